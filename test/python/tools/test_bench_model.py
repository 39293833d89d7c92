"""``kiln-bench --model MODEL --shape ...`` (:mod:`kiln.bench.model_bench`): shape
parsing, the measurement of a torch factory and of an ONNX file (latency
percentiles, throughput, cold / warm compile, peak RSS, arena, launches),
the table and ``--json``, and the usage errors."""

import json
import mmap
import os
import pathlib
import sys

import pytest

from kiln.bench import model_bench as mb
from kiln.errors import KilnError
from kiln.module import SymbolInfo
from kiln.runtime.contract import InputSpec
from kiln.tools import kiln_bench

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _tool_models as tm  # noqa: E402

ROOT = tm.ROOT

SYMS = {"B": SymbolInfo("B", 1, 64), "L": SymbolInfo("L", 1, 512, opt=128)}
INPUTS = [InputSpec.make("x", ["B", "L", 16], "f32"), InputSpec.make("mask", ["B", "L"], "i1")]


def bench_cli(args, pythonpath=None):
    return tm.run_tool("kiln.tools.kiln_bench", args, pythonpath)


# ---------------------------------------------------------------- shapes


def test_parse_shape_symbols_and_input_dims():
    s = mb.parse_shape("B=8,L=128", SYMS, INPUTS)
    assert s.symbols == {"B": 8, "L": 128} and s.inputs == {}
    s = mb.parse_shape("0=4x32x16", SYMS, INPUTS)
    assert s.symbols == {} and s.inputs == {0: (4, 32, 16)}
    s = mb.parse_shape("mask=2x7, B=2", SYMS, INPUTS)
    assert s.inputs == {1: (2, 7)} and s.symbols == {"B": 2}


@pytest.mark.parametrize("text, message", [
    ("Q=3", "'Q' is neither a symbol (B, L) nor an input (x, mask, or its position 0..1)"),
    ("5=3x3", "'5' is neither a symbol"),
    ("B=eight", "symbol B needs an integer, got 'eight'"),
    ("x=4x4", "input 'x' has rank 3 [B, L, 16], got 2 dims '4x4'"),
    ("x=4xax16", "input x needs dims like 8x128, got '4xax16'"),
    ("B", "--shape expects SYM=N or INPUT=D0xD1x... items"),
])
def test_parse_shape_errors(text, message):
    with pytest.raises(KilnError, match=None) as e:
        mb.parse_shape(text, SYMS, INPUTS)
    assert message in str(e.value)


def test_resolve_shape_fills_symbols_from_inputs_examples_and_opt():
    binding, shapes = mb.resolve_shape(mb.parse_shape("0=4x32x16", SYMS, INPUTS), SYMS, INPUTS)
    assert binding == {"B": 4, "L": 32} and shapes == [(4, 32, 16), (4, 32)]
    binding, shapes = mb.resolve_shape(mb.parse_shape("B=2", SYMS, INPUTS), SYMS, INPUTS)
    assert binding == {"B": 2, "L": 128} and shapes == [(2, 128, 16), (2, 128)]  # L at its opt
    binding, _ = mb.resolve_shape(mb.ShapeSpec("default", {}, {}), SYMS, INPUTS, [(3, 9, 16), (3, 9)])
    assert binding == {"B": 3, "L": 9}  # the factory's example shape
    with pytest.raises(KilnError, match=r"give symbol B a value \(1 <= B <= 64\), e.g. --shape B=N"):
        mb.resolve_shape(mb.ShapeSpec("default", {}, {}), SYMS, INPUTS)
    assert mb.batch_symbol(INPUTS) == "B"
    assert mb.batch_symbol([InputSpec.make("x", [3, "B"], "f32")]) is None


def test_peak_rss_is_reset_and_measured():
    exact = mb.reset_peak_rss()
    before = mb.peak_rss_bytes()
    # A fresh mapping: a bytearray may come from heap pages an earlier test
    # left resident (kiln's malloc tuning keeps freed memory), raising nothing.
    block = mmap.mmap(-1, 64 << 20)
    for page in range(0, len(block), 4096):  # touch every page
        block[page] = 1
    if exact:  # the mark was reset to the current RSS, so the block raises it
        assert mb.peak_rss_bytes() >= before + (60 << 20)
    else:  # the mark still covers the whole process, at least all of it now resident
        assert mb.peak_rss_bytes() >= mb._status_kib()["VmRSS"] * 1024
    assert mb.process_peak_rss_bytes() >= mb.peak_rss_bytes() - (1 << 20)
    del block


