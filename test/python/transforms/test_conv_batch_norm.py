"""kiln-simplify's conv-batch-norm folding through kiln.compile: a ResNet-style
block (conv + BN + ReLU, conv + BN + residual + ReLU, a grouped conv + BN)
matches PyTorch at several batch sizes, and no batch_norm is left to run."""

import numpy as np
import torch
from torch.export import Dim

import kiln


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(8, eps=1e-3)
        self.c3 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=4)
        self.b3 = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(y)) + y)
        return self.b3(self.c3(y))


def _block():
    torch.manual_seed(0)
    net = _Block().eval()
    for bn in (net.b1, net.b2, net.b3):  # statistics far from the identity, so a missed fold shows
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.25, 4)
        bn.weight.data.uniform_(0.5, 2)
        bn.bias.data.uniform_(-1, 1)
    return net


def test_batch_norms_fold_into_convolutions_and_match_torch():
    net = _block()
    model = kiln.compile(net, (torch.randn(2, 3, 12, 12),), dynamic_shapes=({0: Dim("B", min=1, max=32)},))
    ops = [op for k in model.report()["kernels"] for op in k["ops"]]
    assert "kiln.batch_norm" not in ops and ops.count("kiln.conv2d") == 3
    for b in (1, 9, 32):
        x = torch.randn(b, 3, 12, 12)
        with torch.no_grad():
            ref = net(x)
        np.testing.assert_allclose(model(x).numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


def test_disabled_fold_keeps_the_batch_norms():
    net = _block()
    model = kiln.compile(net, (torch.randn(2, 3, 12, 12),), dynamic_shapes=({0: Dim("B", min=1, max=32)},),
                         optimize="builtin.module(kiln-infer-shapes,kiln-simplify{disable=conv-batch-norm})")
    ops = [op for k in model.report()["kernels"] for op in k["ops"]]
    assert ops.count("kiln.batch_norm") == 3
    x = torch.randn(4, 3, 12, 12)
    with torch.no_grad():
        np.testing.assert_allclose(model(x).numpy(), net(x).numpy(), rtol=1e-4, atol=1e-4)
