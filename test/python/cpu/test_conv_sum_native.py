"""A sum of two convolutions with constant weights (an ONNX Conv + Conv +
Add), input-channel counts equal or not, on the optimized native CPU path
vs ONNX Runtime.

Both products' accumulators start from one zero fill (CSE merges them);
bufferization gives one product a copy of that fill and the other the fill's
buffer itself.  The native convolution dropped the fill (starting from zero
in the call) while the copy still had to read it: the other product summed
onto uninitialized memory (values like 3e16 or NaN)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import kiln

SYMBOLS = {"N": (1, 4), "H": (3, 12), "W": (3, 12)}
SIZES = [(1, 3, 3), (2, 6, 5), (3, 12, 9)]


def _model(c1, c2, kernel, pads, strides, bias):
    g = np.random.default_rng(c1 * 10 + c2)
    w1 = g.standard_normal((3, c1, *kernel)).astype(np.float32)
    w2 = g.standard_normal((3, c2, *kernel)).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(w1, "w1"), onnx.numpy_helper.from_array(w2, "w2")]
    ins = ["x1", "w1"]
    if bias:
        inits.append(onnx.numpy_helper.from_array(g.standard_normal(3).astype(np.float32), "b"))
        ins.append("b")
    attrs = {"pads": pads, "strides": strides}
    # Both inputs are channel slices of [x; -x] ([2*N, C, H, W]): dims that
    # name no symbol exactly, so one kernel computes the whole graph.
    inits += [onnx.numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
              (("s1", [0]), ("e1", [c1]), ("s2", [c1]), ("e2", [c1 + c2]), ("ax", [1]))]
    nodes = [
        helper.make_node("Neg", ["x"], ["nx"]),
        helper.make_node("Concat", ["x", "nx"], ["t"], axis=0),
        helper.make_node("Slice", ["t", "s1", "e1", "ax"], ["x1"]),
        helper.make_node("Slice", ["t", "s2", "e2", "ax"], ["x2"]),
        helper.make_node("Conv", ins, ["y1"], **attrs),
        helper.make_node("Conv", ["x2", "w2"], ["y2"], **attrs),
        helper.make_node("Add", ["y1", "y2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "conv_sum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c1 + c2, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", 3, "OH", "OW"])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("c1,c2,kernel,pads,strides,bias", [
    (32, 2, [2, 3], [0, 1, 0, 1], [1, 1], False),
    (2, 32, [2, 3], [0, 1, 0, 1], [1, 1], False),
    (8, 2, [2, 3], [0, 1, 0, 1], [1, 1], False),
    (18, 16, [3, 3], [1, 1, 1, 1], [2, 1], False),
    (5, 3, [1, 3], [0, 2, 1, 0], [1, 2], True),
    (4, 4, [2, 2], [1, 0, 0, 1], [1, 1], False),
])
def test_sum_of_convolutions_matches_onnxruntime(c1, c2, kernel, pads, strides, bias):
    model = _model(c1, c2, kernel, pads, strides, bias)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = kiln.compile(model, fallback=False, symbols=SYMBOLS)
    g = np.random.default_rng(7)
    for n, h, w in SIZES:
        x = g.standard_normal((n, c1 + c2, h, w)).astype(np.float32)
        want = ref.run(None, {"x": x})[0]
        got = compiled(x)
        got = got[0] if isinstance(got, (list, tuple)) else got
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"N={n} H={h} W={w}")
