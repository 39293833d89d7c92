"""A dynamic-quantized BERT encoder against ONNX Runtime int8 (issue 38): ``python -m kiln.bench.int8_encoder``.

A ``transformers`` BertModel (random weights; hidden 768, 12 layers by
default) is exported by ``torch.onnx.export(dynamo=True)`` with a dynamic
batch, then quantized by ``onnxruntime.quantization.quantize_dynamic``
(int8 weights, uint8 activations: DynamicQuantizeLinear + MatMulInteger).
The same two files run on ONNX Runtime (2 intra-op threads, kiln's pool
size) and kiln (one compile over ``1 <= B <= max``), rounds alternating
between the contenders (the best round of each), at each batch size; the
kiln int8 model also runs with AMX-INT8 off (``KILN_I8_AMX=0``: VNNI) where
the CPU has it.  Accuracy: kiln's int8 output against ONNX Runtime's int8
(max |diff| and the share outside ``kiln.validate.TOLERANCES["int8"]``) and
each int8 output against the fp32 model's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from .harness import best_of_rounds

__all__ = ["main"]


def _export(path: str, hidden: int, layers: int, length: int, max_batch: int) -> tuple[str, str]:
    import torch
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from .torchvision_compat import define_torchvision_schemas

    define_torchvision_schemas()  # transformers imports torchvision, whose C extension does not load here
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 64,
                                     intermediate_size=4 * hidden)
    model = transformers.BertModel(config).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = model

        def forward(self, ids):
            return self.bert(input_ids=ids).last_hidden_state

    f32, q8 = os.path.join(path, "bert.onnx"), os.path.join(path, "bert.int8.onnx")
    ids = torch.randint(0, 1000, (2, length))
    batch = torch.export.Dim("B", min=1, max=max_batch)
    torch.onnx.export(Encoder().eval(), (ids,), f32, input_names=["ids"], output_names=["out"],
                      dynamic_shapes={"ids": {0: batch}}, dynamo=True)
    quantize_dynamic(f32, q8, weight_type=QuantType.QInt8)
    return f32, q8


def _amx_off(fn):
    def run():
        os.environ["KILN_I8_AMX"] = "0"
        try:
            return fn()
        finally:
            del os.environ["KILN_I8_AMX"]
    return run


def main(argv=None) -> int:
    """Run the comparison and print its table."""
    p = argparse.ArgumentParser(prog="python -m kiln.bench.int8_encoder", description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--length", type=int, default=128, help="sequence length L")
    p.add_argument("--batches", default="1,8", help="batch sizes, comma-separated (the max is B's max)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=3, help="timed calls per round")
    args = p.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]

    import onnxruntime as ort

    import kiln
    from kiln.backends.cpu.lowp_gemm import _native
    from kiln.validate import TOLERANCES

    with tempfile.TemporaryDirectory() as tmp:
        f32, q8 = _export(tmp, args.hidden, args.layers, args.length, max(batches))
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        sessions = {name: ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
                    for name, path in (("ort-int8", q8), ("ort-fp32", f32))}
        t0 = time.perf_counter()
        k8 = kiln.compile(q8, symbols={"B": (1, max(batches))})
        t1 = time.perf_counter()
        k32 = kiln.compile(f32, symbols={"B": (1, max(batches))})
        t2 = time.perf_counter()
    lib = _native()
    amx = bool(lib is not None and lib.kiln_i8_uses_amx())
    path = ("AMX-INT8" if amx else "VNNI" if lib is not None and lib.kiln_i8_uses_vnni()
            else "AVX2" if lib is not None and lib.kiln_i8_uses_avx2() else "the generic path")
    print(f"BERT encoder: hidden {args.hidden}, {args.layers} layers, L = {args.length}; quantize_dynamic int8; "
          f"ONNX Runtime {ort.__version__}, 2 threads; kiln compile {t1 - t0:.1f} s (int8), {t2 - t1:.1f} s (fp32); "
          f"integer products on {path}")
    tol = TOLERANCES["int8"]
    header = "| B | ORT int8 ms | kiln int8 ms | kiln / ORT int8 |" + (" kiln int8, AMX off ms |" if amx else "") + \
        " ORT fp32 ms | kiln fp32 ms | kiln / ORT fp32 | max diff kiln vs ORT int8 (outside table) | int8 vs fp32 max diff ORT / kiln |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for b in batches:
        x = np.random.default_rng(b).integers(0, 1000, (b, args.length)).astype(np.int64)
        runs = {
            "ort-int8": lambda x=x: sessions["ort-int8"].run(None, {"ids": x}),
            "kiln-int8": lambda x=x: k8(x),
            "ort-fp32": lambda x=x: sessions["ort-fp32"].run(None, {"ids": x}),
            "kiln-fp32": lambda x=x: k32(x),
        }
        if amx:
            runs["kiln-int8-vnni"] = _amx_off(lambda x=x: k8(x))
        best = {k: v * 1e3 for k, v in best_of_rounds(runs, args.rounds, args.calls).items()}
        r8, rk = sessions["ort-int8"].run(None, {"ids": x})[0], np.asarray(k8(x))
        r32 = sessions["ort-fp32"].run(None, {"ids": x})[0]
        outside = int((np.abs(rk - r8) > tol.atol + tol.rtol * np.abs(r8)).sum())
        vnni = f" {best['kiln-int8-vnni']:.1f} |" if amx else ""
        print(f"| {b} | {best['ort-int8']:.1f} | {best['kiln-int8']:.1f} | {best['kiln-int8'] / best['ort-int8']:.2f}x |"
              f"{vnni} {best['ort-fp32']:.1f} | {best['kiln-fp32']:.1f} | {best['kiln-fp32'] / best['ort-fp32']:.2f}x | "
              f"{np.abs(rk - r8).max():.3g} ({outside} of {r8.size}) | "
              f"{np.abs(r8 - r32).max():.3g} / {np.abs(rk - r32).max():.3g} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
