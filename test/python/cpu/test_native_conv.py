"""kiln's native weight-A GEMM and convolution (kiln_sgemm_wa, kiln_conv2d):
the C entry points against numpy / PyTorch, and convolutions through kiln.compile."""

import ctypes
import gc
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import kiln
from kiln.backends.cpu import library
from kiln.bench import native_check
from kiln.runtime import native

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)

I64 = ctypes.c_int64


def _conv2d():
    f = native.load().kiln_conv2d
    f.argtypes = [I64] * 19 + [ctypes.c_float, ctypes.c_int32, I64, ctypes.c_int32, I64]
    f.restype = None
    return f


def _sgemm_wa():
    f = native.load().kiln_sgemm_wa
    f.argtypes = [I64] * 9 + [ctypes.c_float, I64, I64, I64, ctypes.c_int32, I64]
    f.restype = None
    return f


# (batch, C, H, W, F, KH, KW, stride, dilation, pad): strided, dilated,
# padded, 1x1, a window wider than the per-panel bound table (KW 17), output
# rows shorter and longer than a panel, more input channels than a K block;
# stride-2 runs longer than one 16-lane copy with padding at both ends, a
# strided 1x1, and pointwise convolutions (no im2col) over several panels.
GEOMETRIES = [
    (1, 3, 8, 70, 4, 3, 3, 2, 1, 1),
    (2, 6, 9, 9, 5, 1, 1, 2, 1, 0),
    (2, 16, 10, 10, 33, 1, 1, 1, 1, 0),
    (2, 5, 11, 13, 7, 3, 3, 2, 1, 1),
    (3, 4, 9, 40, 9, 3, 3, 1, 1, 1),
    (1, 3, 7, 7, 10, 1, 1, 1, 1, 0),
    (2, 3, 12, 12, 17, 3, 3, 1, 2, 2),
    (1, 2, 5, 6, 3, 5, 5, 3, 1, 2),
    (2, 2, 6, 30, 5, 1, 17, 1, 1, 8),
    (1, 50, 6, 6, 13, 3, 3, 1, 1, 1),
    # 64 output channels below KILN_DCONV_MIN_FMAS: the im2col gather with
    # a packed weight (fewer channels now take the direct path there too).
    (1, 16, 12, 12, 64, 3, 3, 1, 1, 1),
    # Above KILN_DCONV_MIN_FMAS (6 M), so computed directly when the weight
    # has a slot: stride 1 with a partial row block, stride 2 with odd sizes,
    # a 7x7 stride-2 stem, dilation 2, a 1x1 stride 2 (one phase plane of
    # four), stride 3, and a weight big enough for every-panel tasks.
    (2, 16, 40, 40, 43, 3, 3, 1, 1, 1),
    (1, 48, 45, 61, 37, 3, 3, 2, 1, 1),
    (1, 3, 90, 90, 24, 7, 7, 2, 1, 3),
    (1, 32, 30, 30, 32, 3, 3, 1, 2, 2),
    (2, 256, 28, 28, 128, 1, 1, 2, 1, 0),
    (1, 64, 50, 50, 16, 5, 5, 3, 1, 2),
    (1, 256, 9, 9, 160, 3, 3, 1, 1, 1),
    # Stride 2 without padding, both column phases split from each input row
    # in one pass (copy_row_s2): a 2x2 window whose last input column lies
    # past the phase planes, and a 3x3 on an odd width.
    (4, 48, 33, 33, 64, 2, 2, 2, 1, 0),
    (2, 40, 41, 41, 32, 3, 3, 2, 1, 0),
    # Plane rows zeroed at their ends without the vector stores: padding
    # wider than a vector, and rows narrower than one (5 + 2 columns).
    (2, 16, 20, 20, 32, 3, 3, 1, 1, 9),
    (4, 128, 5, 5, 64, 3, 3, 1, 1, 1),
    # A 1x1 stride 2 over a 2 MiB weight (its subsampled im2col packed once,
    # row blocks over every panel), and a 2x2 stride 2 whose weight (8 MiB)
    # takes the three passes on one image, its flat grid (no extra columns)
    # stored straight into Y.
    (1, 512, 14, 14, 1024, 1, 1, 2, 1, 0),
    (1, 512, 14, 14, 1024, 2, 2, 2, 1, 0),
    # Bands: three images in bands of 9 rows and 8 (two bands per image on
    # two threads), and eight whole images (four per thread).
    (3, 32, 33, 33, 40, 3, 3, 2, 1, 1),
    (8, 16, 24, 24, 24, 3, 3, 1, 1, 1),
    # Output rows a whole number of 32-column panels (AVX-512; 16 with AVX2)
    # within the wide grid, stored straight into Y (dconv_rows): two K
    # blocks and a partial row block over two images; a 3 -> 16 layer on
    # 64 x 64 (two panels a row, bands of rows on one image); a weight over
    # 1 MiB on one image (three passes).  The 30-wide rows above (dilation 2,
    # a 1 x 17 window) take this path too, with a partial panel.
    (2, 48, 32, 32, 20, 3, 3, 1, 1, 1),
    (1, 3, 64, 64, 16, 3, 3, 1, 1, 1),
    (1, 128, 32, 32, 264, 3, 3, 1, 1, 1),
    # A row of one panel and a half (48 = 32 + 16 of Wq = 51): the last
    # panel, one vector wide, straight into Y too (a 7x7 stride-2 stem).
    (1, 3, 96, 96, 16, 7, 7, 2, 1, 3),
    # Stride 2 with K >= 256 (kiln_vconv.c on AVX-512): 16-pixel tiles over
    # 15 outputs (three images: bands of rows padded per task on two threads,
    # by image on one or three), 14 x 2 tiles (bands on three threads), a
    # 1x1 with a part-filled group of 64 channels, dilation 2 with 7 x 4
    # tiles, groups outer (the weight bigger than the padded image) on one
    # image and on four; 8 x 2 tiles whose second vector holds 8 channels
    # (the 8-pixel transpose's registers carry one channel, not two).
    (3, 32, 20, 30, 64, 3, 3, 2, 1, 1),
    (2, 29, 28, 28, 32, 3, 3, 2, 1, 1),
    (1, 300, 13, 13, 120, 1, 1, 2, 1, 0),
    (1, 64, 13, 13, 128, 3, 3, 2, 2, 2),
    (4, 64, 13, 13, 128, 3, 3, 2, 1, 1),
    (2, 32, 16, 16, 24, 3, 3, 2, 1, 1),
    # Stride 1 where the direct path's wide grid wastes a tenth (kiln_vconv.c
    # on AVX-512; with AVX2 the two undilated 7 x 7 ones take kiln_winograd.c):
    # 7 x 7 with the weight in one block, in two on four images (whole
    # images per thread), dilation 2 on 14 x 14 in two blocks; stride 2 in
    # two blocks.
    (1, 64, 7, 7, 128, 3, 3, 1, 1, 1),
    (4, 128, 7, 7, 64, 3, 3, 1, 1, 1),
    (1, 128, 14, 14, 64, 3, 3, 1, 2, 2),
    (1, 160, 13, 13, 64, 3, 3, 2, 1, 1),
    # Pointwise convolutions over few pixels (7 x 7, 14 x 14, 5 x 5, 3 x 5),
    # flattened into one row of channel-vector tiles (7 x 4, 7 x 4, 7 x 4 on
    # three images, 16 x 1).
    (1, 300, 7, 7, 128, 1, 1, 1, 1, 0),
    (1, 256, 14, 14, 256, 1, 1, 1, 1, 0),
    (3, 256, 5, 5, 64, 1, 1, 1, 1, 0),
    (1, 256, 3, 5, 16, 1, 1, 1, 1, 0),
    # Pointwise convolutions up to 28 x 28 whose image outweighs the weight:
    # chunks of 14 x 2 tiles through every group (rows outer), one image cut
    # in chunks of tiles (also where the image is small enough for bands),
    # two images one a thread, three in chunks.
    (1, 512, 28, 28, 96, 1, 1, 1, 1, 0),
    (1, 256, 14, 14, 128, 1, 1, 1, 1, 0),
    (2, 320, 24, 24, 64, 1, 1, 1, 1, 0),
    (3, 256, 12, 12, 64, 1, 1, 1, 1, 0),
    # 3x3 stride 1 by Winograd's F(2x2, 3x3) (kiln_winograd.c, from 16 x 32
    # channels; the 40 x 40, 9-padded 20 x 20 and 32 x 32 ones above go there
    # too): odd output sides (half tiles) with a partial row block, no padding
    # with the channels in two K blocks, and blocks of 32 tiles across rows of
    # 15 on three images; one block of 16 tiles (three passes over the pool on
    # two and three threads), two images of 5 x 5 tiles on an odd width (three
    # passes on three threads); with AVX-512 those two and the 13 x 17 and
    # 12 x 12 outputs have too few tiles for Winograd (kiln_vconv.c or the
    # direct path takes them), and one block of 8 x 8 tiles, two images of
    # 8 x 8 tiles on an odd width take its passes.
    (2, 24, 13, 17, 23, 3, 3, 1, 1, 1),
    (1, 400, 14, 14, 24, 3, 3, 1, 1, 0),
    (3, 64, 30, 30, 64, 3, 3, 1, 1, 1),
    (1, 32, 8, 8, 48, 3, 3, 1, 1, 1),
    (2, 24, 10, 9, 22, 3, 3, 1, 1, 1),
    (1, 16, 16, 16, 48, 3, 3, 1, 1, 1),
    (2, 24, 16, 15, 22, 3, 3, 1, 1, 1),
    # A pointwise convolution whose output (625 KB an image) outgrows half of
    # L2 from a small B: B packed once, row blocks over every panel.
    (2, 16, 40, 40, 100, 1, 1, 1, 1, 0),
    # Pointwise, panel by panel with B read in place (wgemm_tasks): a last
    # panel of 2 columns (packed) on 30 x 31, K in two blocks (520 channels),
    # and 32 x 32 planes, whose rows all start on one L1 set (packed).
    (2, 300, 30, 31, 70, 1, 1, 1, 1, 0),
    (1, 520, 30, 30, 40, 1, 1, 1, 1, 0),
    (1, 256, 32, 32, 24, 1, 1, 1, 1, 0),
]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[str(g) for g in GEOMETRIES])
@pytest.mark.parametrize("packed, threads", [(True, 2), (True, 1), (True, 3), (False, 2)],
                         ids=["slot", "slot-1-thread", "slot-3-threads", "no-slot"])
