"""Quantized ONNX models (built in the test with ``onnxruntime.quantization``)
compiled with fallback disabled match ONNX Runtime on the same quantized file.

A small MLP and a small CNN are exported from torch (dynamic batch ``B``),
then quantized three ways: ``quantize_dynamic`` (DynamicQuantizeLinear +
MatMulInteger / ConvInteger), ``quantize_static`` in QDQ format
(QuantizeLinear / DequantizeLinear pairs around float ops) and in QOperator
format (QLinearMatMul / QLinearConv, QLinearAdd where ORT emits it).  Outputs
are compared within ``kiln.validate.TOLERANCES["int8"]`` at the min, a middle
and the max of ``B``.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

import kiln
from kiln.validate import TOLERANCES

B_RANGE = (1, 16)
BATCHES = (1, 7, 16)  # min, middle, max of B


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        # A plain MatMul first (QLinearMatMul in QOperator form), then Linears (Gemm: ORT's QGemm).
        self.w = torch.nn.Parameter(torch.randn(24, 64) * 0.2)
        self.net = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x @ self.w)


class _CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1, stride=2)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        y = torch.relu(self.c2(y)) + 0.5 * y[:, :, ::2, ::2]  # a residual add (QLinearAdd in QOperator form)
        return self.fc(y.mean(dim=(2, 3)))


_SHAPES = {"mlp": (24,), "cnn": (3, 12, 12)}


def _inputs(kind: str, batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, *_SHAPES[kind])).astype(np.float32)


def _export(kind: str, path: str) -> str:
    torch.manual_seed(0)
    net = (_MLP() if kind == "mlp" else _CNN()).eval()
    x = torch.from_numpy(_inputs(kind, 2, 0))
    torch.onnx.export(net, (x,), path, dynamo=True, input_names=["x"], output_names=["y"],
                      dynamic_shapes=({0: torch.export.Dim("B", min=1, max=B_RANGE[1])},))
    return path


class _Reader(CalibrationDataReader):
    """A few random batches: enough for MinMax calibration of a test model."""

    def __init__(self, kind: str):
        self._batches = iter([{"x": _inputs(kind, 4, 100 + i)} for i in range(4)])

    def get_next(self):
        return next(self._batches, None)


@pytest.fixture(scope="module")
def float_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("quant")
    return {kind: _export(kind, os.path.join(root, f"{kind}.onnx")) for kind in _SHAPES}, root


def _quantized(float_models, kind: str, how: str) -> str:
    paths, root = float_models
    src = paths[kind]
    out = os.path.join(root, f"{kind}-{how}.onnx")
    if how == "dynamic":
        quantize_dynamic(src, out, weight_type=QuantType.QInt8 if kind == "mlp" else QuantType.QUInt8)
    else:
        fmt = QuantFormat.QDQ if how == "qdq" else QuantFormat.QOperator
        quantize_static(src, out, _Reader(kind), quant_format=fmt, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, per_channel=(how == "qdq"))
    return out


def _op_types(path: str) -> set:
    return {n.op_type for n in onnx.load(path).graph.node}


@pytest.mark.parametrize("kind", sorted(_SHAPES))
@pytest.mark.parametrize("how", ["dynamic", "qdq", "qoperator"])
def test_quantized_model_matches_ort(float_models, kind, how):
    path = _quantized(float_models, kind, how)
    ops = _op_types(path)
    # The quantizer really produced the form under test (else the test proves nothing).
    expected = {"dynamic": {"DynamicQuantizeLinear"}, "qdq": {"QuantizeLinear", "DequantizeLinear"},
                "qoperator": {"QLinearConv", "QLinearAdd"} if kind == "cnn" else {"QLinearMatMul", "QGemm"}}[how]
    assert expected <= ops, f"{how} quantization of the {kind} gave ops {sorted(ops)}"
    compiled = kiln.compile(path, symbols={"B": B_RANGE}, fallback=False)
    # ONNX Runtime running the graph as written: its optimizer fuses QDQ pairs
    # into u8 x s8 kernels that, on x86 without VNNI, sum pairs of products in
    # saturating 16 bits (vpmaddubsw): off ONNX's semantics by several
    # quantization steps on an AVX2 host, where kiln and the unoptimized
    # session both equal onnx.reference exactly.
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    tol = TOLERANCES["int8"]
    for batch in BATCHES:
        x = _inputs(kind, batch, seed=batch)
        want = session.run(None, {"x": x})[0]
        got = np.asarray(compiled(x))
        assert got.shape == want.shape
        err = float(np.max(np.abs(got - want)))
        print(f"{kind} {how} B={batch}: max |kiln - ORT| = {err:.3g} (output range {np.ptp(want):.3g})")
        np.testing.assert_allclose(got, want, rtol=tol.rtol, atol=tol.atol, err_msg=f"{kind} {how} B={batch}")


@pytest.mark.native
def test_qdq_products_run_on_the_integer_kernel(float_models):
    """kiln-fold-qdq: each DQ -> MatMul <- DQ of the QDQ MLP (a per-tensor activation, per-channel
    symmetric weights) is one kiln.matmul_integer, no f32 product left (the values are checked above and
    against onnx.reference below)."""
    path = _quantized(float_models, "mlp", "qdq")
    compiled = kiln.compile(path, symbols={"B": B_RANGE}, fallback=False)
    ops = [op for k in compiled.report()["kernels"] for op in k["ops"]]
    assert ops.count("kiln.matmul_integer") == 3 and "kiln.matmul" not in ops, sorted(set(ops))


@pytest.mark.parametrize("how", ["dynamic", "qdq"])
def test_quantized_mlp_equals_the_onnx_reference(float_models, how):
    """Integer products are exact: kiln's output is ONNX's reference evaluator's
    (float rounding of the dequantized sums aside), at the max batch."""
    from onnx.reference import ReferenceEvaluator

    path = _quantized(float_models, "mlp", how)
    x = _inputs("mlp", B_RANGE[1], seed=7)
    want = ReferenceEvaluator(path).run(None, {"x": x})[0]
    got = np.asarray(kiln.compile(path, symbols={"B": B_RANGE}, fallback=False)(x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Add", "Sub", "Div", "Max", "Min", "Greater", "LessOrEqual", "ReduceMax", "ArgMin"])
def test_uint8_ops_match_ort(op):
    """uint8 values above 127 (held as i8 inside kiln): ops whose integer form
    depends on signedness must treat them as unsigned (200 / 3 is 66, not -18)."""
    from onnx import TensorProto, helper

    unary = op in ("ReduceMax", "ArgMin")
    ins = ["x"] if unary else ["x", "z"]
    out_type = {"Greater": TensorProto.BOOL, "LessOrEqual": TensorProto.BOOL, "ArgMin": TensorProto.INT64}
    attrs = {"ReduceMax": {"keepdims": 0, "axes": [1]}, "ArgMin": {"axis": 1, "keepdims": 0}}.get(op, {})
    graph = helper.make_graph(
        [helper.make_node(op, ins, ["y"], **attrs)], "u8",
        [helper.make_tensor_value_info(n, TensorProto.UINT8, ["B", 5]) for n in ins],
        [helper.make_tensor_value_info("y", out_type.get(op, TensorProto.UINT8), ["B"] if unary else ["B", 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = kiln.compile(model, symbols={"B": B_RANGE}, fallback=False)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in BATCHES:
        rng = np.random.default_rng(batch)
        feeds = {n: rng.integers(0, 256, (batch, 5)).astype(np.uint8) for n in ins}
        if "z" in feeds:
            feeds["z"] = np.maximum(feeds["z"], 1)  # no division by zero
        want = session.run(None, feeds)[0]
        got = np.asarray(compiled(*feeds.values()))
        assert got.dtype == want.dtype and got.shape == want.shape, f"{op} B={batch}"
        np.testing.assert_array_equal(got, want, err_msg=f"{op} B={batch}")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("k", [256, 700])
def test_matmul_integer_is_exact_past_f32(k, precision):
    """MatMulInteger with a contraction long enough that one f32 product
    would round (sums past 2**24): kiln's chunked f32 GEMMs must give the
    exact int32 result (numpy int64 reference), at B = 1, 7, 16; under
    ``precision="bf16"`` too, which must leave those exact chunks in f32."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(k)
    w = rng.integers(-128, 128, (k, 9)).astype(np.int8)
    w[:, 0] = -127  # odd extremes: with row 0 (253 after the zero point) |sums| pass 2**24 in odd steps
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w", "azp"], ["y"])], "mmi",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, ["B", k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["B", 9])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(2, np.uint8), "azp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = kiln.compile(model, symbols={"B": B_RANGE}, fallback=False, precision=precision)
    for batch in BATCHES:
        a = rng.integers(0, 256, (batch, k)).astype(np.uint8)
        a[0] = 255
        want = (a.astype(np.int64) - 2) @ w.astype(np.int64)
        assert np.abs(want).max() > 2 ** 24 or k <= 256
        got = np.asarray(compiled(a))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want.astype(np.int32), err_msg=f"K={k} B={batch}")


