"""Patterns for ONNX's quantization ops: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv
and ONNX Runtime's ``com.microsoft`` QGemm, QLinearAdd and QLinearMul.

Each becomes ``kiln.quantize`` / ``kiln.dequantize`` around integer kiln ops:

- integer matrix products (MatMulInteger, QLinearMatMul, QGemm) of an
  ``[..., M, K]`` and a ``[K, N]`` operand with per-tensor zero points are
  ``kiln.matmul_integer`` (the native int8 kernel on the CPU); the others
  and the convolutions (ConvInteger, QLinearConv) subtract the zero points in
  ``i32``: convolutions run ``kiln.conv2d`` on ``i32`` or im2col, matrix
  products f32 GEMMs over chunks of the contraction small enough to be
  exact (:func:`exact_int_matmul`), summed in i32: the int32 accumulation
  ONNX specifies (one f32 product over the whole contraction would lose
  exactness above 2**24);
- requantization (QLinear*) multiplies the ``i32`` accumulator by
  ``a_scale * b_scale / y_scale`` in **f64** (what ONNX's reference does:
  numpy promotes int32 times float32 to float64), then ``kiln.quantize``
  with scale 1 rounds half to even, adds the output zero point and saturates.

Blocked quantization (opset 21's ``block_size``) maps to the ops'
``block_size`` attribute; 4-bit, 16-bit and float8 types are declined with
the reason.
"""

from __future__ import annotations

from ...dialects.dims import dim
from ...dialects.kiln import MAX_VARIADIC
from ...transforms.decompose import exact_int_products
from .aten import dims_of, dtype_of, rank_of
from .driver import Decline
from .onnx import pattern
from .onnx_nn import _kernel, _spatial, _window_slice, conv

__all__ = ["exact_int_matmul", "lower_dequantize_linear", "lower_quantize_linear"]

_QUANT = ("i8", "ui8")


def _torch_dtype(cx, i: int) -> str:
    """The element type ONNX declares for operand ``i`` (``ui8``, ``si8``, ``f32``)."""
    return str(cx.op.operands[i].type).rsplit(",", 1)[-1].rstrip(">")


def _operand(cx, i: int):
    """Operand ``i`` as a kiln tensor of the dtype ONNX declares: a ``uint8``
    constant reaches the patterns as ``i16`` or ``i1`` (see the driver's
    ``_unsigned_literal``), so it is cast back to ``ui8`` here."""
    v = cx.tensor(i)
    if _torch_dtype(cx, i) == "ui8" and dtype_of(v) != "ui8":
        v = cx.cast(v, "ui8")
    return v


def _zero_point(cx, i: int, dtype: str, scale):
    """Operand ``i`` (the zero point) or, when absent, a 0 of ``dtype`` shaped like ``scale``."""
    if cx.has(i):
        zp = _operand(cx, i)
        if dtype_of(zp) not in _QUANT + ("i32",):
            raise Decline(f"zero point of dtype {dtype_of(zp)} (kiln quantizes to int8 / uint8 / int32)")
        return zp
    if not all(d.is_static for d in dims_of(scale)):
        raise Decline("a symbolic-shaped scale without a zero point")
    return cx.const(0, dtype, shape=[d.value for d in dims_of(scale)])


def _layout(cx, x, scale) -> dict:
    """``axis`` (and ``block_size``) attributes for ``kiln.quantize`` / ``dequantize``."""
    block = cx.attr("block_size", 0)
    if not block:
        return {"axis": _axis(cx, x, scale)}
    axis = cx.attr("axis", 1)
    if not -rank_of(x) <= axis < rank_of(x):
        raise Decline(f"attribute 'axis' {axis} is out of range for rank {rank_of(x)}")
    return {"axis": axis % rank_of(x), "block_size": block}


def _per_tensor(cx, scale, zp, layout: dict):
    """Per-tensor parameters as rank-0 tensors: ONNX allows a scale of one
    element ``[1]`` beside a scalar zero point (quantize_static writes such
    pairs for int32 biases), kiln's ops want the two shaped alike."""
    if layout.get("axis") is not None:
        return scale, zp
    return tuple(cx.build("reshape", v, shape=[]) if rank_of(v) == 1 else v for v in (scale, zp))


