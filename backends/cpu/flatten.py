"""``kiln-cpu-flatten-elementwise``: trailing loops over contiguous buffers as one loop.

A ``linalg.generic`` whose last loops ``d_j .. d_{n-1}`` are parallel and
that every operand either reads as its own last dims, in order, from a
contiguous buffer, or does not read at all (a broadcast: a per-channel bias,
a rank-0 scalar), computes the same with those loops merged into one: here
those operands become views with their last dims collapsed
(``memref.collapse_shape``, no copy), the others keep their maps, and the
generic has one loop fewer per merged dim.  ``convert-linalg-to-loops`` then
emits a long innermost loop that LLVM vectorizes, instead of one whose trip
count is a tensor's last dim: a residual add + ReLU over ``[B, 512, 28, 28]``
ran 8.5x slower than over ``[B, 512, 784]`` (0.65 against 0.08 ms at B = 1,
AMD EPYC: a 16-lane loop of 28 iterations is one vector step, a scalar
remainder of 12 and runtime alias checks, 14336 times).  CNN activations
(``[N, C, H, W]``, H and W from 7 to 112) are where it shows: the epilogues
kiln's native calls do not take (a bf16 convolution's, MobileNetV2's ReLU6)
and bias broadcasts.  A body that reads its loop indices (``linalg.index``)
is left alone.

It runs after the library stages (whose calls take 4-D epilogue steps as
they lie) and before ``kiln-cpu-to-llvm``.
"""

from __future__ import annotations

from ..._mlir import ir
from ...conversions.kiln_to_linalg.library_call import LIBRARY_CALL
from ...pipelines.registry import Pass, register_pass
from .buffers import indexing_maps
from .library import _dims, _is_contiguous

__all__ = ["CpuFlattenElementwise", "flatten_elementwise"]


def _merge_from(op) -> int | None:
    """The first loop ``j`` of the longest run of trailing loops (at least two)
    that ``op`` may merge, or None (see the module docstring)."""
    if op.name != "linalg.generic" or len(op.results) or LIBRARY_CALL in op.attributes:
        return None
    try:
        types = [ir.MemRefType(v.type) for v in op.operands]
    except (ValueError, TypeError):  # a scalar operand, a tensor
        return None
    maps = indexing_maps(op)
    loops = maps[0].n_dims if maps else 0
    dims = [_dims(m) for m in maps]
    if loops < 2 or any(d is None for d in dims):
        return None
    if any(o.operation.name == "linalg.index" for o in op.regions[0].blocks[0].operations):
        return None
    iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    for j in range(loops - 1):  # the longest run first
        tail = list(range(j, loops))
        if any("parallel" not in iters[i] for i in tail):
            continue
        ok = bool(dims[-1]) and dims[-1][-len(tail):] == tail  # the output reads them all
        for t, d in zip(types, dims, strict=True):
            used = [i for i in d if i >= j]
            if not used:
                continue  # broadcast along the merged loops
            if used != tail or d[-len(tail):] != tail or not _is_contiguous(t):
                ok = False
                break
        if ok:
            return j
    return None


def flatten_elementwise(module) -> int:
    """Merge the trailing loops of every generic of ``module`` (bufferized)
    that allows it (:func:`_merge_from`); the number of generics changed."""
    found = []

    def visit(op):
        if op.name == "linalg.generic":
            j = _merge_from(op)
            if j is not None:
                found.append((op, j))
        return ir.WalkResult.ADVANCE

    module = module.operation if hasattr(module, "operation") else module
    module.walk(visit)
    i64 = ir.IntegerType.get_signless(64)
    for op, j in found:
        maps = indexing_maps(op)
        loops = maps[0].n_dims
        new_maps = []
        with ir.InsertionPoint(op), op.location:
            for i, (v, m) in enumerate(zip(list(op.operands), maps, strict=True)):
                d = _dims(m)
                if not any(x >= j for x in d):  # a broadcast along the merged loops: the same dims
                    new_maps.append(ir.AffineMap.get(j + 1, 0, [ir.AffineDimExpr.get(x) for x in d]))
                    continue
                t = ir.MemRefType(v.type)
                keep = t.rank - (loops - j)  # the operand's dims before the merged ones
                groups = [[x] for x in range(keep)] + [list(range(keep, t.rank))]
                merged = t.shape[keep:]
                size = ir.ShapedType.get_dynamic_size()
                if not any(ir.ShapedType.is_dynamic_size(x) for x in merged):
                    size = 1
                    for x in merged:
                        size *= x
                flat = ir.MemRefType.get(list(t.shape[:keep]) + [size], t.element_type)
                reassociation = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, x) for x in g])
                                                  for g in groups])
                view = ir.Operation.create("memref.collapse_shape", results=[flat], operands=[v],
                                           attributes={"reassociation": reassociation})
                op.operands[i] = view.result
                new_maps.append(ir.AffineMap.get(j + 1, 0, [ir.AffineDimExpr.get(x) for x in d[:keep]]
                                                 + [ir.AffineDimExpr.get(j)]))
        iters = list(ir.ArrayAttr(op.attributes["iterator_types"]))
        op.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps])
        op.attributes["iterator_types"] = ir.ArrayAttr.get(iters[:j + 1])
    return len(found)


@register_pass
class CpuFlattenElementwise(Pass):
    """Trailing parallel loops over contiguous buffers merged into one (rank-reduced views)."""

    name = "kiln-cpu-flatten-elementwise"
    summary = ("Merge a linalg.generic's trailing parallel loops that every operand reads as its own contiguous "
               "last dims or not at all into one loop over collapsed views (memref.collapse_shape), so LLVM "
               "vectorizes a long innermost loop")

    def run(self, module) -> None:
        n = flatten_elementwise(module)
        if n:
            self.bump("elementwise generics flattened", n)
