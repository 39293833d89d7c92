"""kiln's native depthwise convolution (kiln_dwconv2d): the C entry point
against PyTorch, and depthwise convolutions through kiln.compile."""

import ctypes

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
from kiln.runtime import native

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)

I64 = ctypes.c_int64


def _dwconv():
    f = native.load().kiln_dwconv2d
    f.argtypes = [I64] * 19 + [ctypes.c_int32]
    f.restype = None
    return f


# (N, C, H, W, KH, KW, (sh, sw), (dh, dw), (top, left, bottom, right)):
# MobileNet's 3x3 at strides 1 and 2, EfficientNet's 5x5, ConvNeXt's 7x7,
# a dilated one, rows shorter than a vector, no padding, uneven strides and
# pads, a window wider than the input.
GEOMETRIES = [
    (2, 32, 17, 23, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 16, 20, 37, 3, 3, (2, 2), (1, 1), (1, 1, 1, 1)),
    (3, 8, 12, 12, 5, 5, (1, 1), (1, 1), (2, 2, 2, 2)),
    (1, 4, 14, 30, 7, 7, (1, 1), (1, 1), (3, 3, 3, 3)),
    (2, 6, 11, 41, 3, 3, (1, 1), (2, 3), (2, 3, 2, 3)),
    (1, 5, 4, 5, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1)),
    (2, 3, 9, 33, 3, 3, (2, 1), (1, 1), (0, 0, 0, 0)),
    (1, 7, 10, 19, 3, 5, (1, 2), (1, 1), (1, 2, 0, 1)),
    (1, 2, 3, 3, 5, 5, (1, 1), (1, 1), (2, 2, 2, 2)),
]


def _out(size, k, s, d, lo, hi):
    return (size + lo + hi - d * (k - 1) - 1) // s + 1


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[str(g[:6]) for g in GEOMETRIES])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("relu", [0, 1])
def test_kernel_matches_torch(geometry, threads, relu):
    n, c, h, w, kh, kw, (sh, sw), (dh, dw), (pt, pl, pb, pr) = geometry
    rng = np.random.default_rng(sum(geometry[:6]))
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((c, 1, kh, kw), dtype=np.float32)
    bias = rng.standard_normal(c, dtype=np.float32)
    oh, ow = _out(h, kh, sh, dh, pt, pb), _out(w, kw, sw, dw, pl, pr)
    y = np.full((n, c, oh, ow), np.nan, np.float32)
    _dwconv()(n * c, c, h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, x.ctypes.data, wt.ctypes.data,
              bias.ctypes.data, relu, y.ctypes.data, threads)
    xp = torch.nn.functional.pad(torch.from_numpy(x), (pl, pr, pt, pb))
    ref = torch.nn.functional.conv2d(xp, torch.from_numpy(wt), torch.from_numpy(bias), (sh, sw), 0, (dh, dw), c)
    ref = ref.relu() if relu else ref
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5)


def test_kernel_without_bias_and_relu_keeps_nan():
    x = np.full((1, 2, 5, 20), np.nan, np.float32)
    x[0, 1] = 1.0
    wt = np.ones((2, 1, 3, 3), np.float32)
    y = np.zeros((1, 2, 5, 20), np.float32)
    _dwconv()(2, 2, 5, 20, 5, 20, 3, 3, 1, 1, 1, 1, 1, 1, x.ctypes.data, wt.ctypes.data, 0, 1, y.ctypes.data, 2)
    assert np.isnan(y[0, 0]).all()  # relu keeps NaN, as torch's
    assert y[0, 1, 2, 2] == 9.0 and y[0, 1, 0, 0] == 4.0  # corner: 4 taps inside


class _InvertedResidual(torch.nn.Module):
    """MobileNetV2's block: 1x1 expand, depthwise 3x3 (stride s), 1x1 project, batch norms and ReLU6."""

    def __init__(self, c, expand, stride):
        super().__init__()
        e = c * expand
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(c, e, 1, bias=False), torch.nn.BatchNorm2d(e), torch.nn.ReLU6(),
            torch.nn.Conv2d(e, e, 3, stride, 1, groups=e, bias=False), torch.nn.BatchNorm2d(e), torch.nn.ReLU6(),
            torch.nn.Conv2d(e, c, 1, bias=False), torch.nn.BatchNorm2d(c))
        self.stride = stride

    def forward(self, x):
        y = self.body(x)
        return x + y if self.stride == 1 else y


@pytest.mark.parametrize("stride", [1, 2])
def test_mobilenet_block_runs_its_depthwise_convolution_natively(stride):
    torch.manual_seed(0)
    net = _InvertedResidual(8, 6, stride).eval()
    with torch.no_grad():  # statistics that are not the identity
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    example = torch.randn(2, 8, 20, 20)
    model = kiln.compile(net, (example,), dynamic_shapes=({0: Dim("N", min=1, max=8)},), fallback=False,
                         keep_ir=True)
    assert 'kiln.impl = "native.conv2d_depthwise"' in model.ir["partitioned"]
    assert "call @kiln_dwconv2d(" in model.ir["llvm"]
    assert any("native.conv2d_depthwise" in (k["impl"] or "") for k in model.report()["kernels"])
    for n in (1, 3, 8):
        x = torch.randn(n, 8, 20, 20)
        with torch.no_grad():
            ref = net(x).numpy()
        np.testing.assert_allclose(np.asarray(model(x)), ref, rtol=1e-4, atol=1e-4)
