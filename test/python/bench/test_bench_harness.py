"""kiln-bench pieces: statistics, the markdown report and target checks, the micro-benchmark models."""

import platform
import time

import numpy as np
import pytest

import kiln
from kiln.bench import harness, micro, report
from kiln.bench.workloads import WORKLOADS, select


def test_summarize_percentiles():
    s = harness.summarize(list(range(1, 101)))
    assert s["iters"] == 100
    assert abs(s["p50_ms"] - 50.5) < 1e-9
    assert abs(s["p99_ms"] - 99.01) < 1e-9
    assert s["min_ms"] == 1


def _result():
    rows = [
        {"workload": "mlp", "row": "B=1", "shapes": [[1, 1024]],
         "peers": {"kiln": {"p50_ms": 1.0, "p95_ms": 1.2, "p99_ms": 1.5, "throughput_per_s": 1000.0,
                            "kernel_launches_per_call": 2, "arena_peak_bytes": 2 ** 20, "max_abs_err_vs_ref": 1e-6},
                   "onnxruntime": {"p50_ms": 2.0, "p95_ms": 2.0, "p99_ms": 2.0},
                   "eager": {"error": "RuntimeError: x"}},
         "ratio_p50": {"onnxruntime": 0.5}},
        {"workload": "transformer_block", "row": "B=1,L=32", "shapes": [[1, 32, 256]],
         "peers": {"kiln": {"p50_ms": 3.0, "p95_ms": 3.0, "p99_ms": 3.0},
                   "onnxruntime": {"p50_ms": 2.0, "p95_ms": 2.0, "p99_ms": 2.0},
                   "eager": {"p50_ms": 4.0, "p95_ms": 4.0, "p99_ms": 4.0}},
         "ratio_p50": {"onnxruntime": 1.5, "eager": 0.75},
         "ratio_rounds": {"onnxruntime": [0.8001, 1.75], "eager": [0.5, 0.9]}},
    ]
    return {"quick": True, "threads": 2, "peers": ["kiln", "eager", "onnxruntime"], "started": "t0",
            "finished": "t1", "machine": {"load_avg_at_start": (1.0, 1.0, 1.0)},
            "workloads": {"mlp": {"kiln": {"compile_cold_s": 3.0, "compile_warm_s": 1.0, "process_setup_s": 20.0}}},
            "rows": rows}


def test_targets_are_checked_per_row():
    checks = {(c["row"], c["target"]): c["met"] for c in report.targets(_result())}
    assert checks[("mlp B=1", "kiln <= 1.0x onnxruntime")] is True
    assert checks[("mlp B=1", "kiln <= 0.8x onnxruntime")] is True
    assert checks[("transformer_block B=1,L=32", "kiln <= 1.0x onnxruntime")] is False
    assert checks[("transformer_block B=1,L=32", "kiln <= 0.5x eager")] is False


def test_markdown_has_every_row_and_marks_errors():
    md = report.markdown(_result())
    lines = md.splitlines()
    mlp = next(line for line in lines if line.startswith("| mlp | B=1 |"))
    assert "error" in mlp and "0.50" in mlp and "| 1.0 |" in mlp  # eager failed; ratio; arena MiB
    assert any(line.startswith("| transformer_block | B=1,L=32 |") for line in lines)
    assert "| mlp | kiln | 3.00 | 1.00 | first: 20.0 s of once-per-process setup (native runtime build, a first" \
           " compile) |" in md
    # Ratio targets in three places with the rounds' spread when recorded (0.8001 is not 0.80).
    assert "| transformer_block B=1,L=32 | kiln <= 1.0x onnxruntime | 1.500 (rounds 0.80-1.75) | no |" in md
    assert "| mlp B=1 | kiln <= 0.8x onnxruntime | 0.500 | yes |" in md  # no rounds recorded
    assert "| mlp compile | warm compile <= 1 s | 1.00 | yes |" in md


def test_the_run_names_its_cpu_and_vector_extension():
    """The native kernels differ between AVX2 and AVX-512 builds, so a run says which it had."""
    cpu = harness._machine()["cpu"]
    assert cpu.endswith(("AVX-512", "AVX2", "no AVX2")) or platform.system() != "Linux"
    result = _result()
    result["machine"]["cpu"] = "Some CPU, AVX2"
    assert "2 threads, Some CPU, AVX2," in report.markdown(result).splitlines()[0]


