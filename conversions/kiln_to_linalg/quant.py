"""Lowerings of ``kiln.quantize`` / ``kiln.dequantize`` (and of casts from or to
``ui8``) to one parallel ``linalg.generic`` each.

``arith`` works on signless integers only, so linalg holds a ``ui8`` tensor as
``i8`` (same bits, :func:`~.common.storage_info`), and the scalar code picks the
unsigned conversions (``extui`` / ``uitofp`` / ``fptoui``) from the *kiln*
dtype, which still says ``ui8``.

Quantize is ``clamp(roundeven(x / scale) + zero_point, lo, hi)`` computed in
x's float type (ONNX ``QuantizeLinear``: round half to even, then saturate);
dequantize is ``(float(x) - float(zero_point)) * scale``.
"""

from __future__ import annotations

import numpy as np

from ..._mlir import arith, ir, math
from ...dialects.kiln import is_float, tensor_info
from ...dialects.kiln.quant import INT_RANGES
from .common import Lowering, affine_map, fill, generic, identity_map, scalar_const
from .library_call import mark_contraction

__all__ = ["SIGNED_OPS", "cast_unsigned", "kiln_dtypes", "signless_constant", "table", "widen_unsigned"]

def kiln_dtypes(lw: Lowering) -> tuple[list[str], list[str]]:
    """The kiln dtype names of the op's operands and results (``ui8`` kept:
    ``lw.infos`` / ``lw.results`` hold the ``i8`` storage type)."""
    from .convert import _operand_infos

    ins = [str(i.dtype) for i in _operand_infos(lw.op)]
    outs = [str(tensor_info(r.type).dtype) for r in lw.op.results]
    return ins, outs


def signless_constant(value: ir.Attribute, holder: ir.Operation) -> ir.Attribute:
    """A constant's value with ``ui8`` elements re-typed as ``i8`` (same bits),
    the storage type linalg holds ``ui8`` in; any other value unchanged."""
    st = ir.ShapedType(value.type)
    if str(st.element_type) != "ui8":
        return value
    from ...transforms._resources import resource_bytes

    shape = list(st.shape)
    raw = resource_bytes(value, holder)
    if raw is not None:
        arr = np.asarray(raw, dtype=np.uint8)
    elif isinstance(value, ir.DenseElementsAttr) and value.is_splat:
        arr = np.full(shape, int(ir.IntegerAttr(value.get_splat_value()).value) & 0xFF, dtype=np.uint8)
    else:
        arr = np.array(value).astype(np.uint8)
    return ir.DenseElementsAttr.get(arr.reshape(shape).view(np.int8), type=_i8(), shape=shape)


def _i8() -> ir.Type:
    return ir.IntegerType.get_signless(8)


def _param_map(x_rank: int, param: ir.Value, axis, block_size=None) -> ir.AffineMap:
    """How a scale / zero point is read at each element of x: the axis's
    index (per axis), its block (``index floordiv block_size``, blocked),
    index 0 (one element) or nothing (rank 0)."""
    rank = ir.RankedTensorType(param.type).rank
    if block_size is not None:
        a = axis % x_rank
        block = ir.AffineExpr.get_floor_div(ir.AffineDimExpr.get(a), ir.AffineConstantExpr.get(block_size))
        return affine_map(x_rank, [block if k == a else k for k in range(x_rank)])
    if rank == 0:
        return affine_map(x_rank, [])
    if axis is None:
        return affine_map(x_rank, [("c", 0)])
    return affine_map(x_rank, [axis % x_rank])


def _int_to_float(v: ir.Value, kiln_dtype: str, ft: ir.Type) -> ir.Value:
    return arith.uitofp(ft, v) if kiln_dtype == "ui8" else arith.sitofp(ft, v)


def _empty_like(lw: Lowering, dtype: ir.Type) -> ir.Value:
    return lw.empty(lw.results[0].dims, dtype)


