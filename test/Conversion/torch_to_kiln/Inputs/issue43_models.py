"""Factories for the issue-43 ``kiln-import`` lit tests (and their pytest
numerics): common dynamic-shape code that used to fail to import.

Each factory returns ``(module, example_args, dynamic_shapes)``.
"""

import torch
from torch.export import Dim


def _batch_len():
    return Dim("B", min=1, max=8), Dim("L", min=6, max=64)


class Slice(torch.nn.Module):
    """``x[:, 1:]``, ``x[:, :-1]`` and ``x[:, -1:]``: negative constants in the dims."""

    def forward(self, x):
        return x[:, 1:] * 2.0, x[:, :-1] + 1.0, x[:, -1:] - 1.0, x[:, 1:] - x[:, :-1]


class Strided(torch.nn.Module):
    """``x[:, ::2]`` and ``x[:, 1::3]``: floor divisions in the dims."""

    def forward(self, x):
        return x[:, ::2] * 2.0, x[:, 1::3] + 1.0


class StridedConv(torch.nn.Module):
    """A stride-2 unpadded convolution over symbolic H and W."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, stride=2)

    def forward(self, x):
        return self.conv(x)


class Derived(torch.nn.Module):
    """Inputs sized by derived Dims ``2*L`` and ``L+1``."""

    def forward(self, x, y, z):
        return torch.cat([x, x], 1) + y, z[:, 1:] * x


def slices():
    b, seq = _batch_len()
    return Slice(), (torch.randn(2, 8),), ({0: b, 1: seq},)


def strided():
    b, seq = _batch_len()
    return Strided(), (torch.randn(2, 8),), ({0: b, 1: seq},)


def strided_conv():
    b = Dim("B", min=1, max=4)
    h, w = Dim("H", min=5, max=32), Dim("W", min=6, max=33)
    return StridedConv(), (torch.randn(2, 3, 9, 10),), ({0: b, 2: h, 3: w},)


def derived():
    b, seq = _batch_len()
    args = (torch.randn(2, 8), torch.randn(2, 16), torch.randn(2, 9))
    return Derived(), args, ({0: b, 1: seq}, {0: b, 1: 2 * seq}, {0: b, 1: seq + 1})


def derived_only():
    """The root ``L`` appears in no input by itself, only as ``L+1``."""
    seq = Dim("L", min=6, max=64)
    return Slice(), (torch.randn(2, 9),), ({1: seq + 1},)
