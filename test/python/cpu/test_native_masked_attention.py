"""Masked attention on the native kernel (kiln_attention_masked): the C
entry point against PyTorch for additive and bool masks at every broadcast
a mask takes (per batch entry, per head, per query row, padding rows that
broadcast over the queries), with causal, grouped-query heads and rows
every key of which is masked; then SDPA with a mask and attention written
out with ``masked_fill`` through kiln.compile: one native call each, at the
min, a middle and the max of the symbols."""

import ctypes

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
from kiln.backends.cpu.library_kernels import ATTENTION_MASKED
from kiln.runtime import native

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)

I64 = ctypes.c_int64


def _masked():
    f = native.load().kiln_attention_masked
    f.argtypes = [I64] * 10 + [ctypes.c_float, ctypes.c_int32, I64, ctypes.c_int32] + [I64] * 5 + [ctypes.c_int32]
    f.restype = ctypes.c_int32
    return f


def _reference(q, k, v, mask, scale, causal, group):
    k, v = (x.repeat_interleave(group, dim=1) for x in (k, v))
    s = (q @ k.transpose(-1, -2)) * scale
    if mask.dtype == torch.bool:
        s = s.masked_fill(~mask, float("-inf"))
    else:
        s = s + mask
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    p = s.softmax(-1).nan_to_num(0.0)  # a row with every key masked: zeros, as kiln's lowering gives
    return p @ v


