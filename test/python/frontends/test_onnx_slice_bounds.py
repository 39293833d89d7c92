"""ONNX Slice with constant bounds on a symbolic axis: ONNX clamps each index
to the axis, kiln.slice does not, so a bound is taken as it is only when the
symbols' ranges decide where it falls; otherwise it is an UnsupportedError
naming the node and the bound — never a result dim that is wrong for some sizes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln


def _slice_model(start, end):
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for v, n in ((start, "s"), (end, "e"), (0, "a"))]
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "s", "e", "a"], ["t"]), helper.make_node("Relu", ["t"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["L", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, compiled, sizes):
    """Shapes and values equal ONNX Runtime's at each L in ``sizes``."""
    sess = ort.InferenceSession(model.SerializeToString())
    for n in sizes:
        x = np.random.default_rng(n).standard_normal((n, 2)).astype(np.float32)
        want = sess.run(None, {"x": x})[0]
        got = np.asarray(compiled(x))
        assert got.shape == want.shape, (n, got.shape, want.shape)
        np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("start, end, lo, hi", [
    (1, 1000, 1, 64),       # the end lies past every L: "to the end"
    (0, 3, 3, 64),          # the end lies inside every L
    (-3, 2**62, 3, 64),     # a negative start inside every L
    (1, 2**62, 1, 64),      # x[1:] is empty at L = 1
    (2, 2, 1, 64),          # empty at every L, even L = 1 where ONNX clamps the start
    (-1, -3, 1, 64),        # empty at every L
])
def test_bounds_the_ranges_decide_compile(start, end, lo, hi):
    model = _slice_model(start, end)
    compiled = kiln.compile(model, fallback=False, symbols={"L": (lo, hi)})
    _check(model, compiled, sorted({lo, (lo + hi) // 2, hi}))


@pytest.mark.parametrize("start, end, lo, hi", [
    (1, 1000, 1, 2000),     # x[1:1000]: 999 rows for L >= 1000, L - 1 below
    (-3, 2**62, 1, 64),     # x[-3:]: 3 rows for L >= 3, L below
    (5, 2**62, 1, 64),      # x[5:]: empty below L = 5
])
def test_bounds_the_ranges_do_not_decide_are_not_guessed(start, end, lo, hi):
    model = _slice_model(start, end)
    with pytest.raises(kiln.UnsupportedError, match="Slice .* on the symbolic axis L"):
        kiln.compile(model, fallback=False, symbols={"L": (lo, hi)})
    # Nor can ONNX Runtime run it for kiln: its result dim (min(L, 1000) - 1)
    # is no kiln dim expression, and fallback outputs are preallocated.
    with pytest.raises(kiln.UnsupportedError, match="Slice .* on the symbolic axis L"):
        kiln.compile(model, symbols={"L": (lo, hi)})
