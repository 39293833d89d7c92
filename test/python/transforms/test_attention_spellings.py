"""The bench transformer block with attention written out by hand (as
GPT-2's eager attention is) compiles like the ``F.scaled_dot_product_attention``
spelling: ``kiln-simplify``'s ``attention`` pattern turns the matmul /
masked_fill / softmax / matmul chain into the same ``kiln.attention``, so
both give the same kernels, and both match eager PyTorch at the min, a
middle and the max of B and L."""

import pytest
import torch

import kiln
from kiln.bench.models import TransformerBlock, TransformerBlockWrittenOut, transformer_block

#: The bench block with GPT-2's eager attention: ``q @ k^T * scale``,
#: ``masked_fill`` with a causal mask from ``torch.arange``, softmax, ``@ v``.
WrittenOut = TransformerBlockWrittenOut


class DividedWhereExpSum(TransformerBlock):
    """Another common spelling: q scaled by a division first, the causal mask
    kept by ``where`` (``j <= i``), softmax written as exp / sum after the max."""

    def attention(self, x):
        b, seq, _ = x.shape
        qkv = self.qkv(x).reshape(b, seq, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scores = torch.matmul(q / self.head_dim ** 0.5, k.transpose(2, 3))
        pos = torch.arange(seq)
        scores = torch.where(pos[:, None] >= pos[None, :], scores, torch.finfo(torch.float32).min)
        e = torch.exp(scores - scores.amax(-1, keepdim=True))
        p = e / e.sum(-1, keepdim=True)
        return self.proj(torch.matmul(p, v).transpose(1, 2).reshape(b, seq, self.hidden))


SHAPES = [(1, 1), (3, 37), (64, 512)]


def _compiled(cls):
    ref, args, dynamic = transformer_block()
    module = ref if cls is None else cls().eval()
    module.load_state_dict(ref.state_dict())
    return module, kiln.compile(module, args, dynamic)


@pytest.fixture(scope="module")
def sdpa():
    return _compiled(None)


def _kernels(model):
    r = model.report()
    return r["kernels_in_schedule"], r["kernels_launched_per_call"]


@pytest.mark.parametrize("cls", [WrittenOut, DividedWhereExpSum], ids=["masked_fill", "where_exp_sum"])
def test_written_out_attention_compiles_like_sdpa(sdpa, cls):
    ref_module, ref_model = sdpa
    module, model = _compiled(cls)
    for b, seq in SHAPES:
        x = torch.randn(b, seq, 256, generator=torch.Generator().manual_seed(b * 1000 + seq))
        with torch.no_grad():
            want = module(x)
            torch.testing.assert_close(want, ref_module(x), rtol=1e-4, atol=1e-4)  # the spellings agree
        torch.testing.assert_close(model(x), want, rtol=2e-4, atol=2e-4)
        torch.testing.assert_close(ref_model(x), want, rtol=2e-4, atol=2e-4)
        assert _kernels(model) == _kernels(ref_model)
    assert model.report()["fallback"]["ops"] == 0
