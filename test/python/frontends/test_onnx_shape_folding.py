"""Shape computations fold at ONNX import (issue 36): static ones into
constants through ONNX's reference implementation (any op), symbolic ones
into dims of the real symbols (``Shape -> Gather -> Concat -> Reshape`` over
``B`` and ``L``), and causal masks (``Trilu``) over a symbolic ``L``.  The
quickstart transformer block exported to ONNX imports with no fallback and
only ``B`` / ``L``, and matches ONNX Runtime."""

import os
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from kiln_ir_helpers import kiln_ops, result_dims
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.module import symbols_of

EXAMPLES = os.path.join(os.path.dirname(kiln.__file__), "examples")


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def _import(model, symbols=None):
    module, report = kiln.import_onnx(model, symbols=symbols, fallback=False, with_report=True)
    return module, report


def _ops(module):
    return [op.name for op in kiln_ops(module)]


def _symbols(module):
    return sorted(symbols_of(module.operation))


def _against_ort(model, feeds_list, symbols=None):
    compiled = kiln.compile(model, symbols=symbols, fallback=False)
    sess = ort.InferenceSession(model.SerializeToString())
    for feeds in feeds_list:
        got = compiled(*feeds.values())
        got = got if isinstance(got, (list, tuple)) else [got]
        want = sess.run(None, feeds)
        for g, w in zip(got, want):
            assert np.asarray(g).shape == w.shape
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------
# Static shape code folds away
# ----------------------------------------------------------------------------


def test_static_shape_gather_concat_reshape_chain_folds():
    """``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` over a static
    input: only the reshape is left, no fallback, no op of the chain."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [_i64("zero", 0), _i64("axes", [0]), _i64("minus1", [-1])]
    model = _model(nodes, [x], [y], inits)
    module, report = _import(model)
    assert report.fallbacks == 0
    assert _ops(module) == ["kiln.reshape"]
    assert result_dims(module) == [["2", "12"]]
    _against_ort(model, [{"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)}])


def test_any_op_over_known_values_is_evaluated_at_import():
    """The layer-norm expansion's shape code (``Size``, ``Neg``,
    ``ConstantOfShape``, ``Slice``, ``Concat``) and ops with no kiln pattern
    for it (``Mod``, ``CumSum``, ``ReduceProd`` of a shape) fold through
    ONNX's reference implementation: the reshape targets are constants."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 1, 1])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [120])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Size", ["s"], ["rank"]),
        helper.make_node("Neg", ["axis"], ["n_reduced"]),
        helper.make_node("ConstantOfShape", ["n_reduced"], ["suffix"], value=helper.make_tensor("v", 7, [1], [1])),
        helper.make_node("Slice", ["s", "zero1", "axis"], ["prefix"]),
        helper.make_node("Concat", ["prefix", "suffix"], ["reduced"], axis=0),
        helper.make_node("Sub", ["rank", "rank"], ["zero"]),
        helper.make_node("Mod", ["s", "two"], ["odd"]),  # [0, 1, 0, 1]
        helper.make_node("CumSum", ["odd", "zero"], ["c"]),  # [0, 1, 1, 2]
        helper.make_node("Cast", ["c"], ["cf0"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["cf0"], ["cf"], keepdims=1),  # [4.0]
        helper.make_node("ReduceProd", ["s"], ["numel"], keepdims=1),  # [120]
        helper.make_node("Reshape", ["x", "numel"], ["flat"]),
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=0),
        helper.make_node("Reshape", ["m", "reduced"], ["y"]),
        helper.make_node("Add", ["flat", "cf"], ["z"]),
    ]
    inits = [_i64("axis", [-2]), _i64("zero1", [0]), _i64("two", 2)]
    model = _model(nodes, [x], [y, z], inits)
    onnx.checker.check_model(model)
    module, report = _import(model)
    assert report.fallbacks == 0
    ops = _ops(module)
    for name in ("kiln.fallback", "kiln.gather", "kiln.concat", "kiln.neg", "kiln.slice", "kiln.cast"):
        assert name not in ops, ops
    assert result_dims(module) == [["2", "3", "1", "1"], ["120"]]
    _against_ort(model, [{"x": np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)}])


