"""GPU benchmark of the Triton backend, prepared to run in one go on a lent GPU.

    python bench/gpu_bench.py [--quick] [--out DIR]

For each bench model (mlp, transformer_block, small_cnn) at a few shapes it
compiles with ``kiln.compile(..., device="cuda", autotune=True)``, checks the
result against PyTorch eager, and reports the median latency of kiln, PyTorch
eager and ``torch.compile`` (CUDA-event timed, after warm-up).  It also
checks the FlashAttention-style kernel against SDPA (fp16, causal and not)
and measures a cold compile against a warm one in a new process (the
persistent kernel cache).  Results print as a table and go to
``<out>/gpu_bench.json`` (``--out``, else ``$OUT``, else the working dir).

Every section is guarded: a failure is recorded in the JSON with its
traceback, and the script goes on, so one run yields everything it can.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# --interpret: a dry run on CPU in Triton's interpreter (tiny shapes), to check the script itself.
INTERPRET = "--interpret" in sys.argv
if INTERPRET:
    os.environ["TRITON_INTERPRET"] = "1"
else:
    os.environ.pop("TRITON_INTERPRET", None)
DEVICE = "cpu" if INTERPRET else "cuda"
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-gpu-bench-"))

SHAPES = {
    "mlp": [(1, 1024), (8, 1024), (64, 1024)],
    "transformer_block": [(1, 128, 256), (4, 128, 256), (2, 512, 256)],
    "small_cnn": [(1, 3, 32, 32), (8, 3, 32, 32), (64, 3, 32, 32)],
}
QUICK = {k: v[1:2] for k, v in SHAPES.items()}
TINY = {"tiny_mlp": [(3, 16)], "small_cnn": [(1, 3, 32, 32)]}


def ensure_kiln_importable() -> str:
    """Make ``import kiln`` work from a plain checkout (the repo root is the package);
    returns the folder to put on sys.path / PYTHONPATH."""
    try:
        import kiln  # noqa: F401

        return ""
    except ImportError:
        pass
    if ROOT.name == "kiln":
        folder = str(ROOT.parent)
    else:
        folder = tempfile.mkdtemp(prefix="kiln-path-")
        os.symlink(ROOT, os.path.join(folder, "kiln"))
    sys.path.insert(0, folder)
    os.environ["PYTHONPATH"] = folder + os.pathsep + os.environ.get("PYTHONPATH", "")
    return folder


def cuda_time(fn, warmup: int = 3, iters: int = 20) -> float:
    """Median milliseconds of ``fn()`` measured with CUDA events (wall clock when interpreting)."""
    import torch

    if INTERPRET:
        fn()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def device_ms(fn, calls: int = 20) -> float | None:
    """Milliseconds a call of ``fn`` keeps the GPU busy: the CUDA time of its
    kernels (torch.profiler), without the host's time between them.  Beside
    :func:`cuda_time` it tells a host-bound call from a slow kernel (on the
    first H200 run an attention call took 0.22 ms, its kernel 0.016: see
    bench/RESULTS.md).  None when interpreting."""
    if INTERPRET:
        return None
    import torch

    try:  # not yet run on a GPU: a failure costs this column, not the row
        fn()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        return sum(e.self_device_time_total for e in prof.key_averages()) / calls / 1e3
    except Exception as e:
        print(f"device time not measured: {type(e).__name__}: {e}", flush=True)
        return None


def bench_model(name: str, shapes, results: dict) -> None:
    import torch

    import kiln
    from kiln.bench import models

    module, args, dyn = getattr(models, name)()
    t0 = time.perf_counter()
    model = kiln.compile(module, args, dyn, device="cuda", autotune=True)
    compile_s = time.perf_counter() - t0
    module = module.to(DEVICE).eval()
    compiled = None
    if not INTERPRET:
        try:
            compiled = torch.compile(module, dynamic=True)
        except Exception:
            compiled = None
    rows = []
    for shape in shapes:
        x = torch.randn(*shape, device=DEVICE)
        with torch.no_grad():
            want = module(x)
            got = model(x)
            err = (got - want).abs().max().item()
            row = {"shape": list(shape), "max_abs_err": err,
                   "kiln_ms": cuda_time(lambda x=x: model(x)), "eager_ms": cuda_time(lambda x=x: module(x)),
                   "kiln_device_ms": device_ms(lambda x=x: model(x))}
            if compiled is not None:
                try:
                    row["torch_compile_ms"] = cuda_time(lambda x=x: compiled(x))
                except Exception as e:
                    row["torch_compile_error"] = f"{type(e).__name__}: {e}"[:500]
        rows.append(row)
        dev = row["kiln_device_ms"]
        print(f"{name:18s} {str(list(shape)):18s} err {err:.2e}  kiln {row['kiln_ms']:.3f} ms "
              f"(kernels {dev if dev is not None else float('nan'):.3f})  "
              f"eager {row['eager_ms']:.3f} ms  torch.compile {row.get('torch_compile_ms', float('nan')):.3f} ms",
              flush=True)
    results["models"][name] = {
        "compile_s": compile_s,
        "kernels": [s.kernel.spec.pattern + f" [{getattr(s.kernel, 'candidate', '?')} {s.kernel.config}]"
                    for s in model.schedule],
        "rows": rows,
    }


def bench_attention(results: dict) -> None:
    import torch
    import torch.nn.functional as F  # noqa: N812

    import kiln

    rows = []
    sizes = ((1, 2, 20, 16),) if INTERPRET else ((1, 8, 1024, 64), (4, 16, 2048, 64))
    for causal in (False, True):
        for b, h, length, d in sizes:
            text = f"""
