"""Run the benchmark: every peer on every row of every workload, in one process.

:func:`run_benchmark` returns a plain-data result (written as JSON by
``kiln-bench``): one entry per (workload, row) with each peer's latency
percentiles, throughput, compile times and, for kiln, kernel launches and
arena bytes, plus the ratio kiln/peer of the p50 latencies and the largest
difference of each peer's output from PyTorch eager.  The peers of a row are
measured in interleaved rounds (:func:`_measure_row`), and the ratio is the
median of the per-round ratios, so drift of a shared machine during the run
cancels out of it.
"""

from __future__ import annotations

import functools
import gc
import os
import platform
import time
import traceback

import numpy as np

from .peers import DEFAULT_PEERS, PEERS, KilnPeer, PeerUnavailable
from .workloads import Workload, select

__all__ = ["best_of_rounds", "measure", "run_benchmark", "summarize"]


def best_of_rounds(runs: dict, rounds: int, calls: int) -> dict:
    """Seconds per call of each ``runs[name]()``: the best of ``rounds`` rounds of ``calls`` timed calls (after
    one untimed), the contenders alternating within each round so a load change on a shared machine hits
    all alike."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, fn in runs.items():
            fn()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / calls)
    return best


def measure(fn, *, warmup: int = 3, min_iters: int = 5, max_iters: int = 200, budget_s: float = 2.0,
            raw: bool = False):
    """Latency statistics of ``fn()`` (the latencies in ms with ``raw``):
    ``warmup`` untimed calls, then timed calls until ``max_iters`` or
    ``budget_s`` seconds (at least ``min_iters``)."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < max_iters:
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) / 1e6)
        if len(times) >= min_iters and time.perf_counter() - start > budget_s:
            break
    return times if raw else summarize(times)


def summarize(times_ms) -> dict:
    """p50/p95/p99/mean/min of a list of latencies in milliseconds."""
    a = np.asarray(times_ms, dtype=np.float64)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {"iters": int(a.size), "p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99),
            "mean_ms": float(a.mean()), "min_ms": float(a.min())}


def _as_numpy(y):
    if isinstance(y, (list, tuple)):
        y = y[0]
    if hasattr(y, "detach"):
        y = y.detach().numpy()
    return np.asarray(y)