# ----------------------------------------------------------------------------
# Symbolic shape code becomes dims of the real symbols
# ----------------------------------------------------------------------------


def _symbolic_reshape_model():
    """``[B, L, 64] -> [B*L, 4, 16] -> [B, L, 64]`` through the legacy
    exporter's shape code, plus a ``1/sqrt(L)`` scale (dims as data) and
    ``Equal``/``Where`` that the symbols' ranges decide."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "L", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "L", 64])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["l"], axis=0),
        helper.make_node("Gather", ["s", "i2"], ["h"], axis=0),
        helper.make_node("Mul", ["b", "l"], ["bl"]),
        helper.make_node("Div", ["h", "four"], ["hd"]),
        helper.make_node("Unsqueeze", ["bl", "ax0"], ["bl1"]),
        helper.make_node("Unsqueeze", ["hd", "ax0"], ["hd1"]),
        helper.make_node("Concat", ["bl1", "four1", "hd1"], ["t1"], axis=0),
        helper.make_node("Reshape", ["x", "t1"], ["r1"]),
        # Where(Equal(shape, 0), 1, shape): decided by B, L >= 1
        helper.make_node("Equal", ["s", "zero"], ["isz"]),
        helper.make_node("Where", ["isz", "one3", "s"], ["t2"]),
        helper.make_node("Reshape", ["r1", "t2"], ["r2"]),
        helper.make_node("Cast", ["l"], ["lf"], to=TensorProto.FLOAT),
        helper.make_node("Sqrt", ["lf"], ["sq"]),
        helper.make_node("Div", ["r2", "sq"], ["y"]),
    ]
    inits = [_i64("i0", 0), _i64("i1", 1), _i64("i2", 2), _i64("four", 4), _i64("four1", [4]), _i64("ax0", [0]),
             _i64("zero", 0), _i64("one3", [1, 1, 1])]
    return _model(nodes, [x], [y], inits)


def test_symbolic_shape_chain_gives_dims_of_the_real_symbols():
    model = _symbolic_reshape_model()
    module, report = _import(model, symbols={"B": (1, 8), "L": (1, 32)})
    assert report.fallbacks == 0
    assert _symbols(module) == ["B", "L"]
    assert result_dims(module) == [["B", "L", "64"]]
    rs = [op for op in kiln_ops(module) if op.name == "kiln.reshape"]
    from kiln.dialects.kiln import tensor_info

    assert [str(d) for d in tensor_info(rs[0].results[0].type).dims] == ["B*L", "4", "16"]
    rng = np.random.default_rng(2)
    _against_ort(model, [{"x": rng.standard_normal((b, n, 64)).astype(np.float32)} for b, n in
                         [(1, 1), (3, 7), (8, 32)]], symbols={"B": (1, 8), "L": (1, 32)})


def test_symbolic_range_and_slice_bounds():
    """``Range(0, L)`` position ids and ``table[0:L]`` (an exported
    ``position_ids[:, :L]``) over a symbolic ``L``: a ``kiln.range`` and a
    gather, no fallback, no fresh symbol."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "L"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "L", 8])
    table = np.random.default_rng(3).standard_normal((40, 8)).astype(np.float32)
    buf = (np.arange(40, dtype=np.int64) % 5)[None, :]
    nodes = [
        helper.make_node("Shape", ["ids"], ["s"]),
        helper.make_node("Gather", ["s", "i1"], ["l"], axis=0),
        helper.make_node("Range", ["zero", "l", "one"], ["pos"]),
        helper.make_node("Gather", ["table", "pos"], ["pe"], axis=0),
        helper.make_node("Unsqueeze", ["l", "ax0"], ["l1"]),
        helper.make_node("Slice", ["buf", "zero1", "l1", "ax1"], ["ids2"]),
        helper.make_node("Add", ["ids", "ids2"], ["ids3"]),
        helper.make_node("Gather", ["table", "ids3"], ["te"], axis=0),
        helper.make_node("Add", ["te", "pe"], ["y"]),
    ]
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(buf, "buf"), _i64("i1", 1),
             _i64("zero", 0), _i64("one", 1), _i64("ax0", [0]), _i64("zero1", [0]), _i64("ax1", [1])]
    model = _model(nodes, [ids], [y], inits)
    symbols = {"B": (1, 4), "L": (1, 40)}
    module, report = _import(model, symbols=symbols)
    assert report.fallbacks == 0
    assert _symbols(module) == ["B", "L"]
    assert result_dims(module) == [["B", "L", "8"]]
    rng = np.random.default_rng(4)
    _against_ort(model, [{"ids": rng.integers(0, 35, (b, n)).astype(np.int64)} for b, n in [(1, 1), (2, 17), (4, 40)]],
                 symbols=symbols)