def test_workloads_are_the_issue_rows():
    labels = {w: [r.label for r in WORKLOADS[w].rows] for w in WORKLOADS}
    assert labels["mlp"] == ["B=1", "B=8", "B=64"]
    assert labels["transformer_block"] == ["B=1,L=32", "B=4,L=128", "B=8,L=512"]
    assert labels["small_cnn"] == ["B=1", "B=8"]
    assert labels["light_resnet50"] == ["B=1"]
    assert all(rows for _, rows in select(None, quick=True))
    assert WORKLOADS["mlp"].rows[1].inputs()[0].shape == (8, 1024)


def test_chain_model_launches_one_kernel_per_matmul():
    model = kiln.compile(micro.chain_text(3))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    w = np.eye(4, dtype=np.float32) * 2
    np.testing.assert_allclose(model(x, w), x * 8)
    assert model.report()["kernels_launched_per_call"] == 3


def test_rows_interleave_peers_and_ratio_is_the_median_of_round_ratios(monkeypatch):
    """Each round runs a burst of every peer, the order rotating; kiln/peer is
    the median of the per-round p50 ratios (one slow round does not move it)."""
    from kiln.bench.workloads import Row

    calls = []
    # Per-round latency of each peer (ms): a slow spell from round 2 (for ONNX
    # Runtime, whose burst comes first in that round) and from round 3 (kiln).
    # Ratios of the pooled p50s would give 1/6 against ONNX Runtime.
    lat = {"kiln": [1.0, 1.0, 1.0, 3.0, 3.0], "onnxruntime": [2.0, 2.0, 6.0, 6.0, 6.0],
           "eager": [4.0, 4.0, 4.0, 4.0, 4.0]}

    class Fake:
        def __init__(self, name):
            self.name = name

        def runner(self, row, inputs):
            return lambda: np.zeros(3, np.float32)

        def row_info(self, row):
            return {}

    def fake_measure(fn, **kw):
        name = next(n for n, f in fns.items() if f is fn)
        r = sum(1 for c in calls if c == name)
        calls.append(name)
        return [lat[name][r]] * 3

    peers = {n: Fake(n) for n in ("kiln", "onnxruntime", "eager")}
    fns = {}
    orig_runner = Fake.runner

    def runner(self, row, inputs):
        fns[self.name] = orig_runner(self, row, inputs)
        return fns[self.name]

    monkeypatch.setattr(Fake, "runner", runner)
    monkeypatch.setattr(harness, "measure", fake_measure)
    monkeypatch.setattr(harness, "GAP_S", 0.0)

    class W:
        gflop = None

    entry = {"peers": {}}
    harness._measure_row(W(), Row("B=1", ((1, 4),)), peers, [np.zeros((1, 4), np.float32)], None, entry,
                         quick=False, budget_s=0.1, log=lambda *a: None)
    assert calls[:3] == ["kiln", "onnxruntime", "eager"] and calls[3:6] == ["onnxruntime", "eager", "kiln"]
    assert len(calls) == 3 * harness.ROUNDS
    assert entry["ratio_p50"] == {"onnxruntime": 0.5, "eager": 0.25}
    assert entry["ratio_rounds"] == {"onnxruntime": [1 / 6, 0.5], "eager": [0.25, 0.75]}
    assert entry["peers"]["kiln"]["p50_ms"] / entry["peers"]["onnxruntime"]["p50_ms"] == 1 / 6
    assert entry["peers"]["kiln"]["rounds"] == harness.ROUNDS and entry["peers"]["kiln"]["iters"] == 15


def test_overhead_interleaves_the_chain_models_and_fits_their_p50s(monkeypatch):
    """The chain models take turns in rotating order; each point's p50 is over
    its own bursts, and the line through them gives the fixed and per-launch cost."""
    chains, rounds = (1, 4, 16), 3
    expected = [n for r in range(rounds) for n in chains[r:] + chains[:r]]
    seen = []

    def fake_measure(fn, **kwargs):
        assert kwargs["raw"]
        fn()  # a real call, so the report counts its launches
        n = expected[len(seen)]
        seen.append(n)
        return [(10.0 + 2.0 * n) / 1000.0] * 3  # ms: 10 us per call + 2 us per kernel

    monkeypatch.setattr(micro, "measure", fake_measure)
    out = micro.overhead(chains, rounds=rounds)
    assert len(seen) == len(expected)
    assert [p["launches"] for p in out["points"]] == list(chains)
    assert [p["iters"] for p in out["points"]] == [3 * rounds] * 3
    assert abs(out["fixed_us"] - 10.0) < 1e-6 and abs(out["per_launch_us"] - 2.0) < 1e-6


