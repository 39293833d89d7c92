"""kiln's native attention (kiln_attention): the C entry point against
PyTorch, and attention through kiln.compile at several shapes."""

import ctypes

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
from kiln.backends.cpu import attention
from kiln.runtime import native

pytestmark = pytest.mark.skipif(native.load() is None, reason="no C compiler: the native library is not built")

I64 = ctypes.c_int64


def _attention():
    f = native.load().kiln_attention
    f.argtypes = [I64] * 9 + [ctypes.c_float, ctypes.c_int32, ctypes.c_int32]
    f.restype = ctypes.c_int32
    return f


def _reference(q, k, v, scale, causal):
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return s.softmax(-1) @ v


# (heads, L, S, D, Dv, causal): one query, fewer keys than queries, more
# keys than queries, head dims that are not multiples of a vector, a query
# count past one block (32) and the largest head dim.
CASES = [
    (2, 1, 1, 64, 64, True),
    (3, 37, 37, 16, 24, True),
    (3, 37, 50, 8, 5, False),
    (2, 70, 33, 100, 3, False),
    (1, 5, 200, 64, 64, False),
    (4, 130, 130, 64, 64, True),
    (2, 45, 45, 256, 256, True),
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_matches_torch(case, threads):
    h, seq_q, seq_k, d, dv, causal = case
    rng = np.random.default_rng(sum(case[:5]))
    q = rng.standard_normal((h, seq_q, d), dtype=np.float32)
    k = rng.standard_normal((h, seq_k, d), dtype=np.float32) * 3  # large scores: the running max matters
    v = rng.standard_normal((h, seq_k, dv), dtype=np.float32)
    out = np.full((h, seq_q, dv), np.nan, np.float32)
    scale = 1 / np.sqrt(d)
    rc = _attention()(h, seq_q, seq_k, d, dv, q.ctypes.data, k.ctypes.data, v.ctypes.data, out.ctypes.data, scale,
                      int(causal), threads)
    assert rc == 0
    ref = _reference(*map(torch.from_numpy, (q, k, v)), scale, causal).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_kernel_refuses_head_dims_past_its_limit():
    a = np.zeros(attention.MAX_HEAD_DIM + 1, np.float32)
    out = np.full(attention.MAX_HEAD_DIM + 1, 7.0, np.float32)
    d = attention.MAX_HEAD_DIM + 1
    assert _attention()(1, 1, 1, d, d, a.ctypes.data, a.ctypes.data, a.ctypes.data, out.ctypes.data, 1.0, 0, 1) == -1
    assert (out == 7.0).all()  # nothing written


class _Attn(torch.nn.Module):
    def __init__(self, causal, scale=None):
        super().__init__()
        self.causal, self.scale = causal, scale

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=self.scale)


@pytest.mark.parametrize("causal, scale", [(True, None), (False, 0.3)])
def test_compiled_attention_is_one_native_call_and_matches_torch(causal, scale):
    net = _Attn(causal, scale)
    b, seq = Dim("B", min=1, max=8), Dim("L", min=1, max=300)
    example = tuple(torch.randn(2, 4, 16, 32) for _ in range(3))  # distinct: torch.export merges aliased inputs
    spec = {0: b, 2: seq}
    model = kiln.compile(net, example, dynamic_shapes=(spec, spec, spec), keep_ir=True)
    if not kiln.backends.cpu.library.native_enabled():
        pytest.skip("KILN_NATIVE=0")
    assert model.ir["llvm"].count(f"call @{attention.NATIVE_ATTENTION}(") == 1
    for bb, ll in ((1, 1), (3, 45), (8, 300)):
        q, k, v = (torch.randn(bb, 4, ll, 32) for _ in range(3))
        with torch.no_grad():
            ref = net(q, k, v)
        np.testing.assert_allclose(model(q, k, v).numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
