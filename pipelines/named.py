"""kiln's named pipelines: ordered, named stages of graph optimization.

A named pipeline is data: a name, a summary and its stages in order, each a
pass with its options in the textual pipeline syntax.  Use one from Python,
from ``kiln-opt``, or inside a larger pipeline::

    Pipeline.named("kiln-default-cpu").run(module)
    Pipeline.named("kiln-default-cpu", without=["kiln-fuse"], stop_after="kiln-dce")
    kiln-opt --pass-pipeline='builtin.module(kiln-default-cpu)' model.mlir
    kiln-opt --kiln-default-triton model.mlir

In pipeline text the name expands to its stages, so ``str()`` of such a
pipeline lists the passes themselves.

=======================  ===================================================
``kiln-default-cpu``     shapes, Q / DQ pairs around products folded into
                         integer products, folding, simplification, CSE, DCE, fusion:
                         the CPU backend lowers every kiln op, and inlines the
                         ``kiln.fused`` groups (library GEMM + generated
                         epilogues are chosen per kernel by the registry)
``kiln-default-triton``  as for the CPU, plus ``batch_norm`` decomposed into
                         elementwise ops, so it fuses with its neighbours into
                         one generated kernel
=======================  ===================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dialects.kiln import ONE_ANCHOR_KINDS

__all__ = ["NAMED_PIPELINES", "NamedPipeline", "named_pipeline"]


@dataclass(frozen=True)
class NamedPipeline:
    """A named, ordered list of stages (pipeline element texts)."""

    name: str
    summary: str
    stages: tuple[str, ...]

    def text(self, without=()) -> str:
        """The stages as ``builtin.module(...)`` text, minus the ``without`` passes."""
        skip = set(without)
        kept = [s for s in self.stages if s.partition("{")[0] not in skip]
        return "builtin.module(" + ",".join(kept) + ")"

    @property
    def stage_names(self) -> list[str]:
        """The pass name of each stage, in order."""
        return [s.partition("{")[0] for s in self.stages]


# The graph-optimization stages both backends share, in order.  Folding runs
# before simplification so identities see folded constants (x * (2/2)); CSE
# merges what the rewrites made identical; DCE removes what they left dead
# (fallbacks included); fusion comes last, on the final graph.
_COMMON_HEAD = ("kiln-infer-shapes", "kiln-fold-constants", "kiln-simplify")
_COMMON_TAIL = ("cse", "kiln-dce", "kiln-fuse")

NAMED_PIPELINES: dict[str, NamedPipeline] = {
    p.name: p
    for p in (
        NamedPipeline(
            "kiln-default-cpu",
            "Graph optimization for the CPU backend: fold, simplify, CSE, DCE, fuse",
            # QDQ pairs around products fold into int8 GEMMs before a constant weight's dequantization folds.
            _COMMON_HEAD[:1] + ("kiln-fold-qdq",) + _COMMON_HEAD[1:] + _COMMON_TAIL,
        ),
        NamedPipeline(
            "kiln-default-triton",
            "Graph optimization for the Triton backend: as for the CPU, with batch_norm decomposed for fusion "
            "and attention left unpacked",
            _COMMON_HEAD[:-1]
            + ("kiln-simplify{disable=packed-attention}",)
            + ("kiln-decompose{gelu=false softmax=false layer-norm=false attention=false batch-norm=true}",)
            + _COMMON_TAIL[:-1]
            + (f"kiln-fuse{{kinds={','.join(ONE_ANCHOR_KINDS)}}}",),
        ),
    )
}


def named_pipeline(name: str) -> NamedPipeline | None:
    """The named pipeline called ``name``, or None."""
    return NAMED_PIPELINES.get(name)
