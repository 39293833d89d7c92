"""Issue 43: ops that used to run as PyTorch fallbacks in position ids, ALiBi,
relative position buckets and Whisper's front end now compile with kiln
lowerings: ``cumsum`` (a scan), ``full`` / ``full_like`` over symbolic shapes,
``repeat`` (tile), ``index.Tensor`` (gather) and 1-D convolution (conv2d over
a unit height).  Each model is compiled once and compared with eager at the
min, middle and max of every symbol, with no fallback."""

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln

B = Dim("B", min=1, max=8)
L = Dim("L", min=2, max=16)


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class Fn2(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, i):
        return self.fn(x, i)


def _compile(module, example, dynamic):
    compiled = kiln.compile(module, example, dynamic)
    rep = compiled.report()
    assert rep["fallback"]["ops"] == 0, rep["fallback"]["op_names"]
    return compiled


def _check(module, compiled, args):
    with torch.no_grad():
        want = module(*args)
    got = compiled(*args)
    got = got.numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    want = want.numpy()
    assert got.shape == want.shape
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


SHAPES_BL = [(1, 2), (4, 9), (8, 16)]


@pytest.mark.parametrize("axis", [1, 0, -1])
def test_cumsum_f32(axis):
    m = Fn(lambda x: torch.cumsum(x, axis) * 0.5)
    c = _compile(m, (torch.randn(2, 5, 3),), ({0: B, 1: L},))
    for b, n in SHAPES_BL:
        _check(m, c, (torch.randn(b, n, 3),))


def test_cumsum_int64_position_ids():
    """RoBERTa / OPT position ids: ``cumsum(mask) * mask + pad``, on int64."""
    m = Fn(lambda mask: (torch.cumsum(mask, dim=1).type_as(mask) * mask) + 1)
    c = _compile(m, (torch.ones(2, 5, dtype=torch.long),), ({0: B, 1: L},))
    for b, n in SHAPES_BL:
        mask = torch.randint(0, 2, (b, n), dtype=torch.long)
        _check(m, c, (mask,))


def test_cumsum_of_bool_counts_in_int64():
    m = Fn(lambda x: torch.cumsum(x > 0, dim=-1))
    c = _compile(m, (torch.randn(2, 5),), ({0: B, 1: L},))
    for b, n in SHAPES_BL:
        _check(m, c, (torch.randn(b, n),))


def test_full_like_and_full_of_symbolic_shape():
    def fn(x):
        b, n = x.shape[0], x.shape[1]
        return x * torch.full_like(x, 2.5) + torch.full((b, n, 3), -1.0) + torch.zeros_like(x) + torch.ones_like(x)

    m = Fn(fn)
    c = _compile(m, (torch.randn(2, 5, 3),), ({0: B, 1: L},))
    for b, n in SHAPES_BL:
        _check(m, c, (torch.randn(b, n, 3),))


def test_full_like_int_mask():
    m = Fn(lambda x: torch.full_like(x, 7, dtype=torch.long) + x.long())
    c = _compile(m, (torch.ones(2, 5),), ({0: B, 1: L},))
    for b, n in SHAPES_BL:
        _check(m, c, (torch.ones(b, n),))


@pytest.mark.parametrize("reps", [(1, 2, 3), (2, 1, 1), (3, 1, 2, 1)])
def test_repeat(reps):
    m = Fn(lambda x: x.repeat(*reps) + 1.0)
    c = _compile(m, (torch.randn(2, 5, 3),), ({0: B, 1: L},))
    for b, n in SHAPES_BL:
        _check(m, c, (torch.randn(b, n, 3),))


def test_index_one_tensor_leading():
    """``table[idx]`` with a symbolic number of (some negative) indices."""
    table = torch.randn(10, 4)
    m = Fn(lambda i: table[i] * 2.0)
    c = _compile(m, (torch.tensor([[0, 3], [1, 2]]),), ({0: B, 1: L},))
    for b, n in SHAPES_BL:
        _check(m, c, (torch.randint(-10, 10, (b, n)),))