"kiln.symbol"() {{sym_name = "L", min = 1, max = 8192, opt = {length}}} : () -> ()
func.func @f(%q: !kiln.tensor<[{b}, {h}, "L", {d}], f16>, %k: !kiln.tensor<[{b}, {h}, "L", {d}], f16>, %v: !kiln.tensor<[{b}, {h}, "L", {d}], f16>) -> !kiln.tensor<[{b}, {h}, "L", {d}], f16> {{
  %r = "kiln.attention"(%q, %k, %v) {{causal = {str(causal).lower()}, operandSegmentSizes = array<i32: 1, 1, 1, 0>}} : (!kiln.tensor<[{b}, {h}, "L", {d}], f16>, !kiln.tensor<[{b}, {h}, "L", {d}], f16>, !kiln.tensor<[{b}, {h}, "L", {d}], f16>) -> !kiln.tensor<[{b}, {h}, "L", {d}], f16>
  return %r : !kiln.tensor<[{b}, {h}, "L", {d}], f16>
}}"""
            model = kiln.compile(text, device="cuda", autotune=True)
            q, k, v = (torch.randn(b, h, length, d, device=DEVICE, dtype=torch.float16) for _ in range(3))
            want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal).half()
            got = model(q, k, v)
            row = {"causal": causal, "shape": [b, h, length, d], "max_abs_err": (got - want).abs().max().item(),
                   "kiln_ms": cuda_time(lambda m=model, q=q, k=k, v=v: m(q, k, v)),
                   "sdpa_ms": cuda_time(lambda q=q, k=k, v=v, c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c)),
                   "config": model.schedule[0].kernel.config}
            rows.append(row)
            print(f"attention causal={causal!s:5s} {row['shape']} err {row['max_abs_err']:.2e} "
                  f"kiln {row['kiln_ms']:.3f} ms  sdpa {row['sdpa_ms']:.3f} ms", flush=True)
    results["attention"] = rows


WARM = """
import json, sys, time
import kiln
from kiln.bench import models
module, args, dyn = models.{model}()
t0 = time.perf_counter()
model = kiln.compile(module, args, dyn, device="cuda", autotune=True)
compile_s = time.perf_counter() - t0
import torch
model(args[0].to({device!r}))
if torch.cuda.is_available(): torch.cuda.synchronize()
print(json.dumps({{"compile_s": compile_s, "first_call_s": time.perf_counter() - t0 - compile_s,
                  "backend_s": model.program.compile_seconds,
                  "how": [c.how for c in model.program.choices if c is not None]}}))
"""


def bench_cache(results: dict) -> None:
    env = dict(os.environ, KILN_CACHE_DIR=tempfile.mkdtemp(prefix="kiln-cache-warm-"))
    env.pop("TRITON_CACHE_DIR", None)
    runs = []
    for label in ("cold", "warm"):
        code = WARM.format(model="tiny_mlp" if INTERPRET else "mlp", device=DEVICE)
        out = subprocess.run([sys.executable, "-c", code, *(["--interpret"] if INTERPRET else [])], env=env,
                             capture_output=True, text=True, timeout=400)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-3000:])
        runs.append(dict(json.loads(out.stdout.strip().splitlines()[-1]), run=label))
        print(f"cache {label}: compile {runs[-1]['compile_s']:.2f} s (backend {runs[-1]['backend_s']:.2f} s), "
              f"first call {runs[-1]['first_call_s']:.2f} s, "
              f"choices {runs[-1]['how']}", flush=True)
    results["cache"] = runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one shape per model")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--only", nargs="*", help="sections: models attention cache")
    parser.add_argument("--interpret", action="store_true", help="dry run on CPU in Triton's interpreter")
    args = parser.parse_args()
    ensure_kiln_importable()
    import torch

    results: dict = {"models": {}, "errors": {}, "interpret": INTERPRET}
    if not INTERPRET and not torch.cuda.is_available():
        print("no CUDA device: nothing to benchmark")
        results["errors"]["device"] = "no CUDA device"
    else:
        results["device"] = "cpu (interpreter)" if INTERPRET else torch.cuda.get_device_name()
        import triton

        results["versions"] = {"torch": torch.__version__, "triton": triton.__version__}
        sections = args.only or ["models", "attention", "cache"]
        shapes = TINY if INTERPRET else QUICK if args.quick else SHAPES
        if "models" in sections:
            for name in shapes:
                try:
                    bench_model(name, shapes[name], results)
                except Exception:
                    results["errors"][name] = traceback.format_exc()[-4000:]
                    print(f"{name} FAILED\n{results['errors'][name]}", flush=True)
        for sec, fn in (("attention", bench_attention), ("cache", bench_cache)):
            if sec in sections:
                try:
                    fn(results)
                except Exception:
                    results["errors"][sec] = traceback.format_exc()[-4000:]
                    print(f"{sec} FAILED\n{results['errors'][sec]}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_bench.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {out / 'gpu_bench.json'}")
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
