"""Zero-size tensors and Pad mode 'wrap' through kiln.compile against ONNX
Runtime, and freezing value inputs of an IR-3 model (issue 36).

Zero-size results (Split sizes of 0, Slice to empty, Concat with an empty
operand, ConstantOfShape with a 0 dim) must compile and run: a slice of a
dim of 0, or one starting at the dim, is an empty tensor rather than a
``tensor.extract_slice`` its verifier rejects.  Pad 'wrap' is exact for any
amount on a static axis, and on a symbolic axis whose range keeps it at
least the pad; otherwise an UnsupportedError."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_compare import check_against_ort

import kiln
from kiln.errors import KilnError

onnxruntime = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(36)
F = TensorProto.FLOAT


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _model(inputs, nodes, outputs, inits=(), opset=19, ir_version=None):
    """``inputs`` ``(name, dims)`` f32 (or ``(name, dims, elem)``), ``outputs``
    ``(name, rank)`` f32 with unknown dims, ``inits`` ``(name, array)``."""
    vi = [helper.make_tensor_value_info(i[0], i[2] if len(i) > 2 else F, i[1]) for i in inputs]
    vo = [helper.make_tensor_value_info(n, F, [None] * r) for n, r in outputs]
    graph = helper.make_graph(nodes, "zero_wrap", vi, vo, [numpy_helper.from_array(a, n) for n, a in inits])
    kw = {} if ir_version is None else {"ir_version": ir_version}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw)


def _check(model, feeds_list, symbols=None):
    """Compile once; compare every output's shape and values with ONNX Runtime for each feed dict."""
    check_against_ort(model, feeds_list, symbols=symbols)


def test_split_zero_sizes_static():
    """Split of an empty axis into empties; sizes of 0 first, between and
    last (the last one starts at the dim)."""
    i64 = np.int64
    model = _model(
        [("e", [0]), ("x", [6, 3])],
        [helper.make_node("Split", ["e", "s0"], ["e1", "e2", "e3"], axis=0),
         helper.make_node("Split", ["x", "s1"], ["a1", "a2", "a3", "a4"], axis=0),
         helper.make_node("Split", ["x", "s2"], ["b1", "b2"], axis=1)],
        [("e1", 1), ("e2", 1), ("e3", 1), ("a1", 2), ("a2", 2), ("a3", 2), ("a4", 2), ("b1", 2), ("b2", 2)],
        [("s0", np.zeros(3, i64)), ("s1", np.array([0, 4, 0, 2], i64)), ("s2", np.array([3, 0], i64))],
        opset=13,
    )
    _check(model, [{"e": _x(0), "x": _x(6, 3)}])


def test_slice_concat_empty_with_symbolic_dims():
    """Slice to empty on static and symbolic axes (start at the dim, start
    past it, start == end), Concat with an operand empty along the axis, at
    N = 1, 3, 7."""
    i64 = np.int64

    def sl(name, inp, s, e, a):
        return [helper.make_node("Slice", [inp, f"{name}_s", f"{name}_e", f"{name}_a"], [name])], [
            (f"{name}_s", np.array(s, i64)), (f"{name}_e", np.array(e, i64)), (f"{name}_a", np.array(a, i64))]

    nodes, inits = [], []
    for name, s, e, a in [("s1", [4], [4], [1]), ("s2", [9], [20], [1]), ("s3", [2], [2], [0]),
                          ("s4", [-1], [-1], [0]), ("s5", [0], [0], [1])]:
        n, i = sl(name, "x", s, e, a)
        nodes += n
        inits += i
    nodes += [helper.make_node("Concat", ["s1", "x"], ["c1"], axis=1),
              helper.make_node("Concat", ["x", "s3", "z"], ["c2"], axis=0),
              helper.make_node("Concat", ["s5", "s1"], ["c3"], axis=1)]
    model = _model([("x", ["N", 4]), ("z", [0, 4])], nodes,
                   [("s1", 2), ("s2", 2), ("s3", 2), ("s4", 2), ("c1", 2), ("c2", 2), ("c3", 2)], inits)
    _check(model, [{"x": _x(n, 4), "z": _x(0, 4)} for n in (2, 3, 7)])


