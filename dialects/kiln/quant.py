"""Quantization ops: ``kiln.quantize`` and ``kiln.dequantize`` (linear, ONNX / PyTorch semantics).

A quantized tensor is an integer tensor (``i8``, ``ui8``; ``i32`` for biases
and accumulators) with a float ``scale`` and an integer ``zero_point``:
``real = (q - zero_point) * scale``.  Scale and zero point are operands, so a
dynamically computed scale (``DynamicQuantizeLinear``) is expressed the same
way as a constant one:

- **per tensor**: no ``axis`` attribute, scale and zero point of rank 0 (or
  rank 1 with one element);
- **per axis**: ``axis`` names the dim of ``x`` the rank-1 scale and zero
  point run along (one value per channel);
- **blocked**: ``axis`` and ``block_size``: scale and zero point have x's
  rank and dims but ``ceil(n / block_size)`` along ``axis``; element ``i``
  of that axis uses parameter ``i floordiv block_size``.
"""

# No `from __future__ import annotations`: the ext DSL reads annotations as objects.

from ..._mlir import ext
from ...errors import VerifyError
from ..dims import shape_text
from .base import ATTR, KilnOp, TensorInfo, TensorType, dtype_name, is_float, parse_dtype
from .shapes import norm_axis, require_dims_equal

__all__ = ["EXACT_ATTR", "EXACT_K", "INT_RANGES", "QUANT_DTYPES", "DequantizeOp", "MatmulIntegerOp", "MatmulW8Op", "QuantizeOp",
           "scale_layout"]

#: Integer dtypes a quantized tensor may have.
QUANT_DTYPES = ("i8", "ui8", "i32")

#: Unit attribute on the f32 ``kiln.matmul`` chunks an integer product is
#: computed with (frontends' ``exact_int_matmul``): each sum is exact in f32,
#: so passes that reduce precision (``kiln-reduce-precision``) leave them alone.
EXACT_ATTR = "kiln.exact_integer"

#: Centered 8-bit values are at most 255 in magnitude, so a dot product of up
#: to EXACT_K of their products stays below 2**24 (256 * 255 * 255): every
#: partial sum is an integer f32 holds exactly, in any summation order.
EXACT_K = 256

#: ``(lowest, highest)`` of each quantized dtype: the saturation bounds.
INT_RANGES = {"i8": (-128, 127), "ui8": (0, 255), "i32": (-(2 ** 31), 2 ** 31 - 1)}


def scale_layout(x: TensorInfo, scale: TensorInfo, zero_point: TensorInfo, axis, block_size=None) -> int | None:
    """Check the scale and zero point against ``x`` and return the axis they
    run along (normalized), or None for per-tensor parameters; VerifyError
    names the operand that does not fit."""
    if zero_point.dims != scale.dims:
        raise VerifyError(f"zero_point has shape {zero_point}, but scale has {scale} (they must match)")
    if block_size is not None:
        return _blocked_layout(x, scale, axis, block_size)
    if axis is None:
        if scale.rank > 1 or (scale.rank == 1 and not (scale.dims[0].is_static and scale.dims[0].value == 1)):
            raise VerifyError(f"per-tensor scale must have rank 0 or one element, got {scale} "
                              "(set 'axis' for per-axis parameters)")
        return None
    a = norm_axis(axis, x.rank)
    if scale.rank != 1:
        raise VerifyError(f"per-axis scale must have rank 1, got {scale}")
    d, n = x.dims[a], scale.dims[0]
    if d.is_static and n.is_static and d.value != n.value:
        raise VerifyError(f"per-axis scale has {n.value} values, but x has {d.value} along axis {a}")
    return a


