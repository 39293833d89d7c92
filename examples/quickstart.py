"""kiln quickstart: compile a PyTorch model once, run it at several batch and sequence sizes.

    python examples/quickstart.py

A small pre-LN transformer block (attention + MLP) with dynamic batch ``B``
and sequence length ``L`` is exported with ``torch.export``, imported into
the kiln dialect, lowered through linalg to LLVM code for this CPU, and
called on numpy arrays and torch tensors of different shapes -- one
compilation for all of them.  Each result is checked against PyTorch.
"""

import time

import numpy as np
import torch
from torch import nn
from torch.export import Dim

import kiln


class Block(nn.Module):
    """x + attn(ln(x)), then h + mlp(ln(h)); hidden 64, 4 heads."""

    def __init__(self, hidden=64, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, seq, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, seq, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, seq, h))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


def main():
    torch.manual_seed(0)
    model = Block().eval()
    example = (torch.randn(2, 8, 64),)
    dynamic = ({0: Dim("B", min=1, max=64), 1: Dim("L", min=1, max=512)},)

    start = time.perf_counter()
    compiled = kiln.compile(model, example, dynamic)
    print(f"compiled in {time.perf_counter() - start:.2f} s: {compiled}")

    for b, seq in [(1, 1), (7, 33), (64, 16), (2, 512)]:
        x = torch.randn(b, seq, 64)
        t = time.perf_counter()
        y = compiled(x.numpy())  # numpy in, numpy out (torch in gives torch out)
        ms = (time.perf_counter() - t) * 1e3
        with torch.no_grad():
            want = model(x).numpy()
        err = float(np.abs(y - want).max())
        print(f"B={b:2d} L={seq:3d}: output {list(y.shape)}, {ms:7.2f} ms, max |kiln - torch| = {err:.2e}")
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)

    try:
        compiled(np.zeros((65, 4, 64), np.float32))
    except kiln.ShapeError as e:
        print(f"B=65 is outside the compiled range: ShapeError: {e}")


if __name__ == "__main__":
    main()
