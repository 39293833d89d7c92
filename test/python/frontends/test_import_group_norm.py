"""GroupNorm imports as kiln ops, not a fallback (issue 43).

``aten.native_group_norm`` (a core ATen op with three results) fell back in
MobileViTv2 and PoolFormer; ``export_fixes`` decomposes it into reshapes and
reductions (torch's own decomposition ends in an ``as_strided`` of symbolic
size that torch-mlir rejects).
"""

import pytest
import torch
from torch.export import Dim

import kiln
from kiln.frontends.export_fixes import KILN_DECOMPOSITIONS


class Net(torch.nn.Module):
    """A convolution, then GroupNorm (``groups`` of 8 channels), then ReLU."""

    def __init__(self, groups, affine):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.norm = torch.nn.GroupNorm(groups, 8, affine=affine)
        if affine:  # not the identity init
            torch.nn.init.normal_(self.norm.weight)
            torch.nn.init.normal_(self.norm.bias)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))


@pytest.mark.parametrize("groups,affine", [(2, True), (1, True), (8, False)])
def test_group_norm_compiles_without_fallback(groups, affine):
    torch.manual_seed(0)
    model = Net(groups, affine).eval()
    h = Dim("H", min=2, max=12)
    compiled = kiln.compile(model, (torch.randn(2, 4, 5, 5),), ({0: Dim("B", min=1, max=6), 2: h, 3: h},))
    assert compiled.report()["fallback"]["ops"] == 0
    for b, s in ((1, 2), (3, 7), (6, 12)):
        x = torch.randn(b, 4, s, s) * 3 + 1
        with torch.no_grad():
            want = model(x)
        torch.testing.assert_close(torch.as_tensor(compiled(x)), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(3, 6, 5, 4), (2, 6, 7), (1, 6)])
def test_decomposition_matches_all_three_results(shape):
    torch.manual_seed(0)
    x = torch.randn(shape) * 2 + 0.5
    w, b = torch.randn(6), torch.randn(6)
    hxw = x[0, 0].numel()
    op = torch.ops.aten.native_group_norm.default
    for weight, bias in ((w, b), (None, None)):
        want = op(x, weight, bias, shape[0], 6, hxw, 3, 1e-5)
        got = KILN_DECOMPOSITIONS[op](x, weight, bias, shape[0], 6, hxw, 3, 1e-5)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
