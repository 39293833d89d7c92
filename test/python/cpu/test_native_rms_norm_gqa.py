"""kiln.rms_norm and grouped-query attention on the CPU's native kernels.

LLaMA's RMSNorm written out compiles to one ``kiln.rms_norm``, kiln-select-kernels
chooses the ``kiln_rms_norm`` native call for it (rows over the pool), and
the result matches eager at the min, a middle and the max of B and L; the
norm without a weight, and over a width that leaves a scalar tail after the
vectors, likewise.  SDPA with ``enable_gqa`` (8 q heads over 2 k / v heads)
is one ``kiln_attention_gqa`` call reading k / v head ``h / 4`` in place."""

import pytest
import torch
from torch.export import Dim

import kiln
from kiln.backends.cpu.library_kernels import ATTENTION, ATTENTION_MASKED, RMS_NORM

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)


class RMSNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm (the dtype casts included)."""

    def __init__(self, n, weight=True):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n)) if weight else None
        self.eps = 1e-6

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        h = h.to(dtype)
        return h if self.weight is None else self.weight * h


@pytest.mark.parametrize("width, weight", [(512, True), (37, False)])
def test_rms_norm_is_one_native_call_and_matches(width, weight):
    module = RMSNorm(width, weight).eval()
    b, seq = Dim("B", min=1, max=8), Dim("L", min=1, max=300)
    model = kiln.compile(module, (torch.randn(2, 16, width),), ({0: b, 1: seq},), keep_ir=True, fallback=False)
    assert str(model.ir["optimized"]).count('"kiln.rms_norm"') == 1
    assert model.ir["llvm"].count(f"call @{RMS_NORM.symbol}(") == 1
    for bb, ll in ((1, 1), (3, 45), (8, 300)):
        x = torch.randn(bb, ll, width) * 3
        with torch.no_grad():
            want = module(x)
        got = model(x)
        got = got[0] if isinstance(got, (tuple, list)) else got
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class _GQA(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


class _MaskedGQA(torch.nn.Module):
    def forward(self, q, k, v, keep):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)


@pytest.mark.parametrize("masked", [False, True])
def test_sdpa_enable_gqa_matches_without_materialized_repeat(masked):
    """Unmasked: one kiln_attention_gqa call; masked: one
    kiln_attention_masked call; neither repeats k / v; both vs eager."""
    module = _MaskedGQA() if masked else _GQA()
    b, seq = Dim("B", min=1, max=8), Dim("L", min=1, max=300)
    example = (torch.randn(2, 8, 16, 32), torch.randn(2, 2, 16, 32), torch.randn(2, 2, 16, 32))
    spec = {0: b, 2: seq}
    dyn = (spec, spec, spec)
    if masked:
        example += (torch.rand(2, 1, 16, 16) > 0.3,)
        dyn += ({0: b, 2: seq, 3: seq},)
    model = kiln.compile(module, example, dynamic_shapes=dyn, keep_ir=True, fallback=False)
    assert '"kiln.expand"' not in str(model.ir["optimized"])
    llvm = model.ir["llvm"]
    assert llvm.count(f"call @{ATTENTION.symbol}(") == (0 if masked else 1)
    assert llvm.count(f"call @{ATTENTION_MASKED.symbol}(") == (1 if masked else 0)
    gen = torch.Generator().manual_seed(1)
    for bb, ll in ((1, 1), (3, 45), (8, 300)):
        args = [torch.randn(bb, 8, ll, 32, generator=gen)]
        args += [torch.randn(bb, 2, ll, 32, generator=gen) for _ in range(2)]
        if masked:
            keep = torch.rand(bb, 1, ll, ll, generator=gen) > 0.3
            keep[..., 0] = True  # no row drops every key
            args.append(keep)
        got = model(*args)
        got = got[0] if isinstance(got, (tuple, list)) else got
        torch.testing.assert_close(got, module(*args), rtol=1e-5, atol=1e-5)
