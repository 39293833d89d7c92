"""Library GEMM (kiln-cpu-library) and compile-time hoisting of constant kernels: numerics."""

import numpy as np
import pytest
import torch

import kiln
from kiln.backends.cpu import library
from kiln.bench import micro
from kiln.bench.models import tiny_mlp, transformer_block

pytestmark = pytest.mark.skipif(library.blas_library() is None, reason="numpy bundles no OpenBLAS")

T3 = '!kiln.tensor<["B", "M", "K"], f32>'


def _module(a_ty, b_ty, c_ty, syms="BMKN"):
    decl = "\n".join(f'  "kiln.symbol"() {{max = 64 : i64, min = 1 : i64, sym_name = "{s}"}} : () -> ()'
                     for s in syms)
    return (f"module {{\n{decl}\n  func.func @main(%a: {a_ty}, %b: {b_ty}) -> {c_ty} {{\n"
            f'    %0 = "kiln.matmul"(%a, %b) : ({a_ty}, {b_ty}) -> {c_ty}\n'
            f"    return %0 : {c_ty}\n  }}\n}}\n")


def _rng():
    return np.random.default_rng(7)


def test_gemm_2d_is_an_sgemm_call_and_matches_numpy():
    model = kiln.compile(micro.gemm_text(), keep_ir=True)
    assert library.SGEMM in model.ir["llvm"]
    assert "linalg.generic" not in model.ir["llvm"]
    rng = _rng()
    for m, k, n in [(1, 1, 1), (1, 64, 33), (7, 13, 5), (64, 300, 129)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        np.testing.assert_allclose(model(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "b_ty, c_ty, b_shape",
    [
        ('!kiln.tensor<["B", "K", "N"], f32>', '!kiln.tensor<["B", "M", "N"], f32>', lambda b, k, n: (b, k, n)),
        ('!kiln.tensor<["K", "N"], f32>', '!kiln.tensor<["B", "M", "N"], f32>', lambda b, k, n: (k, n)),
    ],
    ids=["batched", "batch-folded-into-m"],
)
def test_gemm_batched_matches_numpy(b_ty, c_ty, b_shape):
    model = kiln.compile(_module(T3, b_ty, c_ty), keep_ir=True)
    assert library.SGEMM in model.ir["llvm"]
    rng = _rng()
    for bb, m, k, n in [(1, 1, 1, 1), (3, 5, 7, 2), (8, 17, 32, 9)]:
        a = rng.standard_normal((bb, m, k), dtype=np.float32)
        b = rng.standard_normal(b_shape(bb, k, n), dtype=np.float32)
        np.testing.assert_allclose(model(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_library_off_keeps_generated_code(monkeypatch):
    monkeypatch.setenv("KILN_CPU_LIBRARY", "0")
    model = kiln.compile(micro.gemm_text(), keep_ir=True)
    assert library.SGEMM not in model.ir["llvm"]
    a = _rng().standard_normal((3, 4), dtype=np.float32)
    np.testing.assert_allclose(model(a, a.T.copy()), a @ a.T, rtol=1e-5, atol=1e-5)


def test_weight_transposes_are_hoisted_out_of_the_call():
    module, args, dyn = tiny_mlp()
    model = kiln.compile(module, args, dynamic_shapes=dyn)
    report = model.report()
    ops = [op for k in report["kernels"] for op in k["ops"]]
    assert "kiln.transpose" not in ops  # the W^T kernels ran at compile time
    assert report["kernels_in_schedule"] == 2
    for b in (1, 5, 64):
        x = torch.randn(b, 16)
        with torch.no_grad():
            ref = module(x)
        np.testing.assert_allclose(model(x).numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


def test_transformer_block_batched_transposed_gemms_match_torch():
    # The four linear layers run as sgemm; the heads' attention (packed:
    # read from the QKV projection in place) inside the native attention, or
    # without it as generated loops.
    from kiln.backends.cpu.library_kernels import PACKED_ATTENTION

    module, args, dyn = transformer_block()
    model = kiln.compile(module, args, dynamic_shapes=dyn, keep_ir=True)
    llvm = model.ir["llvm"]
    if library.native_enabled():
        assert llvm.count(f"call @{PACKED_ATTENTION.symbol}(") == 1 and llvm.count(f"call @{library.SGEMM_PAR}(") >= 4
    else:
        assert llvm.count(f"call @{library.SGEMM}(") >= 4
    for b, seq in [(1, 1), (2, 7), (3, 40)]:
        x = torch.randn(b, seq, 256)
        with torch.no_grad():
            ref = module(x)
        np.testing.assert_allclose(model(x).numpy(), ref.numpy(), rtol=1e-3, atol=1e-4)


def test_convolutions_through_sgemm_match_torch():
    # strided + dilated 3x3, 1x1 (read in place, no im2col), 3x1, grouped-free chain.
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=2, dilation=2), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 1), torch.nn.Conv2d(16, 4, (3, 1), padding=(1, 0), bias=False),
    ).eval()
    x = torch.randn(2, 3, 17, 13)
    model = kiln.compile(net, (x,), dynamic_shapes=({0: torch.export.Dim("B", min=1, max=8)},), keep_ir=True)
    # Every conv ends in one native convolution call (im2col gathered in the
    # call) or, without the native runtime, in sgemm calls on an im2col copy.
    llvm = model.ir["llvm"]
    if library.weight_a_enabled():
        assert llvm.count(f"call @{library.NATIVE_CONV}(") == 3
    else:
        assert llvm.count(f"call @{library.SGEMM}(") >= 3
    for b in (1, 3, 8):
        xb = torch.randn(b, 3, 17, 13)
        with torch.no_grad():
            ref = net(xb)
        np.testing.assert_allclose(model(xb).numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


_CONV = """
func.func @conv(%x: tensor<?x3x11x11xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<?x4x{o}x{o}xf32> {{
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x3x11x11xf32>
  %e = tensor.empty(%n) : tensor<?x4x{o}x{o}xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x4x{o}x{o}xf32>) -> tensor<?x4x{o}x{o}xf32>
  %r = linalg.conv_2d_nchw_fchw {{strides = dense<{s}> : tensor<2xi64>, dilations = dense<{d}> : tensor<2xi64>}}
       ins(%x, %w : tensor<?x3x11x11xf32>, tensor<4x3x3x3xf32>) outs(%f : tensor<?x4x{o}x{o}xf32>) -> tensor<?x4x{o}x{o}xf32>
  return %r : tensor<?x4x{o}x{o}xf32>
}}
"""


@pytest.mark.parametrize("stride, dilation", [(1, 1), (2, 1), (1, 2)])
def test_direct_convolution_generic_stays_generated_code(stride, dilation):
    """Hand-written linalg (a named convolution, generalized) is not raised to a library call: no kiln op
    chose one (issue 40), so it runs as generated loops, and right."""
    from kiln._mlir import ir
    from kiln.backends.cpu import jit
    from kiln.backends.cpu.dispatch import make_caller
    from kiln.backends.cpu.pipeline import CpuLower
    from kiln.context import make_context

    out = (11 - dilation * 2 - 1) // stride + 1
    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(_CONV.format(o=out, s=stride, d=dilation))
        CpuLower().run(module.operation)
        assert "kiln_conv2d" not in str(module) and "sgemm" not in str(module)
        engine = jit(module)
        call = make_caller(engine, "conv")
        for n in (1, 3):
            x, w = torch.randn(n, 3, 11, 11), torch.randn(4, 3, 3, 3)
            y = torch.empty(n, 4, out, out)
            call([x, w, y])
            ref = torch.nn.functional.conv2d(x, w, stride=stride, dilation=dilation)
            np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
