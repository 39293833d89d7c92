"""Every generated kernel kind also compiles for a real GPU (sm_90 PTX + cubin), not only interprets."""

import pytest
import torch
from helpers import compile_text, symbols, t
from test_attention import attention_module

from kiln.backends.triton.target import compile_in_subprocess

F = torch.nn.functional


def modules():
    xf, wf, yf = "B,32:{d}", "32,24:{d}", "B,24:{d}"
    out = {}
    for d in ("f32", "f16", "bf16"):
        xt, wt, yt = xf.format(d=d), wf.format(d=d), yf.format(d=d)
        out[f"matmul_softmax_{d}"] = (symbols(B=(1, 64, 8)) + f"""
func.func @f(%x: {t(xt)}, %w: {t(wt)}, %b: {t("24:" + d)}) -> {t(yt)} {{
  %m = "kiln.matmul"(%x, %w) : ({t(xt)}, {t(wt)}) -> {t(yt)}
  %a = "kiln.add"(%m, %b) : ({t(yt)}, {t("24:" + d)}) -> {t(yt)}
  %g = "kiln.gelu"(%a) : ({t(yt)}) -> {t(yt)}
  %s = "kiln.softmax"(%g) {{axis = -1 : i64}} : ({t(yt)}) -> {t(yt)}
  %n = "kiln.layer_norm"(%s, %b) {{axis = -1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>}} : ({t(yt)}, {t("24:" + d)}) -> {t(yt)}
  %r = "kiln.reduce_sum"(%n) {{axes = array<i64: 1>, keepdims = true}} : ({t(yt)}) -> {t("B,1:" + d)}
  %e = "kiln.sub"(%n, %r) : ({t(yt)}, {t("B,1:" + d)}) -> {t(yt)}
  return %e : {t(yt)}
}}""", lambda d=d: (torch.randn(5, 32).to(TD[d]), torch.randn(32, 24).to(TD[d]), torch.randn(24).to(TD[d])))
        out[f"attention_{d}"] = (attention_module(d, True), lambda d=d: tuple(
            torch.randn(1, 2, 17, 24).to(TD[d]) for _ in range(3)))
    out["row_prologue_f32"] = (symbols(B=(1, 8, 2), L=(1, 512, 16)) + f"""
func.func @f(%x: {t("B,L:f32")}, %m: {t("L:f32")}) -> {t("B,L:f32")} {{
  %a = "kiln.add"(%x, %m) : ({t("B,L:f32")}, {t("L:f32")}) -> {t("B,L:f32")}
  %s = "kiln.softmax"(%a) {{axis = -1 : i64}} : ({t("B,L:f32")}) -> {t("B,L:f32")}
  %q = "kiln.mul"(%s, %s) : ({t("B,L:f32")}, {t("B,L:f32")}) -> {t("B,L:f32")}
  %r = "kiln.reduce_max"(%q) {{axes = array<i64: 1>, keepdims = true}} : ({t("B,L:f32")}) -> {t("B,1:f32")}
  %o = "kiln.div"(%s, %r) : ({t("B,L:f32")}, {t("B,1:f32")}) -> {t("B,L:f32")}
  return %o : {t("B,L:f32")}
}}""", lambda: (torch.randn(2, 20), torch.randn(20)))
    xc = "N,3,H,H:f16"
    out["conv_pool_f16"] = (symbols(N=(1, 4, 1), H=(4, 64, 8)) + f"""
func.func @f(%x: {t(xc)}, %w: {t("8,3,3,3:f16")}, %b: {t("8:f16")}) -> {t("N,8,(H-2)/2+1,(H-2)/2+1:f16")} {{
  %c = "kiln.conv2d"(%x, %w, %b) {{pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>}} : ({t(xc)}, {t("8,3,3,3:f16")}, {t("8:f16")}) -> {t("N,8,H,H:f16")}
  %r = "kiln.relu"(%c) : ({t("N,8,H,H:f16")}) -> {t("N,8,H,H:f16")}
  %p = "kiln.max_pool2d"(%r) {{kernel = array<i64: 2, 2>}} : ({t("N,8,H,H:f16")}) -> {t("N,8,(H-2)/2+1,(H-2)/2+1:f16")}
  return %p : {t("N,8,(H-2)/2+1,(H-2)/2+1:f16")}
}}""", lambda: (torch.randn(1, 3, 8, 8).half(), torch.randn(8, 3, 3, 3).half(), torch.randn(8).half()))
    return out


TD = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def test_every_kernel_kind_compiles_for_sm90():
    records, names = [], []
    for name, (text, make_args) in modules().items():
        prog = compile_text(text)
        prog(*make_args())
        for k in prog.kernels:
            if k.last_launch is not None:
                records.append(k.last_launch.as_json())
                names.append(f"{name}:{k.kind}")
    kinds = {n.split(":")[1] for n in names}
    assert kinds >= {"matmul", "softmax", "layer_norm", "reduce", "pointwise", "attention", "conv2d", "pool"}
    results = compile_in_subprocess(records, arch=90)
    failed = [(n, r["error"]) for n, r in zip(names, results) if not r["ok"]]
    assert not failed, failed
    for r in results:
        assert r["sizes"]["ptx"] > 0 and r["sizes"]["cubin"] > 0


@pytest.mark.parametrize("arch", [80])
def test_gemm_compiles_for_sm80(arch):
    text, make_args = modules()["matmul_softmax_f16"]
    prog = compile_text(text)
    prog(*make_args())
    results = compile_in_subprocess([prog.kernels[0].last_launch.as_json()], arch=arch)
    assert results[0]["ok"], results[0].get("error")