def test_index_one_tensor_middle_axis():
    """``x[:, idx]`` on a symbolic batch, a symbolic number of (some negative) indices."""
    m = Fn2(lambda x, i: x[:, i] + 0.0)
    c = _compile(m, (torch.randn(2, 5, 3), torch.tensor([3, 0, -1, 2])), ({0: B}, {0: L}))
    for b, n in SHAPES_BL:
        _check(m, c, (torch.randn(b, 5, 3), torch.randint(-5, 5, (n,))))


def test_index_two_tensors_broadcast_relative_positions():
    """T5 / ALiBi style: ``bias[ctx[:, None], mem[None, :]]`` with broadcasting
    index tensors built from ``arange(L)``."""
    bias = torch.randn(16, 16, 4)

    def fn(x):
        n = x.shape[1]
        pos = torch.arange(n)
        return bias[pos[:, None], pos[None, :] - 1] + x.sum()

    m = Fn(fn)
    c = _compile(m, (torch.randn(2, 5),), ({0: B, 1: L},))
    for b, n in SHAPES_BL:
        _check(m, c, (torch.randn(b, n),))


def test_index_two_tensors_over_symbolic_axes():
    """transformers' padding mask: ``mask[batch_idx, kv_idx]`` where both axes
    are symbolic (B, L), so no constant stride linearizes them."""

    def fn(mask):
        b, n = mask.shape
        batch_idx = torch.arange(b)[:, None, None, None]
        kv_idx = torch.arange(n)[None, None, None, :]
        return mask[batch_idx, kv_idx] * 2

    m = Fn(fn)
    c = _compile(m, (torch.ones(2, 5, dtype=torch.long),), ({0: B, 1: L},))
    for b, n in SHAPES_BL:
        _check(m, c, (torch.randint(0, 2, (b, n)),))


def test_index_symbolic_axes_after_a_leading_axis():
    """``x[:, i, j]`` with symbolic indexed axes and a sliced one in front."""
    m = Fn2(lambda x, i: x[:, i[:, None], i[None, :] - 1] + 1.0)
    c = _compile(m, (torch.randn(3, 5, 5), torch.tensor([0, 2])),
                 ({1: L, 2: L}, {0: Dim("K", min=1, max=4)}))
    for n, k in [(2, 1), (9, 2), (16, 4)]:
        _check(m, c, (torch.randn(3, n, n), torch.randint(0, n, (k,))))


def test_index_non_adjacent_tensors_go_first():
    table = torch.randn(5, 3, 6)
    m = Fn2(lambda x, i: table[i, :, i + 1] + x)
    i0 = torch.tensor([0, 4, 2])
    c = _compile(m, (torch.randn(3, 3), i0), ({0: B}, {0: B}))
    for b in (1, 4, 8):
        _check(m, c, (torch.randn(b, 3), torch.randint(0, 5, (b,))))


@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 1, 1, 1), (2, 0, 1, 1), (1, 2, 2, 3)])
def test_conv1d(stride, padding, dilation, groups):
    """Whisper's front end: 1-D convolutions over a symbolic batch (and a
    symbolic length at stride 1)."""
    conv = torch.nn.Conv1d(6, 9, 3, stride=stride, padding=padding, dilation=dilation, groups=groups)
    m = torch.nn.Sequential(conv, torch.nn.GELU()).eval()
    dyn = {0: B, 2: Dim("T", min=8, max=32)} if stride == 1 else {0: B}
    c = _compile(m, (torch.randn(2, 6, 16),), (dyn,))
    shapes = [(1, 8), (4, 19), (8, 32)] if stride == 1 else [(1, 16), (4, 16), (8, 16)]
    for b, t in shapes:
        _check(m, c, (torch.randn(b, 6, t),))
