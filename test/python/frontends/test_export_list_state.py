"""Parameters and buffers that an op takes inside a list argument (issue 43).

timm's LeViT and EfficientFormer index a parameter table with a buffer of
indices (``biases[:, idxs]``, ``aten.index.Tensor(biases, [None, idxs])``);
torch-mlir's frozen import fails on them with "Heterogeneous lists are not
supported".  ``export_fixes.list_state_to_get_attr`` makes such state a
``get_attr`` the importer's list path takes.
"""

import pytest
import torch
from torch.export import Dim
from torch_mlir.extras.fx_importer import FxImporter

import kiln
from kiln._mlir import ir
from kiln.context import make_context
from kiln.frontends.export_fixes import list_state_to_get_attr, restore_non_persistent_buffers


class IndexedBias(torch.nn.Module):
    """Attention-bias style lookup: a parameter table gathered by a buffer."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(3, 5))
        self.register_buffer("idxs", torch.tensor([[0, 4, 2, 2], [1, 3, 0, 4]]), persistent=False)

    def forward(self, x):  # x: (B, 3, 2, 4)
        return x + self.table[:, self.idxs]


class StackedState(torch.nn.Module):
    """Parameters and a constant directly in a tensor-list op (stack / cat)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(4))
        self.b = torch.nn.Parameter(torch.randn(4))
        self.register_buffer("c", torch.randn(4))

    def forward(self, x):  # x: (B, 8)
        return x * torch.cat([self.a, self.c]) + torch.stack([self.a, self.b]).sum(0).repeat(2)


CASES = {
    "index": (IndexedBias, (3, 2, 4)),
    "stack": (StackedState, (8,)),
}


def _export(case):
    torch.manual_seed(0)
    cls, tail = CASES[case]
    model = cls().eval()
    shapes = ({0: Dim("B", min=1, max=9)},)
    return model, torch.export.export(model, (torch.randn(2, *tail),), dynamic_shapes=shapes), tail, shapes


def _import(ep):
    ctx = make_context(torch=True)
    with ctx, ir.Location.unknown():
        importer = FxImporter(context=ctx)
        importer.import_frozen_program(ep, func_name="main")
        return str(importer.module)


@pytest.mark.parametrize("case", sorted(CASES))
def test_torch_mlir_needs_the_fix(case):
    _, ep, _, _ = _export(case)
    restore_non_persistent_buffers(ep)  # the other fix the index case needs
    with pytest.raises(AssertionError, match="Heterogeneous lists are not supported"):
        _import(ep)


@pytest.mark.parametrize("case", sorted(CASES))
def test_list_state_becomes_get_attr(case):
    _, ep, _, _ = _export(case)
    ep = ep.run_decompositions({})
    restore_non_persistent_buffers(ep)
    names = list_state_to_get_attr(ep)
    assert names, "no state inside a list argument"
    for node in ep.graph.nodes:
        for arg in node.args:
            if isinstance(arg, (list, tuple)):
                assert not any(isinstance(a, torch.fx.Node) and a.op == "placeholder" for a in arg), node
    assert "torch.vtensor.literal" in _import(ep)


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles_and_matches_eager(case):
    model, _, tail, shapes = _export(case)
    compiled = kiln.compile(model, (torch.randn(2, *tail),), dynamic_shapes=shapes)
    assert compiled.report()["fallback"]["ops"] == 0
    for b in (1, 5, 9):
        x = torch.randn(b, *tail)
        want = model(x).detach()
        got = torch.as_tensor(compiled(x))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