def test_constant_of_shape_with_a_zero_dim():
    """ConstantOfShape of [2, 0, 3] and of a Shape holding a 0, added to an empty input."""
    value = numpy_helper.from_array(np.array([1.5], np.float32), "v")
    model = _model(
        [("x", [3, 0])],
        [helper.make_node("ConstantOfShape", ["shape"], ["k"], value=value),
         helper.make_node("Shape", ["x"], ["sx"]),
         helper.make_node("ConstantOfShape", ["sx"], ["k2"], value=value),
         helper.make_node("Add", ["k2", "x"], ["y"])],
        [("k", 3), ("y", 2)], [("shape", np.array([2, 0, 3], np.int64))],
    )
    _check(model, [{"x": _x(3, 0)}])


def test_wrap_pad_static_any_amount():
    """Pad 'wrap' on several axes at once, pads below, equal to and above the dim (as ONNX Runtime allows)."""
    model = _model(
        [("x", [2, 3, 4])],
        [helper.make_node("Pad", ["x", "p1"], ["y1"], mode="wrap"),
         helper.make_node("Pad", ["x", "p2"], ["y2"], mode="wrap"),
         helper.make_node("Pad", ["x", "p3", "", "ax"], ["y3"], mode="wrap")],
        [("y1", 3), ("y2", 3), ("y3", 3)],
        [("p1", np.array([0, 1, 2, 1, 0, 3], np.int64)), ("p2", np.array([5, 3, 9, 2, 7, 4], np.int64)),
         ("p3", np.array([1, 6], np.int64)), ("ax", np.array([-1], np.int64))],
    )
    _check(model, [{"x": _x(2, 3, 4)}])


def test_wrap_pad_symbolic():
    """Pad 'wrap' on symbolic axes whose range keeps them >= the pads, at 3 values each."""
    model = _model(
        [("x", ["B", "L", 2])],
        [helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")],
        [("y", 3)], [("p", np.array([1, 3, 1, 0, 2, 2], np.int64))],
    )
    _check(model, [{"x": _x(b, n, 2)} for b, n in ((1, 3), (2, 5), (4, 11))],
           symbols={"B": (1, 8), "L": (3, 64)})


def test_wrap_pad_beyond_a_symbolic_dim_is_unsupported():
    """A wrap pad a symbolic dim may be smaller than: an UnsupportedError naming Pad, not a wrong shape."""
    model = _model([("x", ["L", 2])], [helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")],
                   [("y", 2)], [("p", np.array([4, 0, 0, 0], np.int64))])
    with pytest.raises(KilnError, match="wrap"):
        kiln.compile(model, symbols={"L": (1, 64)}, fallback=False)


def test_freeze_value_input_of_ir3_model():
    """An IR-3 (old PyTorch export, opset 7) model whose Reshape shape is an
    input: the frozen copies keep passing the ONNX checker."""
    model = _model(
        [("x", [2, 6]), ("s", [2], TensorProto.INT64)],
        [helper.make_node("Reshape", ["x", "s"], ["y"])],
        [("y", 2)], opset=7, ir_version=3,
    )
    compiled = kiln.compile(model, fallback=False)
    x = _x(2, 6)
    for shape in ([3, 4], [12, 1], [4, 3]):
        got = np.asarray(compiled(x, np.array(shape, np.int64)))
        np.testing.assert_array_equal(got, x.reshape(shape))


def test_concat_with_an_operand_empty_at_run_time():
    """Concat of ``x[1:]`` (L-1 rows: empty at L = 1), x and ``x[1:]`` again, and a constant Pad of it, at L = 1, 2, 5."""
    i64 = np.int64
    model = _model(
        [("x", ["L", 2])],
        [helper.make_node("Slice", ["x", "s", "e", "a"], ["t"]),
         helper.make_node("Concat", ["t", "x", "t"], ["y"], axis=0),
         helper.make_node("Pad", ["t", "p"], ["y2"], mode="constant")],
        [("y", 2), ("y2", 2)],
        [("s", np.array([1], i64)), ("e", np.array([2**63 - 1], i64)), ("a", np.array([0], i64)),
         ("p", np.array([1, 0, 1, 0], i64))],
    )
    _check(model, [{"x": _x(n, 2)} for n in (1, 2, 5)])