def test_conv2d_kernel_matches_torch(geometry, packed, threads):
    n, c, h, w, f, kh, kw, s, d, p = geometry
    rng, x, wt, bias, ref = native_check.case(geometry)
    oh, ow = ref.shape[2:]
    y0 = rng.standard_normal(ref.shape, dtype=np.float32)
    slot = (I64 * 1)(0)
    conv = _conv2d()
    res = rng.standard_normal(ref.shape, dtype=np.float32)
    # float32 sums of K = c * kh * kw unit-normal products differ by order of
    # summation up to about eps * K (AVX2's 8-lane blocks round differently
    # from AVX-512's 16 and from torch: 2.1e-4 at K = 2304); a wrong or
    # missing tap is off by order 1.
    atol = max(1e-4, 2e-7 * c * kh * kw)
    # beta 0 with a bias, beta 0 without, beta 1 (accumulate into y); each
    # with and without the ReLU and a residual applied in the call, and the
    # residual being y itself (a block that adds into its shortcut).
    for with_bias, beta in ((True, 0.0), (False, 0.0), (False, 1.0)):
        for relu in (0, 1):
            for residual in ("none", "other", "y") if beta == 0.0 else ("none",):
                y = y0.copy() if residual != "y" else res.copy()
                r = {"none": 0, "other": res.ctypes.data, "y": y.ctypes.data}[residual]
                conv(n, f, c, h, w, kh, kw, oh, ow, s, s, d, d, p, p, x.ctypes.data, wt.ctypes.data,
                     bias.ctypes.data if with_bias else 0, r, beta, relu, y.ctypes.data, threads,
                     ctypes.addressof(slot) if packed else 0)
                want = ref + (bias[None, :, None, None] if with_bias else 0) + beta * y0
                want = want + (res if residual != "none" else 0)
                np.testing.assert_allclose(y, np.maximum(want, 0) if relu else want, rtol=1e-4, atol=atol)
    assert (slot[0] != 0) == packed
    native.load().kiln_free_packed(I64(slot[0]))


