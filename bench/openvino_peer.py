"""OpenVINO as a benchmark peer (issue 42): ``openvino.convert_model`` on the
PyTorch model, compiled for the CPU with ``threads`` inference threads, the
latency hint and ``INFERENCE_PRECISION_HINT=f32`` (like for like with kiln,
the compared row), or ``bf16`` (:class:`OpenVinoBf16Peer`, a row for
information: on a CPU without bf16 arithmetic OpenVINO runs f32 and the row
says so).

Cold compile = ``torch.export`` and conversion (export included) and
``compile_model`` with an empty model cache (``CACHE_DIR`` a fresh
temporary folder); warm = both again with that cache filled.  Without the
``openvino`` package the peer is unavailable, and the table says why.
"""

from __future__ import annotations

import shutil
import tempfile
import time

from .peers import Peer, PeerUnavailable, onnx_file

__all__ = ["OpenVinoBf16Peer", "OpenVinoPeer", "import_openvino"]


def import_openvino():
    """The ``openvino`` module, or :class:`PeerUnavailable` saying how to install it."""
    try:
        import openvino
    except ImportError as e:
        raise PeerUnavailable(f"openvino is not installed ({e}): pip install openvino (kiln's bench extra)") from None
    return openvino


class OpenVinoPeer(Peer):
    """OpenVINO CPU, f32 inference precision, latency hint, ``threads`` inference threads."""

    name = "openvino"
    precision = "f32"

    def __init__(self, threads: int = 2):
        self.threads = threads

    def _config(self, cache_dir: str) -> dict:
        return {"INFERENCE_NUM_THREADS": self.threads, "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_PRECISION_HINT": self.precision, "CACHE_DIR": cache_dir}

    def _convert(self, ov, workload):
        """The workload as an OpenVINO model: from the torch module (its dynamic
        dims -1, the example inputs for tracing), or from the ONNX file."""
        if workload.factory is None:
            return ov.convert_model(onnx_file(workload))
        import torch

        module, args, dynamic = workload.torch_model()
        # torch.export's program with the workload's dynamic dims (what kiln
        # imports too): OpenVINO's TorchScript tracing path fails on
        # transformers' mask code (aten::diff), its FX path does not.
        program = torch.export.export(module, args, dynamic_shapes=dynamic)
        return ov.convert_model(program)

    def setup(self, workload):
        ov = import_openvino()
        import torch

        torch.set_num_threads(self.threads)  # the conversion traces the model in PyTorch
        core = ov.Core()
        caps = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        cache = tempfile.mkdtemp(prefix="kiln-bench-ov-")
        try:
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                model = self._convert(ov, workload)
                compiled = core.compile_model(model, "CPU", self._config(cache))
                times.append(time.perf_counter() - t0)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        self.compiled = compiled
        hint = compiled.get_property("INFERENCE_PRECISION_HINT")
        effective = hint.to_string() if hasattr(hint, "to_string") else str(hint)
        info = {"compile_cold_s": times[0], "compile_warm_s": times[1], "cold_with_export_s": times[0],
                "precision": effective, "version": ov.__version__}
        if self.precision == "bf16" and "BF16" not in caps:
            info["note"] = f"this CPU has no bf16 arithmetic ({', '.join(caps)}): runs {effective}"
        return info

    def runner(self, row, inputs):
        request = self.compiled.create_infer_request()
        out = self.compiled.output(0)

        def call():
            return request.infer(inputs, share_inputs=True)[out]

        return call


class OpenVinoBf16Peer(OpenVinoPeer):
    """OpenVINO with ``INFERENCE_PRECISION_HINT=bf16`` (for information: not like for like)."""

    name = "openvino-bf16"
    precision = "bf16"