def test_gemm_takes_turns_and_reports_the_median_round_ratio(monkeypatch):
    """kiln and numpy alternate in bursts (kiln first in even rounds), and
    kiln_vs_numpy is the median of the per-round ratios, not the ratio of the
    pooled p50s: a slow spell on one side's bursts moves those rounds only."""
    from kiln.bench import micro

    # Per round (ms): numpy / kiln = 2, 0.5, 2 -> median 2; the pooled p50s
    # (kiln 4, numpy 2) would read 0.5.
    kiln_ms, numpy_ms = [1.0, 4.0, 4.0], [2.0, 2.0, 8.0]
    calls = []

    def fake_measure(fn, **kwargs):
        assert kwargs["raw"]
        r = len(calls) // 2
        side = ("kiln", "numpy")[(len(calls) + r) % 2]
        calls.append(side)
        return [(kiln_ms if side == "kiln" else numpy_ms)[r]] * 3

    monkeypatch.setattr(micro, "measure", fake_measure)
    (row,) = micro.gemm(sizes=(8,), rounds=3)
    assert calls == ["kiln", "numpy", "numpy", "kiln", "kiln", "numpy"]
    assert row["rounds"] == 3 and row["max_abs_err"] < 1e-4
    assert row["kiln_vs_numpy"] == 2.0
    assert row["kiln_p50_ms"] == 4.0 and row["numpy_p50_ms"] == 2.0


def test_floor_is_the_flops_at_the_peak_or_the_weights_at_the_stream_rate():
    from kiln.bench import ceiling

    assert ceiling.floor_ms(100.0, 0.3) == 3.0  # 0.3 GFLOP at 100 GFLOPS
    assert abs(ceiling.floor_ms(100.0, 0.01, 2_000_000, 10.0) - 0.2) < 1e-12  # 2 MB at 10 GB/s outweighs 0.1 ms
    assert ceiling.floor_ms(100.0, 0.01, 2_000_000, None) == 0.1  # no rate probed: FLOPs only
    assert ceiling.floor_ms(None, 0.3) is None
    assert ceiling.floor_ms(100.0, None, 2_000_000, 10.0) is None


def test_targets_beyond_the_machines_ceiling_are_marked_out_of_reach():
    """With the ceiling probed, each kiln/peer target gets the share of the
    machine's best it asks for; an unmet one above 100% reads "out of reach"."""
    result = _result()
    result["ceiling"] = {"threads": 2, "fma_gflops": 100.0}
    mlp, block = result["rows"]
    mlp.update(min_gflop=0.01, weight_bytes=2_000_000, stream_gbps=10.0)  # floor 0.2 ms (the weights)
    block.update(min_gflop=0.3, weight_bytes=None)  # floor 3.0 ms (the FLOPs)
    for peer in block["peers"].values():
        peer["min_ms"] = 3.5
    checks = {(c["row"], c["target"]): c for c in report.targets(result)}
    # mlp: kiln 1.0 ms at 0.5x ORT, so ORT took 2.0 and 0.8x allows 1.6 ms.
    assert abs(checks[("mlp B=1", "kiln <= 0.8x onnxruntime")]["floor_share"] - 0.2 / 1.6) < 1e-12
    # block: kiln 3.0 ms at 0.75x eager, so 0.5x eager allows 2.0 ms: 150% of the floor.
    assert abs(checks[("transformer_block B=1,L=32", "kiln <= 0.5x eager")]["floor_share"] - 1.5) < 1e-12
    md = report.markdown(result)
    assert "FMA peak 100 GFLOPS; weights streamed (best sweep between a row's rounds) mlp B=1 1.9 MiB at 10 GB/s" in md
    assert "| transformer_block B=1,L=32 | kiln <= 0.5x eager | 0.750 (rounds 0.50-0.90) | no (out of reach here)" \
           " | 150% |" in md
    assert "| mlp B=1 | kiln <= 0.8x onnxruntime | 0.500 | yes | 12% |" in md
    # A call faster than the probed floor proves it lower: the floor is capped there.
    block["peers"]["onnxruntime"]["min_ms"] = 1.0
    checks = {(c["row"], c["target"]): c for c in report.targets(result)}
    assert abs(checks[("transformer_block B=1,L=32", "kiln <= 0.5x eager")]["floor_share"] - 0.5) < 1e-12
    del result["ceiling"]
    assert "floor_share" not in report.targets(result)[0]
    assert "| mlp B=1 | kiln <= 0.8x onnxruntime | 0.500 | yes | — |" in report.markdown(result)