@pytest.mark.parametrize("geometry", [
    dict(strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1]),
    dict(strides=[2, 1], pads=[0, 2, 1, 0], dilations=[1, 2]),
])
def test_conv_integer_is_exact(geometry):
    """ConvInteger (im2col + chunked f32 GEMMs inside kiln) against ONNX's
    reference evaluator in integers: 40 input channels x 3x3 taps = 360 terms
    per output, past one exact f32 chunk; strides, asymmetric pads, dilations;
    per-output-channel weight zero points; B = 1, 7, 16."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(5)
    w = rng.integers(0, 256, (6, 40, 3, 3)).astype(np.uint8)
    wzp = rng.integers(0, 256, (6,)).astype(np.uint8)
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w", "xzp", "wzp"], ["y"], kernel_shape=[3, 3], **geometry)], "ci",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, ["B", 40, 9, 11])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["B", 6, "OH", "OW"])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(7, np.uint8), "xzp"),
         numpy_helper.from_array(wzp, "wzp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = kiln.compile(model, symbols={"B": B_RANGE}, fallback=False)
    reference = ReferenceEvaluator(model)
    for batch in BATCHES:
        x = rng.integers(0, 256, (batch, 40, 9, 11)).astype(np.uint8)
        want = reference.run(None, {"x": x})[0]
        got = np.asarray(compiled(x))
        assert got.dtype == np.int32 and got.shape == want.shape, f"B={batch}: {got.shape} vs {want.shape}"
        np.testing.assert_array_equal(got, want, err_msg=f"{geometry} B={batch}")


def test_dynamic_quantize_linear_edge_inputs_match_ort():
    """DynamicQuantizeLinear on all-zero (scale 0: ORT uses 1), constant,
    all-negative and tiny inputs: y, scale and zero point as ORT gives them."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], "dql",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, ["B", 4]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("z", TensorProto.UINT8, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = kiln.compile(model, symbols={"B": B_RANGE}, fallback=False)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in BATCHES:
        for x in (np.zeros((batch, 4)), np.full((batch, 4), 3.0), np.full((batch, 4), -2.0),
                  np.pad([[1e-30]], ((0, batch - 1), (0, 3)))):
            x = np.asarray(x, np.float32)
            for got, want in zip(compiled(x), session.run(None, {"x": x})):
                np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"B={batch} x={x[0]}")
