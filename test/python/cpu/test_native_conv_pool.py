"""A convolution summed over its pixels in its own call (kiln_conv2d_mean),
and the global average pools kiln.compile folds into it, against PyTorch."""

import ctypes

import numpy as np
import pytest
import torch

import kiln
from kiln.bench import native_check
from kiln.runtime import native

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)

I64 = ctypes.c_int64

# (batch, C, H, W, F, KH, KW, stride, dilation, pad).  Stride 2 with K >= 256
# takes the channel-vector tiles' pool mode on AVX-512 (8 x 2 tiles, the
# bench CNN's 32 -> 64 layer at batch 1 / 3 / 8; 7 x 4 with a part-filled
# group and an odd output width; bands on one image, images per thread on
# four; a 2.3 MB weight in K blocks, the tiles' sums kept between them, on
# one image and four); stride-1 3x3 (Winograd), pointwise and small
# convolutions compute the whole output and sum it.
GEOMETRIES = [
    (1, 32, 32, 32, 64, 3, 3, 2, 1, 1),
    (3, 32, 32, 32, 64, 3, 3, 2, 1, 1),
    (8, 32, 32, 32, 64, 3, 3, 2, 1, 1),
    (2, 64, 13, 13, 40, 3, 3, 2, 1, 1),
    (4, 160, 13, 13, 64, 3, 3, 2, 1, 1),
    (1, 256, 32, 32, 256, 3, 3, 2, 1, 1),
    (4, 256, 32, 32, 200, 3, 3, 2, 1, 1),
    (2, 24, 16, 15, 22, 3, 3, 1, 1, 1),
    (3, 64, 7, 7, 96, 1, 1, 1, 1, 0),
    (2, 3, 9, 9, 5, 3, 3, 1, 1, 1),
]


def _mean_fn():
    f = native.load().kiln_conv2d_mean
    f.argtypes = [I64] * 19 + [ctypes.c_float, ctypes.c_int32, I64, ctypes.c_int32, I64, ctypes.c_float]
    f.restype = None
    return f


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[str(g) for g in GEOMETRIES])
@pytest.mark.parametrize("relu, residual, divisor", [(1, False, None), (0, False, 1.0), (1, True, None)],
                         ids=["relu-mean", "sum", "residual-relu-mean"])
def test_conv2d_mean_matches_torch(geometry, relu, residual, divisor):
    n, c, h, w, f, kh, kw, s, d, p = geometry
    rng, x, wt, bias, ref = native_check.case(geometry)
    oh, ow = ref.shape[2:]
    divisor = float(oh * ow) if divisor is None else divisor
    res = rng.standard_normal(ref.shape, dtype=np.float32) if residual else None
    full = ref + bias[None, :, None, None] + (res if residual else 0.0)
    full = np.maximum(full, 0.0) if relu else full
    want = full.astype(np.float64).sum(axis=(2, 3)) / divisor
    y = np.full((n, f), np.nan, dtype=np.float32)
    slot = (I64 * 1)(0)
    mean = _mean_fn()
    for _ in range(2):  # the second call reads the packed weight (and, pooling, sums into fresh partials)
        mean(n, f, c, h, w, kh, kw, oh, ow, s, s, d, d, p, p, x.ctypes.data, wt.ctypes.data, bias.ctypes.data,
             res.ctypes.data if residual else 0, 0.0, relu, y.ctypes.data, 2, ctypes.addressof(slot), divisor)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(full).max())
    native.load().kiln_free_packed(I64(slot[0]))


class _Head(torch.nn.Module):
    """conv (stride 2) -> ReLU -> global average pool -> linear: the bench
    CNN's tail; with ``residual`` a stride-1 conv whose input is added first."""

    def __init__(self, residual: bool, window_pool: bool = False):
        super().__init__()
        self.residual, self.window_pool = residual, window_pool
        self.conv = torch.nn.Conv2d(32, 32 if residual else 64, 3, stride=1 if residual else 2, padding=1)
        self.fc = torch.nn.Linear(self.conv.out_channels, 10)

    def forward(self, x):
        y = self.conv(x)
        y = torch.relu(y + x if self.residual else y)
        pooled = (torch.nn.functional.avg_pool2d(y, y.shape[2:]) if self.window_pool
                  else torch.nn.functional.adaptive_avg_pool2d(y, 1))
        return self.fc(torch.flatten(pooled, 1))


@pytest.mark.parametrize("residual, window_pool", [(False, False), (True, False), (True, True)],
                         ids=["plain", "residual", "residual-avg-pool-window"])
def test_global_pool_folds_into_the_convolution(residual, window_pool):
    """The pool is the mean of torch's adaptive pool, or an average pool
    whose window is the whole map (ResNet-50's ONNX AveragePool), which
    kiln-simplify makes that mean."""
    torch.manual_seed(0)
    model = _Head(residual, window_pool).eval()
    x = torch.randn(2, 32, 16, 16)
    batch = torch.export.Dim("B", min=1, max=24)
    m = kiln.compile(model, (x,), dynamic_shapes={"x": {0: batch}})
    ops = [k["ops"] for k in m.report()["kernels"]]
    assert any("kiln.conv2d" in o and "kiln.reduce_mean" in o for o in ops), ops
    for b in (1, 11, 24):
        xb = torch.randn(b, 32, 16, 16)
        with torch.inference_mode():
            want = model(xb).numpy()
        got = m(xb.numpy())
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