def test_symbolic_dims_as_data():
    """``Cast(Shape(x))`` of a ``[B, L, 3]`` input: each dim's value computed
    at run time, ``B`` and ``L`` apart (not one value for both)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "L", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT)]
    model = _model(nodes, [x], [y])
    symbols = {"B": (1, 8), "L": (1, 32)}
    _against_ort(model, [{"x": np.zeros((b, n, 3), np.float32)} for b, n in [(1, 1), (2, 7), (8, 32)]],
                 symbols=symbols)


def test_range_with_a_symbolic_start():
    """``arange(P, P + L)`` (positions after a past of length ``P``): a range
    of ``L`` elements shifted by ``P`` at run time."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "L"])
    p = helper.make_tensor_value_info("p", TensorProto.FLOAT, ["B", "P"])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, ["L"])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Shape", ["p"], ["ps"]),
             helper.make_node("Gather", ["s", "i1"], ["l"], axis=0),
             helper.make_node("Gather", ["ps", "i1"], ["pl"], axis=0),
             helper.make_node("Add", ["pl", "l"], ["end"]), helper.make_node("Range", ["pl", "end", "one"], ["y"])]
    model = _model(nodes, [x, p], [y], [_i64("i1", 1), _i64("one", 1)])
    symbols = {"B": (1, 4), "L": (1, 16), "P": (1, 16)}
    module, report = _import(model, symbols=symbols)
    assert report.fallbacks == 0
    assert result_dims(module) == [["L"]]
    _against_ort(model, [{"x": np.zeros((b, n), np.float32), "p": np.zeros((b, q), np.float32)}
                         for b, n, q in [(1, 1, 1), (2, 5, 9), (4, 16, 16)]], symbols=symbols)