def _cpu() -> str:
    """The CPU's model name and its widest vector extension (the native
    kernels' tiles differ between AVX2 and AVX-512), from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:  # pragma: no cover - not Linux
        return platform.processor() or "unknown"
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{model}, {isa}"


def _machine() -> dict:
    info = {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "cpu": _cpu()}
    try:
        info["load_avg_at_start"] = os.getloadavg()
    except OSError:  # pragma: no cover
        pass
    versions = {}
    for mod in ("torch", "onnxruntime", "openvino", "numpy"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing peer is reported, not fatal
            versions[mod] = None
    info["versions"] = versions
    return info


def run_benchmark(workloads=None, peers=None, *, quick=False, threads=2, budget_s=None, log=print,
                  kiln_options=None, ceiling=False) -> dict:
    """Benchmark ``peers`` (names in :data:`~kiln.bench.peers.PEERS`) on ``workloads``
    (names in :data:`~kiln.bench.workloads.WORKLOADS`, or Workload objects
    such as :func:`~kiln.bench.real.real_workloads`', run at all their rows).

    ``quick`` uses the rows marked quick and a shorter time budget per
    measurement.  Errors of one peer on one workload are recorded in the
    result (``"error"``) and the run goes on.  ``ceiling``: probe the
    machine's FMA peak once and, between the rounds of each row with known
    FLOPs, the rate its weights stream at (:mod:`kiln.bench.ceiling`).
    """
    peers = list(peers or DEFAULT_PEERS)
    budget_s = budget_s if budget_s is not None else (0.5 if quick else 2.0)
    result = {"quick": quick, "threads": threads, "peers": peers, "machine": _machine(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S"), "workloads": {}, "rows": []}
    probes = None
    if ceiling:
        from .ceiling import Ceiling

        probes = Ceiling.build(threads)
        if probes is not None:
            result["ceiling"] = {"threads": threads, "fma_gflops": probes.fma_gflops()}
    if workloads and all(isinstance(w, Workload) for w in workloads):
        chosen = [(w, w.rows) for w in workloads]  # given as objects (the real workloads): every row
    else:
        chosen = select(workloads, quick)
    for workload, rows in chosen:
        log(f"== {workload.name}: rows {', '.join(r.label for r in rows)}")
        wres = {}
        inputs = {row.label: row.inputs() for row in rows}
        refs = _references(workload, rows, inputs)
        weights = workload.weight_bytes() if probes is not None else None  # builds the model: only for the floor
        entries = {row.label: {"workload": workload.name, "row": row.label,
                               "shapes": [list(s) for s in row.shapes], "peers": {},
                               "min_gflop": workload.min_gflop(row), "weight_bytes": weights,
                               **(workload.entry_info(row) if hasattr(workload, "entry_info") else {})}
                   for row in rows}
        # Every peer set up first, then each row measured in rounds: a burst
        # of every peer in turn (the order rotating), so a slow spell of a
        # shared machine hits them alike.  After each burst the run sleeps
        # GAP_S, long enough for thread pools that spin after a call (ONNX
        # Runtime's, OpenMP's) to go idle before the next peer runs.
        alive = {}
        for name in peers:
            cls = PEERS[name]
            peer = (cls(threads=threads, options=kiln_options) if issubclass(cls, KilnPeer)
                    else cls(threads=threads))
            try:
                info = peer.setup(workload)
                wres[name] = info
                alive[name] = peer
                log(f"   {name}: setup {_fmt_setup(info)}")
            except PeerUnavailable as e:
                wres[name] = {"unavailable": str(e)}
                log(f"   {name}: unavailable: {e}")
                for entry in entries.values():
                    entry["peers"][name] = {"unavailable": str(e)}
            except Exception as e:  # noqa: BLE001 - recorded per peer
                wres[name] = {"error": _err(e)}
                log(f"   {name}: setup FAILED {wres[name]['error']}")
                log(traceback.format_exc(limit=4))
        for row in rows:
            entry = entries[row.label]
            stream = None
            if probes is not None and entry["weight_bytes"] and entry["min_gflop"] is not None:
                stream = functools.partial(probes.stream_gbps, entry["weight_bytes"])
            _measure_row(workload, row, alive, inputs[row.label], refs.get(row.label), entry,
                         quick=quick, budget_s=budget_s, log=log, stream=stream)
        del alive
        if hasattr(workload, "release"):
            workload.release()
        gc.collect()
        result["workloads"][workload.name] = wres
        for row in rows:
            result["rows"].append(entries[row.label])
    if probes is not None:
        probes.close()
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        result["machine"]["load_avg_at_end"] = os.getloadavg()
    except OSError:  # pragma: no cover
        pass
    return result


#: Rounds of bursts per row, and the pause after each burst (seconds).
ROUNDS, QUICK_ROUNDS, GAP_S = 5, 3, 0.05


def _measure_row(workload, row, peers: dict, inputs, ref, entry: dict, *, quick: bool, budget_s: float, log,
                 stream=None) -> None:
    """Fill ``entry`` for ``row``: each peer's statistics over all its timed
    calls, and ``ratio_p50`` = kiln/peer as the median over rounds of the
    ratio of the two p50s within a round.  ``stream`` (a call returning
    GB/s), when given, runs after each round; ``stream_gbps`` is its best."""
    fns, slow = {}, {}
    for name, peer in peers.items():
        try:
            fn = peer.runner(row, inputs)
            t0 = time.perf_counter()
            out = _as_numpy(fn())
            slow[name] = time.perf_counter() - t0 > 0.5  # seconds-long calls: fewer warmups and iterations
            stats = peer.row_info(row)
            if ref is not None:
                stats["max_abs_err_vs_ref"] = (float(np.max(np.abs(out - ref))) if out.shape == ref.shape
                                               else f"shape {out.shape} vs {ref.shape}")
            for _ in range(0 if slow[name] else (1 if quick else 3)):
                fn()
            fns[name] = fn
            entry["peers"][name] = stats
        except Exception as e:  # noqa: BLE001
            entry["peers"][name] = {"error": _err(e)}
            log(f"   {row.label:12s} {name:14s} FAILED {entry['peers'][name]['error']}")
    rounds = QUICK_ROUNDS if quick else ROUNDS
    times = {name: [] for name in fns}
    round_p50 = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)] if names else []:
            if name not in fns:
                continue
            try:
                burst = measure(fns[name], warmup=0 if slow[name] else 1, budget_s=budget_s / rounds,
                                min_iters=1 if slow[name] else 3, raw=True)
            except Exception as e:  # noqa: BLE001
                entry["peers"][name] = {"error": _err(e)}
                log(f"   {row.label:12s} {name:14s} FAILED {entry['peers'][name]['error']}")
                del fns[name]
                continue
            times[name] += burst
            round_p50[name].append(float(np.median(burst)))
            time.sleep(GAP_S)
        if stream is not None:
            entry["stream_gbps"] = max(entry.get("stream_gbps", 0.0), stream())
    batch = row.shapes[0][0]
    for name in fns:
        stats = entry["peers"][name]
        stats.update(summarize(times[name]))
        stats["rounds"] = len(round_p50[name])
        stats["throughput_per_s"] = batch * 1000.0 / stats["p50_ms"]
        if workload.gflop is not None:
            stats["gflops"] = workload.gflop(row) / (stats["p50_ms"] / 1000.0)
        log(f"   {row.label:12s} {name:14s} p50 {stats['p50_ms']:9.3f} ms  p99 {stats['p99_ms']:9.3f} ms"
            f"  ({stats['iters']} iters)")
    if "kiln" in fns:
        per_round = {n: [k / p for k, p in zip(round_p50["kiln"], round_p50[n])] for n in fns if n != "kiln"}
        entry["ratio_p50"] = {n: float(np.median(r)) for n, r in per_round.items()}
        # How far the rounds spread: a shared machine's spells move single rounds by 10-20%.
        entry["ratio_rounds"] = {n: [float(min(r)), float(max(r))] for n, r in per_round.items()}


def _err(e: Exception) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def _references(workload, rows, inputs) -> dict:
    """The reference output per row: PyTorch eager, or ONNX Runtime for an ONNX-only workload."""
    refs = {}
    try:
        if workload.factory is not None:
            import torch

            module = workload.torch_model()[0]
            with torch.inference_mode():
                for row in rows:
                    refs[row.label] = _as_numpy(module(*[torch.from_numpy(x) for x in inputs[row.label]]))
        else:
            from .peers import OrtPeer

            peer = OrtPeer(threads=1)
            peer.setup(workload)
            for row in rows:
                refs[row.label] = _as_numpy(peer.runner(row, inputs[row.label])())
    except Exception:  # noqa: BLE001 - no reference: errors are not reported
        pass
    return refs


def _fmt_setup(info: dict) -> str:
    parts = []
    for k, v in info.items():
        parts.append(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}")
    return " ".join(parts)
