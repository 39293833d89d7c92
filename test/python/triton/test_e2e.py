"""The bench models end to end through ``kiln.compile(..., device="cuda")`` in interpreter mode."""

import pytest
import torch
from helpers import check

import kiln
from kiln.bench import models


@pytest.mark.parametrize(
    "name,shapes",
    [
        ("tiny_mlp", [(1, 16), (5, 16), (64, 16)]),
        ("transformer_block", [(1, 1, 256), (2, 7, 256), (1, 33, 256)]),
        ("small_cnn", [(1, 3, 32, 32), (3, 3, 32, 32)]),
    ],
)
def test_model_through_kiln_compile_cuda(name, shapes):
    module, args, dyn = getattr(models, name)()
    model = kiln.compile(module, args, dyn, device="cuda")
    kinds = [s.kernel.kind for s in model.schedule]
    assert all(k != "torch" for k in kinds), kinds  # every kernel is generated Triton code
    gen = torch.Generator().manual_seed(1)
    for shape in shapes:
        x = torch.randn(*shape, generator=gen)
        with torch.no_grad():
            want = module(x)
        got = model(x)
        assert isinstance(got, torch.Tensor)
        check(got, want, "f32")
    assert model.calls == len(shapes)


def test_transformer_block_schedule_fuses_epilogues():
    module, args, dyn = models.transformer_block()
    model = kiln.compile(module, args, dyn, device="cuda")
    patterns = [s.kernel.spec.pattern for s in model.schedule]
    assert "kiln.attention" in patterns
    # The residual adds and the GELU ride on the GEMMs instead of running alone.
    assert any(p.startswith("kiln.matmul+kiln.add+kiln.gelu") for p in patterns), patterns
    assert sum(p.startswith("kiln.matmul") for p in patterns) == 4
    assert len(model.schedule) == 7


def test_numpy_inputs_and_shape_errors():
    module, args, dyn = models.tiny_mlp()
    model = kiln.compile(module, args, dyn, device="cuda")
    x = torch.randn(3, 16)
    with torch.no_grad():
        want = module(x).numpy()
    got = model(x.numpy())
    assert got.shape == want.shape and abs(got - want).max() < 1e-4
    with pytest.raises(kiln.ShapeError, match="B"):
        model(torch.randn(65, 16))
    with pytest.raises(kiln.KilnError, match="unknown kiln.compile option"):
        kiln.compile(module, args, dyn, device="cuda", bogus=1)


def test_kiln_fuse_groups_become_kernels():
    """With kiln-fuse first, each kiln.fused group is one kernel: both convolutions
    with their ReLU (conv_epilogue groups), the linear layer with its bias."""
    module, args, dyn = models.small_cnn()
    model = kiln.compile(module, args, dyn, device="cuda", fuse=True, keep_ir=True)
    groups = model.ir["kiln"].count('"kiln.fused"')
    assert groups >= 3
    patterns = [s.kernel.spec.pattern for s in model.schedule]
    assert patterns.count("kiln.conv2d+kiln.relu") == 2 and "kiln.matmul+kiln.add" in patterns, patterns
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = module(x)
    check(model(x), want, "f32")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name,shapes", [("tiny_mlp", [(1, 16), (9, 16)]), ("transformer_block", [(2, 7, 256)])])
def test_half_precision_models(name, shapes, dtype):
    """fp16/bf16 weights and inputs, fp32 accumulation: vs the fp32 model on the same rounded values,
    within the dtype's tolerance."""
    from helpers import TORCH

    module, args, dyn = getattr(models, name)()
    dt = TORCH[dtype]
    module = module.to(dt)
    model = kiln.compile(module, tuple(a.to(dt) for a in args), dyn, device="cuda")
    ref = module.float()
    gen = torch.Generator().manual_seed(5)
    for shape in shapes:
        x = torch.randn(*shape, generator=gen).to(dt)
        got = model(x)
        assert got.dtype == dt
        with torch.no_grad():
            check(got, ref(x.float()), dtype)


def test_fallback_false_refuses_an_op_kiln_cannot_import():
    """``fallback=False`` on the Triton path as on the CPU path: the op kiln
    cannot import is an UnsupportedError naming it, not a PyTorch kernel."""
    from torch.export import Dim

    from kiln.errors import UnsupportedError

    class Bessel(torch.nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(x) + 1

    dyn = ({0: Dim("B", min=1, max=8)},)
    with pytest.raises(UnsupportedError, match="special_bessel_j0"):
        kiln.compile(Bessel(), (torch.randn(4, 16),), dyn, device="cuda", fallback=False)
    model = kiln.compile(Bessel(), (torch.randn(4, 16),), dyn, device="cuda")  # the default falls back
    x = torch.randn(3, 16)
    torch.testing.assert_close(model(x), torch.special.bessel_j0(x) + 1)
