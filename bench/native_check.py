"""Check and time kiln's native convolution and attention on a machine without torch-mlir.

kiln's own tests reach the native library through ``import kiln``, which
needs the MLIR bindings.  This script does not: it compiles
``runtime/native/*.c`` with the system C compiler and the library's flags,
loads it with ctypes and

* ``--check``: runs ``kiln_conv2d`` on every geometry of
  ``test/python/cpu/test_native_conv.py`` (read from that file, not copied)
  at several thread counts, with and without a packed-weight slot, with bias,
  residual, accumulation and ReLU, against ``torch.nn.functional.conv2d``,
  the same geometries through ``kiln_conv2d_mean`` (summed over the pixels),
  and ``kiln_attention`` on every case of ``test_native_attention.py``;
* ``--time``: times ResNet-50's and small_cnn's convolution layers, kiln
  against torch's (oneDNN) on the same threads, alternating the two.

It exists for the machines the project is lent now and then (the GPU machine
has a 16-core CPU with AVX-512 and no torch-mlir), where the paths built for
AVX-512 (``kiln_vconv.c``, the 16-lane Winograd) can be exercised at all.
``KILN_WINOGRAD=0`` in the environment turns Winograd off, as in kiln.
``--march x86-64-v3`` builds for AVX2 instead of the host (``-march=native``),
so an AVX-512 machine checks the 8-lane paths too.

Usage: ``python bench/native_check.py --check --time [--threads 1,2,16] [--march x86-64-v3]``
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT / "runtime" / "native"
I64 = ctypes.c_int64


def _literal(path: Path, name: str):
    """The value of the module-level literal `name` in the Python file at
    path, read from its syntax tree (the modules that hold them import the
    MLIR bindings)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
            return ast.literal_eval(node.value)
    raise SystemExit(f"{name} not found in {path}")


# The library's C files and compiler flags, as kiln builds it.
SOURCES = _literal(NATIVE / "__init__.py", "SOURCE_NAMES")
FLAGS = _literal(NATIVE / "__init__.py", "FLAGS")

# (batch, C, H, W, F, KH, KW, stride, dilation, pad) of the timed layers.
LAYERS = {
    "r50 3x3 56": (1, 64, 56, 56, 64, 3, 3, 1, 1, 1),
    "r50 3x3 28": (1, 128, 28, 28, 128, 3, 3, 1, 1, 1),
    "r50 3x3 14": (1, 256, 14, 14, 256, 3, 3, 1, 1, 1),
    "r50 3x3 7": (1, 512, 7, 7, 512, 3, 3, 1, 1, 1),
    "r50 3x3 s2 56": (1, 128, 56, 56, 128, 3, 3, 2, 1, 1),
    "r50 3x3 s2 28": (1, 256, 28, 28, 256, 3, 3, 2, 1, 1),
    "r50 3x3 s2 14": (1, 512, 14, 14, 512, 3, 3, 2, 1, 1),
    "r50 1x1 256-64 56": (1, 256, 56, 56, 64, 1, 1, 1, 1, 0),
    "r50 1x1 64-256 56": (1, 64, 56, 56, 256, 1, 1, 1, 1, 0),
    "r50 1x1 1024-256 14": (1, 1024, 14, 14, 256, 1, 1, 1, 1, 0),
    "r50 1x1 s2 512-1024 28": (1, 512, 28, 28, 1024, 1, 1, 2, 1, 0),
    "r50 stem 7x7 s2": (1, 3, 224, 224, 64, 7, 7, 2, 1, 3),
    "cnn conv1 B1": (1, 3, 32, 32, 32, 3, 3, 1, 1, 1),
    "cnn conv2 B1": (1, 32, 32, 32, 64, 3, 3, 2, 1, 1),
    "cnn conv1 B8": (8, 3, 32, 32, 32, 3, 3, 1, 1, 1),
    "cnn conv2 B8": (8, 32, 32, 32, 64, 3, 3, 2, 1, 1),
}