@pytest.mark.parametrize("geometry", [(1, 32, 32, 32, 64, 3, 3, 2, 1, 1), (1, 64, 7, 7, 128, 3, 3, 1, 1, 1),
                                      (1, 300, 7, 7, 128, 1, 1, 1, 1, 0), (2, 48, 32, 32, 20, 3, 3, 1, 1, 1)],
                         ids=["stride-2", "stride-1-vectors", "pointwise-vectors", "direct-rows"])
def test_relu_keeps_nan(geometry):
    """A NaN in the input stays NaN through the fused ReLU (as torch.relu
    keeps it), on the channel-vector paths and the direct one."""
    n, c, h, w, f, kh, kw, s, d, p = geometry
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    x[0, 0, h // 2, w // 2] = np.nan
    wt = rng.standard_normal((f, c, kh, kw), dtype=np.float32)
    bias = rng.standard_normal(f, dtype=np.float32)
    ref = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(bias),
                                                stride=s, padding=p, dilation=d)).numpy()
    y = np.zeros_like(ref)
    slot = (I64 * 1)(0)
    oh, ow = ref.shape[2:]
    _conv2d()(n, f, c, h, w, kh, kw, oh, ow, s, s, d, d, p, p, x.ctypes.data, wt.ctypes.data, bias.ctypes.data, 0,
              0.0, 1, y.ctypes.data, 2, ctypes.addressof(slot))
    assert np.isnan(ref).any()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_allclose(np.nan_to_num(y), np.nan_to_num(ref), rtol=1e-4, atol=1e-4)
    native.load().kiln_free_packed(I64(slot[0]))