def _axis(cx, x, scale, default: int = 1):
    """The ``axis`` for ``kiln.quantize`` / ``dequantize``: None for a
    per-tensor (rank-0 or one-element) scale, else the normalized attribute."""
    r = rank_of(scale)
    if r == 0:
        return None
    if r != 1:
        raise Decline(f"scale of rank {r} without 'block_size'")
    axis = cx.attr("axis", default)
    n = dims_of(scale)[0]
    in_range = -rank_of(x) <= axis < rank_of(x)
    if n.is_static and n.value == 1 and not (in_range and dims_of(x)[axis % rank_of(x)] == dim(1)):
        # One value for the whole tensor: the axis does not apply (the default 1 on a rank-1 int32 bias).
        return None
    if not in_range:
        raise Decline(f"attribute 'axis' {axis} is out of range for rank {rank_of(x)}")
    return axis % rank_of(x)


@pattern("QuantizeLinear")
def lower_quantize_linear(cx):
    """``kiln.quantize``: per tensor or per axis; the output dtype is the zero
    point's, else ``output_dtype`` (opset 21), else uint8."""
    x, scale = cx.tensor(0), cx.tensor(1)
    out = cx.result_dtype(0)
    if out not in _QUANT:
        raise Decline(f"QuantizeLinear to {out} (kiln quantizes to int8 / uint8)")
    if dtype_of(scale) != dtype_of(x):
        scale = cx.cast(scale, dtype_of(x))
    zp = _zero_point(cx, 2, out, scale)
    layout = _layout(cx, x, scale)
    scale, zp = _per_tensor(cx, scale, zp, layout)
    return cx.build("quantize", x, scale, zp, **layout)


@pattern("DequantizeLinear")
def lower_dequantize_linear(cx):
    """``kiln.dequantize``: per tensor or per axis, from int8 / uint8 / int32."""
    x, scale = _operand(cx, 0), cx.tensor(1)
    if dtype_of(x) not in _QUANT + ("i32",):
        raise Decline(f"DequantizeLinear from {_torch_dtype(cx, 0)} (kiln dequantizes int8 / uint8 / int32)")
    zp = _zero_point(cx, 2, dtype_of(x), scale)
    layout = _layout(cx, x, scale)
    scale, zp = _per_tensor(cx, scale, zp, layout)
    y = cx.build("dequantize", x, scale, zp, **layout)
    out = cx.result_dtype(0)
    return cx.cast(y, out) if out != dtype_of(y) else y


@pattern("DynamicQuantizeLinear")
def lower_dynamic_quantize_linear(cx):
    """uint8 with ``scale = (max(0, max x) - min(0, min x)) / 255`` (1 when
    that is 0, as ONNX Runtime does) and ``zero_point = saturate(round(-min /
    scale))``; returns ``(y, scale, zero_point)``."""
    x = cx.tensor(0)
    axes = list(range(rank_of(x)))
    zero = cx.like(0.0, x)
    lo = cx.build("minimum", cx.build("reduce_min", x, axes=axes, keepdims=False), zero)
    hi = cx.build("maximum", cx.build("reduce_max", x, axes=axes, keepdims=False), zero)
    scale = cx.build("div", cx.build("sub", hi, lo), cx.like(255.0, x))
    # An all-zero x gives scale 0 (and 0 / 0 below): ONNX Runtime uses 1 then.
    one = cx.like(1.0, x)
    scale = cx.build("where", cx.build("eq", scale, zero), one, scale)
    zp = cx.build("quantize", cx.build("neg", lo), scale, cx.const(0, "ui8"))
    return cx.build("quantize", x, scale, zp), scale, zp


# ----------------------------------------------------------------------------
# Integer products
# ----------------------------------------------------------------------------