def _blocked_layout(x: TensorInfo, scale: TensorInfo, axis, block_size: int) -> int:
    if axis is None:
        raise VerifyError("blocked quantization (block_size) needs an 'axis'")
    if block_size <= 0:
        raise VerifyError(f"block_size must be positive, got {block_size}")
    a = norm_axis(axis, x.rank)
    if scale.rank != x.rank:
        raise VerifyError(f"blocked scale must have x's rank {x.rank}, got {scale}")
    for k, (d, s) in enumerate(zip(x.dims, scale.dims)):
        if not (d.is_static and s.is_static):
            continue
        want = -(-d.value // block_size) if k == a else d.value
        if s.value != want:
            raise VerifyError(f"blocked scale dim {k} is {s.value}, expected {want} "
                              f"(x {x}, block_size {block_size} along axis {a})")
    return a


def _check_int(info: TensorInfo, what: str) -> str:
    name = dtype_name(info.dtype)
    if name not in QUANT_DTYPES:
        raise VerifyError(f"{what} must have dtype {', '.join(QUANT_DTYPES)}, got {name}")
    return name


class QuantizeOp(KilnOp, name="quantize", traits=[ext.Pure]):
    """``saturate(round_half_to_even(x / scale) + zero_point)`` in the zero point's dtype.

    ``x`` and ``scale`` have the same float dtype; the result has the zero
    point's (``i8``, ``ui8`` or ``i32``).  ``axis`` (optional) makes the
    parameters per-axis, with ``block_size`` blocked.

    ``%q = "kiln.quantize"(%x, %s, %zp) {axis = 1 : i64} : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64], f32>, !kiln.tensor<[64], i8>) -> !kiln.tensor<["B", 64], i8>``
    """

    x: ext.Operand[TensorType]
    scale: ext.Operand[TensorType]
    zero_point: ext.Operand[TensorType]
    res: ext.Result[TensorType]

    ATTRS = {"axis": ATTR.int(optional=True), "block_size": ATTR.int(optional=True)}

    def shape(self, operands, attrs):
        x, scale, zp = operands
        if not is_float(x.dtype):
            raise VerifyError(f"x must be a float tensor, got {dtype_name(x.dtype)}")
        if scale.dtype != x.dtype:
            raise VerifyError(f"scale must have x's dtype {dtype_name(x.dtype)}, got {dtype_name(scale.dtype)}")
        _check_int(zp, "zero_point")
        scale_layout(x, scale, zp, attrs["axis"], attrs["block_size"])
        return [TensorInfo(x.dims, zp.dtype)]


class DequantizeOp(KilnOp, name="dequantize", traits=[ext.Pure]):
    """``(x - zero_point) * scale`` in the scale's float dtype.

    ``x`` and ``zero_point`` have the same integer dtype (``i8``, ``ui8`` or
    ``i32``); ``axis`` (optional) makes the parameters per-axis, with
    ``block_size`` blocked.

    ``%y = "kiln.dequantize"(%q, %s, %zp) : (!kiln.tensor<["B", 64], ui8>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<["B", 64], f32>``
    """

    x: ext.Operand[TensorType]
    scale: ext.Operand[TensorType]
    zero_point: ext.Operand[TensorType]
    res: ext.Result[TensorType]

    ATTRS = {"axis": ATTR.int(optional=True), "block_size": ATTR.int(optional=True)}

    def shape(self, operands, attrs):
        x, scale, zp = operands
        name = _check_int(x, "x")
        if dtype_name(zp.dtype) != name:
            raise VerifyError(f"zero_point must have x's dtype {name}, got {dtype_name(zp.dtype)}")
        if not is_float(scale.dtype):
            raise VerifyError(f"scale must be a float tensor, got {dtype_name(scale.dtype)}")
        scale_layout(x, scale, zp, attrs["axis"], attrs["block_size"])
        return [TensorInfo(x.dims, scale.dtype)]


class MatmulW8Op(KilnOp, name="matmul_w8", traits=[ext.Pure]):
    """A product with an int8 weight dequantized in groups (weight-only
    quantization, ``precision="int8-weights"``; PyTorch's
    ``_weight_int8pack_mm`` is the one-group case): ``x @ dequant(w).T`` with
    ``dequant(w)[n, k] = w[n, k] * scale[n, k // group_size]``.

    ``x`` is ``[..., K]`` (a float dtype), ``w`` the ``i8`` weight ``[N, K]``
    (one row per output channel, as ``nn.Linear`` stores it), ``scale``
    ``[N, ceil(K / group_size)]`` in x's dtype (``group_size`` >= K: one
    scale per channel); the result is ``[..., N]``.  Products sum in f32 (for
    f16 / bf16 x too).

    ``%r = "kiln.matmul_w8"(%x, %w, %s) {group_size = 32 : i64} : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[32, 64], i8>, !kiln.tensor<[32, 2], f32>) -> !kiln.tensor<["B", 32], f32>``
    """

    x: ext.Operand[TensorType]
    w: ext.Operand[TensorType]
    scale: ext.Operand[TensorType]
    res: ext.Result[TensorType]

    ATTRS = {"group_size": ATTR.int()}

    def shape(self, operands, attrs):
        x, w, scale = operands
        if not is_float(x.dtype):
            raise VerifyError(f"x must be a float tensor, got {dtype_name(x.dtype)}")
        if dtype_name(w.dtype) != "i8":
            raise VerifyError(f"w must have dtype i8, got {dtype_name(w.dtype)}")
        if scale.dtype != x.dtype:
            raise VerifyError(f"scale must have x's dtype {dtype_name(x.dtype)}, got {dtype_name(scale.dtype)}")
        if x.rank < 1 or w.rank != 2 or scale.rank != 2:
            raise VerifyError(f"expected x [..., K], w [N, K] and scale [N, groups], got {shape_text(x.dims)}, "
                              f"{shape_text(w.dims)} and {shape_text(scale.dims)}")
        group = attrs["group_size"]
        if group < 1:
            raise VerifyError(f"group_size must be positive, got {group}")
        require_dims_equal(x.dims[-1], w.dims[1],
                           f"contracting dims differ between {shape_text(x.dims)} and w {shape_text(w.dims)}")
        require_dims_equal(w.dims[0], scale.dims[0],
                           f"scale {shape_text(scale.dims)} must have a row per row of w {shape_text(w.dims)}")
        k, groups = w.dims[1], scale.dims[1]
        if k.is_static and groups.is_static and groups.value != -(-k.value // group):
            raise VerifyError(f"scale {shape_text(scale.dims)} must have ceil({k.value} / {group}) = "
                              f"{-(-k.value // group)} groups per row")
        return [TensorInfo(tuple(x.dims[:-1]) + (w.dims[0],), x.dtype)]


class MatmulIntegerOp(KilnOp, name="matmul_integer", traits=[ext.Pure]):
    """An integer product of 8-bit operands with zero points (ONNX
    ``MatMulInteger``): ``(a - a_zero_point) @ (b - b_zero_point)`` summed in
    ``i32`` (wrapping, as int32 accumulation does).

    ``a`` is ``[..., M, K]`` and ``b`` ``[K, N]``, each ``i8`` or ``ui8``;
    the zero points are rank-0 tensors of their operand's dtype (a computed
    one, from ``DynamicQuantizeLinear``, is an operand like a constant one).
    The result is ``[..., M, N]`` in ``i32``.  On the CPU the native
    ``kiln_i8_gemm`` runs it (VNNI ``vpdpbusd`` / AMX-INT8 where the CPU has
    them).

    ``%r = "kiln.matmul_integer"(%a, %b, %za, %zb) : (!kiln.tensor<["B", 64], ui8>, !kiln.tensor<[64, 32], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 32], i32>``
    """

    a: ext.Operand[TensorType]
    b: ext.Operand[TensorType]
    a_zero_point: ext.Operand[TensorType]
    b_zero_point: ext.Operand[TensorType]
    res: ext.Result[TensorType]

    def shape(self, operands, attrs):
        a, b, za, zb = operands
        for name, v in (("a", a), ("b", b)):
            if dtype_name(v.dtype) not in ("i8", "ui8"):
                raise VerifyError(f"{name} must have dtype i8 or ui8, got {dtype_name(v.dtype)}")
        for name, zp, v in (("a_zero_point", za, a), ("b_zero_point", zb, b)):
            if zp.rank != 0 or zp.dtype != v.dtype:
                raise VerifyError(f"{name} must be a rank-0 tensor of dtype {dtype_name(v.dtype)}, got "
                                  f"{shape_text(zp.dims)} of {dtype_name(zp.dtype)}")
        if a.rank < 2 or b.rank != 2:
            raise VerifyError(f"expected a [..., M, K] and b [K, N], got {shape_text(a.dims)} and {shape_text(b.dims)}")
        require_dims_equal(a.dims[-1], b.dims[0],
                           f"contracting dims differ between {shape_text(a.dims)} and {shape_text(b.dims)}")
        return [TensorInfo(tuple(a.dims[:-1]) + (b.dims[1],), parse_dtype("i32"))]
