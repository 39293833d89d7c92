"""The bench models, as ``torch.nn.Module``s with factories.

Each factory returns ``(module, example_args, dynamic_shapes)`` in the form
``torch.export.export`` (and ``kiln.import_torch``) take: ``example_args`` is a
tuple of tensors, ``dynamic_shapes`` a tuple with one ``{axis: Dim}`` dict per
argument. Weights are deterministic (``torch.manual_seed``) and the modules are
in eval mode.

- ``mlp()``: Linear 1024->4096, GELU, Linear 4096->1024 on ``[B, 1024]``, B in 1..64.
- ``transformer_block()``: pre-LN block, hidden 256, 4 heads, MLP 1024, causal
  attention by ``F.scaled_dot_product_attention``, on ``[B, L, 256]``,
  B in 1..64, L in 1..512 (``TransformerBlockWrittenOut``: the same block with
  attention written out, as GPT-2's eager attention is).
- ``small_cnn()``: conv 3->32, conv 32->64, global average pool, linear 64->10
  on ``[B, 3, 32, 32]``, B in 1..64.
- ``tiny_mlp()``: Linear 16->32, GELU, Linear 32->8 on ``[B, 16]``, B in 1..64
  (for fast tests).
"""

import torch
import torch.nn.functional as F  # noqa: N812 (the usual torch spelling)
from torch import nn
from torch.export import Dim

__all__ = [
    "MLP",
    "SmallCNN",
    "TransformerBlock",
    "TransformerBlockWrittenOut",
    "mlp",
    "small_cnn",
    "tiny_mlp",
    "transformer_block",
    "FACTORIES",
]


class MLP(nn.Module):
    """Linear -> GELU -> Linear."""

    def __init__(self, d_in=1024, d_hidden=4096, d_out=1024):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class TransformerBlock(nn.Module):
    """Pre-LN transformer block with causal multi-head self-attention.

    ``x + attn(ln1(x))`` then ``h + mlp(ln2(h))``. Attention is
    ``F.scaled_dot_product_attention(is_causal=True)``, which kiln imports as
    one ``kiln.attention {causal = true}``.
    """

    def __init__(self, hidden=256, heads=4, mlp_hidden=1024):
        super().__init__()
        assert hidden % heads == 0
        self.hidden = hidden
        self.heads = heads
        self.head_dim = hidden // heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, mlp_hidden)
        self.fc2 = nn.Linear(mlp_hidden, hidden)

    def attention(self, x):
        b, seq, _ = x.shape
        qkv = self.qkv(x).reshape(b, seq, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, L, D]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, L, D]
        out = out.transpose(1, 2).reshape(b, seq, self.hidden)
        return self.proj(out)

    def forward(self, x):
        h = x + self.attention(self.ln1(x))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class TransformerBlockWrittenOut(TransformerBlock):
    """The bench block with attention written out as GPT-2's eager attention
    is: ``q @ k^T * scale``, ``masked_fill`` with a causal mask from
    ``torch.arange``, softmax, ``@ v`` (same weights and outputs as
    :class:`TransformerBlock`; kiln-simplify's ``attention`` pattern must make
    it one ``kiln.attention`` too)."""

    def attention(self, x):
        b, seq, _ = x.shape
        qkv = self.qkv(x).reshape(b, seq, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-1, -2) * (self.head_dim ** -0.5)
        pos = torch.arange(seq)
        scores = scores.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, seq, self.hidden))


class SmallCNN(nn.Module):
    """conv(3->32) -> ReLU -> conv(32->64, stride 2) -> ReLU -> global avg pool -> linear."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = x.mean(dim=(2, 3))
        return self.fc(x)


def _batch():
    return Dim("B", min=1, max=64)


def _build(cls, *args, seed=0, **kwargs):
    torch.manual_seed(seed)
    return cls(*args, **kwargs).eval()


def mlp(batch=8):
    """The bench MLP: ``[B, 1024] -> [B, 1024]``, B in 1..64."""
    module = _build(MLP)
    torch.manual_seed(1)
    x = torch.randn(batch, 1024)
    return module, (x,), ({0: _batch()},)


def tiny_mlp(batch=4):
    """A small MLP for fast tests: ``[B, 16] -> [B, 8]``, B in 1..64."""
    module = _build(MLP, 16, 32, 8)
    torch.manual_seed(1)
    x = torch.randn(batch, 16)
    return module, (x,), ({0: _batch()},)


def transformer_block(batch=2, seq=16):
    """The bench transformer block: ``[B, L, 256] -> [B, L, 256]``, B in 1..64, L in 1..512."""
    module = _build(TransformerBlock)
    torch.manual_seed(1)
    x = torch.randn(batch, seq, 256)
    return module, (x,), ({0: _batch(), 1: Dim("L", min=1, max=512)},)


def small_cnn(batch=2):
    """The bench CNN: ``[B, 3, 32, 32] -> [B, 10]``, B in 1..64."""
    module = _build(SmallCNN)
    torch.manual_seed(1)
    x = torch.randn(batch, 3, 32, 32)
    return module, (x,), ({0: _batch()},)


FACTORIES = {
    "mlp": mlp,
    "tiny_mlp": tiny_mlp,
    "transformer_block": transformer_block,
    "small_cnn": small_cnn,
}
