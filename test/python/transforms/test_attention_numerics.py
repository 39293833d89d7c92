"""Attention written out in several common spellings, each rewritten by
``kiln-simplify``'s ``attention`` pattern into one ``kiln.attention``, and the
compiled model against eager PyTorch at the min, a middle and the max of B
and L: causal ``masked_fill`` plus a boolean padding mask (``keep == 0``,
``finfo.min``), an ALiBi bias built from ``arange`` with softmax as exp / sum,
GQA by ``repeat_interleave`` and ``expand`` with the scale split over q and k
and a ``triu`` causal mask, an unscaled ``where`` keeping the padding, and
the ALiBi bias with a boolean padding mask (one additive mask, their sum)."""

import math

import pytest
import torch
from torch import nn
from torch.export import Dim

import kiln
from kiln._mlir import ir
from kiln.frontends.torch_import import import_torch
from kiln.pipelines.pipeline import Pipeline

H, D, KVH = 4, 16, 2


class Spellings(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(64, 3 * 64)
        self.kv = nn.Linear(64, 2 * KVH * D)
        self.register_buffer("slopes", torch.tensor([2.0 ** -(i + 1) for i in range(H)]))

    def heads(self, x):
        b, seq, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, seq, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def forward(self, x, keep):
        b, seq, _ = x.shape
        q, k, v = self.heads(x)
        pos = torch.arange(seq)
        # a) causal + boolean padding mask (masked_fill of keep == 0 with finfo.min)
        s = q @ k.transpose(-1, -2) / math.sqrt(D)
        s = s.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
        s = s.masked_fill(keep[:, None, None, :] == 0, torch.finfo(torch.float32).min)
        a = torch.softmax(s, -1) @ v
        # b) ALiBi bias from arange, added; exp / sum softmax without the max (the bias keeps exp finite)
        bias = -self.slopes[:, None, None] * (pos[None, :] - pos[:, None]).abs().float()  # symmetric ALiBi
        s = torch.matmul(q, k.transpose(2, 3)) * D ** -0.5 + bias
        e = torch.exp(s)
        b_out = torch.matmul(e / e.sum(-1, keepdim=True), v)
        # c) GQA, repeat_interleave and expand, scale on q and k both
        kv = self.kv(x).reshape(b, seq, 2, KVH, D).permute(2, 0, 3, 1, 4)
        kg, vg = kv[0], kv[1]
        kr = kg.repeat_interleave(H // KVH, dim=1)
        vr = vg[:, :, None].expand(b, KVH, H // KVH, seq, D).reshape(b, H, seq, D)
        s = (q * D ** -0.25) @ (kr * D ** -0.25).transpose(-1, -2)
        c = torch.softmax(s.masked_fill(torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1), float("-inf")), -1) @ vr
        # d) unscaled, padding mask kept by where
        s = q @ k.transpose(-1, -2)
        d = torch.softmax(torch.where(keep[:, None, None, :].bool(), s, float("-inf")), dim=-1) @ v
        # e) ALiBi bias and a boolean padding mask together: one additive mask
        s = (q @ k.transpose(-1, -2) * D ** -0.5 + bias).masked_fill(keep[:, None, None, :] == 0, float("-inf"))
        e = torch.softmax(s, -1) @ v
        return a, b_out, c, d, e



def _inputs(b, seq):
    g = torch.Generator().manual_seed(b * 1000 + seq)
    x = torch.randn(b, seq, 64, generator=g)
    keep = (torch.rand(b, seq, generator=g) > 0.3).to(torch.int64)
    keep[:, 0] = 1  # every query keeps a key: no all -inf row (NaN in eager)
    return x, keep


def _dynamic():
    b, seq = Dim("B", min=1, max=16), Dim("L", min=1, max=256)
    return ({0: b, 1: seq}, {0: b, 1: seq})


@pytest.fixture(scope="module")
def module():
    return Spellings().eval()


def test_every_spelling_becomes_attention(module):
    ir_module = import_torch(module, _inputs(2, 8), _dynamic())
    with ir_module.context, ir.Location.unknown():
        Pipeline.parse("builtin.module(kiln-infer-shapes,kiln-fold-constants,kiln-simplify)").run(ir_module)
    text = str(ir_module)
    assert text.count('"kiln.attention"') == 5
    assert text.count("causal = true") == 2
    assert text.count('"kiln.matmul"') == 2  # the two projections only
    assert "causal = false" in text
    assert '"kiln.softmax"' not in text and '"kiln.exp"' not in text


@pytest.mark.parametrize("b, seq", [(1, 1), (5, 37), (16, 256)])
def test_spellings_match_eager(module, b, seq, compiled=[]):  # noqa: B006 (one compile for the shapes)
    if not compiled:
        compiled.append(kiln.compile(module, _inputs(2, 8), _dynamic(), fallback=False))
    x, keep = _inputs(b, seq)
    with torch.no_grad():
        want = module(x, keep)
    got = compiled[0](x, keep)
    for name, g, w in zip("abcde", got, want):
        torch.testing.assert_close(g, w, rtol=2e-4, atol=2e-5, msg=lambda m, n=name: f"spelling {n}: {m}")
