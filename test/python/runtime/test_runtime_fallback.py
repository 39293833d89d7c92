"""PyTorch-eager fallback kernels: numerics, recorded scalars, no copies."""

import numpy as np
import pytest
import torch

from kiln._mlir import ir
from kiln.backends.fallback import FallbackKernel
from kiln.backends.fallback_build import fallback_from_op
from kiln.context import make_context
from kiln.dialects.dims import dim
from kiln.dialects.kiln import TensorInfo
from kiln.errors import KilnError, UnsupportedError
from kiln.module import parse_module

SEGS = "operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>"


def info(*dims, dtype="f32"):
    return TensorInfo(tuple(dim(d) for d in dims), dtype)


@pytest.mark.parametrize("b", [1, 7, 64])
def test_out_overload_writes_in_place(b):
    k = FallbackKernel("j0", "aten.special_bessel_j0.default", [info("B", 8)], [info("B", 8)])
    x = np.random.default_rng(b).standard_normal((b, 8)).astype(np.float32)
    out = np.empty_like(x)
    ptr = out.ctypes.data
    k([x], [out], {"B": b})
    np.testing.assert_allclose(out, torch.special.bessel_j0(torch.from_numpy(x)).numpy(), rtol=1e-6)
    assert out.ctypes.data == ptr


def test_input_is_not_copied():
    seen = []

    class Spy(FallbackKernel):
        def _args(self, inputs, binding):
            args, kwargs = super()._args(inputs, binding)
            seen.append(args[0].data_ptr())
            return args, kwargs

    x = torch.randn(4, 8)
    Spy("j0", "aten.special_bessel_j0", [info("B", 8)], [info("B", 8)])([x], [torch.empty(4, 8)], {"B": 4})
    assert seen == [x.data_ptr()]


def test_recorded_scalars_and_dims_under_the_binding():
    k = FallbackKernel("view", "aten.reshape.default", [info("B", 8)], [info("B*8")],
                       positions=[("tensor", 0), ("value", [dim("B*8")])])
    x = torch.randn(3, 8)
    out = torch.empty(24)
    k([x], [out], {"B": 3})
    assert torch.equal(out, x.reshape(24))


def test_several_results_are_copied_in():
    k = FallbackKernel("sort", "aten.sort.default", [info("B", 8)], [info("B", 8), info("B", 8, dtype="i64")],
                       kwargs={"dim": -1})
    x = torch.randn(5, 8)
    vals, idx = torch.empty(5, 8), torch.empty(5, 8, dtype=torch.int64)
    k([x], [vals, idx], {"B": 5})
    want = torch.sort(x, -1)
    assert torch.equal(vals, want.values) and torch.equal(idx, want.indices)


def test_from_op_puts_scalars_back_at_their_positions():
    t = '!kiln.tensor<["B", 8], f32>'
    text = (
        '"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()\n'
        f"func.func @f(%x: {t}) -> {t} {{\n"
        f'  %0 = "kiln.fallback"(%x) {{op_name = "aten.cumsum.default", attrs = {{operand1 = 1 : i64}}, {SEGS}, '
        f"resultSegmentSizes = array<i32: 1, 0, 0, 0>}} : ({t}) -> {t}\n"
        f"  return %0 : {t}\n}}"
    )
    with make_context(), ir.Location.unknown():
        module = parse_module(text)
        fn = list(module.body.operations)[1]
        op = list(fn.regions[0].blocks[0].operations)[0]
        k = fallback_from_op(op)
    assert k.positions == [("tensor", 0), ("value", 1)]
    assert k.inputs == [info("B", 8)] and k.outputs == [info("B", 8)]
    x = torch.randn(6, 8)
    out = torch.empty(6, 8)
    k([x], [out], {"B": 6})
    torch.testing.assert_close(out, torch.cumsum(x, 1))


def test_unknown_op_is_unsupported():
    with pytest.raises(UnsupportedError, match="'onnx.Foo' has no PyTorch implementation"):
        FallbackKernel("foo", "onnx.Foo", [info(4)], [info(4)])


def test_keyword_only_parameters_are_passed_by_name():
    # aten.gather(self, dim, index, *, sparse_grad): the frontend records
    # sparse_grad as the 4th operand; torch only takes it by name.
    kernel = FallbackKernel(
        "g", "aten.gather", [TensorInfo((dim(2), dim(3)), "f32"), TensorInfo((dim(2), dim(2)), "i64")],
        [TensorInfo((dim(2), dim(2)), "f32")],
        [("tensor", 0), ("value", 1), ("tensor", 1), ("value", False)],
    )
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    idx = torch.tensor([[2, 0], [1, 1]])
    out = torch.empty(2, 2)
    kernel([x, idx], [out], {})
    assert torch.equal(out, torch.gather(x, 1, idx))


def test_a_failing_torch_op_is_a_kiln_error():
    kernel = FallbackKernel("g", "aten.gather", [TensorInfo((dim(2),), "f32")], [TensorInfo((dim(2),), "f32")],
                            [("tensor", 0), ("value", "not a dim"), ("value", "nor an index")])
    with pytest.raises(KilnError, match="fallback op 'aten.gather' failed in PyTorch"):
        kernel([torch.zeros(2)], [torch.empty(2)], {})


def test_tensor_lists_from_markers_run_as_torch_lists():
    # aten.index.Tensor(x, [i, j]): the frontend passes i and j as operands and
    # records the list as "%operand<k>" markers.
    text = """
    func.func @f(%x: !kiln.tensor<[4, 5], f32>, %i: !kiln.tensor<[4, 1], i64>, %j: !kiln.tensor<[1, 5], i64>) -> !kiln.tensor<[4, 5], f32> {
      %0 = "kiln.fallback"(%x, %i, %j) {attrs = {operand1 = ["%operand1", "%operand2"]}, op_name = "aten.index.Tensor", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[4, 5], f32>, !kiln.tensor<[4, 1], i64>, !kiln.tensor<[1, 5], i64>) -> !kiln.tensor<[4, 5], f32>
      return %0 : !kiln.tensor<[4, 5], f32>
    }"""
    with make_context(), ir.Location.unknown():
        module = parse_module(text)
        fn = next(iter(module.body.operations))
        op = next(iter(fn.regions[0].blocks[0].operations))
        kernel = fallback_from_op(op)
    x = torch.arange(20, dtype=torch.float32).reshape(4, 5)
    i = torch.tensor([[3], [2], [1], [0]])
    j = torch.tensor([[4, 3, 2, 1, 0]])
    out = torch.empty(4, 5)
    kernel([x, i, j], [out], {})
    assert torch.equal(out, x[i, j])
