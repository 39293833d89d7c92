"""``kiln validate`` / :func:`kiln.validate.validate`: the tolerance table, the
shape points, the comparison, and whole runs on a torch factory and an ONNX
file -- passing, and failing (a perturbed result, a zero tolerance) with the
shape and output named and exit status 1; usage errors exit 2."""

import json
import math
import pathlib
import sys

import numpy as np
import pytest

import kiln.validate as kv
from kiln.errors import KilnError
from kiln.module import SymbolInfo
from kiln.runtime.profiles import normalize_profiles
from kiln.tools import kiln_main

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _tool_models as tm  # noqa: E402

ROOT = tm.ROOT


def cli(args, pythonpath=None):
    return tm.run_tool("kiln.tools.kiln_main", args, pythonpath)


# ---------------------------------------------------------------- the table and the comparison


def test_tolerance_table_is_public_and_ordered():
    assert set(kv.TOLERANCES) == {"f32", "f16", "bf16", "int8", "int8-weights"}
    assert kv.TOLERANCES["f32"] == kv.Tolerance(rtol=1e-4, atol=1e-5)
    # Less precise types are allowed more, never less (int8-weights: about bf16's error, below int8's).
    order = ["f32", "f16", "bf16", "int8-weights", "int8"]
    for a, b in zip(order, order[1:]):
        assert kv.TOLERANCES[a].rtol <= kv.TOLERANCES[b].rtol and kv.TOLERANCES[a].atol <= kv.TOLERANCES[b].atol


def test_tolerance_for_outputs():
    assert kv.tolerance_for("f16", "f32") == kv.TOLERANCES["f16"]
    assert kv.tolerance_for("f32", "i64") == kv.EXACT  # integer outputs exact
    assert kv.tolerance_for("f32", "i1", rtol=1.0) == kv.EXACT  # overrides are for floats only
    assert kv.tolerance_for("f32", "f32", rtol=0) == kv.Tolerance(0.0, 1e-5)
    with pytest.raises(KilnError, match="unknown precision 'f8'"):
        kv.tolerance_for("f8", "f32")


def test_precision_of_takes_the_least_precise():
    assert kv.precision_of(["f32", "i64"]) == "f32"
    assert kv.precision_of(["f32", "f16"]) == "f16"
    assert kv.precision_of(["f16", "bf16", "f32"]) == "bf16"
    assert kv.precision_of(["f32", "i8"]) == "int8"


def test_compare_passes_fails_and_names_the_worst_element():
    tol = kv.Tolerance(rtol=1e-3, atol=1e-3)
    want = np.array([[1.0, 2.0], [100.0, 0.0]], np.float32)
    ok = kv.compare("output0", want + np.float32(5e-4), want, tol)
    assert ok.passed and 0 < ok.worst_ratio < 1 and ok.max_abs == pytest.approx(5e-4, rel=1e-2)
    bad = want.copy()
    bad[1, 1] = 0.01  # 10x the atol where the reference is 0
    c = kv.compare("output0", bad, want, tol)
    assert not c.passed and c.worst_index == [1, 1] and c.worst_ratio == pytest.approx(10, rel=1e-3)
    assert "at [1, 1] kiln 0.00999999978 vs reference 0 exceeds atol 0.001 + rtol 0.001 * |ref|" in c.message
    # The relative error only counts elements above atol: 100 -> 100.05 is 5e-4.
    assert kv.compare("o", want + np.array([[0, 0], [0.05, 0]], np.float32), want, tol).max_rel == pytest.approx(
        5e-4, rel=1e-2)


def test_compare_nan_inf_shapes_and_integers():
    tol = kv.TOLERANCES["f32"]
    want = np.array([np.nan, np.inf, 1.0], np.float32)
    assert kv.compare("o", want.copy(), want, tol).passed  # NaN matches NaN, inf matches inf
    c = kv.compare("o", np.array([1.0, np.inf, 1.0], np.float32), want, tol)
    assert not c.passed and math.isinf(c.max_abs) and c.worst_index == [0]
    assert not kv.compare("o", np.zeros((2, 3)), np.zeros((3, 2)), tol).passed
    assert "shape [2, 3] but the reference's is [3, 2]" in kv.compare("o", np.zeros((2, 3)), np.zeros((3, 2)), tol).message
    ints = np.array([3, 4, 5])
    assert kv.compare("o", ints, ints, kv.EXACT).passed
    c = kv.compare("o", ints + np.array([0, 1, 0]), ints, kv.EXACT)
    assert not c.passed and "tolerance 0" in c.message and c.worst_index == [1]


