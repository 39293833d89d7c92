"""kiln-bench pieces: statistics, the markdown report and target checks, the micro-benchmark models."""

import numpy as np

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
         "ratio_p50": {"onnxruntime": 1.5, "eager": 0.75}},
    ]
    return {"quick": True, "threads": 2, "peers": ["kiln", "eager", "onnxruntime"], "started": "t0",
            "finished": "t1", "machine": {"load_avg_at_start": (1.0, 1.0, 1.0)},
            "workloads": {"mlp": {"kiln": {"compile_cold_s": 3.0, "compile_warm_s": 1.0}}}, "rows": rows}


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
    assert "| mlp | kiln | 3.00 | 1.00 |" in md


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
