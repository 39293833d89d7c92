"""Lowering of ``kiln.rms_norm``: one reduction and one output generic.

``x * rsqrt(mean(x**2) + eps) [* weight]`` over the dims from ``axis`` on:
the sum of squares (a reduction over the normalized dims, collapsed into one
loop as the other reductions are), ``1 / sqrt(sum / n + eps)`` per row, and
one generic that multiplies ``x`` by it and by the weight.  No tensor of
``x``'s size but the result: ``x**2`` is squared inside the reduction.

``f16`` / ``bf16`` input is read as ``f32`` (the sum, the inverse and the
normalized value), rounded to the input's dtype before the weight multiplies
it, as the op is documented (LLaMA's ``RMSNorm`` upcasts the same way).
(An f32 norm runs as the native ``kiln_rms_norm`` where kiln-select-kernels
chose it: :mod:`kiln.backends.cpu.library_kernels`.)
"""

from __future__ import annotations

from ..._mlir import arith, ir, math
from .common import Lowering, affine_map, elementwise, empty_tensor, fill, generic, identity_map, scalar_const, to_float
from .nn import _collapse, _count, _kept, _reduction_groups

__all__ = ["lower_rms_norm", "table"]

_LOW = ("f16", "bf16")


def lower_rms_norm(lw: Lowering):
    """``kiln.rms_norm`` (see the module doc)."""
    x = lw.operands[0]
    out = lw.results[0]
    t = out.dtype
    rank = len(out.dims)
    axes = list(range(lw.attrs["axis"] % rank, rank))
    acc = ir.F32Type.get() if str(t) in _LOW else t

    def wide(v):
        return arith.extf(acc, v) if acc != t else v

    groups = _reduction_groups(rank, axes)
    xc = _collapse(x, groups) if len(groups) < rank else x
    loops = len(groups)
    out_exprs = []
    for loop, group in enumerate(groups):
        out_exprs.extend([("c", 0)] * len(group) if group[0] in axes else [loop])
    kept = _kept(out.dims, axes)
    init = fill(scalar_const(acc, 0.0), empty_tensor(kept, acc, lw.env))
    iters = ["reduction" if g[0] in axes else "parallel" for g in groups]

    def square_sum(v, a):
        w = wide(v)
        return arith.addf(a, arith.mulf(w, w))

    sq = generic([xc], [init], [identity_map(loops), affine_map(loops, out_exprs)], iters, square_sum)[0]
    n = to_float(_count(x, axes), acc)
    eps = scalar_const(acc, lw.attrs["epsilon"])
    inv = elementwise([sq], kept, acc, lw.env,
                      lambda v: arith.divf(scalar_const(acc, 1.0), math.sqrt(arith.addf(arith.divf(v, n), eps))))
    extra = lw.operands[1:]  # the weight, when present

    def body(xv, iv, *w):
        y = arith.mulf(wide(xv), iv)
        if acc != t:
            y = arith.truncf(t, y)
        return arith.mulf(y, w[0]) if w else y

    return [elementwise([x, inv, *extra], out.dims, t, lw.env, body)]


def table() -> dict:
    """The rms_norm part of the lowering table."""
    return {"kiln.rms_norm": lower_rms_norm}