@pytest.mark.cc  # the probes are built with cc: without one this fails, not skips (conftest.py)
def test_the_ceiling_probe_measures_this_machine():
    """The probes give plausible numbers: two threads at most ~2x one (each
    thread times itself, so a caller scheduled late cannot shrink the time).
    One thread is measured before and after two and the better kept: on a
    loaded CI host one run of it was slowed to 123 GFLOPS against 348 for two
    (2.8x, CI of 2026-12-06); the bound of 3x still catches a probe that
    counts a thread's work twice or times only part of it."""
    from kiln.bench.ceiling import Ceiling

    one, two = Ceiling.build(1), Ceiling.build(2)
    try:
        fma1 = one.fma_gflops(0.05)
        fma2 = two.fma_gflops(0.05)
        fma1 = max(fma1, one.fma_gflops(0.05))
        assert 1 < fma1 < 2000
        assert fma2 < 3 * fma1
        assert 0.1 < one.stream_gbps(1 << 20) < 2000
        assert two.stream_gbps(1 << 20) < 5000  # a 2 MiB-per-microsecond sweep is a timing bug
    finally:
        one.close()
        two.close()


@pytest.mark.cc
def test_the_fma_peak_is_above_what_a_gemm_reaches():
    """The peak is a peak: the FMA probe on every CPU beats numpy's sgemm
    (its BLAS threads, at most one a CPU) on a cache-resident product (with
    chains wider than the registers the AVX2 build spilled and read 10.8
    GFLOPS on two cores whose GEMMs ran at 80-125).  Best of several runs
    each, a quarter of margin for a noisy host."""
    import os

    from kiln.bench.ceiling import Ceiling

    a = np.random.default_rng(0).standard_normal((384, 384), dtype=np.float32)
    probe = Ceiling.build(os.cpu_count() or 1)
    best, peak = float("inf"), 0.0
    try:
        # Interleaved rounds, the best of each: another job on the host slows
        # both alike (measured one after the other, a busy spell during the
        # probe alone read it below the GEMM).
        for _ in range(4):
            for _ in range(5):
                start = time.perf_counter()
                a @ a
                best = min(best, time.perf_counter() - start)
            peak = max(peak, probe.fma_gflops(0.05))
    finally:
        probe.close()
    gemm = 2 * 384**3 / best / 1e9
    assert peak > 0.75 * gemm, (peak, gemm)


def test_rows_with_a_stream_probe_keep_its_best_rate(monkeypatch):
    """The harness sweeps a row's weights after each round and keeps the best rate."""
    from kiln.bench.workloads import Row

    monkeypatch.setattr(harness, "measure", lambda fn, **kw: [1.0, 1.0, 1.0])
    monkeypatch.setattr(harness, "GAP_S", 0.0)

    class Peer:
        def runner(self, row, inputs):
            return lambda: np.zeros(3, np.float32)

        def row_info(self, row):
            return {}

    class W:
        gflop = None

    rates = iter([5.0, 9.0, 7.0, 6.0, 8.0])
    entry = {"peers": {}}
    harness._measure_row(W(), Row("B=1", ((1, 4),)), {"kiln": Peer()}, [np.zeros((1, 4), np.float32)], None, entry,
                         quick=False, budget_s=0.1, log=lambda *a: None, stream=lambda: next(rates))
    assert entry["stream_gbps"] == 9.0


def test_workloads_know_their_weights_and_unavoidable_flops():
    mlp, block = WORKLOADS["mlp"], WORKLOADS["transformer_block"]
    assert mlp.weight_bytes() == 4 * (1024 * 4096 + 4096 + 4096 * 1024 + 1024)
    assert WORKLOADS["light_resnet50"].weight_bytes() is None
    row = block.rows[1]  # B=4, L=128: the causal mask spares the upper triangle of both attention products
    assert abs(block.gflop(row) - block.min_gflop(row) - 2 * 4 * 128 * 127 * 256 / 1e9) < 1e-12
    assert mlp.min_gflop(mlp.rows[0]) == mlp.gflop(mlp.rows[0])
