"""kiln's native max pool (kiln_maxpool2d): strided max pools through
kiln.compile against PyTorch at several batch sizes, with and without
padding, and the pools the rewrite leaves generated."""

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
from kiln.backends.cpu.library_kernels import MAX_POOL

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)


class _Pool(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, x):
        return torch.nn.functional.max_pool2d(x, **self.kw) + 1.0


# (max_pool2d arguments, input side, native?): ResNet-50's 3x3 stride 2 pad 1;
# no padding on an odd side; 3x3 stride 2 on 65 (three blocks of 16 outputs
# and one of 1: with AVX-512 these three take the 3x3 stride-2 path); a 2x2 stride 2; a 5x5 stride 2 (the stride-2
# phases with more than three taps); stride 3 with padding 1 on a
# side the windows do not tile; dilation 2; ceil_mode and stride 1 keep the
# generated code.
CASES = [
    (dict(kernel_size=3, stride=2, padding=1), 112, True),
    (dict(kernel_size=3, stride=2), 33, True),
    (dict(kernel_size=3, stride=2, padding=1), 65, True),
    (dict(kernel_size=2, stride=2), 16, True),
    (dict(kernel_size=5, stride=2, padding=2), 21, True),
    (dict(kernel_size=3, stride=3, padding=1), 20, True),
    (dict(kernel_size=3, stride=2, padding=1, dilation=2), 23, True),
    (dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), 20, False),
    (dict(kernel_size=3, stride=1, padding=1), 12, False),
]


@pytest.mark.parametrize("kw, side, native_call", CASES, ids=[str(c[0]) for c in CASES])
def test_compiled_max_pools_match_torch(kw, side, native_call):
    model = kiln.compile(_Pool(**kw), (torch.randn(2, 5, side, side),), dynamic_shapes=({0: Dim("B", min=1, max=16)},),
                         keep_ir=True)
    assert (MAX_POOL.symbol in model.ir["llvm"]) == native_call
    rng = np.random.default_rng(side)
    for b in (1, 3, 16):
        x = torch.from_numpy(rng.standard_normal((b, 5, side, side), dtype=np.float32))
        np.testing.assert_array_equal(model(x).numpy(), _Pool(**kw)(x).numpy())


@pytest.mark.parametrize("side, at", [(9, 4), (112, 61)], ids=["edge-block", "inner-block"])
def test_nan_and_inf_propagate_like_torch(side, at):
    """A NaN in a window gives NaN (torch's max pool keeps it), -inf stays
    -inf: in a row's first block of outputs and in one inside a wide row."""
    kw = dict(kernel_size=3, stride=2, padding=1)
    model = kiln.compile(_Pool(**kw), (torch.randn(1, 2, side, side),))
    x = torch.randn(1, 2, side, side)
    x[0, 0, at, at] = float("nan")
    x[0, 1] = float("-inf")
    want = _Pool(**kw)(x).numpy()
    got = model(x).numpy()
    assert np.isnan(want).any() and np.isneginf(want).any()
    np.testing.assert_array_equal(got, want)



# Pools folded tap by tap from the input (maxpool_planes_taps): more tap
# columns than the row path keeps bounds for, and rows wider than its buffer.
WIDE = [
    (dict(kernel_size=(2, 17), stride=2, padding=(1, 8)), (2, 3, 7, 40)),
    (dict(kernel_size=3, stride=2, padding=1), (1, 2, 5, 4100)),
]


@pytest.mark.parametrize("kw, shape", WIDE, ids=["17-columns", "4100-wide"])
def test_wide_max_pools_match_torch(kw, shape):
    x = torch.from_numpy(np.random.default_rng(0).standard_normal(shape, dtype=np.float32))
    model = kiln.compile(_Pool(**kw), (x,), keep_ir=True)
    assert MAX_POOL.symbol in model.ir["llvm"]
    np.testing.assert_array_equal(model(x).numpy(), _Pool(**kw)(x).numpy())