def _centered(cx, i: int, zp_index: int, zp_shape=None, transpose: bool = False):
    """Operand ``i`` in i32 (transposed when ``transpose``) minus its zero
    point (operand ``zp_index``, if any), the zero point reshaped to
    ``zp_shape`` for per-row / per-channel."""
    v = _operand(cx, i)
    if dtype_of(v) not in _QUANT:
        raise Decline(f"operand #{i} of dtype {_torch_dtype(cx, i)} (expected int8 / uint8)")
    v = cx.cast(v, "i32")
    if transpose:
        if rank_of(v) != 2:
            raise Decline(f"a transposed operand #{i} of rank {rank_of(v)} (expected 2)")
        v = cx.build("transpose", v, perm=[1, 0])
    if zp_index is None or not cx.has(zp_index):
        return v
    zp = cx.cast(_operand(cx, zp_index), "i32")
    if zp_shape is not None and rank_of(zp) == 1 and dims_of(zp)[0] != dim(1):
        zp = cx.build("reshape", zp, shape=zp_shape(dims_of(zp)[0]))
    return cx.build("sub", v, zp)


def _row_shape(a):
    """A per-row zero point of A ``[..., M, K]``: ``[M, 1]``."""
    return lambda n: [n, dim(1)]


def _channel_shape(w):
    """A per-output-channel zero point of W ``[O, C, KH, KW]``: ``[O, 1, 1, 1]``."""
    return lambda n: [n] + [dim(1)] * (rank_of(w) - 1)



def exact_int_matmul(cx, a, b):
    """``a @ b`` for i32 tensors holding centered 8-bit values, exactly:
    :func:`~kiln.transforms.decompose.exact_int_products` (f32 matmuls, kiln's
    fast GEMMs, over exact chunks of the contraction; an integer generic ran a
    128x768x3072 product in seconds).  A symbolic contraction dim keeps the
    i32 matmul."""
    if not dims_of(a)[-1].is_static:
        return cx.build("matmul", a, b)
    return exact_int_products(cx.build, cx.cast, a, b)


def _scalar_zero_point(cx, zp_index, x):
    """The zero point (operand ``zp_index``) of 8-bit ``x`` as a rank-0 tensor (0 when absent), or None when
    it has one value per row / column."""
    if zp_index is None or not cx.has(zp_index):
        return cx.const(0, dtype_of(x))
    zp = _operand(cx, zp_index)
    if dtype_of(zp) != dtype_of(x):
        return None
    if rank_of(zp) == 1 and dims_of(zp)[0] == dim(1):
        return cx.build("reshape", zp, shape=[])
    return zp if rank_of(zp) == 0 else None


def _matmul_integer(cx, a_i, a_zp, b_i, b_zp, transpose_b: bool = False):
    """``kiln.matmul_integer`` of operands ``a_i`` ``[..., M, K]`` and ``b_i`` ``[K, N]`` (``[N, K]`` when
    ``transpose_b``) with per-tensor zero points, or None for what it does not take (a 1-D or batched
    operand, a zero point per row or column): the caller computes those as :func:`exact_int_matmul`."""
    a, b = _operand(cx, a_i), _operand(cx, b_i)
    if dtype_of(a) not in _QUANT or dtype_of(b) not in _QUANT or rank_of(a) < 2 or rank_of(b) != 2:
        return None
    za, zb = _scalar_zero_point(cx, a_zp, a), _scalar_zero_point(cx, b_zp, b)
    if za is None or zb is None:
        return None
    if transpose_b:
        b = cx.build("transpose", b, perm=[1, 0])
    return cx.build("matmul_integer", a, b, za, zb)


def _int_matmul(cx, a_i, a_zp, b_i, b_zp):
    direct = _matmul_integer(cx, a_i, a_zp, b_i, b_zp)
    if direct is not None:
        return direct
    a = _centered(cx, a_i, a_zp, _row_shape(cx.tensor(a_i)))
    b = _centered(cx, b_i, b_zp)
    return exact_int_matmul(cx, a, b)