# ---------------------------------------------------------------- shape points


def test_shape_points_min_opt_max_random_deduplicated():
    syms = {"B": SymbolInfo("B", 1, 64), "L": SymbolInfo("L", 4, 4096, opt=512, multiple_of=4)}
    pts = kv.shape_points(syms, random=3, seed=5)
    assert [p.label for p in pts[:3]] == ["min", "opt", "max"]
    assert [dict(p.binding) for p in pts[:3]] == [{"B": 1, "L": 4}, {"B": 8, "L": 512}, {"B": 64, "L": 4096}]
    assert len(pts) == 6 and all(1 <= p.binding["B"] <= 64 and p.binding["L"] % 4 == 0 for p in pts)
    assert pts == kv.shape_points(syms, random=3, seed=5)  # seeded
    # A range of one point gives one shape, however many are asked for.
    assert len(kv.shape_points({"B": SymbolInfo("B", 3, 3)}, random=4)) == 1
    assert pts[0].text() == "B=1, L=4 (min)"


def test_shape_points_per_profile_and_unranged_symbols():
    syms = {"B": SymbolInfo("B", 1, 64)}
    profiles = normalize_profiles([{"name": "small", "B": (1, 2, 4)}, {"B": (5, 16, 64)}], syms)
    pts = kv.shape_points(syms, profiles, random=4, seed=0)
    assert [p.label for p in pts[:6]] == ["small min", "small opt", "small max", "profile1 min", "profile1 opt",
                                          "profile1 max"]
    for p in pts[6:]:
        lo, hi = (1, 4) if p.label.startswith("small") else (5, 64)
        assert lo <= p.binding["B"] <= hi
    with pytest.raises(KilnError, match=r"symbol 'N' has no declared range .*--symbol N=MIN:MAX"):
        kv.shape_points({"N": SymbolInfo("N", 1, 2**31 - 1)})


def test_random_inputs_follow_dtypes_and_ranges():
    from kiln.runtime.contract import InputSpec

    specs = [InputSpec.make("x", ["B", 3], "f32"), InputSpec.make("ids", ["B"], "i64"),
             InputSpec.make("m", ["B"], "i1")]
    rng = np.random.default_rng(0)
    x, ids, m = kv.random_inputs(specs, {"B": 200}, rng, [None, (7, 9), None])
    assert x.shape == (200, 3) and x.dtype == np.float32
    assert ids.dtype == np.int64 and ids.min() == 7 and ids.max() == 9
    assert m.dtype == np.bool_
    _, ids, _ = kv.random_inputs(specs, {"B": 200}, rng)
    assert 0 <= ids.min() and ids.max() <= 15
    import torch

    assert kv.example_ranges((torch.randn(2), torch.tensor([3, 40]))) == [None, (3, 40)]


# ---------------------------------------------------------------- whole runs, in process


def test_validate_factory_passes_with_coverage(factories):
    _, mod = factories
    r = kv.validate(f"{mod}:mlp", shapes=2, seed=1)
    assert r.passed, r.format()
    assert [s.point.label for s in r.shapes] == ["min", "opt", "max", "random 1", "random 2"]
    assert [s.point.binding["B"] for s in r.shapes[:3]] == [1, 8, 32]
    assert r.reference == "PyTorch eager" and r.precision == "f32"
    assert r.coverage["fallback"] == 0 and r.coverage["rate"] == 1.0 and r.coverage["ops"] >= 3
    out = r.shapes[2].outputs[0]
    assert out.shape == [32, 8] and 0 < out.max_abs < 1e-5
    text = r.format()
    assert "PASS: 5 shape(s)" in text and "B=32 (max)" in text and "op coverage: " in text
    json.dumps(r.to_dict())


def test_validate_integer_inputs_use_the_example_range(factories):
    """Token ids drawn in the example's [40, 89], the table's rows after the model subtracts 40 (in the
    default [0, 15] they would index before the table and fail)."""
    _, mod = factories
    r = kv.validate(f"{mod}:embed", shapes=1)
    assert r.passed, r.format()
    assert dict(r.shapes[2].point.binding) == {"B": 8, "L": 40}


def test_validate_reports_fallback_coverage_and_time(factories):
    _, mod = factories
    r = kv.validate(f"{mod}:bessel", shapes=1)
    assert r.passed, r.format()
    assert r.coverage["fallback"] == 1 and r.coverage["rate"] < 1.0
    assert any("bessel_j0" in name for name in r.coverage["fallback_ops"])
    assert r.fallback["ops"] >= 1 and r.fallback["share_of_ops"] > 0 and r.fallback["share_of_time"] > 0


