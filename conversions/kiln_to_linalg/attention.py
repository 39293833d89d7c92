"""Lowerings of ``kiln.attention`` and ``kiln.packed_attention``.

An attention lowers to its chain -- ``q k^T`` (a contraction), the scale and
mask, a softmax, ``p v`` -- whose contractions are placeholders of the
library GEMM where kiln-select-kernels marked the op so (``kiln.parts =
"native.gemm"``, f32: kiln-cpu-library calls sgemm); grouped-query
k / v are repeated to q's heads first (sgemm needs plain batch maps).  This
is the generated code: where kiln-select-kernels chose the native flash
attention (``kiln.impl``, most f32 attentions), the op is one call instead
(:mod:`kiln.backends.cpu.library_kernels`).
"""

from __future__ import annotations

import math as pymath

from ..._mlir import arith, ir, tensor
from ...dialects.dims import dim
from ...dialects.kiln.nn import gqa_group
from ...transforms._graph import PARTS_ATTR
from .common import (
    DYN,
    Lowering,
    affine_map,
    broadcast_map,
    const_index,
    empty_tensor,
    fill,
    generic,
    identity_map,
    loop_index,
    scalar_const,
)
from .library_call import mark_contraction
from .nn import _accumulator, _batch_exprs, _dim_of, _empty_from, _mac, _reshape, softmax


def _attention_chain(q, k, v, mask, maps, sdims, out_init, env, scale: float, causal: bool, lw=None):
    """The lowered attention over loops ``(b.., l, s, d)`` (``b..`` the batch
    loops, ``nb = len(sdims) - 2`` of them): the ``q k^T`` contraction into a
    scores tensor of ``sdims``, the scale and mask pass, the softmax and the
    ``p v`` contraction (loops ``(b.., l, e, s)``) into ``out_init``.
    ``maps``: q's and k's in the first loop space, v's and the output's in
    the second (lists for :func:`affine_map`)."""
    out_t = ir.RankedTensorType(out_init.type).element_type
    # bf16 / f16: scores, softmax and the p v sums in f32, the output rounded once.
    t = _accumulator(out_t)
    if t != out_t:
        out_dims_init = out_init
        out_init = _empty_from([_dim_of(out_init, i, env) for i in range(ir.RankedTensorType(out_init.type).rank)],
                               t, env)
    nb = len(sdims) - 2
    n = nb + 3
    qmap, kmap, vmap, omap = maps
    init = fill(scalar_const(t, 0.0), empty_tensor(sdims, t, env))
    scores = generic([q, k], [init], [affine_map(n, qmap), affine_map(n, kmap), affine_map(n, list(range(nb + 2)))],
                     ["parallel"] * (nb + 2) + ["reduction"], _mac)[0]
    sc = scalar_const(t, scale)
    ninf = scalar_const(t, float("-inf"))
    inputs = [scores] + ([mask] if mask is not None else [])
    r = nb + 2
    smaps = [identity_map(r)] + ([broadcast_map(ir.RankedTensorType(mask.type), sdims)] if mask is not None else [])
    smaps.append(identity_map(r))

    def body(s, *rest):
        y = arith.mulf(s, sc)
        if mask is not None:
            m = rest[0]
            if str(m.type) != "i1" and m.type != t:
                m = arith.extf(t, m)  # a bf16 / f16 additive mask, added in f32
            y = arith.select(m, y, ninf) if str(m.type) == "i1" else arith.addf(y, m)
        if causal:
            li, si = loop_index(nb), loop_index(nb + 1)
            y = arith.select(arith.cmpi(arith.CmpIPredicate.ugt, si, li), ninf, y)
        return y

    scaled = generic(inputs, [empty_tensor(sdims, t, env)], smaps, ["parallel"] * r, lambda *a: body(*a[:-1]))[0]
    p = softmax(scaled, r - 1, sdims, env, empty_rows_zero=mask is not None)
    # out[b.., l, e] = sum_s p[b.., l, s] * v[b.., s, e]
    pmap = list(range(nb)) + [nb, nb + 2]
    res = generic([p, v], [fill(scalar_const(t, 0.0), out_init)],
                  [affine_map(n, pmap), affine_map(n, vmap), affine_map(n, omap)],
                  ["parallel"] * (nb + 2) + ["reduction"], _mac)[0]
    parts = lw.op.attributes[PARTS_ATTR] if lw is not None and PARTS_ATTR in lw.op.attributes else None
    if parts is not None:  # kiln-select-kernels chose the library GEMM (kiln-cpu-library) for the products
        for product in (scores, res):
            mark_contraction(lw, product, ir.StringAttr(parts).value)
    if t != out_t:
        res = _narrow_into(res, out_dims_init)
    return res


def _narrow_into(value: ir.Value, init: ir.Value) -> ir.Value:
    """``value`` (an f32 accumulator) rounded into ``init`` (a tensor of the same shape, of the narrower type)."""
    rank = ir.RankedTensorType(value.type).rank
    dtype = ir.RankedTensorType(init.type).element_type
    return generic([value], [init], [identity_map(rank)] * 2, ["parallel"] * rank,
                   lambda x, _: arith.truncf(dtype, x))[0]


