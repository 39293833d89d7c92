"""kiln's native permuting copy (kiln_permute): the C entry point against
numpy, and transposes through kiln.compile at several shapes."""

import ctypes

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
from kiln.backends.cpu.library_kernels import PERMUTE
from kiln.runtime import native

pytestmark = pytest.mark.native  # fails, not skips, without the library (conftest.py)

I64 = ctypes.c_int64


def _permute():
    f = native.load().kiln_permute
    f.argtypes = [I64] * 5 + [ctypes.c_int32]
    f.restype = None
    return f


# (input shape, perm of the output dims over the input's): the last dim stays
# last; small copies (the caller alone) and ones over 128 KiB (split over the
# pool; on two threads, in halves of the input's outermost dim where that is
# not the output's first), a dim of 1, and the transformer block's stacked
# q/k/v transpose.
CASES = [
    ((3, 5), (0, 1)),
    ((4, 3, 7), (1, 0, 2)),
    ((2, 1, 3, 5), (2, 0, 1, 3)),
    ((6, 33, 3, 4, 64), (2, 0, 3, 1, 4)),
    ((7, 33, 3, 4, 64), (2, 0, 3, 1, 4)),  # on two threads in halves of the input's outer dim: 3 and 4
    ((64, 300, 9), (1, 0, 2)),
]


@pytest.mark.parametrize("shape, perm", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])  # 4-byte runs copied by a loop, others by memcpy
def test_kernel_matches_numpy(shape, perm, threads, dtype):
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(dtype)
    want = np.ascontiguousarray(x.transpose(perm))
    strides = [s // x.itemsize for s in x.strides]
    meta = np.array(list(want.shape) + [strides[p] for p in perm], dtype=np.int64)
    out = np.full_like(want, np.nan)
    _permute()(len(shape), meta.ctypes.data, x.ctypes.data, out.ctypes.data, x.itemsize, threads)
    np.testing.assert_array_equal(out, want)


class _Transpose(torch.nn.Module):
    def __init__(self, perm):
        super().__init__()
        self.perm = perm

    def forward(self, x):
        return x.permute(*self.perm) * 2.0


@pytest.mark.parametrize("perm, native_call", [((2, 0, 3, 1, 4), True), ((0, 1, 2, 4, 3), False)],
                         ids=["innermost-kept", "innermost-moved"])
def test_compiled_transposes_match_torch(perm, native_call):
    """The stacked q/k/v transpose runs as one kiln_permute call at every B and
    L; a transpose that moves the innermost dim keeps the generated copy."""
    b, s = Dim("B", min=1, max=16), Dim("L", min=1, max=512)
    model = kiln.compile(_Transpose(perm), (torch.randn(2, 8, 3, 4, 64),), dynamic_shapes=({0: b, 1: s},),
                         keep_ir=True)
    assert (PERMUTE.symbol in model.ir["llvm"]) == native_call
    for batch, length in ((1, 1), (3, 77), (16, 512)):
        x = torch.randn(batch, length, 3, 4, 64)
        np.testing.assert_array_equal(model(x).numpy(), (x.permute(*perm) * 2.0).numpy())
