"""Input-independent subgraphs are folded before import (issue 43).

torchvision's Swin builds its shifted-window mask from constants by slice
assignment (``aten.slice_scatter`` / ``aten.copy`` after functionalization,
with the assigned number a lifted tensor constant) and rolls windows through
``fmod(arange(n) + shift, n)``; each of those ran as a PyTorch fallback on
every call.  ``constant_fold.fold_constant_subgraphs`` evaluates them once.
"""

import torch
from torch.export import Dim

import kiln
from kiln.frontends.constant_fold import fold_constant_subgraphs
from kiln.frontends.export_fixes import decomposition_table


class WindowMask(torch.nn.Module):
    """Swin's mask recipe, a roll and a parameter use, on a ``[B, 6, 6]`` input."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(6))

    def forward(self, x):
        mask = x.new_zeros((6, 6))
        count = 0
        for h in (slice(0, -3), slice(-3, -1), slice(-1, None)):
            for w in (slice(0, -2), slice(-2, None)):
                mask[h, w] = count
                count += 1
        mask = (mask.unsqueeze(0) - mask.unsqueeze(1)).reshape(36, 6)[:6]
        mask = mask.masked_fill(mask != 0, -100.0)
        return torch.roll(x, shifts=(-1, 2), dims=(1, 2)) * self.scale + mask


def _program():
    ep = torch.export.export(WindowMask(), (torch.randn(2, 6, 6),), dynamic_shapes=({0: Dim("B", min=1, max=9)},))
    return ep.run_decompositions(decomposition_table())


def test_fold_replaces_only_the_frontier():
    ep = _program()
    before = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.slice_scatter.default in before
    assert fold_constant_subgraphs(ep) >= 2  # the mask and the roll's index
    after = [n for n in ep.graph.nodes if n.op == "call_function"]
    names = {str(n.target) for n in after}
    assert not any(k in name for name in names for k in ("slice_scatter", "fmod", "copy", "masked_fill")), names
    # The parameter is not folded into: it is still read from its placeholder.
    scale = next(n for n in ep.graph.nodes if n.op == "placeholder" and "scale" in n.name)
    assert scale.users
    # Each use of a folded value has its own get_attr (the importer binds each once).
    getters = [n for n in ep.graph.nodes if n.op == "get_attr"]
    assert all(len(g.users) == 1 for g in getters)


def test_fold_keeps_what_kiln_converts():
    """With kiln's predicate only subgraphs holding an op kiln rejects fold:
    a causal mask from ``arange`` (converted, and matched as causal later)
    keeps its ops."""
    from kiln.frontends.torch_import import _converts

    class CausalAndWindow(WindowMask):
        def forward(self, x):
            pos = torch.arange(6)
            causal = (pos[None, :] > pos[:, None]).float() * -100.0
            return super().forward(x) + causal

    ep = torch.export.export(CausalAndWindow(), (torch.randn(2, 6, 6),),
                             dynamic_shapes=({0: Dim("B", min=1, max=9)},)).run_decompositions(decomposition_table())
    assert fold_constant_subgraphs(ep, _converts) >= 2
    names = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert "aten.gt.Tensor" in names and any(n.startswith("aten.arange.") for n in names), names
    assert not any(k in name for name in names for k in ("slice_scatter", "fmod")), names


def test_folded_model_matches_eager_without_fallbacks():
    model = WindowMask().eval()
    compiled = kiln.compile(model, (torch.randn(2, 6, 6),), dynamic_shapes=({0: Dim("B", min=1, max=9)},))
    assert compiled.report()["fallback"]["ops"] == 0
    for b in (1, 5, 9):
        x = torch.randn(b, 6, 6)
        torch.testing.assert_close(torch.as_tensor(compiled(x)), model(x), rtol=1e-5, atol=1e-5)