def lower_quantize(lw: Lowering) -> list[ir.Value]:
    """``kiln.quantize``: see the module docstring."""
    x, scale, zp = lw.operands
    out = lw.results[0]
    qname = kiln_dtypes(lw)[1][0]
    lo, hi = INT_RANGES[qname]
    rank = len(out.dims)
    axis = lw.attrs["axis"]
    ft = lw.infos[0].dtype
    st = out.dtype
    bs = lw.attrs["block_size"]
    maps = [identity_map(rank), _param_map(rank, scale, axis, bs), _param_map(rank, zp, axis, bs), identity_map(rank)]

    def body(xv, sv, zv, _):
        r = math.roundeven(arith.divf(xv, sv))
        r = arith.addf(r, _int_to_float(zv, qname, ft))
        # Saturate in float (the bounds are exact in f32 for 8 bits; for i32
        # the conversion below saturates as fptosi's poison-free range allows).
        r = arith.minimumf(arith.maximumf(r, scalar_const(ft, lo)), scalar_const(ft, hi))
        if qname == "i32":
            return arith.fptosi(st, r)
        wide = ir.IntegerType.get_signless(32)
        return arith.trunci(st, arith.fptosi(wide, r))

    return generic([x, scale, zp], [_empty_like(lw, st)], maps, ["parallel"] * rank, body)


def lower_dequantize(lw: Lowering) -> list[ir.Value]:
    """``kiln.dequantize``: see the module docstring."""
    x, scale, zp = lw.operands
    out = lw.results[0]
    qname = kiln_dtypes(lw)[0][0]
    rank = len(out.dims)
    axis = lw.attrs["axis"]
    ft = out.dtype
    bs = lw.attrs["block_size"]
    maps = [identity_map(rank), _param_map(rank, scale, axis, bs), _param_map(rank, zp, axis, bs), identity_map(rank)]

    def body(xv, sv, zv, _):
        d = arith.subf(_int_to_float(xv, qname, ft), _int_to_float(zv, qname, ft))
        return arith.mulf(d, sv)

    return generic([x, scale, zp], [_empty_like(lw, ft)], maps, ["parallel"] * rank, body)


def lower_matmul_w8(lw: Lowering) -> list[ir.Value]:
    """``kiln.matmul_w8``: one contraction over loops ``x's leading dims..., n,
    k`` whose body widens the weight element and multiplies it by its group's
    scale (read at ``[n, k floordiv group_size]``) before the product: ``acc +
    x * (sitofp(w) * scale)``, in f32 for f16 / bf16 x (rounded once after).
    No f32 copy of the weight exists; kiln-cpu-lowp-gemm replaces the
    contraction with the native ``kiln_w8_gemm``."""
    from .nn import _accumulator, _narrow

    x, w, scale = lw.operands
    out = lw.results[0]
    rank, group = len(out.dims), lw.attrs["group_size"]
    acc_t = _accumulator(out.dtype)
    init = fill(scalar_const(acc_t, 0), lw.empty(out.dims, acc_t))
    k_group = ir.AffineExpr.get_floor_div(ir.AffineDimExpr.get(rank), ir.AffineConstantExpr.get(group))
    maps = [affine_map(rank + 1, list(range(rank - 1)) + [rank]), affine_map(rank + 1, [rank - 1, rank]),
            affine_map(rank + 1, [rank - 1, k_group]), affine_map(rank + 1, list(range(rank)))]

    def body(a, b, s, acc):
        a, s = (v if v.type == acc_t else arith.extf(acc_t, v) for v in (a, s))
        return arith.addf(acc, arith.mulf(a, arith.mulf(arith.sitofp(acc_t, b), s)))

    sums = mark_contraction(lw, generic([x, w, scale], [init], maps, ["parallel"] * rank + ["reduction"], body)[0])
    return [_narrow(sums, out.dtype, out.dims, lw.env)]


def lower_matmul_integer(lw: Lowering) -> list[ir.Value]:
    """``kiln.matmul_integer``: one contraction over loops ``a's leading
    dims..., n, k`` with the zero points read as scalars (rank-0 maps) and the
    body ``acc + (ext(a) - ext(a_zp)) * (ext(b) - ext(b_zp))`` in i32 (``extui``
    for a ``ui8`` operand, ``extsi`` for ``i8``); kiln-cpu-lowp-gemm replaces
    it with the native ``kiln_i8_gemm``."""
    a, b, za, zb = lw.operands
    (a_dt, b_dt, _, _), _ = kiln_dtypes(lw)
    out = lw.results[0]
    rank = len(out.dims)
    i32 = ir.IntegerType.get_signless(32)
    init = fill(scalar_const(i32, 0), lw.empty(out.dims, i32))
    maps = [affine_map(rank + 1, list(range(rank - 1)) + [rank]), affine_map(rank + 1, [rank, rank - 1]),
            affine_map(rank + 1, []), affine_map(rank + 1, []), affine_map(rank + 1, list(range(rank)))]

    def widen(v, dtype):
        return arith.extui(i32, v) if dtype == "ui8" else arith.extsi(i32, v)

    def body(av, bv, zav, zbv, acc):
        x = arith.subi(widen(av, a_dt), widen(zav, a_dt))
        y = arith.subi(widen(bv, b_dt), widen(zbv, b_dt))
        return arith.addi(acc, arith.muli(x, y))

    return [mark_contraction(lw, generic([a, b, za, zb], [init], maps, ["parallel"] * rank + ["reduction"], body)[0])]


