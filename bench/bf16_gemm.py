"""bf16 vs fp32 on BERT-layer-sized products (issue 38): ``python -m kiln.bench.bf16_gemm``.

Two parts, both alternating their contenders round by round (the best of
several rounds each), so a load change on a shared machine hits all alike:

* kernels (ctypes, one thread unless ``--threads``): kiln's fp32 native GEMM
  (``kiln_sgemm_small``) against the 16-bit GEMM ``kiln_lowp_gemm`` on its
  AMX, vdpbf16ps and generic paths, B packed once;
* models: a Linear 768 -> 768 and a 768 -> 3072 -> 768 GELU MLP compiled with
  ``precision="fp32"`` and ``"bf16"`` (and bf16 with the generic path forced),
  at B*L = 128 and 1024 rows, beside PyTorch eager fp32 and bf16 (its
  oneDNN) as the library reference.
"""

from __future__ import annotations

import argparse
import ctypes
import os

import numpy as np

from .harness import best_of_rounds

__all__ = ["main"]

H = 768


def kernels(threads: int, rounds: int) -> None:
    """The kernel comparison (see the module docstring)."""
    from kiln.runtime.blas import native_with_blas
    from kiln.transforms.precision import bf16_bits

    lib = native_with_blas()
    lp, sg = lib.kiln_lowp_gemm, lib.kiln_sgemm_small
    lp.argtypes = [ctypes.c_int64] * 7 + [ctypes.c_int32, ctypes.c_float, ctypes.c_int64, ctypes.c_int64,
                                          ctypes.c_int32, ctypes.c_int32, ctypes.c_int64]
    sg.argtypes = [ctypes.c_int64] * 7 + [ctypes.c_float, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32,
                                          ctypes.c_int64]
    rng = np.random.default_rng(0)
    for m, n, k in ((128, H, H), (1024, H, H), (128, 4 * H, H), (1024, 4 * H, H), (128, H, 4 * H)):
        af, bf = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
        a, b = bf16_bits(af), bf16_bits(bf)
        c = np.zeros((m, n), np.float32)
        slots = [np.zeros(1, np.int64) for _ in range(4)]

        def low(path, slot, m=m, n=n, k=k, a=a, b=b, c=c):
            def run():
                os.environ["KILN_BF16_AMX"] = "1" if path == "amx" else "0"
                lib.kiln_lowp_set_generic(1 if path == "generic" else 0)
                lp(m, n, k, a.ctypes.data, k, b.ctypes.data, n, 0, 0.0, c.ctypes.data, n, 0, threads,
                   slot.ctypes.data)
            return run

        runs = {"fp32": lambda m=m, n=n, k=k, af=af, bf=bf, c=c, s=slots[0]: sg(
                    m, n, k, af.ctypes.data, k, bf.ctypes.data, n, 0.0, c.ctypes.data, n, threads, s.ctypes.data),
                "bf16 amx": low("amx", slots[1]), "bf16 vdpbf16ps": low("dp", slots[2]),
                "bf16 generic": low("generic", slots[3])}
        best = best_of_rounds(runs, rounds, max(2, int(2e8 / (m * n * k))))
        print(f"kernel {m} x {n} x {k}, {threads} thread(s): " + ", ".join(
            f"{name} {t * 1e3:.3f} ms ({2 * m * n * k / t / 1e9:.0f} GFLOPS)" for name, t in best.items()), flush=True)
        for s in slots[1:]:
            lib.kiln_free_packed(ctypes.c_int64(int(s[0])))
    lib.kiln_lowp_set_generic(-1)
    os.environ.pop("KILN_BF16_AMX", None)


def models(rounds: int) -> None:
    """The model comparison (see the module docstring)."""
    import torch

    import kiln
    from kiln.backends.cpu.lowp_gemm import force_generic

    torch.manual_seed(0)

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = torch.nn.Linear(H, 4 * H), torch.nn.Linear(4 * H, H)

        def forward(self, x):
            return self.down(torch.nn.functional.gelu(self.up(x)))

    rows = torch.export.Dim("rows", min=1, max=2048)
    for label, m in (("Linear 768->768", torch.nn.Linear(H, H).eval()), ("MLP 768->3072->768", MLP().eval())):
        name = "input" if isinstance(m, torch.nn.Linear) else "x"
        compiled = {p: kiln.compile(m, (torch.randn(16, H),), dynamic_shapes={name: {0: rows}}, precision=p)
                    for p in ("fp32", "bf16")}
        mb = type(m)() if not isinstance(m, torch.nn.Linear) else torch.nn.Linear(H, H)
        mb.load_state_dict(m.state_dict())
        mb = mb.to(torch.bfloat16).eval()
        for n in (128, 1024):
            x = torch.randn(n, H)
            xb = x.to(torch.bfloat16)

            fp32, bf16 = compiled["fp32"], compiled["bf16"]

            def generic(x=x, bf16=bf16):
                force_generic(True)
                bf16(x)
                force_generic(None)

            with torch.no_grad():
                runs = {"kiln fp32": lambda x=x, f=fp32: f(x), "kiln bf16": lambda x=x, f=bf16: f(x),
                        "kiln bf16 generic": generic, "torch fp32": lambda x=x, f=m: f(x),
                        "torch bf16": lambda xb=xb, f=mb: f(xb)}
                best = best_of_rounds(runs, rounds, 20 if n == 128 else 5)
                err = (compiled["bf16"](x) - m(x)).abs().max().item()
            print(f"{label}, B*L = {n}: " + ", ".join(f"{k} {t * 1e3:.3f} ms" for k, t in best.items())
                  + f"; bf16 / fp32 (kiln) {best['kiln bf16'] / best['kiln fp32']:.2f}x; max |bf16 - eager fp32| "
                  f"{err:.1e}", flush=True)


def main(argv=None) -> None:
    """Run the kernel and the model comparisons and print one line per shape."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="threads of the kernel comparison")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--skip-kernels", action="store_true")
    args = ap.parse_args(argv)
    with open("/proc/cpuinfo") as f:
        info = f.read()
    model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "?")
    flags = [f for f in ("avx512_bf16", "amx_bf16", "amx_tile") if f" {f}" in info]
    print(f"host: {model}, {os.cpu_count()} CPUs, {' '.join(flags)}; load {os.getloadavg()[0]:.1f}", flush=True)
    if not args.skip_kernels:
        kernels(args.threads, args.rounds)
    models(args.rounds)


if __name__ == "__main__":
    main()
