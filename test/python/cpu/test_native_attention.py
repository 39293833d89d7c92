"""kiln's native attention (kiln_attention): the C entry point against
PyTorch, and attention through kiln.compile at several shapes."""

import ctypes
import re

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
from kiln.backends.cpu.library_kernels import ATTENTION, MAX_HEAD_DIM, PACKED_ATTENTION
from kiln.runtime import native

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)

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
# count past one block (32) and the largest head dim; causal with more and
# with fewer keys than queries (a query sees the keys up to its own index).
CASES = [
    (2, 1, 1, 64, 64, True),
    (3, 37, 37, 16, 24, True),
    (3, 37, 50, 8, 5, False),
    (2, 70, 33, 100, 3, False),
    (1, 5, 200, 64, 64, False),
    (4, 130, 130, 64, 64, True),
    (2, 45, 45, 256, 256, True),
    (2, 20, 70, 64, 64, True),
    (2, 70, 20, 32, 16, True),
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
    a = np.zeros(MAX_HEAD_DIM + 1, np.float32)
    out = np.full(MAX_HEAD_DIM + 1, 7.0, np.float32)
    d = MAX_HEAD_DIM + 1
    assert _attention()(1, 1, 1, d, d, a.ctypes.data, a.ctypes.data, a.ctypes.data, out.ctypes.data, 1.0, 0, 1) == -1
    assert (out == 7.0).all()  # nothing written


class _Attn(torch.nn.Module):
    def __init__(self, causal, scale=None):
        super().__init__()
        self.causal, self.scale = causal, scale

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=self.scale)


def test_attention_past_the_native_kernel_runs_its_products_on_the_library_gemm():
    # A head dim past MAX_HEAD_DIM: generated code, its q k^T and p v products
    # chosen on kiln IR for sgemm (kiln.parts), and the report says both.
    net = _Attn(causal=True)
    d = MAX_HEAD_DIM + 64
    b, seq = Dim("B", min=1, max=4), Dim("L", min=1, max=64)
    example = tuple(torch.randn(2, 2, 16, d) for _ in range(3))
    spec = {0: b, 2: seq}
    model = kiln.compile(net, example, dynamic_shapes=(spec, spec, spec), keep_ir=True)
    assert 'kiln.parts = "native.gemm"' in model.ir["partitioned"]
    assert "kiln.impl" not in model.ir["partitioned"]
    assert len(set(re.findall(r"call @(kiln_gemm_\d+)\(", model.ir["llvm"]))) == 2  # the library GEMM's helpers
    assert [k["impl"] for k in model.report()["kernels"]] == ["generated+native.gemm"]
    for bb, ll in ((1, 1), (2, 33), (4, 64)):
        q, k, v = (torch.randn(bb, 2, ll, d) for _ in range(3))
        np.testing.assert_allclose(np.asarray(model(q, k, v)), _reference(q, k, v, d ** -0.5, True).numpy(),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal, scale", [(True, None), (False, 0.3)])
def test_compiled_attention_is_one_native_call_and_matches_torch(causal, scale):
    net = _Attn(causal, scale)
    b, seq = Dim("B", min=1, max=8), Dim("L", min=1, max=300)
    example = tuple(torch.randn(2, 4, 16, 32) for _ in range(3))  # distinct: torch.export merges aliased inputs
    spec = {0: b, 2: seq}
    model = kiln.compile(net, example, dynamic_shapes=(spec, spec, spec), keep_ir=True)
    if not kiln.backends.cpu.library.native_enabled():
        pytest.skip("KILN_NATIVE=0")
    assert model.ir["llvm"].count(f"call @{ATTENTION.symbol}(") == 1
    # The choice was made on kiln IR, and the report names it.
    assert 'kiln.impl = "native.attention"' in model.ir["partitioned"]
    assert [k["impl"] for k in model.report()["kernels"]] == ["native.attention"]
    assert "(native.attention)" in kiln.format_report(model.report())
    for bb, ll in ((1, 1), (3, 45), (8, 300)):
        q, k, v = (torch.randn(bb, 4, ll, 32) for _ in range(3))
        with torch.no_grad():
            ref = net(q, k, v)
        np.testing.assert_allclose(model(q, k, v).numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


class _Heads(torch.nn.Module):
    """A transformer's attention between its projections: one [B, L, 3 * hidden]
    projection split into heads, attended, merged (kiln-simplify's
    packed-attention pattern makes it one kiln.packed_attention)."""

    def __init__(self, hidden, heads, causal):
        super().__init__()
        torch.manual_seed(hidden + heads)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.heads, self.causal = heads, causal

    def forward(self, x):
        b, seq, hidden = x.shape
        qkv = self.qkv(x).reshape(b, seq, 3, self.heads, hidden // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return out.transpose(1, 2).reshape(b, seq, hidden)


# (hidden, heads, causal): the bench block's 4 heads of 64; heads of 24 (not
# whole vectors: V's rows are copied, strided, into padded ones) and of 5
# (a query's row is read lane by lane); not causal.
PACKED = [(256, 4, True), (48, 2, True), (20, 4, False)]


@pytest.mark.parametrize("hidden, heads, causal", PACKED)
def test_packed_heads_are_one_native_call_and_match_torch(hidden, heads, causal):
    net = _Heads(hidden, heads, causal)
    dims = {0: Dim("B", min=1, max=16), 1: Dim("L", min=1, max=300)}
    model = kiln.compile(net, (torch.randn(2, 16, hidden),), dynamic_shapes={"x": dims}, keep_ir=True)
    llvm = model.ir["llvm"]
    if kiln.backends.cpu.library.native_enabled():
        assert f"call @{PACKED_ATTENTION.symbol}(" in llvm and "@kiln_attention(" not in llvm
    assert "kiln_permute" not in llvm  # the heads stay where the projection wrote them
    for b, seq in ((1, 1), (3, 45), (16, 300)):  # 45 and 300: a last key block that is not whole
        x = torch.randn(b, seq, hidden)
        with torch.no_grad():
            ref = net(x).numpy()
        np.testing.assert_allclose(model(x).numpy(), ref, rtol=1e-4, atol=2e-5)


def test_packed_kernel_refuses_head_dims_past_its_limit():
    f = native.load().kiln_attention_packed
    f.argtypes = [I64] * 6 + [ctypes.c_float, ctypes.c_int32, ctypes.c_int32]
    f.restype = ctypes.c_int32
    d = MAX_HEAD_DIM + 1
    x = np.zeros(3 * d, np.float32)
    out = np.full(d, 7.0, np.float32)
    assert f(1, 1, 1, d, x.ctypes.data, out.ctypes.data, 1.0, 0, 1) == -1
    assert (out == 7.0).all()  # nothing written


def test_packed_heads_without_the_native_runtime_match_torch(monkeypatch):
    monkeypatch.setenv("KILN_NATIVE", "0")  # the generated chain, reading the heads through its maps
    net = _Heads(48, 2, True)
    dims = {0: Dim("B", min=1, max=16), 1: Dim("L", min=1, max=300)}
    model = kiln.compile(net, (torch.randn(2, 16, 48),), dynamic_shapes={"x": dims}, keep_ir=True)
    assert PACKED_ATTENTION.symbol not in model.ir["llvm"] and "kiln_permute" not in model.ir["llvm"]
    for b, seq in ((1, 1), (3, 45)):
        x = torch.randn(b, seq, 48)
        with torch.no_grad():
            ref = net(x).numpy()
        np.testing.assert_allclose(model(x).numpy(), ref, rtol=1e-4, atol=2e-5)
