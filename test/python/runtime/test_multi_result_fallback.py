"""Fallback ops with several results (issue 43): ``sort``, ``topk`` and
``kthvalue`` run in PyTorch when fallback is allowed, with all or
only some of their results used.  kiln-partition gives a fallback step
outputs only for the used results; the kernel used to insist on all of them
("fallback kernel ... takes 3 inputs and 3 outputs, got 3 and 1") and failed
at the first call.  Each model is compiled once and compared with eager at
the min, middle and max of its symbol."""

import numpy as np
import pytest
import torch
from torch.export import Dim

import kiln
from kiln.backends.fallback import FallbackKernel

B = Dim("B", min=1, max=8)
BATCHES = (1, 4, 8)


class SortValues(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=-1).values * 2.0


class TopkBoth(torch.nn.Module):
    def forward(self, x):
        v, i = torch.topk(x, k=3, dim=-1)
        return v + 1.0, i


class TopkIndicesOnly(torch.nn.Module):
    def forward(self, x):
        return torch.topk(x, k=3, dim=-1).indices + 1


class KthValues(torch.nn.Module):
    """The values of ``kthvalue`` only, after a linear layer (MobileViTv2's
    GroupNorm had this shape of use, native_group_norm's mean and rstd
    unused, until the frontend decomposed it)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(7, 7)

    def forward(self, x):
        return torch.relu(torch.kthvalue(self.linear(x), 3, dim=-1).values)


def _outputs(y):
    return [t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t) for t in (y if isinstance(y, (tuple, list)) else [y])]


def _check(module, compiled, x):
    with torch.no_grad():
        want = _outputs(module(x))
    got = _outputs(compiled(x))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        if w.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


CASES = {
    "sort_values": (SortValues, (7,), "aten.sort"),
    "topk_both": (TopkBoth, (7,), "aten.topk"),
    "topk_indices_only": (TopkIndicesOnly, (7,), "aten.topk"),
    "kthvalue_values": (KthValues, (7,), "aten.kthvalue"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_multi_result_fallback_matches_eager(case):
    cls, tail, op = CASES[case]
    torch.manual_seed(0)
    module = cls().eval()
    compiled = kiln.compile(module, (torch.randn(2, *tail),), ({0: B},))
    fallback = compiled.report()["fallback"]
    assert fallback["ops"] == 1 and fallback["op_names"] == [op], fallback
    for b in BATCHES:
        # Distinct values: sort/topk order is then unique, indices comparable.
        x = torch.randn(b, *tail)
        _check(module, compiled, x)


def test_only_used_results_reach_the_kernel_and_survive_an_artifact(tmp_path):
    """The kernel of ``topk(...).indices`` writes result #1 alone, and an
    artifact keeps that choice."""
    module = TopkIndicesOnly().eval()
    compiled = kiln.compile(module, (torch.randn(2, 7),), ({0: B},))
    kernels = list(compiled.runtime.prepared.fallback.values())
    assert len(kernels) == 1 and kernels[0].results == [1] and kernels[0].num_results == 2
    path = tmp_path / "topk.kiln"
    kiln.save(compiled, path)
    loaded = kiln.load(path)
    for b in BATCHES:
        x = torch.randn(b, 7)
        _check(module, loaded, x)


def test_results_round_trip_through_json():
    from kiln.dialects.dims import dim
    from kiln.dialects.kiln import TensorInfo

    idx = TensorInfo((dim("B"), dim(3)), "i64")
    k = FallbackKernel("k", "aten.topk.default", [TensorInfo((dim("B"), dim(7)), "f32")], [idx],
                       [("tensor", 0), ("value", 3), ("value", -1)], {}, results=[1], num_results=2)
    back = FallbackKernel.from_json(k.to_json(), lambda dims, dtype: TensorInfo(tuple(dim(d) for d in dims), dtype))
    assert back.results == [1] and back.num_results == 2
    x = torch.randn(4, 7)
    out = torch.empty(4, 3, dtype=torch.long)
    back([x], [out], {"B": 4})
    assert torch.equal(out, torch.topk(x, 3, -1).indices)


def test_results_that_do_not_fit_are_an_error():
    from kiln.dialects.dims import dim
    from kiln.dialects.kiln import TensorInfo
    from kiln.errors import KilnError

    t = TensorInfo((dim(4),), "f32")
    with pytest.raises(KilnError, match=r"fallback kernel 'k' \(aten.sort.default\): results \[2\] do not fit 1 outputs of an op with 2 results"):
        FallbackKernel("k", "aten.sort.default", [t], [t], results=[2], num_results=2)
