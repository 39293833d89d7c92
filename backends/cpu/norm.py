"""Layer norm for ``kiln-cpu-library``: the lowered chain as one native call.

``convert-kiln-to-linalg`` lowers ``kiln.layer_norm`` to four passes with
two row buffers between them (the sum, the mean, the centred squares, the
inverse deviation) and a last generic ``(x - mean) * inv`` times the weight
plus the bias, tagged ``kiln.layer_norm = {epsilon, weight, bias}``.  They
run on the calling thread (the runtime splits a kernel over two threads
only along a leading dim above 1), and in the transformer block at ``(1,
32)`` each norm of 32 x 256 took 4.5 us.  With the native runtime,
:func:`rewrite_layer_norms` replaces the tagged generic with a
``kiln_layer_norm`` call (kiln_dispatch.c: the same two-pass statistics,
rows over the native pool from 16 KiB), 2.5 us there; the reductions that
only fed it go with their buffers.

``kiln.rms_norm`` lowers to a sum of squares, a row inverse and an output
generic ``x * inv`` (times the weight) tagged ``kiln.rms_norm = {epsilon,
weight}``; that generic becomes a ``kiln_rms_norm`` call the same way.

It applies when ``x`` and the output are contiguous f32 memrefs of one type,
the norm's dims are the trailing ones and the weight and bias (each
optional) are contiguous f32 memrefs of exactly those dims; anything else
keeps the generated chain.
"""

from __future__ import annotations

from ..._mlir import ir
from ...conversions.kiln_to_linalg.nn import LAYER_NORM_ATTR
from ...conversions.kiln_to_linalg.rms_norm import RMS_NORM_ATTR
from .buffers import erase_dead_buffers, indexing_maps
from .library import _dims, add_pointer, contiguous_f32, native_enabled, pool_threads_line, replace_generics

__all__ = ["NATIVE_LAYER_NORM", "NATIVE_RMS_NORM", "rewrite_layer_norms"]

#: The C entry point.
NATIVE_LAYER_NORM = "kiln_layer_norm"

_DECL = f"func.func private @{NATIVE_LAYER_NORM}(i64, i64, i64, i64, i64, f32, i64, i32)"
#: The RMS norm's entry point (kiln_dispatch.c): rows, N, x, weight, eps, y, threads.
NATIVE_RMS_NORM = "kiln_rms_norm"
_RMS_DECL = f"func.func private @{NATIVE_RMS_NORM}(i64, i64, i64, i64, f32, i64, i32)"


class _Norm:
    """A matched norm: its input, output, weight and bias (None when absent),
    the first normalized dim and epsilon."""

    def __init__(self, x, y, weight, bias, axis: int, eps: float):
        self.x, self.y, self.weight, self.bias, self.axis, self.eps = x, y, weight, bias, axis, eps


def _match_tagged(op, attr: str, n_stats: int, params: tuple[str, ...]) -> _Norm | None:
    """A norm's tagged output generic: ``x``, ``n_stats`` row statistics
    (read with the rows' dims, the normalized ones at 0), the optional
    parameters ``params`` the tag says are present (shaped like the
    normalized dims), ``out``; f32 and contiguous."""
    if attr not in op.attributes:
        return None
    tag = ir.DictAttr(op.attributes[attr])
    present = [ir.BoolAttr(tag[name]).value for name in params]
    operands = list(op.operands)
    first = 1 + n_stats  # the first parameter
    if len(operands) != first + sum(present) + 1:
        return None
    x, y = operands[0], operands[-1]
    if not (contiguous_f32(x) and x.type == y.type):
        return None
    rank = ir.MemRefType(x.type).rank
    maps = indexing_maps(op)
    identity = list(range(rank))
    if _dims(maps[0]) != identity or _dims(maps[-1]) != identity:
        return None
    # The first statistic's map keeps the rows' dims and reads the normalized ones at 0.
    kept = [r for r in maps[1].results if _dims(ir.AffineMap.get(rank, 0, [r])) is not None]
    axis = len(kept)
    if axis >= rank or [ir.AffineDimExpr(r).position for r in kept] != list(range(axis)):
        return None
    given = operands[first:first + sum(present)]
    for v, m in zip(given, maps[first:first + sum(present)]):
        if not contiguous_f32(v, rank - axis) or _dims(m) != list(range(axis, rank)):
            return None
    values = iter(given)
    found = {name: next(values) if on else None for name, on in zip(params, present)}
    return _Norm(x, y, found.get("weight"), found.get("bias"), axis, ir.FloatAttr(tag["epsilon"]).value)


