"""The custom FlashAttention-style kernel (registered with kiln.register_kernel) vs SDPA."""

import pytest
import torch
from helpers import TORCH, check, compile_text, symbols, t


def attention_module(dtype: str, causal: bool, mask: bool = False) -> str:
    q, k, o = f"B,2,L,24:{dtype}", f"B,2,S,24:{dtype}", f"B,2,L,24:{dtype}"
    args = f"%q: {t(q)}, %k: {t(k)}, %v: {t(k)}" + (f", %m: {t('L,S:f32')}" if mask else "")
    seg = "1, 1, 1, 1" if mask else "1, 1, 1, 0"
    operands = "%q, %k, %v" + (", %m" if mask else "")
    types = f"{t(q)}, {t(k)}, {t(k)}" + (f", {t('L,S:f32')}" if mask else "")
    return symbols(B=(1, 4, 1), L=(1, 128, 16), S=(1, 128, 16)) + f"""
func.func @f({args}) -> {t(o)} {{
  %r = "kiln.attention"({operands}) {{causal = {str(causal).lower()}, operandSegmentSizes = array<i32: {seg}>}} : ({types}) -> {t(o)}
  return %r : {t(o)}
}}"""


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_vs_sdpa(dtype, causal):
    prog = compile_text(attention_module(dtype, causal))
    (kernel,) = prog.kernels
    assert kernel.candidate == "flash_attention" and kernel.kind == "attention"
    gen = torch.Generator().manual_seed(3)
    shapes = ((1, 1, 1), (2, 17, 17), (1, 40, 23)) if not causal else ((1, 1, 1), (2, 17, 17), (1, 33, 33))
    for b, length, s in shapes:
        q, k, v = (torch.randn(b, 2, n, 24, generator=gen).to(TORCH[dtype]) for n in (length, s, s))
        want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        check(prog(q, k, v), want, dtype)


def test_flash_attention_additive_mask():
    prog = compile_text(attention_module("f32", False, mask=True))
    gen = torch.Generator().manual_seed(4)
    for length, s in ((3, 5), (20, 37)):
        q, k, v = (torch.randn(2, 2, n, 24, generator=gen) for n in (length, s, s))
        m = torch.randn(length, s, generator=gen)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
        check(prog(q, k, v, m), want, "f32")


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_grouped_query(causal):
    """4 q heads over 2 k / v heads: the kernel reads k / v head h // 2 (no repeated copy)."""
    q_t, kv_t = t("B,4,L,16:f32"), t("B,2,L,16:f32")
    text = symbols(B=(1, 3, 1), L=(1, 64, 16)) + f"""
func.func @f(%q: {q_t}, %k: {kv_t}, %v: {kv_t}) -> {q_t} {{
  %r = "kiln.attention"(%q, %k, %v) {{causal = {str(causal).lower()}, operandSegmentSizes = array<i32: 1, 1, 1, 0>}} : ({q_t}, {kv_t}, {kv_t}) -> {q_t}
  return %r : {q_t}
}}"""
    prog = compile_text(text)
    (kernel,) = prog.kernels
    assert kernel.candidate == "flash_attention"
    gen = torch.Generator().manual_seed(5)
    for b, length in ((1, 1), (2, 17), (3, 64)):
        q = torch.randn(b, 4, length, 16, generator=gen)
        k, v = (torch.randn(b, 2, length, 16, generator=gen) for _ in range(2))
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        check(prog(q, k, v), want, "f32")
