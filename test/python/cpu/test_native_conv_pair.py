"""Two convolutions in one call (kiln_conv2d_pair, kiln_cpair.c), and the
small CNNs kiln.compile runs through it, against PyTorch."""

import ctypes

import numpy as np
import pytest
import torch

import kiln
from kiln.runtime import native

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)

I64 = ctypes.c_int64

# (batch, C, H, W, F1, K1, stride1, pad1, F2, K2, stride2, pad2, takes): the
# bench CNN at batch 1 (each image's rows split over the threads), 3 (the
# same: 3 images do not share 2 threads evenly) and 8 (whole images per
# thread); 64 channels between (the grid's pixels 128 floats apart at
# stride 2); a stride-1 second convolution; a 1x1 one with no padding; a 7x7
# stride-2 first one on a non-square image; a second whose reach ends before
# the first's last row (rows left uncomputed).  `takes`: whether the pair's
# own path runs it on AVX-512; the rest run as the two calls: an odd width,
# 48 channels between, a second convolution of 40 channels.
GEOMETRIES = [
    (1, 3, 32, 32, 32, 3, 1, 1, 64, 3, 2, 1, True),
    (3, 3, 32, 32, 32, 3, 1, 1, 64, 3, 2, 1, True),
    (8, 3, 32, 32, 32, 3, 1, 1, 64, 3, 2, 1, True),
    (2, 3, 32, 32, 64, 3, 1, 1, 64, 3, 2, 1, True),
    (3, 8, 16, 16, 32, 3, 1, 1, 32, 3, 1, 1, True),
    (5, 16, 16, 16, 64, 3, 1, 1, 128, 1, 1, 0, True),
    (2, 4, 40, 64, 32, 7, 2, 3, 64, 3, 2, 1, True),
    (2, 3, 35, 34, 32, 3, 1, 0, 32, 2, 2, 0, True),
    (2, 3, 30, 30, 32, 3, 1, 1, 64, 3, 2, 1, False),
    (2, 3, 16, 16, 48, 3, 1, 1, 64, 3, 2, 1, False),
    (2, 3, 16, 16, 32, 3, 1, 1, 40, 3, 2, 1, False),
]


def _out(size, k, s, p):
    return (size + 2 * p - k) // s + 1


def _fns():
    lib = native.load()
    pair = lib.kiln_conv2d_pair
    pair.argtypes = [I64] * 25 + [ctypes.c_int32, I64, I64, ctypes.c_int32, I64, ctypes.c_int32, I64, I64,
                                  ctypes.c_float]
    pair.restype = None
    takes = lib.kiln_conv2d_pair_takes
    takes.argtypes = [I64] * 21
    takes.restype = ctypes.c_int
    return pair, takes


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[str(g[:-1]) for g in GEOMETRIES])
@pytest.mark.parametrize("relu1, relu2, biases", [(1, 1, True), (0, 1, False), (1, 0, True)],
                         ids=["relu-relu-bias", "none-relu-nobias", "relu-none-bias"])
def test_conv2d_pair_matches_torch(geometry, relu1, relu2, biases):
    n, c, h, w, f1, k1, s1, p1, f2, k2, s2, p2, fast = geometry
    oh1, ow1 = _out(h, k1, s1, p1), _out(w, k1, s1, p1)
    oh2, ow2 = _out(oh1, k2, s2, p2), _out(ow1, k2, s2, p2)
    rng = np.random.default_rng(sum(geometry[:-1]) + relu1 + 2 * relu2)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    w1 = (rng.standard_normal((f1, c, k1, k1), dtype=np.float32) / np.sqrt(c * k1 * k1)).astype(np.float32)
    w2 = (rng.standard_normal((f2, f1, k2, k2), dtype=np.float32) / np.sqrt(f1 * k2 * k2)).astype(np.float32)
    b1 = rng.standard_normal(f1, dtype=np.float32) if biases else None
    b2 = rng.standard_normal(f2, dtype=np.float32) if biases else None
    t = torch.nn.functional
    with torch.no_grad():
        mid = t.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w1).double(),
                       None if b1 is None else torch.from_numpy(b1).double(), stride=s1, padding=p1)
        mid = mid.clamp_min(0) if relu1 else mid
        out = t.conv2d(mid, torch.from_numpy(w2).double(), None if b2 is None else torch.from_numpy(b2).double(),
                       stride=s2, padding=p2)
        out = out.clamp_min(0) if relu2 else out
        want = out.mean(dim=(2, 3)).numpy()
    pair, takes = _fns()
    geometry_args = (c, h, w, f1, k1, k1, oh1, ow1, s1, s1, p1, p1, f2, k2, k2, oh2, ow2, s2, s2, p2, p2)
    assert takes(*geometry_args) == int(fast and native.load().kiln_vector_width() == 16)
    y = np.full((n, f2), np.nan, dtype=np.float32)
    slots = (I64 * 2)(0, 0)
    ptr = ctypes.addressof(slots)
    for _ in range(2):  # the second call reads the packed weights
        pair(n, *geometry_args[:21], x.ctypes.data, w1.ctypes.data, 0 if b1 is None else b1.ctypes.data, relu1,
             w2.ctypes.data, 0 if b2 is None else b2.ctypes.data, relu2, y.ctypes.data, 2, ptr, ptr + 8,
             float(oh2 * ow2))
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max())))
    for s in slots:
        native.load().kiln_free_packed(I64(s))


class _Tail(torch.nn.Module):
    """conv -> ReLU -> conv -> ReLU -> global average pool -> linear: the
    bench CNN (3 -> 32 -> 64, the second at stride 2), or with ``wide`` 64
    channels between and a stride-1 second convolution."""

    def __init__(self, wide: bool = False):
        super().__init__()
        mid = 64 if wide else 32
        self.conv1 = torch.nn.Conv2d(3, mid, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(mid, 64, 3, stride=1 if wide else 2, padding=1)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        y = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc(y.mean(dim=(2, 3)))


@pytest.mark.parametrize("wide", [False, True], ids=["bench-cnn", "wide-stride1"])
def test_compiled_cnn_runs_both_convolutions_in_one_kernel(wide):
    """kiln.compile puts both convolutions, their ReLUs and the pool in one
    kernel (kiln-fuse's conv_pair), right at the batch's min, a middle value
    and its max."""
    torch.manual_seed(0)
    module = _Tail(wide).eval()
    x = torch.randn(2, 3, 16, 16)
    model = kiln.compile(module, (x,), dynamic_shapes=({0: torch.export.Dim("B", min=1, max=24)},))
    ops = [k["ops"] for k in model.report()["kernels"]]
    assert ["kiln.conv2d", "kiln.relu", "kiln.conv2d", "kiln.relu", "kiln.reduce_mean"] in ops, ops
    for b in (1, 7, 24):
        xb = torch.randn(b, 3, 16, 16)
        with torch.no_grad():
            want = module(xb).numpy()
        got = model(xb.numpy())
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