def test_a_reset_the_kernel_ignores_is_reported(monkeypatch):
    """A host that accepts the clear_refs write and keeps the mark (CI of
    2026-12-06) makes the reset report False, so rows say "process"."""
    assert mb.reset_peak_rss() in (True, False)
    monkeypatch.setattr(mb, "_status_kib", lambda: {"VmHWM": 1_500_000, "VmRSS": 200_000})
    assert mb.reset_peak_rss() is False
    monkeypatch.setattr(mb, "_status_kib", lambda: {"VmHWM": 200_004, "VmRSS": 200_000})
    assert mb.reset_peak_rss() is True


# ---------------------------------------------------------------- whole runs


def test_bench_model_factory_in_process(factories):
    _, mod = factories
    saved = os.environ.get("KILN_CACHE_DIR")
    r = mb.bench_model(f"{mod}:mlp", ["B=1", "0=16x16"], iters=7, warmup=2)
    assert os.environ.get("KILN_CACHE_DIR") == saved  # the temporary cold cache is put back
    c = r["compile"]
    assert c["cold_s"] > 0 and c["warm_s"] > 0 and c["kernel_cache_warm"] == "hit"
    assert c["warm_s"] < c["cold_s"]
    assert r["batch_symbol"] == "B" and [row["binding"] for row in r["rows"]] == [{"B": 1}, {"B": 16}]
    for row, n in zip(r["rows"], (1, 16)):
        assert row["iters"] == 7
        assert 0 < row["min_ms"] <= row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
        assert row["calls_per_s"] == pytest.approx(1000.0 / row["p50_ms"])
        assert row["samples_per_s"] == pytest.approx(n * row["calls_per_s"])
        assert row["kernel_launches_per_call"] >= 1
        assert row["arena_bytes"] > 0 and row["peak_rss_bytes"] >= row["rss_before_bytes"] > 0
        assert row["peak_rss_scope"] == "this shape"
    assert r["rows"][1]["arena_bytes"] > r["rows"][0]["arena_bytes"]  # planned for the bound shape
    table = mb.format_table(r)
    assert "compile: cold " in table and "p99 ms" in table and "samples/s" in table
    assert table.splitlines()[-1].startswith("B=16 ")
    json.dumps(r)


def test_kiln_bench_model_factory_json(factories):
    folder, mod = factories
    rc, out, err = bench_cli(["--model", f"{mod}:embed", "--shape", "B=2,L=16", "--iters", "5", "--warmup", "1",
                              "--json"], pythonpath=folder)
    assert rc == 0, err
    data = json.loads(out)
    assert data["model"] == f"{mod}:embed" and data["iters"] == 5
    (row,) = data["rows"]
    assert row["binding"] == {"B": 2, "L": 16} and row["input_shapes"] == [[2, 16]]
    assert row["samples_per_s"] == pytest.approx(2 * row["calls_per_s"])
    assert data["compile"]["cold_s"] > data["compile"]["warm_s"] > 0
    assert "kiln-bench: compiling" in err  # progress on stderr, JSON alone on stdout


def test_kiln_bench_model_onnx_table(onnx_model, tmp_path):
    rc, out, err = bench_cli(["--model", str(onnx_model), "--symbol", "N=1:64", "--shape", "N=4",
                              "--shape", "x=32x8,ids=32", "--iters", "5", "--quiet", "--out", str(tmp_path)])
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"model: {onnx_model}" and lines[1].startswith("compile: cold ")
    assert [ln.split()[0] for ln in lines[-2:]] == ["N=4", "N=32"]
    data = json.loads((tmp_path / "bench_model.json").read_text())
    assert [r["input_shapes"] for r in data["rows"]] == [[[4, 8], [4]], [[32, 8], [32]]]
    assert err == ""


def test_kiln_bench_model_usage_errors(factories, capsys):
    with pytest.raises(SystemExit) as e:
        kiln_bench.main(["--shape", "B=1"])
    assert e.value.code == 2 and "--shape needs --model" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        kiln_bench.main(["--json"])
    assert e.value.code == 2
    with pytest.raises(KilnError, match="--iters must be at least 1"):
        kiln_bench.main(["--model", "m:f", "--iters", "0"])
    with pytest.raises(KilnError, match="--workloads, --peers and --quick are for the suite"):
        kiln_bench.main(["--model", "m:f", "--quick"])
    _, mod = factories
    with pytest.raises(KilnError, match="'Q' is neither a symbol"):
        kiln_bench.main(["--model", f"{mod}:mlp", "--shape", "Q=3", "--iters", "1", "--quiet"])