def test_validate_perturbed_model_fails_naming_the_shape(factories, monkeypatch, capsys):
    """kiln's result made wrong by 1e-3 at B = 8 only: that shape fails, the others pass; the
    command prints the shape and output and exits 1."""
    _, mod = factories
    real = kv._compile

    def perturbed(compile_fn, module, options):
        model = real(compile_fn, module, options)

        class Wrong:
            def __getattr__(self, name):
                return getattr(model, name)

            def __call__(self, *args):
                y = model(*args)
                return y + np.float32(1e-3) if args[0].shape[0] == 8 else y

        return Wrong()

    monkeypatch.setattr(kv, "_compile", perturbed)
    r = kv.validate(f"{mod}:mlp", shapes=1)
    assert not r.passed
    assert [s.passed for s in r.shapes] == [True, False, True, True]
    assert len(r.failures()) == 1 and r.failures()[0].startswith("shape B=8 (opt) output0: max abs error 0.001")
    rc = kiln_main.main(["validate", f"{mod}:mlp", "--random", "0"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAIL: 1 violation(s)" in out and "  shape B=8 (opt) output0: max abs error 0.001" in out


def test_validate_profiles_flag_in_process(factories, capsys):
    _, mod = factories
    rc = kiln_main.main(["validate", f"{mod}:mlp", "--profile", "small:B=1:2:4", "--profile", "B=5:16:32",
                         "--random", "1", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["passed"]
    labels = [s["label"] for s in data["shapes"]]
    assert labels[:6] == ["small min", "small opt", "small max", "profile1 min", "profile1 opt", "profile1 max"]
    assert data["tolerances"]["f32"] == {"rtol": 1e-4, "atol": 1e-5}


def test_validate_onnx_in_process(onnx_model):
    r = kv.validate(str(onnx_model), symbols={"N": (1, 16)}, shapes=1)
    assert r.passed, r.format()
    assert r.reference.startswith("ONNX Runtime") and r.coverage["ops"] == 5
    assert [s.input_shapes for s in r.shapes[:3]] == [[[1, 8], [1]], [[8, 8], [8]], [[16, 8], [16]]]


# ---------------------------------------------------------------- the command, in a fresh process


def test_cli_factory_json_passes(factories):
    folder, mod = factories
    rc, out, err = cli(["validate", f"{mod}:mlp", "--random", "1", "--seed", "3", "--json"], pythonpath=folder)
    assert rc == 0, err
    data = json.loads(out)
    assert data["passed"] and data["seed"] == 3 and len(data["shapes"]) == 4
    assert data["coverage"]["rate"] == 1.0 and data["fallback"]["share_of_ops"] == 0.0


def test_cli_onnx_zero_tolerance_fails_naming_shapes(onnx_model):
    """float32 rounding differs between kiln and ONNX Runtime: with rtol = atol = 0 that is a violation."""
    rc, out, err = cli(["validate", str(onnx_model), "--symbol", "N=1:16", "--random", "0", "--rtol", "0",
                        "--atol", "0"])
    assert rc == 1, err
    assert "Traceback" not in err
    assert "reference: ONNX Runtime" in out and "FAIL: " in out
    assert any(line.startswith("  shape N=") and " output0: max abs error " in line for line in out.splitlines())


@pytest.mark.parametrize("args, message", [
    (["--profile", "B=1:2"], "--profile expects [NAME:]SYM=MIN:OPT:MAX"),
    (["--profile", "B=1:x:4"], "--profile expects integer bounds, got 'B=1:x:4'"),
    (["--symbol", "B=1:4"], "--symbol applies to ONNX models"),
    (["--random", "-1"], "--random must be a non-negative number of shapes"),
    (["--rtol", "-1"], "--rtol must be a non-negative number"),
    (["--precision", "f8"], "invalid choice: 'f8'"),
])
def test_cli_usage_errors_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        kiln_main.main(["validate", "some.module:factory", *args])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_user_errors_exit_1(onnx_model, factories, tmp_path):
    rc, out, err = cli(["validate", str(onnx_model)])
    assert rc == 1 and "kiln: error: symbol 'N' has no declared range" in err and "--symbol N=MIN:MAX" in err
    _, mod = factories
    with pytest.raises(KilnError, match="factory .*:broken' raised RuntimeError: no model today"):
        kiln_main.main(["validate", f"{mod}:broken"])
    with pytest.raises(KilnError, match="no such file"):
        kiln_main.main(["validate", str(tmp_path / "missing.onnx")])