@pytest.mark.parametrize("f, q", [(120, 4), (64, 1)])
def test_strided_convolutions_run_vectorized_over_channels(f, q):
    """A stride-2 convolution with K >= 256 packs its weight as groups of 16Q
    channels (kiln_vconv.c), not as the direct path's row blocks of 8; one
    with K < 256 keeps the direct path."""
    if native.load().kiln_vector_width() != 16:
        pytest.skip("kiln_vconv.c is built for AVX-512 only")
    ow = {4: 7, 1: 16}[q]
    for c, expect_groups in ((300, True), (20, False)):
        x = np.ones((1, c, 2 * ow, 2 * ow), np.float32)
        wt = np.ones((f, c, 1, 1), np.float32)
        y = np.zeros((1, f, ow, ow), np.float32)
        slot = (I64 * 1)(0)
        before = native.packed_bytes()
        _conv2d()(1, f, c, 2 * ow, 2 * ow, 1, 1, ow, ow, 2, 2, 1, 1, 0, 0, x.ctypes.data, wt.ctypes.data, 0, 0, 0.0,
                  0, y.ctypes.data, 2, ctypes.addressof(slot))
        width = 16 * q if expect_groups else 8
        assert native.packed_bytes() - before == -(-f // width) * width * c * 4
        np.testing.assert_array_equal(y, np.full_like(y, c))
        native.load().kiln_free_packed(I64(slot[0]))


def test_small_pointwise_convolutions_run_vectorized_over_channels():
    """A pointwise convolution over 49 pixels (32-column panels would waste
    15 of 64) packs its weight as groups of 64 channels (kiln_vconv.c's 7 x 4
    tiles); over 64 pixels (up to 28 x 28) as groups of 32 (14 x 2 tiles);
    over 32 x 32 it keeps the GEMM's row blocks of 8."""
    if native.load().kiln_vector_width() != 16:
        pytest.skip("kiln_vconv.c is built for AVX-512 only")
    f, c = 120, 300
    for side, width in ((7, 64), (8, 32), (32, 8)):
        x = np.ones((1, c, side, side), np.float32)
        wt = np.ones((f, c, 1, 1), np.float32)
        y = np.zeros((1, f, side, side), np.float32)
        slot = (I64 * 1)(0)
        before = native.packed_bytes()
        _conv2d()(1, f, c, side, side, 1, 1, side, side, 1, 1, 1, 1, 0, 0, x.ctypes.data, wt.ctypes.data, 0, 0, 0.0,
                  0, y.ctypes.data, 2, ctypes.addressof(slot))
        assert native.packed_bytes() - before == -(-f // width) * width * c * 4
        np.testing.assert_array_equal(y, np.full_like(y, c))
        native.load().kiln_free_packed(I64(slot[0]))


def test_3x3_convolutions_over_enough_tiles_take_winograd():
    """A 3x3 stride-1 convolution over 64 tiles of 2 x 2 outputs packs its
    weight transformed, 16 floats per channel pair (kiln_winograd.c); over 9
    tiles it keeps the direct path's 9, as does a dilated one."""
    mr = 8 if native.load().kiln_vector_width() == 16 else 6
    f, c = 32, 32
    for side, dilation, floats in ((16, 1, 16), (6, 1, 9), (16, 2, 9)):
        pad = dilation
        x = np.ones((1, c, side, side), np.float32)
        wt = np.ones((f, c, 3, 3), np.float32)
        y = np.zeros((1, f, side, side), np.float32)
        slot = (I64 * 1)(0)
        before = native.packed_bytes()
        _conv2d()(1, f, c, side, side, 3, 3, side, side, 1, 1, dilation, dilation, pad, pad, x.ctypes.data,
                  wt.ctypes.data, 0, 0, 0.0, 0, y.ctypes.data, 2, ctypes.addressof(slot))
        assert native.packed_bytes() - before == -(-f // mr) * mr * c * floats * 4
        # Interior outputs see all nine taps, edges six, corners four.
        want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), padding=pad,
                                          dilation=dilation).numpy()
        np.testing.assert_array_equal(y, want)
        native.load().kiln_free_packed(I64(slot[0]))


@pytest.mark.parametrize("sides", [(6, 16), (16, 6)], ids=["direct-first", "winograd-first"])
def test_one_weight_on_both_sides_of_the_winograd_bound(sides):
    """A weight whose slot holds one packing (the direct path's, or the
    transformed one) still convolves correctly at an output size that wants
    the other: that call runs unpacked."""
    rng = np.random.default_rng(7)
    f, c = 32, 32
    wt = rng.standard_normal((f, c, 3, 3), dtype=np.float32)
    slot = (I64 * 1)(0)
    for side in sides:
        x = rng.standard_normal((2, c, side, side), dtype=np.float32)
        y = np.zeros((2, f, side, side), np.float32)
        _conv2d()(2, f, c, side, side, 3, 3, side, side, 1, 1, 1, 1, 1, 1, x.ctypes.data, wt.ctypes.data, 0, 0, 0.0,
                  0, y.ctypes.data, 2, ctypes.addressof(slot))
        want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), padding=1).numpy()
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    native.load().kiln_free_packed(I64(slot[0]))