# (B, H, group, L, S, D, mask shape as [B?, H?, L?, S], kind, causal)
CASES = [
    (2, 4, 1, 37, 50, 16, (2, 1, 1, 50), "bool", False),     # padding, broadcast over heads and queries
    (2, 4, 2, 37, 37, 24, (1, 1, 37, 37), "f32", True),      # additive, one for all entries, causal
    (3, 6, 3, 1, 70, 64, (3, 1, 1, 70), "bool", False),      # a decode step over a grouped-query cache
    (2, 4, 2, 5, 40, 16, (2, 4, 5, 40), "f32", False),       # grouped rows (2 heads x 5 queries), a mask per head
    (1, 8, 4, 9, 20, 8, (1, 1, 9, 20), "bool", False),       # grouped rows past one block (4 x 9 = 36)
    (2, 2, 1, 45, 33, 8, (2, 2, 45, 33), "bool", False),     # a mask per entry, head and query
    (1, 3, 1, 70, 70, 32, (1, 3, 70, 70), "f32", True),      # per head (an ALiBi-like bias)
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_matches_torch(case, threads):
    b, h, group, seq_q, seq_k, d, mshape, kind, causal = case
    rng = np.random.default_rng(seq_q + seq_k + d)
    q = rng.standard_normal((b, h, seq_q, d), dtype=np.float32)
    k = rng.standard_normal((b, h // group, seq_k, d), dtype=np.float32) * 3
    v = rng.standard_normal((b, h // group, seq_k, d), dtype=np.float32)
    if kind == "bool":
        mask = rng.random(mshape) > 0.3
        mask.reshape(-1, mshape[-1])[0] = False  # one row (or the whole padding) with every key masked
    else:
        mask = (rng.standard_normal(mshape) * 2).astype(np.float32)
        mask[..., : seq_k // 4] = -np.inf
    strides = [s // mask.itemsize if n > 1 else 0 for n, s in zip(mask.shape, mask.strides)]
    out = np.full((b, h, seq_q, d), np.nan, np.float32)
    scale = 1 / np.sqrt(d)
    rc = _masked()(b * h, group, seq_q, seq_k, d, d, q.ctypes.data, k.ctypes.data, v.ctypes.data, out.ctypes.data,
                   scale, int(causal), mask.ctypes.data, 1 if kind == "f32" else 2, h, *strides, threads)
    assert rc == 0
    ref = _reference(*map(torch.from_numpy, (q, k, v, mask)), scale, causal, group).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    assert np.isfinite(out).all()


def test_kernel_refuses_a_bad_mask_kind_or_group():
    a = np.zeros(64, np.float32)
    out = np.full(64, 7.0, np.float32)
    p = a.ctypes.data
    f = _masked()
    assert f(2, 1, 1, 1, 8, 8, p, p, p, out.ctypes.data, 1.0, 0, p, 3, 1, 0, 0, 0, 1, 1) == -1  # kind 3
    assert f(3, 2, 1, 1, 8, 8, p, p, p, out.ctypes.data, 1.0, 0, p, 1, 1, 0, 0, 0, 1, 1) == -1  # 2 does not divide 3
    assert f(2, 1, 1, 1, 8, 8, p, p, p, out.ctypes.data, 1.0, 0, 0, 1, 1, 0, 0, 0, 1, 1) == -1  # no mask
    assert (out == 7.0).all()


class _SDPA(torch.nn.Module):
    def __init__(self, group=1):
        super().__init__()
        self.group = group

    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.group > 1)


class _WrittenOut(torch.nn.Module):
    """GPT-2's eager attention as users write it: a causal mask from a
    buffer, sliced to the length, a padding mask added, softmax, then v."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(512, 512, dtype=torch.bool)).view(1, 1, 512, 512))

    def forward(self, q, k, v, pad):
        w = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5)
        n = q.shape[-2]
        w = torch.where(self.bias[:, :, :n, :n], w, torch.finfo(w.dtype).min)
        w = w + pad
        return torch.softmax(w, dim=-1) @ v


def _padding(b, n, kind, gen):
    keep = torch.ones(b, 1, 1, n, dtype=torch.bool)
    for i in range(b):
        keep[i, ..., : int(torch.randint(0, n, (1,), generator=gen))] = False  # left padding of each row's own length
    return keep if kind == "bool" else torch.zeros(b, 1, 1, n).masked_fill(~keep, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("kind, group", [("bool", 1), ("f32", 4)])
def test_sdpa_with_a_mask_is_one_native_call(kind, group):
    module = _SDPA(group)
    b, seq = Dim("B", min=1, max=8), Dim("L", min=1, max=200)
    gen = torch.Generator().manual_seed(0)
    example = (torch.randn(2, 8, 16, 32), torch.randn(2, 8 // group, 16, 32), torch.randn(2, 8 // group, 16, 32),
               _padding(2, 16, kind, gen))
    spec = {0: b, 2: seq}
    model = kiln.compile(module, example, dynamic_shapes=(spec, spec, spec, {0: b, 3: seq}), keep_ir=True,
                         fallback=False)
    llvm = model.ir["llvm"]
    assert llvm.count(f"call @{ATTENTION_MASKED.symbol}(") == 1 and "kiln_gemm_" not in llvm
    for bb, ll in ((1, 1), (3, 77), (8, 200)):
        args = [torch.randn(bb, 8, ll, 32, generator=gen)]
        args += [torch.randn(bb, 8 // group, ll, 32, generator=gen) for _ in range(2)]
        args.append(_padding(bb, ll, kind, gen))
        got = model(*args)
        torch.testing.assert_close(got, module(*args).nan_to_num(0.0), rtol=1e-4, atol=1e-5)


def test_attention_written_out_with_a_mask_is_one_native_call():
    module = _WrittenOut()
    b, seq = Dim("B", min=1, max=4), Dim("L", min=2, max=511)  # 512: the slice guards L != 512
    gen = torch.Generator().manual_seed(1)
    example = tuple(torch.randn(2, 4, 16, 64) for _ in range(3)) + (_padding(2, 16, "f32", gen),)
    spec = {0: b, 2: seq}
    model = kiln.compile(module, example, dynamic_shapes=(spec, spec, spec, {0: b, 3: seq}), keep_ir=True,
                         fallback=False)
    assert model.ir["llvm"].count(f"call @{ATTENTION_MASKED.symbol}(") == 1
    for bb, ll in ((1, 2), (3, 100), (4, 511)):
        args = [torch.randn(bb, 4, ll, 64, generator=gen) for _ in range(3)] + [_padding(bb, ll, "f32", gen)]
        torch.testing.assert_close(model(*args), module(*args), rtol=1e-4, atol=1e-5)


SCALAR_MASK = """
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @main(%q: !kiln.tensor<[1, 2, "L", 16], f32>, %k: !kiln.tensor<[1, 2, "L", 16], f32>,
                %v: !kiln.tensor<[1, 2, "L", 16], f32>, %m: !kiln.tensor<[], f32>) -> !kiln.tensor<[1, 2, "L", 16], f32> {
  %r = "kiln.attention"(%q, %k, %v, %m) {operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<[1, 2, "L", 16], f32>, !kiln.tensor<[1, 2, "L", 16], f32>, !kiln.tensor<[1, 2, "L", 16], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<[1, 2, "L", 16], f32>
  return %r : !kiln.tensor<[1, 2, "L", 16], f32>
}
"""


def test_a_scalar_mask_is_one_native_call():
    """A mask of one value (ONNX's flex-attention score_mod case has one):
    rank 0, every stride 0 (its memref has no strides to read; the helper's
    metadata read was malformed for rank 0)."""
    model = kiln.compile(SCALAR_MASK, keep_ir=True, fallback=False)
    assert model.ir["llvm"].count(f"call @{ATTENTION_MASKED.symbol}(") == 1
    for ll in (1, 33, 64):
        q, k, v = (torch.randn(1, 2, ll, 16) for _ in range(3))
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.full((1, 1), -1.5))
        got = model(q.numpy(), k.numpy(), v.numpy(), np.array(-1.5, np.float32))
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