def build(pool: int, sources: Path = NATIVE, march: str | None = None) -> ctypes.CDLL:
    """Compile the native library into a temporary file and load it, its
    pool started with ``pool`` threads (kiln_conv2d's ``threads`` only sets
    how many ranges a call is cut into: every pool thread takes them);
    ``march`` replaces ``native`` in ``-march=native`` (``x86-64-v3``: the
    AVX2 build, which an AVX-512 machine also runs)."""
    cc = os.environ.get("CC", "cc")
    flags = [f"-march={march}" if march and f == "-march=native" else f for f in FLAGS]
    out = Path(tempfile.mkdtemp(prefix="kiln-native-")) / "kiln_native.so"
    subprocess.run([cc, *flags, "-o", str(out), *(str(sources / s) for s in SOURCES)], check=True)
    lib = ctypes.CDLL(str(out), mode=ctypes.RTLD_GLOBAL)
    lib.kiln_pool_init(ctypes.c_int(pool))
    lib.kiln_conv2d.argtypes = [I64] * 19 + [ctypes.c_float, ctypes.c_int32, I64, ctypes.c_int32, I64]
    lib.kiln_conv2d.restype = None
    lib.kiln_conv2d_mean.argtypes = [I64] * 19 + [ctypes.c_float, ctypes.c_int32, I64, ctypes.c_int32, I64, ctypes.c_float]
    lib.kiln_conv2d_mean.restype = None
    lib.kiln_free_packed.argtypes = [I64]
    lib.kiln_attention.argtypes = [I64] * 9 + [ctypes.c_float, ctypes.c_int32, ctypes.c_int32]
    lib.kiln_attention.restype = ctypes.c_int32
    return lib


def geometries() -> list[tuple]:
    """GEOMETRIES of test_native_conv.py, read from its syntax tree."""
    return _literal(ROOT / "test" / "python" / "cpu" / "test_native_conv.py", "GEOMETRIES")


def attention_cases() -> list[tuple]:
    """CASES of test_native_attention.py, ``(heads, L, S, D, Dv, causal)``, read from its syntax tree."""
    return _literal(ROOT / "test" / "python" / "cpu" / "test_native_attention.py", "CASES")


def _tally(worst: float, err: float, failure: str) -> tuple[float, int]:
    """The worst error so far with ``err`` in it (inf for a NaN), and 1 when
    ``err`` is over 1e-4 (then ``failure`` is printed with it), else 0."""
    if err <= 1e-4:
        return max(worst, err), 0
    print(f"{failure} {err:.3g}")
    return (max(worst, err) if np.isfinite(err) else float("inf")), 1


def check_attention(lib, thread_counts) -> int:
    """Every attention test case against torch (softmax(q k^T scale) v,
    causal where the case says); returns the number of failures."""
    failures = 0
    for case in attention_cases():
        h, lq, lk, d, dv, causal = case
        rng = np.random.default_rng(sum(case[:5]))
        q = rng.standard_normal((h, lq, d), dtype=np.float32)
        k = rng.standard_normal((h, lk, d), dtype=np.float32) * 3  # large scores: the running max matters
        v = rng.standard_normal((h, lk, dv), dtype=np.float32)
        scale = 1 / np.sqrt(d)
        s = (torch.from_numpy(q) @ torch.from_numpy(k).transpose(-1, -2)) * scale
        if causal:
            s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool).triu(1), float("-inf"))
        ref = (s.softmax(-1) @ torch.from_numpy(v)).numpy()
        worst = 0.0
        for threads in thread_counts:
            out = np.full((h, lq, dv), np.nan, np.float32)
            rc = lib.kiln_attention(h, lq, lk, d, dv, q.ctypes.data, k.ctypes.data, v.ctypes.data, out.ctypes.data,
                                    scale, int(causal), threads)
            err = float(np.max(np.abs(out - ref))) if rc == 0 else float("inf")
            worst, failed = _tally(worst, err, f"FAIL attention {case} threads={threads}: rc {rc}, max error")
            failures += failed
        print(f"{'ok  ' if worst <= 1e-4 else 'BAD '} attention {case}  worst {worst:.2e}")
    return failures


