"""``kiln-dce``: remove kiln ops whose results never reach a function's outputs.

kiln ops have value semantics (the elementwise, data and nn ops are marked
``Pure``; ``kiln.fallback`` ops run a functional PyTorch op), so an op none of
whose results is used can go, and removing it may make its producers dead in
turn.  One backward sweep over each block finds the whole dead cone.  Inside a
``kiln.fused`` body the ``kiln.yield`` keeps values alive; a ``kiln.fused``
whose results are all unused goes as a whole (counted with its body ops).
``kiln.symbol`` declarations and non-kiln ops are kept.

Upstream ``canonicalize`` and ``cse`` also work on kiln IR (the ops declare
their purity); ``kiln-dce`` differs in also removing dead ``kiln.fallback``
ops and in reporting what it removed.

Statistic: ``ops removed``.
"""

from __future__ import annotations

from ..dialects.kiln import KilnOp
from ..pipelines.registry import Pass, register_pass
from ._graph import block_ops, functions

__all__ = ["DeadCodeElimination", "remove_dead_ops"]

# kiln ops DCE never removes: declarations and terminators.
_KEEP = {"kiln.symbol", "kiln.yield"}


def _removable(op) -> bool:
    if op.name in _KEEP or not op.results:
        return False
    return isinstance(op.opview, KilnOp)


def remove_dead_ops(block) -> int:
    """Erase the dead kiln ops of ``block`` (and of fused bodies in it); returns how many."""
    removed = 0
    for op in reversed(block_ops(block)):
        if _removable(op) and all(not list(r.uses) for r in op.results):
            removed += 1 + (_count_body(op) if op.name == "kiln.fused" else 0)
            op.erase()
        elif op.name == "kiln.fused":
            removed += remove_dead_ops(op.regions[0].blocks[0])
    return removed


def _count_body(op) -> int:
    return len(block_ops(op.regions[0].blocks[0])) - 1  # minus the yield


@register_pass
class DeadCodeElimination(Pass):
    """Remove kiln ops whose results are unused, transitively."""

    name = "kiln-dce"
    summary = "Remove kiln ops whose results never reach a function's outputs"

    def run(self, module) -> None:
        for fn in functions(module):
            for block in fn.regions[0].blocks:
                n = remove_dead_ops(block)
                if n:
                    self.bump("ops removed", n)
