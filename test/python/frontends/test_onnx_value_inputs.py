"""ONNX graph inputs whose values decide shapes: shape inputs and value specializations.

A shape input (ConstantOfShape's / Expand's / Tile's / Reshape's sizes,
Slice's starts and ends) is compiled once, its values bound to symbols per
call; every other such input (a Reduce's axes, Slice's steps) is specialized
on its values at call time, cached and reported.  Each result is compared to ONNX Runtime.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.compiler import compilation_count


def _model(nodes, inputs, outputs, opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _vi(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


def _check(compiled, model, feeds):
    got = compiled(*feeds.values())
    got = list(got) if isinstance(got, tuple) else [got]
    want = _ort(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _shape_model():
    # y = ConstantOfShape(shape, 2.5) + Expand(x, shape): the values of
    # 'shape' are the output's dims.
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5])
    return _model(
        [helper.make_node("ConstantOfShape", ["shape"], ["c"], value=value),
         helper.make_node("Expand", ["x", "shape"], ["e"]),
         helper.make_node("Add", ["c", "e"], ["y"])],
        [_vi("x", TensorProto.FLOAT, [1]), _vi("shape", TensorProto.INT64, [3])],
        [_vi("y", TensorProto.FLOAT, ["A", "B", "C"])])


def test_shape_input_compiles_once_for_every_value():
    model = _shape_model()
    before = compilation_count()
    compiled = kiln.compile(model, fallback=False, symbols={"shape_1": (1, 64)})
    assert compilation_count() - before == 1  # compiled at kiln.compile, once
    rng = np.random.default_rng(0)
    for shape in ([2, 3, 4], [1, 1, 1], [5, 64, 3], [7, 2, 9]):
        x = rng.standard_normal(1).astype(np.float32)
        _check(compiled, model, {"x": x, "shape": np.array(shape, np.int64)})
    assert compilation_count() - before == 1
    rep = compiled.report()
    assert rep["value_inputs"]["shape_inputs"] == {"shape": ["shape_0", "shape_1", "shape_2"]}
    assert rep["value_inputs"]["specializations"] == 0
    assert rep["value_inputs"]["dynamic_calls"] == 4
    assert "shape input 'shape': symbols shape_0, shape_1, shape_2" in str(rep)


def test_shape_input_out_of_range_is_a_shape_error_naming_the_input():
    compiled = kiln.compile(_shape_model(), fallback=False, symbols={"shape_1": (1, 64)})
    x = np.ones(1, np.float32)
    with pytest.raises(kiln.ShapeError, match=r"input 'shape' value #1: shape_1 = 65 violates 1 <= shape_1 <= 64"):
        compiled(x, np.array([2, 65, 3], np.int64))
    with pytest.raises(kiln.ShapeError, match="input 'shape' must be a 1-D integer tensor of 3 values"):
        compiled(x, np.array([2, 3], np.int64))


def test_a_zero_size_is_pinned_and_the_other_values_stay_symbolic():
    # 0 is a valid ConstantOfShape size but outside the symbols' default
    # range (>= 1): a model with that value constant (the others symbolic)
    # serves every call with a 0 there.
    model = _shape_model()
    compiled = kiln.compile(model, fallback=False)
    before = compilation_count()
    for shape in ([2, 0, 3], [5, 0, 1], [1, 0, 7]):
        _check(compiled, model, {"x": np.ones(1, np.float32), "shape": np.array(shape, np.int64)})
    assert compilation_count() - before == 1
    v = compiled.report()["value_inputs"]
    assert (v["shape_input_models"], v["specializations"], v["dynamic_calls"]) == (2, 0, 3)


def test_reshape_and_slice_with_runtime_values_match_onnxruntime():
    model = _model(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Slice", ["r", "starts", "ends", "axes", "steps"], ["y"])],
        [_vi("x", TensorProto.FLOAT, [2, 3, 4]), _vi("shape", TensorProto.INT64, [3]), _vi("starts", TensorProto.INT64, [2]),
         _vi("ends", TensorProto.INT64, [2]), _vi("axes", TensorProto.INT64, [2]), _vi("steps", TensorProto.INT64, [2])],
        [_vi("y", TensorProto.FLOAT, ["A", "B", "C"])])
    compiled = kiln.compile(model, fallback=False)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    cases = [
        ([4, 3, 2], [0, 1], [4, 3], [0, 1], [1, 1]),
        ([0, -1, 2], [-1, 0], [-5, 2**62], [2, 0], [-1, 1]),   # Reshape's 0 and -1; negative slice, INT_MAX end
        ([6, 4, 1], [1, 10], [100, -100], [1, 0], [2, -3]),      # clamped starts / ends
    ]
    for shape, starts, ends, axes, steps in cases:
        feeds = {"x": x, "shape": np.array(shape, np.int64), "starts": np.array(starts, np.int64),
                 "ends": np.array(ends, np.int64), "axes": np.array(axes, np.int64),
                 "steps": np.array(steps, np.int64)}
        _check(compiled, model, feeds)
    v = compiled.report()["value_inputs"]
    # Slice's axes and steps are specialized; Reshape's shape and the slice
    # bounds are shape inputs, whose 0 / -1 / out-of-range values (cases 2, 3)
    # are specialized too, as the symbolic kernels do not take them.
    assert v["shape_inputs"] == {"shape": ["shape_0", "shape_1", "shape_2"], "starts": ["starts_0", "starts_1"],
                                 "ends": ["ends_0", "ends_1"]}
    assert v["specialized_inputs"] == ["axes", "steps"]
    assert (v["shape_input_models"], v["dynamic_calls"], v["specializations"]) == (1, 1, 2)


def test_reduce_with_runtime_axes_specializes_per_value_and_reuses(caplog):
    model = _model(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1, noop_with_empty_axes=1)],
        [_vi("x", TensorProto.FLOAT, ["B", 3, 4]), _vi("axes", TensorProto.INT64, ["K"])],
        [_vi("y", TensorProto.FLOAT, ["P", "Q", "R"])], opset=13)
    compiled = kiln.compile(model, fallback=False, symbols={"B": (1, 8)})
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    before = compilation_count()
    with caplog.at_level(logging.INFO, logger="kiln.runtime"):
        _check(compiled, model, {"x": x, "axes": np.array([0, 2], np.int64)})
        _check(compiled, model, {"x": x, "axes": np.array([-2], np.int64)})
    assert sum("value specialization compiled (axes=" in r.getMessage() for r in caplog.records) == 2
    assert compilation_count() - before == 2
    # A repeat (another batch size) reuses the first specialization: B stays symbolic in it.
    _check(compiled, model, {"x": x[:2], "axes": np.array([0, 2], np.int64)})
    assert compilation_count() - before == 2
    v = compiled.report()["value_inputs"]
    assert (v["specialized_inputs"], v["specializations"], v["cache_hits"]) == (["axes"], 2, 1)
    # An empty axes input with noop_with_empty_axes: the identity.
    _check(compiled, model, {"x": x, "axes": np.zeros(0, np.int64)})


def test_specializations_are_bounded():
    model = _model(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["y"])],
        [_vi("x", TensorProto.FLOAT, [2, 3]), _vi("axes", TensorProto.INT64, [1])],
        [_vi("y", TensorProto.FLOAT, ["P", "Q", "R"])])
    compiled = kiln.compile(model, fallback=False, value_specializations=2)
    x = np.ones((2, 3), np.float32)
    for a in (0, 1, 2, 0):
        _check(compiled, model, {"x": x, "axes": np.array([a], np.int64)})
    v = compiled.report()["value_inputs"]
    assert (v["specializations"], v["cached"], v["evicted"]) == (4, 2, 2)


def test_saving_a_model_with_value_inputs_is_a_clear_error(tmp_path):
    compiled = kiln.compile(_shape_model(), fallback=False)
    with pytest.raises(kiln.KilnError, match="kiln.save cannot write a model with shape inputs shape"):
        kiln.save(compiled, tmp_path / "a")
    with pytest.raises(kiln.KilnError, match="kiln.save cannot write"):
        compiled.save(tmp_path / "b")


def test_compile_settings_reach_the_models_compiled_at_call_time(tmp_path):
    # A cache_dir given to kiln.compile is where a specialization compiled
    # later, at the first call, stores its kernels.
    model = _model(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["y"])],
        [_vi("x", TensorProto.FLOAT, [2, 3]), _vi("axes", TensorProto.INT64, [1])],
        [_vi("y", TensorProto.FLOAT, ["P", "Q", "R"])])
    compiled = kiln.compile(model, fallback=False, cache_dir=str(tmp_path / "c"))
    assert [s.name for s in compiled.inputs] == ["x", "axes"]
    _check(compiled, model, {"x": np.ones((2, 3), np.float32), "axes": np.array([1], np.int64)})
    assert any(p.suffix == ".so" for p in (tmp_path / "c").rglob("*"))


def test_tile_repeats_are_a_shape_input():
    model = _model(
        [helper.make_node("Tile", ["x", "reps"], ["y"])],
        [_vi("x", TensorProto.FLOAT, ["B", 3]), _vi("reps", TensorProto.INT64, [2])],
        [_vi("y", TensorProto.FLOAT, ["P", "Q"])])
    before = compilation_count()
    compiled = kiln.compile(model, fallback=False, symbols={"B": (1, 16)})
    rng = np.random.default_rng(2)
    for b, reps in ((2, [1, 1]), (3, [2, 3]), (16, [5, 1])):
        x = rng.standard_normal((b, 3)).astype(np.float32)
        _check(compiled, model, {"x": x, "reps": np.array(reps, np.int64)})
    assert compilation_count() - before == 1
    assert compiled.report()["value_inputs"]["shape_inputs"] == {"reps": ["reps_0", "reps_1"]}
    # A repeat of 0 is outside the symbols' range: a specialization serves it.
    _check(compiled, model, {"x": np.ones((2, 3), np.float32), "reps": np.array([0, 2], np.int64)})
    assert compiled.report()["value_inputs"]["specializations"] == 1


def test_an_unknown_symbol_is_an_error():
    with pytest.raises(kiln.KilnError, match="symbols shape_9 are neither dim_params"):
        kiln.compile(_shape_model(), fallback=False, symbols={"shape_9": (1, 4)})


def test_inputs_by_name_and_as_a_dict():
    model = _shape_model()
    compiled = kiln.compile(model, fallback=False)
    x, shape = np.full(1, 3.0, np.float32), np.array([2, 3, 1], np.int64)
    want = _ort(model, {"x": x, "shape": shape})[0]
    np.testing.assert_allclose(compiled(shape=shape, x=x), want)
    got = compiled({"x": x, "shape": shape})
    assert list(got) and len(got) == 1
    np.testing.assert_allclose(next(iter(got.values())), want)
    with pytest.raises(kiln.ShapeError, match="missing input: 'shape'"):
        compiled(x=x)
    with pytest.raises(kiln.ShapeError, match="has no input 'z'"):
        compiled(x=x, shape=shape, z=x)


def test_a_model_path_with_a_value_input(tmp_path):
    model = _model(
        [helper.make_node("Squeeze", ["x", "axes"], ["y"])],
        [_vi("x", TensorProto.FLOAT, [1, 3, 1]), _vi("axes", TensorProto.INT64, [1])],
        [_vi("y", TensorProto.FLOAT, ["P", "Q"])])
    path = tmp_path / "squeeze.onnx"
    onnx.save(model, str(path))
    compiled = kiln.compile(str(path), fallback=False)
    x = np.arange(3, dtype=np.float32).reshape(1, 3, 1)
    for a in (0, -1):
        _check(compiled, model, {"x": x, "axes": np.array([a], np.int64)})


def test_expand_of_static_dims_is_compiled_once_and_checked():
    # x is [3, 1]: the shape's value aligned with the 3 may be 1 or 3 (the
    # result keeps 3); the one aligned with the 1 is a symbol.
    model = _model(
        [helper.make_node("Expand", ["x", "shape"], ["y"])],
        [_vi("x", TensorProto.FLOAT, [3, 1]), _vi("shape", TensorProto.INT64, [3])],
        [_vi("y", TensorProto.FLOAT, ["P", "Q", "R"])])
    before = compilation_count()
    compiled = kiln.compile(model, fallback=False)
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    for shape in ([2, 1, 6], [1, 3, 4], [5, 3, 1]):
        _check(compiled, model, {"x": x, "shape": np.array(shape, np.int64)})
    assert compilation_count() - before == 1
    assert compiled.report()["value_inputs"]["specializations"] == 0
    with pytest.raises(kiln.ShapeError, match=r"input 'shape' value #1 is 2, but node 'Expand_0' \(Expand\) "
                                              r"broadcasts a dim of size 3 there"):
        compiled(x, np.array([1, 2, 4], np.int64))


def _reshape_slice_model():
    # y = Slice(Reshape(x, shape), starts, ends, axes=[1]), c = ConstantOfShape(fill)
    # with x: [B, 24]; shape, starts, ends and fill are int64 inputs.
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])
    return _model(
        [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
         helper.make_node("Constant", [], ["axes"], value=axes),
         helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["s"], name="slice"),
         helper.make_node("ConstantOfShape", ["fill"], ["c"], value=value),
         helper.make_node("Relu", ["s"], ["y"])],
        [_vi("x", TensorProto.FLOAT, ["B", 24]), _vi("shape", TensorProto.INT64, [3]),
         _vi("starts", TensorProto.INT64, [1]), _vi("ends", TensorProto.INT64, [1]),
         _vi("fill", TensorProto.INT64, [3])],
        [_vi("y", TensorProto.FLOAT, ["P", "Q", "R"]), _vi("c", TensorProto.FLOAT, ["S", "T", "U"])])


def test_reshape_slice_and_constant_of_shape_inputs_compile_once():
    # The acceptance case of issue 36: Reshape / Slice / ConstantOfShape driven
    # by int64 inputs, one compilation for every value, each call against ORT.
    model = _reshape_slice_model()
    before = compilation_count()
    compiled = kiln.compile(model, fallback=False, symbols={"B": (1, 16)})
    assert compilation_count() - before == 1
    rng = np.random.default_rng(2)
    cases = [  # B, shape, starts, ends, fill
        (2, [2, 6, 4], [0], [6], [1, 6, 4]),
        (1, [1, 24, 1], [3], [17], [1, 1, 1]),
        (4, [8, 3, 4], [1], [2], [9, 2, 5]),
        (16, [4, 96, 1], [95], [96], [4, 1, 1]),
        (3, [6, 2, 6], [2], [2], [1, 0, 6]),   # an empty slice; fill's 0 is pinned
    ]
    for b, shape, starts, ends, fill in cases[:4]:
        feeds = {"x": rng.standard_normal((b, 24)).astype(np.float32), "shape": np.array(shape, np.int64),
                 "starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64),
                 "fill": np.array(fill, np.int64)}
        _check(compiled, model, feeds)
    assert compilation_count() - before == 1
    v = compiled.report()["value_inputs"]
    assert sorted(v["shape_inputs"]) == ["ends", "fill", "shape", "starts"]
    assert (v["specializations"], v["dynamic_calls"]) == (0, 4)
    b, shape, starts, ends, fill = cases[4]
    feeds = {"x": rng.standard_normal((b, 24)).astype(np.float32), "shape": np.array(shape, np.int64),
             "starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64), "fill": np.array(fill, np.int64)}
    _check(compiled, model, feeds)
    v = compiled.report()["value_inputs"]
    assert (v["shape_input_models"], v["specializations"]) == (2, 0)


def test_a_reshape_to_values_that_do_not_fit_is_a_shape_error_naming_the_node():
    model = _reshape_slice_model()
    compiled = kiln.compile(model, fallback=False)
    x = np.ones((2, 24), np.float32)
    one = np.array([1], np.int64)
    with pytest.raises(kiln.ShapeError, match=r"node 'reshape' \(Reshape\): cannot reshape \[2, 24\] "
                                              r"\(48 elements\) to \[5, 5, 2\] \(50 elements\)"):
        compiled(x, np.array([5, 5, 2], np.int64), np.array([0], np.int64), one, np.array([1, 1, 1], np.int64))


def test_slice_bounds_past_the_axis_are_clamped_by_a_specialization():
    # ONNX clamps starts / ends to the axis; the symbolic kernels take only
    # 0 <= start <= end <= size, so other values are served specialized
    # (INT64_MAX, "to the end", is pinned: its model keeps the start symbolic).
    model = _reshape_slice_model()
    compiled = kiln.compile(model, fallback=False)
    x = np.arange(48, dtype=np.float32).reshape(2, 24)
    for starts, ends in (([2], [100]), ([5], [3]), ([1], [2**62])):
        _check(compiled, model, {"x": x, "shape": np.array([2, 6, 4], np.int64), "starts": np.array(starts, np.int64),
                                 "ends": np.array(ends, np.int64), "fill": np.array([1, 1, 4], np.int64)})
    v = compiled.report()["value_inputs"]
    assert (v["specializations"], v["dynamic_calls"], v["shape_input_models"]) == (2, 1, 2)


def test_a_constant_minus_one_that_divides_some_sizes_is_checked_per_call(tmp_path):
    # Reshape [B, 12] to [4, -1, 2]: ONNX Runtime runs it where 4 * 2 divides
    # 12 * B (even B) and refuses it elsewhere; so does kiln, from a compiled
    # model and from its saved artifact (was: not convertible, a fallback).
    shape = helper.make_tensor("s", TensorProto.INT64, [3], [4, -1, 2])
    model = _model([helper.make_node("Constant", [], ["shape"], value=shape),
                    helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")],
                   [_vi("x", TensorProto.FLOAT, ["B", 12])], [_vi("y", TensorProto.FLOAT, [4, "Q", 2])])
    compiled = kiln.compile(model, fallback=False, symbols={"B": (1, 8)})
    kiln.save(compiled, tmp_path / "art")
    loaded = kiln.load(tmp_path / "art")
    for m in (compiled, loaded):
        for b in (2, 4, 8):
            x = np.random.default_rng(b).standard_normal((b, 12)).astype(np.float32)
            _check(m, model, {"x": x})
        with pytest.raises(kiln.ShapeError, match=r"node 'r' \(Reshape\): cannot reshape \[3, 12\] \(36 elements\) "
                                                  r"to \[4, 4, 2\] \(32 elements\)"):
            m(np.ones((3, 12), np.float32))
