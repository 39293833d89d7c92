"""The Python builders of every kiln op: inferred result types, attributes, errors."""

import sys

import numpy as np
import pytest

from kiln._mlir import func, ir
from kiln.dialects.kiln import OPS, builders, create_op, tensor_info, tensor_type
from kiln.errors import VerifyError
from kiln.module import parse_module, verify_module


def _shape(value):
    return [str(d) for d in tensor_info(value.type).dims]


@pytest.fixture
def fn(ctx):
    """A module with symbols B and L and an empty function taking typical args."""
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        for name, hi in (("B", 64), ("L", 512)):
            create_op("symbol", attrs={"sym_name": name, "min": 1, "max": hi})
        arg_types = [
            tensor_type(["B", "L", 16], "f32"),  # x
            tensor_type([16, 32], "f32"),  # w
            tensor_type([32], "f32"),  # bias
            tensor_type(["B", 3, 32, 32], "f32"),  # image
            tensor_type([8, 3, 3, 3], "f32"),  # conv weight
            tensor_type([8], "f32"),  # conv bias / channel params
            tensor_type(["B", "L"], "i64"),  # ids
            tensor_type([100, 16], "f32"),  # table
        ]
        f = func.FuncOp("f", ir.FunctionType.get(arg_types, []))
        block = f.add_entry_block()
    with ir.InsertionPoint(block):
        ret = func.ReturnOp([])
    with ir.InsertionPoint(ret):  # new ops go before the return
        yield module, block.arguments


def test_every_op_has_a_builder_and_docstring_with_ir():
    for name, cls in OPS.items():
        short = name.split(".", 1)[1]
        assert callable(getattr(builders, short)), name
        # The IR is in the op's docstring, or in its module's for region ops.
        doc = (cls.__doc__ or "") + (sys.modules[cls.__module__].__doc__ or "")
        assert cls.__doc__ and f'"{name}"' in doc, f"{name} docstring lacks its IR"


def test_builders_infer_result_types(fn):
    module, (x, w, bias, img, cw, cb, ids, table) = fn
    b = builders
    y = b.matmul(x, w).result
    assert _shape(y) == ["B", "L", "32"]
    assert _shape(b.add(y, bias).result) == ["B", "L", "32"]
    for unary in ("neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "silu", "erf", "abs"):
        assert _shape(getattr(b, unary)(x).result) == ["B", "L", "16"]
    assert _shape(b.gelu(x, approximate="tanh").result) == ["B", "L", "16"]
    for binary in ("sub", "mul", "div", "pow", "maximum", "minimum"):
        assert _shape(getattr(b, binary)(x, x).result) == ["B", "L", "16"]
    cmp = b.lt(x, x).result
    assert str(tensor_info(cmp.type).dtype) == "i1"
    for c in ("eq", "ne", "le", "gt", "ge"):
        assert str(tensor_info(getattr(b, c)(x, x).result.type).dtype) == "i1"
    assert _shape(b.where(cmp, x, x).result) == ["B", "L", "16"]
    assert str(tensor_info(b.cast(x, results=[tensor_type(["B", "L", 16], "f16")]).result.type).dtype) == "f16"
    conv = b.conv2d(img, cw, cb, strides=[2, 2], pads=[1, 1, 1, 1]).result
    assert _shape(conv) == ["B", "8", "16", "16"]
    assert _shape(b.max_pool2d(conv, kernel=[2, 2]).result) == ["B", "8", "8", "8"]
    assert _shape(b.avg_pool2d(conv, kernel=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]).result) == ["B", "8", "16", "16"]
    assert _shape(b.batch_norm(conv, cb, cb, cb, cb, epsilon=1e-3).result) == ["B", "8", "16", "16"]
    assert _shape(b.reduce_sum(x, axes=[1], keepdims=True).result) == ["B", "1", "16"]
    assert _shape(b.reduce_mean(x, axes=[-1]).result) == ["B", "L"]
    assert _shape(b.reduce_max(x).result) == []
    assert _shape(b.softmax(x, axis=-1).result) == ["B", "L", "16"]
    g = b.reduce_sum(table, axes=[0]).result
    assert _shape(b.layer_norm(x, weight=g, bias=g).result) == ["B", "L", "16"]
    assert _shape(b.layer_norm(x, bias=g).result) == ["B", "L", "16"]
    flat = b.reshape(x, shape=["L*B", 16]).result
    assert _shape(flat) == ["B*L", "16"]
    assert _shape(b.reshape(flat, shape=["B", "L", 16]).result) == ["B", "L", "16"]
    assert _shape(b.transpose(x, perm=[0, 2, 1]).result) == ["B", "16", "L"]
    assert _shape(b.concat(x, x, x, axis=1).result) == ["B", "3*L", "16"]
    assert _shape(b.slice(x, starts=[1], ends=[2**62], axes=[1]).result) == ["B", "L-1", "16"]
    assert _shape(b.gather(table, ids, axis=0).result) == ["B", "L", "16"]
    one = b.reduce_sum(x, axes=[0, 1], keepdims=True).result
    assert _shape(b.expand(one, shape=["B", "L", 16]).result) == ["B", "L", "16"]
    assert _shape(b.pad(x, pads=[0, 1, 0, 0, 2, 0]).result) == ["B", "L+3", "16"]
    q = b.reshape(x, shape=["B", 1, "L", 16]).result
    assert _shape(b.attention(q, q, q, causal=True).result) == ["B", "1", "L", "16"]
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    const = b.constant(value=ir.DenseElementsAttr.get(data)).result
    assert _shape(const) == ["2", "3"]
    fb = b.fallback(x, op_name="aten.max.dim", results=[tensor_type(["B", "L"], "f32"), tensor_type(["B", "L"], "i64")])
    assert len(fb.operation.results) == 2
    verify_module(module.operation)
    # What the builders made prints and parses back to the same text.
    text = str(module)
    assert str(parse_module(text)) == text


