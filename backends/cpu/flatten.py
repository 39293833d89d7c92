"""``kiln-cpu-flatten-elementwise``: elementwise loops over contiguous buffers as one loop.

An elementwise ``linalg.generic`` (every loop parallel, every operand read
and written at the identity map, no ``linalg.index``) over contiguous
memrefs of one shape computes the same whatever the loop nest: here its
operands become rank-1 views (``memref.collapse_shape``, no copy) and the
generic one loop.  ``convert-linalg-to-loops`` then emits one long loop that
LLVM vectorizes, instead of a nest whose innermost trip count is a tensor's
last dim: a ReLU / residual add over ``[B, 512, 28, 28]`` ran 8.5x slower
than over ``[B, 512, 784]`` (0.65 against 0.08 ms at B = 1, AMD EPYC: a
16-lane loop of 28 iterations is one vector step, a 12-iteration scalar
remainder and runtime alias checks, 14336 times).  CNN activations
(``[N, C, H, W]`` with H, W of 7 to 112) are where it shows: the epilogues
kiln's native calls do not take (a bf16 convolution's, MobileNetV2's ReLU6).

It runs after the library stages (whose calls take 4-D epilogue steps as
they lie) and before ``kiln-cpu-to-llvm``.
"""

from __future__ import annotations

from ..._mlir import ir
from ...conversions.kiln_to_linalg.library_call import LIBRARY_CALL
from ...pipelines.registry import Pass, register_pass
from .buffers import indexing_maps
from .library import _is_contiguous

__all__ = ["CpuFlattenElementwise", "flatten_elementwise"]

_PARALLEL = "#linalg.iterator_type<parallel>"


def _flattenable(op) -> bool:
    """Whether the ``linalg.generic`` ``op`` (on memrefs) is elementwise over
    contiguous buffers of one shape (rank-0 operands read at every point aside)."""
    if op.name != "linalg.generic" or len(op.results) or LIBRARY_CALL in op.attributes:
        return False
    try:
        types = [ir.MemRefType(v.type) for v in op.operands]
    except (ValueError, TypeError):  # a scalar operand, a tensor
        return False
    out = types[-1]
    rank = out.rank
    if rank < 2 or any("parallel" not in str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])):
        return False
    identity, scalar = ir.AffineMap.get_identity(rank), ir.AffineMap.get(rank, 0, [])
    for t, m in zip(types, indexing_maps(op), strict=True):
        if t.rank == 0 and m == scalar:
            continue
        if m != identity or t.shape != out.shape or not _is_contiguous(t):
            return False
    body = op.regions[0].blocks[0]
    return all(o.operation.name != "linalg.index" for o in body.operations)


def flatten_elementwise(module) -> int:
    """Make every elementwise generic of ``module`` (bufferized) over contiguous
    buffers of one shape a one-loop generic over their rank-1 views; the count."""
    found = []

    def visit(op):
        if op.name == "linalg.generic" and _flattenable(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module = module.operation if hasattr(module, "operation") else module
    module.walk(visit)
    if not found:
        return 0
    i64 = ir.IntegerType.get_signless(64)
    one_loop = ir.AffineMapAttr.get(ir.AffineMap.get_identity(1))
    at_every_point = ir.AffineMapAttr.get(ir.AffineMap.get(1, 0, []))
    for op in found:
        rank = ir.MemRefType(op.operands[-1].type).rank
        whole = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in range(rank)])])
        maps = []
        with ir.InsertionPoint(op), op.location:
            for i, v in enumerate(list(op.operands)):
                t = ir.MemRefType(v.type)
                if t.rank == 0:
                    maps.append(at_every_point)
                    continue
                maps.append(one_loop)
                size = ir.ShapedType.get_dynamic_size()
                if not any(ir.ShapedType.is_dynamic_size(d) for d in t.shape):
                    size = 1
                    for d in t.shape:
                        size *= d
                flat = ir.MemRefType.get([size], t.element_type)
                view = ir.Operation.create("memref.collapse_shape", results=[flat], operands=[v],
                                           attributes={"reassociation": whole})
                op.operands[i] = view.result
        op.attributes["indexing_maps"] = ir.ArrayAttr.get(maps)
        op.attributes["iterator_types"] = ir.ArrayAttr.get([ir.Attribute.parse(_PARALLEL)])
    return len(found)


@register_pass
class CpuFlattenElementwise(Pass):
    """Elementwise generics over contiguous buffers of one shape as one loop over rank-1 views."""

    name = "kiln-cpu-flatten-elementwise"
    summary = ("Make elementwise linalg.generic ops on contiguous memrefs of one shape one-loop generics "
               "over rank-1 views (memref.collapse_shape), so LLVM vectorizes one long loop")

    def run(self, module) -> None:
        n = flatten_elementwise(module)
        if n:
            self.bump("elementwise generics flattened", n)
