"""A matrix product's bias add, activation and residual add, applied natively.

After bufferization a ``Linear`` + GELU kernel is the product's generic, then
two in-place passes over its output: ``C += bias`` (the bias broadcast along
the rows) and ``C = gelu(C)``; a transformer's projection before a residual
connection has ``C += bias`` and ``C = R + C``.  They ran on the calling
thread alone, so a product the native pool computed on two threads waited
for one thread to add and activate: the bench MLP at B=64 spent about 0.1
ms in GELU after a 2.5 ms product.  kiln-select-kernels decides on kiln IR
which of them the native GEMM's call applies (:func:`.epilogues.gemm_steps`)
and their lowering stamps their generics with the role
(``kiln.call_part``, :func:`.epilogues.role_of`); :func:`epilogue_of` reads
those right after the product, and ``kiln-cpu-library`` replaces them: the
native small GEMM applies them to each tile in its registers
(``kiln_sgemm_small_epi``), the other paths (sgemv, OpenBLAS) are followed by
``kiln_bias_act`` (``kiln_dispatch.c``: one pass, rows over the pool).

What is checked here is only what the call needs of the buffers: that each
step rewrites the product's output in place, the bias a dense ``[N]``
indexed by the last dim, the residual dense and of the output's type.
Nothing is recognised by its body.
"""

from __future__ import annotations

from ..._mlir import ir
from .buffers import indexing_maps, op_of
from .epilogues import ACTIVATIONS, role_of
from .library import contiguous_f32

__all__ = ["Epilogue", "epilogue_of"]


class Epilogue:
    """What follows a product, applied in this order: ``bias`` (a 1-D f32
    memref, or None), ``act`` (a key of :data:`ACTIVATIONS`), ``residual``
    (an f32 memref of the output's type added last, or None), and the
    generics the calls replace."""

    def __init__(self, bias, act: str | None, ops: list, residual=None):
        self.bias, self.act, self.ops, self.residual = bias, act, ops, residual

    @property
    def code(self) -> int:
        """The activation's code for the native calls (0: none)."""
        return ACTIVATIONS.get(self.act, 0)


def _parallel(op, rank: int) -> bool:
    kinds = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    return len(kinds) == rank and all("parallel" in k for k in kinds)


def _add_to(op, c, rank: int):
    """``(other, maps)`` when ``op`` (an add step) reads ``c`` and ``other``
    and writes ``c`` (a parallel generic over ``rank`` dims, ``other`` not
    ``c``), the maps ordered ``(c's, other's, the output's)``; else None."""
    if op.name != "linalg.generic" or len(op.operands) != 3 or op.operands[2] != c or not _parallel(op, rank):
        return None
    ins = list(op.operands)[:2]
    if c not in ins or ins[0] == ins[1]:
        return None
    at = ins.index(c)
    maps = indexing_maps(op)
    return ins[1 - at], (maps[at], maps[1 - at], maps[2])


def _bias_add(op, c, rank: int, n: int):
    """The bias when ``op`` is a bias step ``c = c + bias`` (either order),
    ``bias`` a static f32 ``[n]`` indexed by the last of ``rank`` dims; else None."""
    found = _add_to(op, c, rank) if role_of(op) == "bias" else None
    if found is None:
        return None
    bias, (c_map, bias_map, out_map) = found
    if not contiguous_f32(bias, 1) or ir.MemRefType(bias.type).shape != [n]:
        return None
    identity = ir.AffineMap.get_identity(rank)
    if c_map != identity or out_map != identity or bias_map != ir.AffineMap.get(rank, 0, [ir.AffineExpr.get_dim(rank - 1)]):
        return None
    return bias


def _activation(op, c, rank: int) -> str | None:
    """The activation when ``op`` is an activation step ``c = act(c)``, else None."""
    act = role_of(op)
    if op.name != "linalg.generic" or act not in ACTIVATIONS or list(op.operands) != [c, c] or not _parallel(op, rank) \
            or indexing_maps(op) != [ir.AffineMap.get_identity(rank)] * 2:
        return None
    return act


def _residual_add(op, c):
    """The other operand when ``op`` is a residual step ``c = c + r`` (either
    order), ``r`` a contiguous f32 memref of ``c``'s type read element for
    element; else None."""
    rank = ir.MemRefType(c.type).rank
    found = _add_to(op, c, rank) if role_of(op) == "residual" else None
    if found is None:
        return None
    r, maps = found
    if r.type != c.type or not contiguous_f32(r) or list(maps) != [ir.AffineMap.get_identity(rank)] * 3:
        return None
    return r


def epilogue_of(g, c) -> Epilogue | None:
    """The bias add, activation and residual add steps (each optional, in
    that order) right after the product ``g`` (the next ops of its block)
    rewriting its output ``c`` in place: a contiguous f32 memref whose last
    dim is static.  None when none follows as the call takes it."""
    if not contiguous_f32(c):
        return None
    t = ir.MemRefType(c.type)
    if t.rank < 2 or ir.ShapedType.is_dynamic_size(t.shape[-1]):
        return None
    ops = [op_of(o) for o in g.op.block.operations]
    at = ops.index(g.op) + 1
    bias = _bias_add(ops[at], c, t.rank, t.shape[-1]) if at < len(ops) else None
    at += bias is not None
    act = _activation(ops[at], c, t.rank) if at < len(ops) else None
    at += act is not None
    residual = _residual_add(ops[at], c) if at < len(ops) else None
    at += residual is not None
    first = ops.index(g.op) + 1
    if at == first:
        return None
    return Epilogue(bias, act, ops[first:at], residual)