def test_builder_errors_name_the_dims(fn):
    module, (x, w, *_rest) = fn
    with pytest.raises(VerifyError, match=r"'kiln.matmul' op contracting dims differ between \[B, L, 16\] and \[B, L, 16\]: 16 vs L"):
        builders.matmul(x, x)
    with pytest.raises(VerifyError, match="has no attribute 'bogus'"):
        builders.softmax(x, attrs={"bogus": 1})
    with pytest.raises(VerifyError, match="needs operand 'rhs'"):
        builders.add(x)
    with pytest.raises(VerifyError, match="needs explicit result types"):
        builders.cast(x)
    # A failed build leaves nothing behind: the module still verifies.
    verify_module(module.operation)


def test_broadcast_error_names_both_symbols(ctx):
    text = """
    "kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
    "kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
    func.func @f(%a: !kiln.tensor<["B", 16], f32>, %b: !kiln.tensor<["L", 16], f32>) {
      %0 = "kiln.add"(%a, %b) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<["L", 16], f32>) -> !kiln.tensor<["B", 16], f32>
      return
    }"""
    with pytest.raises(VerifyError) as info:
        parse_module(text, "m.mlir")
    assert "m.mlir:5:12: error: 'kiln.add' op" in str(info.value)
    assert "(dim B vs L)" in str(info.value)


def test_reshape_through_product_round_trip_verifies(ctx):
    text = """
    "kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
    "kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
    func.func @f(%a: !kiln.tensor<["B*L", 16], f32>) -> !kiln.tensor<["B", "L", 16], f32> {
      %0 = "kiln.reshape"(%a) {shape = ["B", "L", 16]} : (!kiln.tensor<["B*L", 16], f32>) -> !kiln.tensor<["B", "L", 16], f32>
      return %0 : !kiln.tensor<["B", "L", 16], f32>
    }"""
    module = parse_module(text)
    assert '!kiln.tensor<["B", "L", 16], f32>' in str(module)