@pytest.mark.parametrize("batch, m, k, n", [(1, 1, 1, 1), (3, 9, 20, 33), (2, 17, 1000, 70), (1, 64, 288, 256)])
@pytest.mark.parametrize("packed", [True, False], ids=["slot", "no-slot"])
def test_sgemm_wa_kernel_matches_numpy(batch, m, k, n, packed):
    """Partial row blocks and panels, K in several blocks, beta 0 and 1, a batch stride."""
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((batch, k, n), dtype=np.float32)
    c0 = rng.standard_normal((batch, m, n), dtype=np.float32)
    slot = (I64 * 1)(0)
    for beta in (0.0, 1.0):
        c = c0.copy()
        _sgemm_wa()(batch, m, n, k, a.ctypes.data, k, b.ctypes.data, n, k * n, beta, c.ctypes.data, n, m * n, 2,
                    ctypes.addressof(slot) if packed else 0)
        np.testing.assert_allclose(c, np.matmul(a, b) + beta * c0, rtol=1e-4, atol=1e-3)
    assert (slot[0] != 0) == packed
    native.load().kiln_free_packed(I64(slot[0]))


class _Net(torch.nn.Module):
    """Padded strided conv + bias + ReLU, an unpadded 1x1 conv, a padded conv without bias."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.b = torch.nn.Conv2d(8, 16, 1)
        self.c = torch.nn.Conv2d(16, 4, (3, 2), padding=(1, 2), bias=False)

    def forward(self, x):
        return self.c(self.b(torch.relu(self.a(x))))


def test_convolutions_compile_to_one_native_call_each():
    torch.manual_seed(0)
    net = _Net().eval()
    x = torch.randn(2, 3, 15, 15)
    before = native.packed_bytes()
    model = kiln.compile(net, (x,), dynamic_shapes=({0: torch.export.Dim("B", min=1, max=64)},), keep_ir=True)
    llvm = model.ir["llvm"]
    if not library.weight_a_enabled():
        pytest.skip("KILN_NATIVE_WA=0")
    assert llvm.count(f"call @{library.NATIVE_CONV}(") == 3
    for b in (1, 7, 64):
        xb = torch.randn(b, 3, 15, 15)
        with torch.no_grad():
            ref = net(xb)
        np.testing.assert_allclose(model(xb).numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    assert native.packed_bytes() > before  # the weights were packed into their slots ...
    del model
    gc.collect()
    assert native.packed_bytes() == before  # ... and freed with the model


class _Bottleneck(torch.nn.Module):
    """A ResNet-style stage from 14 x 14 to 7 x 7 that takes each of the
    channel-vector paths: a strided 1x1 projection (subsampled copy), a
    stride-2 and a stride-1 3x3 whose weights go in two blocks (K = 1152), a
    residual with ReLU, and a 1x1 over 49 pixels (one flattened row)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Conv2d(256, 256, 1, stride=2)
        self.reduce = torch.nn.Conv2d(256, 128, 1)
        self.down = torch.nn.Conv2d(128, 128, 3, stride=2, padding=1)
        self.mid = torch.nn.Conv2d(128, 128, 3, padding=1)
        self.expand = torch.nn.Conv2d(128, 256, 1)
        self.tail = torch.nn.Conv2d(256, 256, 1)

    def forward(self, x):
        h = torch.relu(self.reduce(x))
        h = torch.relu(self.down(h))
        h = torch.relu(self.mid(h))
        h = torch.relu(self.expand(h) + self.proj(x))
        return self.tail(h)