def test_legacy_expand_minus_one_code():
    """``x[:, :1].expand(-1, L, -1)`` as the legacy exporter writes it:
    ``Where(Equal(t, -1 * ones(Shape(t))), ones, t)`` over ``t = [-1, L, -1]``
    (a Shape of a known value, a comparison the range of ``L`` decides)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "L", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "L", 8])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i1"], ["l"], axis=0),
        helper.make_node("Unsqueeze", ["l", "ax0"], ["l1"]),
        helper.make_node("Concat", ["m1", "l1", "m1"], ["c"], axis=0),
        helper.make_node("Reshape", ["c", "m1"], ["t"]),
        helper.make_node("Shape", ["t"], ["ts"]),
        helper.make_node("ConstantOfShape", ["ts"], ["ones"], value=helper.make_tensor("v", 7, [1], [1])),
        helper.make_node("Mul", ["ones", "neg"], ["negs"]),
        helper.make_node("Equal", ["t", "negs"], ["eq"]),
        helper.make_node("Where", ["eq", "ones", "t"], ["target"]),
        helper.make_node("Slice", ["x", "zero1", "one1", "ax1"], ["first"]),
        helper.make_node("Expand", ["first", "target"], ["y"]),
    ]
    inits = [_i64("i1", 1), _i64("ax0", [0]), _i64("m1", [-1]), _i64("neg", -1), _i64("zero1", [0]),
             _i64("one1", [1]), _i64("ax1", [1])]
    model = _model(nodes, [x], [y], inits)
    symbols = {"B": (1, 4), "L": (2, 32)}
    module, report = _import(model, symbols=symbols)
    assert report.fallbacks == 0
    assert _symbols(module) == ["B", "L"]
    assert result_dims(module) == [["B", "L", "8"]]
    rng = np.random.default_rng(7)
    _against_ort(model, [{"x": rng.standard_normal((b, n, 8)).astype(np.float32)} for b, n in
                         [(1, 2), (2, 11), (4, 32)]], symbols=symbols)


@pytest.mark.parametrize("upper,k", [(0, None), (1, 1), (0, -2)])
def test_trilu_over_a_symbolic_length(upper, k):
    """A causal mask as exporters write it: ``Expand(1, [L, L]) -> Trilu``
    (then ``Where`` into -inf), and a Trilu of a ``[B, L, L]`` input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "L", "L"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "L", "L"])
    m = helper.make_tensor_value_info("m", TensorProto.FLOAT, ["L", "L"])
    ins = ["ones"] + (["k"] if k is not None else [])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "m2", "end"], ["ll"]),
        helper.make_node("Expand", ["one", "ll"], ["ones"]),
        helper.make_node("Trilu", ins, ["tri"], upper=upper),
        helper.make_node("Equal", ["tri", "fzero"], ["masked"]),
        helper.make_node("Where", ["masked", "ninf", "fzero"], ["m"]),
        helper.make_node("Trilu", ["x"] + ins[1:], ["y"], upper=upper),
    ]
    inits = [numpy_helper.from_array(np.asarray(1.0, np.float32), "one"), _i64("m2", [-2]),
             _i64("end", [2**62]), numpy_helper.from_array(np.asarray(0.0, np.float32), "fzero"),
             numpy_helper.from_array(np.asarray(-np.inf, np.float32), "ninf")]
    if k is not None:
        inits.append(_i64("k", k))
    model = _model(nodes, [x], [m, y], inits)
    symbols = {"B": (1, 3), "L": (1, 48)}
    module, report = _import(model, symbols=symbols)
    assert report.fallbacks == 0
    assert _symbols(module) == ["B", "L"]
    assert result_dims(module) == [["L", "L"], ["B", "L", "L"]]
    rng = np.random.default_rng(5)
    _against_ort(model, [{"x": rng.standard_normal((b, n, n)).astype(np.float32)} for b, n in
                         [(1, 1), (2, 9), (3, 48)]], symbols=symbols)


# ----------------------------------------------------------------------------
# The quickstart transformer block, exported by torch
# ----------------------------------------------------------------------------


def _block():
    import torch

    sys.path.insert(0, EXAMPLES)
    try:
        from quickstart import Block
    finally:
        sys.path.remove(EXAMPLES)
    torch.manual_seed(0)
    return Block().eval(), torch.randn(2, 8, 64)


def _check_block(path):
    symbols = {"B": (1, 8), "L": (1, 64)}
    module, report = kiln.import_onnx(path, symbols=symbols, with_report=True)
    assert report.fallbacks == 0, report.unsupported
    assert _symbols(module) == ["B", "L"]
    assert "kiln.fallback" not in _ops(module)
    compiled = kiln.compile(path, symbols=symbols, fallback=False)
    sess = ort.InferenceSession(path)
    rng = np.random.default_rng(6)
    for b, n in [(1, 1), (3, 17), (8, 64)]:
        x = rng.standard_normal((b, n, 64)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_transformer_block_legacy_export(tmp_path):
    import torch

    model, x = _block()
    path = str(tmp_path / "block.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), path, dynamo=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "B", 1: "L"}, "y": {0: "B", 1: "L"}}, opset_version=17)
    _check_block(path)


def test_transformer_block_dynamo_export(tmp_path):
    pytest.importorskip("onnxscript")
    import torch
    from torch.export import Dim

    model, x = _block()
    path = str(tmp_path / "block.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), path, dynamo=True, external_data=False, input_names=["x"],
                          output_names=["y"], dynamic_shapes=({0: Dim("B", min=1, max=8), 1: Dim("L", min=1, max=64)},),
                          verbose=False)
    _check_block(path)