def _match(op) -> _Norm | None:
    """A layer norm's tagged output generic: ``x, mean, inv, [weight], [bias], out``."""
    return _match_tagged(op, LAYER_NORM_ATTR, 2, ("weight", "bias"))


def _helper_text(name: str, n: _Norm, rms: bool = False) -> str:
    tx = n.x.type
    tw = n.weight.type if n.weight is not None else None
    tb = n.bias.type if n.bias is not None else None
    params = [f"%X: {tx}"] + ([f"%W: {tw}"] if tw else []) + ([f"%B: {tb}"] if tb else []) + [f"%Y: {tx}"]
    lines = [f"func.func private @{name}({', '.join(params)}) {{"]
    add = lines.append
    shape = ir.MemRefType(tx).shape
    for i, size in enumerate(shape):
        if ir.ShapedType.is_dynamic_size(size):
            add(f"  %i{i} = arith.constant {i} : index")
            add(f"  %d{i} = memref.dim %X, %i{i} : {tx}")
        else:
            add(f"  %d{i} = arith.constant {size} : index")

    def product(tag: str, dims) -> None:  # %<tag>: the dims' product as an i64
        add(f"  %{tag}_0 = arith.constant 1 : index")
        for j, i in enumerate(dims):
            add(f"  %{tag}_{j + 1} = arith.muli %{tag}_{j}, %d{i} : index")
        add(f"  %{tag} = arith.index_cast %{tag}_{len(dims)} : index to i64")

    product("rows", range(n.axis))
    product("n", range(n.axis, len(shape)))
    for tag, t in (("X", tx), ("W", tw), ("B", tb), ("Y", tx)):
        add_pointer(add, tag, t)
    add(f"  %eps = arith.constant {n.eps:.9e} : f32")
    add(pool_threads_line())  # asked at run time: the code serves any pool size
    if rms:
        add(f"  func.call @{NATIVE_RMS_NORM}(%rows, %n, %pX, %pW, %eps, %pY, %nthr) : "
            "(i64, i64, i64, i64, f32, i64, i32) -> ()")
    else:
        add(f"  func.call @{NATIVE_LAYER_NORM}(%rows, %n, %pX, %pW, %pB, %eps, %pY, %nthr) : "
            "(i64, i64, i64, i64, i64, f32, i64, i32) -> ()")
    add("  return")
    add("}")
    return "\n".join(lines)


def _match_rms(op) -> _Norm | None:
    """A ``kiln.rms_norm``'s tagged output generic: ``x, inv, [weight], out``."""
    return _match_tagged(op, RMS_NORM_ATTR, 1, ("weight",))


def rewrite_layer_norms(module) -> int:
    """Replace every tagged layer norm in ``module`` (bufferized) with a
    ``kiln_layer_norm`` call, and every tagged RMS norm with a
    ``kiln_rms_norm`` call; the count.  Nothing changes without the native runtime."""
    if not native_enabled():
        return 0

    def args(op, n):
        return [n.x] + [v for v in (n.weight, n.bias) if v is not None] + [n.y]

    count, functions = replace_generics(module.operation, _match, NATIVE_LAYER_NORM, _DECL, "kiln_layer_norm",
                                        lambda name, op, n: _helper_text(name, n), args)
    rms, more = replace_generics(module.operation, _match_rms, NATIVE_RMS_NORM, _RMS_DECL, "kiln_rms_norm",
                                 lambda name, op, n: _helper_text(name, n, rms=True), args)
    for fn in dict.fromkeys(functions + more):
        erase_dead_buffers(fn)  # the reductions and their row buffers
    return count + rms
