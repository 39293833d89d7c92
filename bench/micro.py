"""Micro-benchmarks behind two of issue 8's targets.

* :func:`gemm` — GFLOPS of a kiln-compiled ``kiln.matmul`` (dynamic
  ``[M, K] x [K, N]``) against numpy's ``@`` (OpenBLAS) at the same sizes.
* :func:`overhead` — per-call runtime cost on tiny models whose kernels do
  almost no work: chains of 1, 4 and 16 kernels on ``[1, 4]``, timed in
  interleaved rounds; a line fitted through the p50s gives the fixed cost
  per call and the cost per launch.
"""

from __future__ import annotations

import time

import numpy as np

from .harness import measure, summarize

__all__ = ["chain_text", "gemm", "gemm_text", "overhead"]


def gemm_text() -> str:
    """A kiln module: ``main(a: [M, K], b: [K, N]) -> a @ b`` (f32, M/N/K in 1..4096)."""
    t = {"a": '!kiln.tensor<["M", "K"], f32>', "b": '!kiln.tensor<["K", "N"], f32>',
         "c": '!kiln.tensor<["M", "N"], f32>'}
    syms = "\n".join(f'  "kiln.symbol"() {{max = 4096 : i64, min = 1 : i64, sym_name = "{s}"}} : () -> ()'
                     for s in "MKN")
    return (f"module {{\n{syms}\n"
            f"  func.func @main(%a: {t['a']}, %b: {t['b']}) -> {t['c']} {{\n"
            f"    %0 = \"kiln.matmul\"(%a, %b) : ({t['a']}, {t['b']}) -> {t['c']}\n"
            f"    return %0 : {t['c']}\n  }}\n}}\n")


def chain_text(n: int) -> str:
    """A kiln module of ``n`` dependent ops on ``[B, 4]`` that partition into ``n`` kernels:
    ``x -> matmul(x, w_i)`` (each matmul anchors a kernel)."""
    ty = '!kiln.tensor<["B", 4], f32>'
    wt = '!kiln.tensor<[4, 4], f32>'
    lines = ['module {', '  "kiln.symbol"() {max = 64 : i64, min = 1 : i64, sym_name = "B"} : () -> ()',
             f"  func.func @main(%x: {ty}, %w: {wt}) -> {ty} {{"]
    prev = "%x"
    for i in range(n):
        lines.append(f'    %v{i} = "kiln.matmul"({prev}, %w) : ({ty}, {wt}) -> {ty}')
        prev = f"%v{i}"
    lines += [f"    return {prev} : {ty}", "  }", "}"]
    return "\n".join(lines) + "\n"


def gemm(sizes=(256, 512, 1024), budget_s: float = 1.0, rounds: int = 6) -> list[dict]:
    """kiln vs numpy GFLOPS for square f32 GEMMs (one kiln compilation for every size).

    kiln and numpy take turns, ``rounds`` bursts each with the order
    alternating; ``kiln_vs_numpy`` is the median over rounds of the ratio of
    the two p50s within a round, as for the workload rows (one second of
    each in turn had read 0.47 when a busy spell of the machine fell on kiln's
    second alone)."""
    import kiln

    t0 = time.perf_counter()
    model = kiln.compile(gemm_text())
    compile_s = time.perf_counter() - t0
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        err = float(np.max(np.abs(model(a, b) - a @ b)))
        fns = {"kiln": lambda a=a, b=b: model(a, b), "numpy": lambda a=a, b=b: a @ b}
        times = {name: [] for name in fns}
        ratios = []
        for r in range(rounds):
            p50 = {}
            for name in ("kiln", "numpy") if r % 2 == 0 else ("numpy", "kiln"):
                burst = measure(fns[name], budget_s=budget_s / rounds, raw=True)
                times[name] += burst
                p50[name] = float(np.median(burst))
            ratios.append(p50["numpy"] / p50["kiln"])
        k, ref = summarize(times["kiln"]), summarize(times["numpy"])
        flop = 2.0 * n ** 3
        rows.append({"n": n, "kiln_p50_ms": k["p50_ms"], "numpy_p50_ms": ref["p50_ms"],
                     "kiln_gflops": flop / k["p50_ms"] / 1e6, "numpy_gflops": flop / ref["p50_ms"] / 1e6,
                     "kiln_vs_numpy": float(np.median(ratios)), "rounds": rounds, "max_abs_err": err,
                     "launches": model.report().get("kernels_launched_per_call"), "compile_s": compile_s})
    return rows


def overhead(chains=(1, 4, 16), budget_s: float = 1.0, rounds: int = 5) -> dict:
    """Per-call p50 of ``chain_text(n)`` models at B=1, and the fitted fixed + per-launch cost (µs).

    The models take turns: ``rounds`` bursts each, the order rotating, so
    that every point of the fit sees the same spells of a shared machine (one
    model per second in turn had put a 4-kernel chain above a 16-kernel one)."""
    import kiln

    x = np.ones((1, 4), dtype=np.float32)
    w = np.eye(4, dtype=np.float32)
    models = {n: kiln.compile(chain_text(n)) for n in chains}
    times = {n: [] for n in chains}
    for r in range(rounds):
        order = list(chains[r % len(chains):]) + list(chains[: r % len(chains)])
        for n in order:
            times[n] += measure(lambda m=models[n]: m(x, w), warmup=20, max_iters=2000,
                                budget_s=budget_s / rounds, raw=True)
    points = []
    for n in chains:
        stats = summarize(times[n])
        launches = models[n].report().get("kernels_launched_per_call")  # counted from the calls
        points.append({"ops": n, "launches": launches, "p50_us": stats["p50_ms"] * 1000.0,
                       "p99_us": stats["p99_ms"] * 1000.0, "iters": stats["iters"]})
    xs = np.array([p["launches"] for p in points], dtype=np.float64)
    ys = np.array([p["p50_us"] for p in points], dtype=np.float64)
    if len(set(xs.tolist())) > 1:
        per_launch, fixed = np.polyfit(xs, ys, 1)
    else:
        per_launch, fixed = float("nan"), float(ys[0])
    return {"points": points, "fixed_us": float(fixed), "per_launch_us": float(per_launch), "rounds": rounds}