def _default_scale(lw: Lowering, head_dim: int) -> float:
    scale = lw.attrs["scale"]
    if scale is None:
        if head_dim == DYN:
            raise lw.error("needs a static head dim (or an explicit 'scale')")
        scale = 1.0 / pymath.sqrt(head_dim)
    return scale


def _repeat_heads(x: ir.Value, group: int) -> ir.Value:
    """``x [.., Hkv, S, D]`` copied to ``[.., Hkv * group, S, D]``, head ``h``
    of the copy read from ``h floordiv group``."""
    xt = ir.RankedTensorType(x.type)
    rank = xt.rank
    sizes = [tensor.dim(x, const_index(i)) if n == DYN else n for i, n in enumerate(xt.shape)]
    sizes[-3] = xt.shape[-3] * group
    init = tensor.empty(sizes, xt.element_type)
    exprs = list(range(rank - 3)) + [ir.AffineFloorDivExpr.get(ir.AffineDimExpr.get(rank - 3), ir.AffineConstantExpr.get(group)),
                                      rank - 2, rank - 1]
    return generic([x], [init], [affine_map(rank, exprs), identity_map(rank)], ["parallel"] * rank, lambda a, o: a)[0]


def lower_attention(lw: Lowering):
    q, k, v = lw.operands[:3]
    mask = lw.operands[3] if len(lw.operands) > 3 else None
    out = lw.results[0]
    batch = list(out.dims[:-2])
    nb = len(batch)
    qt, kt, vt = (ir.RankedTensorType(x.type) for x in (q, k, v))
    scale = _default_scale(lw, qt.shape[-1])
    kb, vb = _batch_exprs(kt.shape[:-2], batch, nb), _batch_exprs(vt.shape[:-2], batch, nb)
    group = gqa_group(*(lw.infos[i].dims for i in range(3)))
    if group > 1:
        # Grouped-query attention (q head h reads k / v head h // group) as
        # generated code: its two contractions go to sgemm, which needs plain
        # batch maps, so k and v are repeated to q's heads once (S x D per
        # head, small next to the L x S scores).  The native kernel reads the
        # k / v heads in place (kiln-select-kernels chooses it).
        k, v = (_repeat_heads(x, group) for x in (k, v))
        kt, vt = ir.RankedTensorType(k.type), ir.RankedTensorType(v.type)
        kb, vb = _batch_exprs(kt.shape[:-2], batch, nb), _batch_exprs(vt.shape[:-2], batch, nb)
    # scores[b.., l, s] = sum_d q[b.., l, d] * k[b.., s, d]
    maps = (_batch_exprs(qt.shape[:-2], batch, nb) + [nb, nb + 2], kb + [nb + 1, nb + 2], vb + [nb + 2, nb + 1],
            list(range(nb + 2)))
    sdims = batch + [out.dims[-2], lw.infos[1].dims[-2]]
    return [_attention_chain(q, k, v, mask, maps, sdims, lw.empty(out.dims, out.dtype), lw.env, scale,
                             lw.attrs["causal"], lw)]


def packed_attention_maps(nb: int, d: int) -> tuple:
    """The maps (lists for :func:`affine_map`) of a packed attention's
    chain with ``nb`` batch dims and head dim ``d``: q's and k's into the
    ``[.., L, 3, H, D]`` view over loops ``(b.., h, l, s, d)``, v's into it
    and the output's ``[.., L, H * D]`` over ``(b.., h, l, e, s)``."""
    b, h, ld, sd, rd = list(range(nb)), nb, nb + 1, nb + 2, nb + 3
    column = ir.AffineDimExpr.get(h) * ir.AffineConstantExpr.get(d) + ir.AffineDimExpr.get(sd)
    return b + [ld, ("c", 0), h, rd], b + [sd, ("c", 1), h, rd], b + [rd, ("c", 2), h, sd], b + [ld, column]


def lower_packed_attention(lw: Lowering):
    """``kiln.packed_attention`` as :func:`lower_attention`'s chain with the
    heads a batch loop ``h`` after the op's own batch dims: q, k and v read
    from the packed operand viewed as ``[.., L, 3, H, D]`` (a reshape, no
    copy), the output written at column ``h * D + e`` of ``[.., L, H * D]``
    (no transpose either way)."""
    x = lw.operands[0]
    out = lw.results[0]
    heads = lw.attrs["heads"]
    batch = list(out.dims[:-2])
    nb = len(batch)
    d = ir.RankedTensorType(x.type).shape[-1] // (3 * heads)
    scale = _default_scale(lw, d)
    xt = ir.RankedTensorType(x.type)
    sizes = [n if n != DYN else tensor.dim(x, const_index(i)) for i, n in enumerate(xt.shape[:-1])]
    x5 = _reshape(x, sizes + [3, heads, d], xt.element_type)
    sdims = batch + [dim(heads), out.dims[-2], out.dims[-2]]
    return [_attention_chain(x5, x5, x5, None, packed_attention_maps(nb, d), sdims, lw.empty(out.dims, out.dtype),
                             lw.env, scale, lw.attrs["causal"], lw)]


def table() -> dict:
    """The attention part of the lowering table."""
    return {
        "kiln.attention": lower_attention,
        "kiln.packed_attention": lower_packed_attention,
    }