def cast_unsigned(lw: Lowering) -> list[ir.Value] | None:
    """``kiln.cast`` from or to ``ui8`` (None for any other cast): zero
    extension / ``uitofp`` from ``ui8``; to ``ui8`` the low 8 bits of an
    integer and ``fptoui`` of a float (C semantics, like the signed casts)."""
    (src,), (dst,) = kiln_dtypes(lw)
    if "ui8" not in (src, dst):
        return None
    x = lw.operands[0]
    out = lw.results[0]
    rank = len(out.dims)
    st = out.dtype
    xt = ir.RankedTensorType(x.type).element_type

    def body(v, _):
        if src == dst:
            return v
        if src == "ui8":
            if str(st) == "i1":
                return arith.cmpi(arith.CmpIPredicate.ne, v, scalar_const(xt, 0))
            if is_float(st):
                return arith.uitofp(st, v)
            return v if ir.IntegerType(st).width == 8 else arith.extui(st, v)
        if is_float(xt):
            return arith.trunci(st, arith.fptoui(ir.IntegerType.get_signless(32), v))
        w = ir.IntegerType(xt).width
        if w == 8:
            return v
        return arith.trunci(st, v) if w > 8 else arith.extui(st, v)

    return generic([x], [_empty_like(lw, st)], [identity_map(rank)] * 2, ["parallel"] * rank, body)


#: kiln ops whose integer lowering depends on signedness (signed division,
#: comparison, max / min, ...): on ``ui8`` operands they would compute on the
#: ``i8`` storage as if signed (200 / 3 as -56 / 3).  Wrapping ops (add, sub,
#: mul, matmul, conv, sums) give the same bits either way and are left alone.
SIGNED_OPS = frozenset({
    "kiln.div", "kiln.pow", "kiln.maximum", "kiln.minimum", "kiln.lt", "kiln.le", "kiln.gt", "kiln.ge",
    "kiln.relu", "kiln.abs", "kiln.reduce_max", "kiln.reduce_min", "kiln.argmax", "kiln.argmin",
    "kiln.max_pool2d",
})


def widen_unsigned(module) -> int:
    """Run every :data:`SIGNED_OPS` op with a ``ui8`` operand in ``i16``
    (which holds every uint8 value exactly): ``kiln.cast`` its ``ui8``
    operands to ``i16``, recreate the op with ``i16`` where it had ``ui8``,
    and cast ``ui8`` results back.  Returns the number of ops widened."""
    from ...dialects.kiln import tensor_type

    found = []

    def visit(op):
        if op.name in SIGNED_OPS and any(_is_u8(v.type) for v in op.operands):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for op in found:
        with ir.InsertionPoint(op), op.location:
            operands = [_kiln_cast(v, "i16", tensor_type) if _is_u8(v.type) else v for v in op.operands]
            results = [tensor_type(tensor_info(r.type).dims, "i16") if _is_u8(r.type) else r.type
                       for r in op.results]
            keys = [a if isinstance(a, str) else a.name for a in op.attributes]
            attrs = {k: op.attributes[k] for k in keys}
            new = ir.Operation.create(op.name, results=results, operands=operands, attributes=attrs)
        with ir.InsertionPoint(op), op.location:
            for old, r in zip(op.results, new.results):
                old.replace_all_uses_with(_kiln_cast(r, "ui8", tensor_type) if _is_u8(old.type) else r)
        op.erase()
    return len(found)


def _is_u8(t: ir.Type) -> bool:
    from ...dialects.kiln import TensorType

    return isinstance(t, TensorType) and str(tensor_info(t).dtype) == "ui8"


def _kiln_cast(v: ir.Value, dtype: str, tensor_type) -> ir.Value:
    return ir.Operation.create("kiln.cast", results=[tensor_type(tensor_info(v.type).dims, dtype)], operands=[v]).result


def table() -> dict:
    """The quantization part of the lowering table."""
    return {"kiln.quantize": lower_quantize, "kiln.dequantize": lower_dequantize, "kiln.matmul_w8": lower_matmul_w8,
            "kiln.matmul_integer": lower_matmul_integer}