class _Widen(torch.nn.Module):
    """A 1x1 widening 256 -> 512 channels at 16 x 16 (output 512 KiB an
    image): B packed once, row blocks over every panel."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(256, 512, 1)

    def forward(self, x):
        return torch.relu(self.conv(x))


@pytest.mark.parametrize("net, side", [(_Bottleneck, 14), (_Widen, 16)], ids=["bottleneck", "widen"])
def test_conv_stages_match_torch_at_several_batches(net, side):
    torch.manual_seed(0)
    net = net().eval()
    model = kiln.compile(net, (torch.randn(2, 256, side, side),),
                         dynamic_shapes=({0: torch.export.Dim("B", min=1, max=16)},))
    for b in (1, 3, 16):
        x = torch.randn(b, 256, side, side)
        with torch.no_grad():
            ref = net(x)
        np.testing.assert_allclose(model(x).numpy(), ref.numpy(), rtol=1e-4, atol=2e-4)


def test_bench_cnn_keeps_no_pad_or_im2col_buffer(tmp_path, capsys):
    """Through the real lowering (kiln-compile --stop-after kiln-cpu-library):
    the zero pads, bias inits, im2col copies and ReLUs of the bench CNN are folded into the calls."""
    from kiln.tools.kiln_compile import main

    if not library.weight_a_enabled():
        pytest.skip("KILN_NATIVE_WA=0")
    out = tmp_path / "cnn.mlir"
    assert main(["kiln.bench.models:small_cnn", "--stop-after", "kiln-cpu-library", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.count(f"call @{library.NATIVE_CONV}(") == 2
    for part in ("pad", "init", "im2col", "relu"):  # the parts the calls took over are gone
        assert f'kiln.call_part = "{part}"' not in text
    assert "x3x3x3x32x32xf32" not in text and "x32x3x3x16x16xf32" not in text  # the two im2col buffers


_NO_STALE_SCRATCH = r"""
import ctypes, subprocess, sys, tempfile, numpy as np
from pathlib import Path
from kiln.runtime import native

lib = native.load()
assert lib.kiln_pool_threads() == 1
# MXCSR read and cleared by a helper: its DE flag records any operation on a denormal operand.
src = Path(tempfile.mkdtemp()) / "csr.c"
src.write_text("#include <xmmintrin.h>\nunsigned csr(int clear) { unsigned c = _mm_getcsr(); "
               "if (clear) _mm_setcsr(c & ~0x3fu); return c; }\n")
subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(src.with_suffix(".so")), str(src)], check=True)
csr = ctypes.CDLL(str(src.with_suffix(".so"))).csr
lib.kiln_thread_scratch.restype = ctypes.c_void_p
f = lib.kiln_conv2d
f.argtypes = [ctypes.c_int64] * 19 + [ctypes.c_float, ctypes.c_int32, ctypes.c_int64, ctypes.c_int32, ctypes.c_int64]
bad = []