def _int_conv(cx, x_i, x_zp, w_i, w_zp, bias=None):
    x = _centered(cx, x_i, x_zp)
    w = _centered(cx, w_i, w_zp, _channel_shape(cx.tensor(w_i)))
    if rank_of(x) not in (3, 4, 5):
        raise Decline(f"{rank_of(x) - 2}-D integer convolution")
    kernel = _kernel(cx, w)
    strides, dilations, pads = _spatial(cx, x, kernel)
    groups = cx.attr("group", 1)
    if rank_of(x) == 4 and groups == 1 and len(kernel) == 2 and kernel[0] * kernel[1] <= MAX_VARIADIC:
        y = _im2col_conv(cx, x, w, kernel, strides, dilations, pads)
        if bias is not None:
            y = cx.build("add", y, cx.build("reshape", bias, shape=[dims_of(bias)[0], dim(1), dim(1)]))
        return y
    return conv(cx, x, w, bias, strides, dilations, pads, groups)


def _im2col_conv(cx, x, w, kernel, strides, dilations, pads):
    """A 2-D convolution of centered i32 ``x`` ``[N, C, H, W]`` and ``w``
    ``[O, C, KH, KW]`` as im2col (one strided window slice per kernel tap,
    stacked) and :func:`exact_int_matmul`: the integer convolution at f32
    GEMM speed.  ``kiln.conv2d`` in f32 would not be exact: its 3x3 kernels
    may take Winograd, whose transforms round."""
    kh, kw = kernel
    if any(pads):
        x = cx.build("pad", x, pads=[0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], value=0.0)
    taps = []
    for i in range(kh):
        rows = _window_slice(cx, x, 2, i * dilations[0], (kh - 1) * dilations[0] + 1, strides[0])
        for j in range(kw):
            tap = _window_slice(cx, rows, 3, j * dilations[1], (kw - 1) * dilations[1] + 1, strides[1])
            td = dims_of(tap)
            taps.append(cx.build("reshape", tap, shape=[td[0], td[1], dim(1), td[2] * td[3]]))
    col = taps[0] if len(taps) == 1 else cx.build("concat", *taps, axis=2)  # [N, C, KH*KW, OH*OW]
    n, c, _, p = dims_of(col)
    col = cx.build("reshape", col, shape=[n, c * dim(kh * kw), p])
    o = dims_of(w)[0]
    w2 = cx.build("reshape", w, shape=[o, dims_of(w)[1] * dim(kh * kw)])
    y = exact_int_matmul(cx, w2, col)  # [N, O, OH*OW]
    return cx.build("reshape", y, shape=[n, o, td[2], td[3]])


@pattern("MatMulInteger")
def lower_matmul_integer(cx):
    """``(A - a_zero_point) @ (B - b_zero_point)`` in int32 (per-row a / per-column b zero points)."""
    return _int_matmul(cx, 0, 2, 1, 3)


@pattern("ConvInteger")
def lower_conv_integer(cx):
    """``conv(x - x_zero_point, w - w_zero_point)`` in int32 (zero points
    subtracted first, so padding contributes 0 as ONNX specifies)."""
    return _int_conv(cx, 0, 2, 1, 3)


def _requantize(cx, acc, multiplier, y_zp_index: int):
    """``quantize(f64(acc) * f64(multiplier), 1, y_zero_point)``."""
    y_zp = _operand(cx, y_zp_index)
    scaled = cx.build("mul", cx.cast(acc, "f64"), cx.cast(multiplier, "f64"))
    one = cx.const(1.0, "f64", shape=[d.value for d in dims_of(y_zp)])
    if rank_of(y_zp) > 1 or (rank_of(y_zp) == 1 and dims_of(y_zp)[0] != dim(1)):
        raise Decline("a per-axis output zero point")
    return cx.build("quantize", scaled, one, y_zp)


def _f32(cx, i: int):
    return cx.cast(cx.tensor(i), "f32")