def conv(lib, g, x, wt, bias, res, beta, relu, y, threads, slot):
    n, c, h, w, f, kh, kw, s, d, p = g
    oh, ow = y.shape[2:]
    lib.kiln_conv2d(n, f, c, h, w, kh, kw, oh, ow, s, s, d, d, p, p, x.ctypes.data, wt.ctypes.data,
                    bias.ctypes.data if bias is not None else 0, res.ctypes.data if res is not None else 0,
                    beta, relu, y.ctypes.data, threads, ctypes.addressof(slot) if slot is not None else 0)


def case(g):
    """Geometry g's data, seeded by it: (rng, x, weight, bias, torch's
    convolution of x by the weight without the bias); the rng draws more."""
    n, c, h, w, f, kh, kw, s, d, p = g
    rng = np.random.default_rng(sum(g))
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((f, c, kh, kw), dtype=np.float32)
    bias = rng.standard_normal(f, dtype=np.float32)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), stride=s, padding=p,
                                     dilation=d).numpy()
    return rng, x, wt, bias, ref


def check(lib, thread_counts) -> int:
    """Every test geometry against torch; returns the number of failures."""
    failures = 0
    for g in geometries():
        n, c, h, w, f, kh, kw, s, d, p = g
        rng, x, wt, bias, ref = case(g)
        res = rng.standard_normal(ref.shape, dtype=np.float32)
        y0 = rng.standard_normal(ref.shape, dtype=np.float32)
        atol = max(1e-4, 2e-7 * c * kh * kw)
        worst = 0.0
        for threads in thread_counts:
            for packed in (True, False):
                slot = (I64 * 1)(0) if packed else None
                # bias + residual + ReLU, then plain accumulation (beta 1).
                for with_bias, residual, beta, relu in ((True, True, 0.0, 1), (False, False, 1.0, 0)):
                    y = y0.copy()
                    conv(lib, g, x, wt, bias if with_bias else None, res if residual else None, beta, relu, y,
                         threads, slot)
                    want = ref + (bias[None, :, None, None] if with_bias else 0) + beta * y0 + (res if residual else 0)
                    want = np.maximum(want, 0) if relu else want
                    err = float(np.max(np.abs(y - want) - 1e-4 * np.abs(want)))
                    worst = max(worst, err)
                    if not np.isfinite(err) or err > atol:
                        failures += 1
                        print(f"FAIL {g} threads={threads} packed={packed} bias={with_bias} beta={beta}: "
                              f"max excess {err:.3g} > {atol:.3g}")
                if slot is not None:
                    lib.kiln_free_packed(I64(slot[0]))
        print(f"{'ok  ' if worst <= atol else 'BAD '} {g}  worst {worst:.2e} (atol {atol:.1e})")
    return failures


def check_mean(lib, thread_counts) -> int:
    """``kiln_conv2d_mean`` (the convolution + bias (+ residual) + ReLU summed
    over its pixels, divided by their count) on every test geometry against
    torch; returns the number of failures."""
    failures = 0
    for g in geometries():
        n, c, h, w, f, kh, kw, s, d, p = g
        rng, x, wt, bias, ref = case(g)
        res = rng.standard_normal(ref.shape, dtype=np.float32)
        oh, ow = ref.shape[2:]
        worst = 0.0
        for threads in thread_counts:
            for residual in (False, True):
                full = np.maximum(ref + bias[None, :, None, None] + (res if residual else 0), 0)
                want = full.astype(np.float64).mean(axis=(2, 3))
                y = np.full((n, f), np.nan, np.float32)
                slot = (I64 * 1)(0)
                lib.kiln_conv2d_mean(n, f, c, h, w, kh, kw, oh, ow, s, s, d, d, p, p, x.ctypes.data, wt.ctypes.data,
                                     bias.ctypes.data, res.ctypes.data if residual else 0, 0.0, 1, y.ctypes.data,
                                     threads, ctypes.addressof(slot), float(oh * ow))
                lib.kiln_free_packed(I64(slot[0]))
                err = float(np.max(np.abs(y - want) - 1e-4 * np.abs(want)))
                worst, failed = _tally(worst, err, f"FAIL mean {g} threads={threads} residual={residual}: max excess")
                failures += failed
        print(f"{'ok  ' if worst <= 1e-4 else 'BAD '} mean {g}  worst {worst:.2e}")
    return failures