# Whether call(slot) ran an operation on a denormal, over a scratch full of a
# denormal's bits (as an offset table or a pointer leaves it).
def denormals_read(call):
    scratch = (ctypes.c_uint32 * (16 << 20)).from_address(lib.kiln_thread_scratch(64 << 20))
    np.frombuffer(scratch, np.uint32)[:] = 0x1234
    slot = ctypes.c_int64(0)
    csr(1)
    call(ctypes.addressof(slot))
    flag = csr(0) & 2
    lib.kiln_free_packed(slot)
    return flag


# (batch, C, H, W, F, window, stride, pad): Winograd's (blocks, three passes, a
# partial block; with AVX-512 the 14 x 14, 7 x 7 and 5 x 5 ones go to the
# channel-vector tiles or the direct path, and the 16 x 16 one takes the
# passes), then the direct, strided, stem and pointwise paths.
for g in [(1, 64, 56, 56, 64, 3, 1, 1), (1, 256, 14, 14, 256, 3, 1, 1), (1, 512, 7, 7, 512, 3, 1, 1),
          (2, 24, 10, 9, 24, 3, 1, 1), (1, 16, 16, 16, 48, 3, 1, 1), (8, 3, 32, 32, 32, 3, 1, 1),
          (8, 32, 32, 32, 64, 3, 2, 1), (1, 3, 224, 224, 64, 7, 2, 3), (1, 256, 56, 56, 64, 1, 1, 0),
          (1, 512, 28, 28, 1024, 1, 2, 0), (1, 512, 7, 7, 2048, 1, 1, 0)]:
    n, c, h, w, fo, k, st, p = g
    oh, ow = (h + 2 * p - k) // st + 1, (w + 2 * p - k) // st + 1
    x = np.ones((n, c, h, w), np.float32)
    wt = np.full((fo, c, k, k), 0.5, np.float32)
    y = np.empty((n, fo, oh, ow), np.float32)
    if denormals_read(lambda slot: f(n, fo, c, h, w, k, k, oh, ow, st, st, 1, 1, p, p, x.ctypes.data, wt.ctypes.data,
                                     0, 0, 0.0, 0, y.ctypes.data, 1, slot)):
        bad.append(g)
# The GEMMs with partial row blocks and panels: the small-M one (B packed)
# and the weight-first one (A packed), 5 / 13 rows by 49 columns, K = 300.
small, wa = lib.kiln_sgemm_small, lib.kiln_sgemm_wa
small.argtypes = [ctypes.c_int64] * 7 + [ctypes.c_float, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.c_int64]
wa.argtypes = [ctypes.c_int64] * 9 + [ctypes.c_float, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32,
                                      ctypes.c_int64]
for name, m in (("kiln_sgemm_small", 5), ("kiln_sgemm_wa", 13)):
    a, b, out = np.ones((m, 300), np.float32), np.ones((300, 49), np.float32), np.empty((m, 49), np.float32)
    if name == "kiln_sgemm_small":
        call = lambda slot: small(m, 49, 300, a.ctypes.data, 300, b.ctypes.data, 49, 0.0, out.ctypes.data, 49, 1, slot)
    else:
        call = lambda slot: wa(1, m, 49, 300, a.ctypes.data, 300, b.ctypes.data, 49, 300 * 49, 0.0, out.ctypes.data,
                               49, m * 49, 1, slot)
    if denormals_read(call) or not (out == 300).all():
        bad.append(name)
print("denormal operands in", bad)
sys.exit(1 if bad else 0)
"""


@pytest.mark.cc  # reads the x86 MXCSR through a helper built with cc (the file's native mark skips other hosts)
def test_convolutions_compute_nothing_from_stale_scratch():
    """What the kernels compute and drop (Winograd's spill: tiles past a
    block's last, columns past a row's end; wide grids, partial panels; the
    GEMMs' partial row blocks and panels) must not come from the scratch's
    old bytes, which as floats are often denormals (a microcode assist per
    operation on Intel cores: 10-50x slower layers).  One thread, so that
    every operation runs where MXCSR's denormal flag is read."""
    env = dict(os.environ, KILN_THREADS="1")
    done = subprocess.run([sys.executable, "-c", _NO_STALE_SCRATCH], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