@pattern("QLinearMatMul")
def lower_qlinear_matmul(cx):
    """Integer matmul of ``a``, ``b`` requantized with ``a_scale * b_scale / y_scale``."""
    acc = _int_matmul(cx, 0, 2, 3, 5)
    a_scale, b_scale = _f32(cx, 1), _f32(cx, 4)
    if rank_of(a_scale) == 1 and dims_of(a_scale)[0] != dim(1):
        a_scale = cx.build("reshape", a_scale, shape=[dims_of(a_scale)[0], dim(1)])
    mult = cx.build("div", cx.build("mul", a_scale, b_scale), _f32(cx, 6))
    return _requantize(cx, acc, mult, 7)


@pattern("QLinearConv")
def lower_qlinear_conv(cx):
    """Integer convolution (plus the int32 bias) requantized with ``x_scale * w_scale / y_scale``."""
    bias = cx.tensor(8) if cx.has(8) else None
    if bias is not None and dtype_of(bias) != "i32":
        raise Decline(f"QLinearConv bias of dtype {dtype_of(bias)} (expected int32)")
    acc = _int_conv(cx, 0, 2, 3, 5, bias)
    w_scale = _f32(cx, 4)
    if rank_of(w_scale) == 1 and dims_of(w_scale)[0] != dim(1):
        w_scale = cx.build("reshape", w_scale, shape=[dims_of(w_scale)[0]] + [dim(1)] * (rank_of(acc) - 2))
    mult = cx.build("div", cx.build("mul", _f32(cx, 1), w_scale), _f32(cx, 6))
    return _requantize(cx, acc, mult, 7)


@pattern("QGemm")
def lower_qgemm(cx):
    """com.microsoft QGemm (``A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?,
    y_zp?``; ``alpha``, ``transA``, ``transB``): the int32 product of the
    centered operands plus the int32 bias ``C``, scaled by ``alpha * a_scale *
    b_scale`` to f32, or requantized with ``/ y_scale`` when ``y_scale`` is given."""
    acc = None if cx.attr("transA", 0) else _matmul_integer(cx, 0, 2, 3, 5, transpose_b=bool(cx.attr("transB", 0)))
    if acc is None:
        acc = exact_int_matmul(cx, _centered(cx, 0, 2, transpose=bool(cx.attr("transA", 0))),
                               _centered(cx, 3, 5, transpose=bool(cx.attr("transB", 0))))
    if cx.has(6):
        bias = cx.tensor(6)
        if dtype_of(bias) != "i32":
            raise Decline(f"QGemm bias C of dtype {dtype_of(bias)} (expected int32)")
        acc = cx.build("add", acc, bias)
    mult = cx.build("mul", _f32(cx, 1), _f32(cx, 4))
    alpha = cx.attr("alpha", 1.0)
    if alpha != 1.0:
        mult = cx.build("mul", mult, cx.const(alpha, "f32"))
    if not cx.has(7):
        return cx.cast(cx.build("mul", cx.cast(acc, "f64"), cx.cast(mult, "f64")), "f32")
    return _requantize(cx, acc, cx.build("div", mult, _f32(cx, 7)), 8)


def _dequantized(cx, i: int):
    """Operand ``i`` of a QLinear op (scale ``i + 1``, zero point ``i + 2``) as f32."""
    x = _operand(cx, i)
    scale = _f32(cx, i + 1)
    zp = _operand(cx, i + 2) if cx.has(i + 2) else cx.const(0, dtype_of(x), shape=[d.value for d in dims_of(scale)])
    return cx.build("dequantize", x, scale, zp, axis=None)


@pattern("QLinearAdd", "QLinearMul")
def lower_qlinear_binary(cx):
    """com.microsoft QLinearAdd / QLinearMul: dequantize both, add (multiply)
    in f32, quantize (``A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp``)."""
    kind = "add" if cx.name == "onnx.QLinearAdd" else "mul"
    s = cx.build(kind, _dequantized(cx, 0), _dequantized(cx, 3))
    c_scale = _f32(cx, 6)
    zp = _operand(cx, 7) if cx.has(7) else cx.const(0, dtype_of(_operand(cx, 0)), shape=[d.value for d in dims_of(c_scale)])
    return cx.build("quantize", s, c_scale, zp)