def _torch_conv_relu(x, w, b, stride, pad, dilation):
    return torch.relu_(torch.nn.functional.conv2d(x, w, b, stride=stride, padding=pad, dilation=dilation))


def _median_us(fn, seconds=0.25) -> float:
    fn()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def timing(lib, thread_counts, only=None, rounds=3) -> None:
    """kiln vs torch per layer and thread count: medians, alternating rounds."""
    print(f"{'layer':26} {'thr':>3} {'kiln us':>9} {'torch us':>9} {'kiln/torch':>10} {'kiln GF':>8}")
    for name, g in LAYERS.items():
        if only and not any(word in name for word in only):
            continue
        _, c, _, _, _, kh, kw, s, d, p = g
        _, x, wt, bias, ref = case(g)
        tx, tw, tb = map(torch.from_numpy, (x, wt, bias))
        y = np.empty(ref.shape, np.float32)
        flops = 2.0 * y.size * c * kh * kw
        for threads in thread_counts:
            torch.set_num_threads(threads)
            slot = (I64 * 1)(0)
            kiln_fn = functools.partial(conv, lib, g, x, wt, bias, None, 0.0, 1, y, threads, slot)
            torch_fn = functools.partial(_torch_conv_relu, tx, tw, tb, s, p, d)
            ks, ts = [], []
            for _ in range(rounds):
                ks.append(_median_us(kiln_fn))
                ts.append(_median_us(torch_fn))
            k, t = statistics.median(ks), statistics.median(ts)
            print(f"{name:26} {threads:3d} {k:9.1f} {t:9.1f} {k / t:10.2f} {flops / k / 1e3:8.1f}")
            lib.kiln_free_packed(I64(slot[0]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="kiln_conv2d on the test geometries against torch")
    ap.add_argument("--time", action="store_true", help="time ResNet-50 / small_cnn layers against torch")
    ap.add_argument("--threads", default=None, help="comma-separated thread counts (default 1,2,3,all)")
    ap.add_argument("--layers", default=None, help="comma-separated words: time only the layers named with one")
    ap.add_argument("--sources", type=Path, default=NATIVE, help="folder of the C sources (default runtime/native)")
    ap.add_argument("--march", default=None, help="build for this -march instead of native (x86-64-v3: AVX2)")
    args = ap.parse_args(argv)
    if not (args.check or args.time):
        ap.error("nothing to do: give --check, --time or both")
    ncpu = os.cpu_count() or 1
    counts = [int(t) for t in args.threads.split(",")] if args.threads else sorted({1, 2, 3, ncpu})
    # By default three threads are checked (an odd split), not timed.
    timed = counts if args.threads else [t for t in counts if t != 3]
    if args.time and len(timed) > 1:
        # The pool only grows, so each thread count is timed in a process of its own.
        common = ["--sources", str(args.sources)] + (["--layers", args.layers] if args.layers else [])
        common += ["--march", args.march] if args.march else []
        rc = main(["--check", "--threads", ",".join(map(str, counts)), *common]) if args.check else 0
        for t in timed:
            subprocess.run([sys.executable, __file__, "--time", "--threads", str(t), *common], check=True)
        return rc
    lib = build(max(counts), args.sources, args.march)
    print(f"vector width {lib.kiln_vector_width()} floats, {ncpu} CPUs, pool {max(counts)} threads, Winograd "
          f"{'off' if os.environ.get('KILN_WINOGRAD', '1').startswith('0') else 'on'}, torch {torch.__version__}")
    failures = check(lib, counts) + check_mean(lib, counts) + check_attention(lib, counts) if args.check else 0
    if args.time:
        timing(lib, timed, args.layers.split(",") if args.layers else None)
    if failures:
        print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
