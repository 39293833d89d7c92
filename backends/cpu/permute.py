"""Transposes for ``kiln-cpu-library``: a permuting copy as one native call.

``convert-kiln-to-linalg`` lowers ``kiln.transpose`` to a ``linalg.generic``
that only copies: one input read through a permutation of the loop dims,
the output through the identity, a body that yields the input.  Left to
the generated code it runs on one thread, and the kernel holding it can be
split in halves only when the output's leading dim is the split symbol (the
transformer block's stacked q/k/v transpose, ``[B, L, 3, H, D] -> [3, B,
H, L, D]``, is not).  With the native runtime, :func:`rewrite_permutes`
replaces such a copy with a call of ``kiln_permute`` (kiln_dispatch.c),
which copies the output's rows as runs of its innermost dim on the native
pool.

It applies when the innermost dim stays innermost (the copy moves whole
runs), both operands are contiguous memrefs of a 4-byte element type and
the rank is at most :data:`MAX_RANK`; anything else keeps the generic.
"""

from __future__ import annotations

from ..._mlir import ir
from .buffers import indexing_maps
from .library import _dims, _is_contiguous, add_pointer, native_enabled, pool_threads_line, replace_generics

__all__ = ["MAX_RANK", "NATIVE_PERMUTE", "rewrite_permutes"]

#: The C entry point, and the largest rank it takes (its PERMUTE_MAX_RANK).
NATIVE_PERMUTE = "kiln_permute"
MAX_RANK = 8
_ELEMENTS = ("f32", "i32")


def _match(op) -> list[int] | None:
    """The permutation ``p`` (input dim i read at loop dim ``p[i]``) when
    ``op`` is a pure permuting copy that :func:`rewrite_permutes` takes."""
    if len(op.operands) != 2 or len(op.results) != 0:
        return None
    iters = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    if any("parallel" not in a for a in iters):
        return None
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    if len(ops) != 1 or ops[0].operation.name != "linalg.yield" or len(ops[0].operation.operands) != 1:
        return None
    if ops[0].operation.operands[0] != block.arguments[0]:
        return None
    try:
        tin, tout = (ir.MemRefType(v.type) for v in op.operands)
    except (ValueError, TypeError):
        return None
    rank = tout.rank
    if tin.rank != rank or not 2 <= rank <= MAX_RANK or str(tin.element_type) != str(tout.element_type):
        return None
    if str(tout.element_type) not in _ELEMENTS or not (_is_contiguous(tin) and _is_contiguous(tout)):
        return None
    maps = [_dims(m) for m in indexing_maps(op)]
    perm, ident = maps
    if perm is None or ident != list(range(rank)) or sorted(perm) != list(range(rank)):
        return None
    if perm[-1] != rank - 1 or perm == list(range(rank)):
        return None  # the innermost dim moves (no runs to copy), or nothing moves
    return perm


def _helper_text(name: str, tin: ir.MemRefType, tout: ir.MemRefType, perm: list[int]) -> str:
    """``@name(%I, %O)``: the output's sizes and, per output dim, the input's
    element stride along it into a stack buffer, then one ``kiln_permute``."""
    rank = tout.rank
    lines = [f"func.func private @{name}(%I: {tin}, %O: {tout}) {{"]
    add = lines.append
    add(f"  %meta = memref.alloca() : memref<{2 * rank}xi64>")
    for i in range(2 * rank):
        add(f"  %i{i} = arith.constant {i} : index")
    for j in range(rank):  # the output's sizes
        add(f"  %o{j} = memref.dim %O, %i{j} : {tout}")
        add(f"  %o{j}64 = arith.index_cast %o{j} : index to i64")
        add(f"  memref.store %o{j}64, %meta[%i{j}] : memref<{2 * rank}xi64>")
    # The input's strides (row major), then each stored at the output dim reading that input dim.
    add(f"  %s{rank - 1} = arith.constant 1 : index")
    for i in range(rank - 2, -1, -1):
        add(f"  %n{i + 1} = memref.dim %I, %i{i + 1} : {tin}")
        add(f"  %s{i} = arith.muli %s{i + 1}, %n{i + 1} : index")
    for i in range(rank):
        add(f"  %s{i}64 = arith.index_cast %s{i} : index to i64")
        add(f"  memref.store %s{i}64, %meta[%i{rank + perm[i]}] : memref<{2 * rank}xi64>")
    for tag, t in (("meta", f"memref<{2 * rank}xi64>"), ("I", str(tin)), ("O", str(tout))):
        add_pointer(add, tag, t)
    add(f"  %rank = arith.constant {rank} : i64")
    add("  %elem = arith.constant 4 : i64")
    add(pool_threads_line())  # asked at run time: the code serves any pool size
    add(f"  func.call @{NATIVE_PERMUTE}(%rank, %pmeta, %pI, %pO, %elem, %nthr) : (i64, i64, i64, i64, i64, i32) -> ()")
    add("  return")
    add("}")
    return "\n".join(lines)


_DECL = f"func.func private @{NATIVE_PERMUTE}(i64, i64, i64, i64, i64, i32)"


def rewrite_permutes(module) -> int:
    """Replace every permuting copy in ``module`` (bufferized) that
    :func:`_match` takes with a ``kiln_permute`` call; the count.  Nothing
    changes without the native runtime."""
    if not native_enabled():
        return 0

    def helper(name, op, perm):
        tin, tout = (ir.MemRefType(v.type) for v in op.operands)
        return _helper_text(name, tin, tout, perm)

    count, _ = replace_generics(module.operation, _match, NATIVE_PERMUTE, _DECL, "kiln_permute", helper,
                                lambda op, perm: op.operands)
    return count
