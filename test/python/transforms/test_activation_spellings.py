"""Activations and norms written out by hand, as users and older model code
write them: ``kiln-simplify`` turns exact and tanh GELU, SiLU and layer norm
(from a mean of squares or from ``var``) into ``kiln.gelu`` / ``kiln.silu`` /
``kiln.layer_norm``, and the compiled model matches eager PyTorch at the min,
a middle and the max of B and L (RMS norm, which kiln has no op for, and
``std`` are checked as written)."""

import math

import pytest
import torch
from torch import nn
from torch.export import Dim

import kiln
from kiln._mlir import ir
from kiln.frontends.torch_import import import_torch
from kiln.pipelines.pipeline import Pipeline


class Written(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = nn.Parameter(torch.randn(48))
        self.b = nn.Parameter(torch.randn(48))

    def forward(self, x):
        gelu = 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
        new_gelu = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
        silu = x * torch.sigmoid(x)
        mu = x.mean(-1, keepdim=True)
        ln = (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * self.w + self.b
        ln_var = (x - mu) * torch.rsqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)
        rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
        return gelu, new_gelu, silu, ln, ln_var, rms, x.std(-1)


def _dynamic():
    return ({0: Dim("B", min=1, max=16), 1: Dim("L", min=1, max=300)},)


def _x(b, seq):
    return torch.randn(b, seq, 48, generator=torch.Generator().manual_seed(b * 1000 + seq)) * 3


@pytest.fixture(scope="module")
def module():
    return Written().eval()


def test_written_activations_become_ops(module):
    ir_module = import_torch(module, (_x(2, 8),), _dynamic())
    with ir_module.context, ir.Location.unknown():
        Pipeline.parse("builtin.module(kiln-infer-shapes,kiln-fold-constants,kiln-simplify)").run(ir_module)
    text = str(ir_module)
    assert text.count('approximate = "none"') == 1 and text.count('approximate = "tanh"') == 1
    assert text.count('"kiln.silu"') == 1 and text.count('"kiln.layer_norm"') == 2
    for gone in ('"kiln.erf"', '"kiln.tanh"', '"kiln.sigmoid"', '"kiln.fallback"'):
        assert gone not in text
    assert text.count('"kiln.sqrt"') == 1  # std's


@pytest.mark.parametrize("b, seq", [(1, 1), (7, 45), (16, 300)])
def test_written_activations_match_eager(module, b, seq, compiled=[]):  # noqa: B006 (one compile for the shapes)
    if not compiled:
        compiled.append(kiln.compile(module, (_x(2, 8),), _dynamic(), fallback=False))
    x = _x(b, seq)
    with torch.no_grad():
        want = module(x)
    for name, g, w in zip(["gelu", "new_gelu", "silu", "layer_norm", "layer_norm_var", "rms_norm", "std"], compiled[0](x), want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
