"""The constant helpers of transforms/_graph.py: dense attributes made from
strided views, and dense_resource data read back from a parsed module (no
record, so through the printed blob)."""

import numpy as np
import pytest

import kiln
from kiln._mlir import ir
from kiln.context import make_context
from kiln.dialects.dims import dim
from kiln.module import parse_module
from kiln.transforms._graph import constant_array, elements_attr
from kiln.transforms._resources import resource_bytes


def test_elements_attr_of_a_transposed_view_is_that_of_its_copy():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    with make_context(), ir.Location.unknown():
        f32 = ir.F32Type.get()
        assert elements_attr(w.T, f32) == elements_attr(np.ascontiguousarray(w.T), f32)
        uniform = np.full((32, 64), 1.5, dtype=np.float32).T
        assert ir.DenseElementsAttr(elements_attr(uniform, f32)).is_splat
        nans = np.full((4, 2), np.nan, dtype=np.float32).T
        assert elements_attr(nans, f32) == elements_attr(np.ascontiguousarray(nans), f32)


@pytest.mark.parametrize("dtype, mlir", [(np.float32, "f32"), (np.int64, "i64"), (np.float16, "f16")])
def test_parsed_resource_constant_reads_back(dtype, mlir):
    data = (np.arange(12) * 3 - 7).astype(dtype).reshape(3, 4)
    blob = "0x" + (b"\x08\x00\x00\x00" + data.tobytes()).hex().upper()
    text = f'''
func.func @f() -> !kiln.tensor<[3, 4], {mlir}> {{
  %0 = "kiln.constant"() {{value = dense_resource<blob_a> : tensor<3x4x{mlir}>}} : () -> !kiln.tensor<[3, 4], {mlir}>
  return %0 : !kiln.tensor<[3, 4], {mlir}>
}}
{{-#
  dialect_resources: {{
    builtin: {{
      blob_a: "{blob}"
    }}
  }}
#-}}
'''
    with make_context(), ir.Location.unknown():
        module = parse_module(text)
        fn = module.body.operations[0].operation
        const = fn.regions[0].blocks[0].operations[0].operation
        assert resource_bytes(const.attributes["value"]) is None  # not recorded: read from its print
        got = constant_array(const)
        assert got.dtype == dtype and np.array_equal(got, data)


def test_compiled_resource_constants_without_a_module_print(monkeypatch):
    """A model whose weights stay dense_resource constants to the runtime
    (fallback kernels read them) gives the right results."""
    import torch
    from torch.export import Dim

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", torch.arange(24, dtype=torch.float32).reshape(4, 6) / 7)

        def forward(self, x):
            return x @ torch.special.erfcx(self.w)  # erfcx: a PyTorch fallback kernel, on the constant

    from kiln import compile_prepare

    read = []
    original = compile_prepare.constant_tensor
    monkeypatch.setattr(compile_prepare, "constant_tensor", lambda op: read.append(op) or original(op))
    model = M().eval()
    x = torch.randn(3, 4)
    compiled = kiln.compile(model, (x,), dynamic_shapes=({0: Dim("B", min=1, max=8)},))
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert read  # the weight went to the runtime as a constant tensor


def test_static_dims_are_shared_and_compare_as_before():
    assert dim(7) is dim(7)
    assert dim(7) == 7 and dim(7) != dim(8) and dim("B*L") == dim("L*B")
    assert dim("2*(L+1)") == dim("2*L+2") and dim("B") != dim("L")
