"""Patterns for PyTorch's PT2E quantization ops (``quantized_decomposed.*``,
what ``convert_pt2e`` leaves in an exported graph): quantize / dequantize per
tensor and per channel become ``kiln.quantize`` / ``kiln.dequantize``.

torch computes ``clamp(round(x * (1 / scale)) + zero_point, quant_min,
quant_max)`` (a multiply by the f32 inverse, not a division), so the pattern
multiplies by that inverse itself and quantizes with scale 1: the same f32
rounding as torch's.  A ``[quant_min, quant_max]`` narrower than the dtype's
range (``-127..127`` weights) is a clamp before rounding (equal to one after
it: the bounds are integers).
"""

from __future__ import annotations

from ...dialects.dims import dim
from ...dialects.kiln.quant import INT_RANGES
from .aten import dims_of, dtype_of, pattern, rank_of
from .driver import Decline

__all__ = ["TORCH_QUANT_DTYPES"]

#: torch ScalarType numbers of the quantized dtypes -> kiln dtype.
TORCH_QUANT_DTYPES = {0: "ui8", 1: "i8", 3: "i32"}

_NS = "torch.quantized_decomposed"


def _qdtype(cx, i: int) -> str:
    code = cx.int(i)
    if code not in TORCH_QUANT_DTYPES:
        raise Decline(f"quantized dtype code {code} (kiln has uint8, int8, int32)")
    return TORCH_QUANT_DTYPES[code]


def _bounds(cx, lo_i: int, hi_i: int, dtype: str):
    lo, hi = cx.int(lo_i), cx.int(hi_i)
    dlo, dhi = INT_RANGES[dtype]
    if lo < dlo or hi > dhi or lo > hi:
        raise Decline(f"quant range [{lo}, {hi}] outside {dtype}'s [{dlo}, {dhi}]")
    return lo, hi, (lo, hi) != (dlo, dhi)


def _f32_output(cx, i: int) -> None:
    """Dequantize's optional ``out_dtype`` (operand ``i``): None or float32 (code 6)."""
    if cx.has(i) and cx.int(i) != 6:
        raise Decline(f"dequantize to dtype code {cx.int(i)} (kiln dequantizes to float32)")


def _scalar_param(cx, i: int, kind: str):
    """A per-tensor scale (f32) or zero point: a constant scalar, or a one-element tensor."""
    v = cx.value(i)
    if isinstance(v, (int, float)):
        return v
    try:
        return cx.scalar(i)
    except Decline:
        raise Decline(f"a per-tensor {kind} computed at run time") from None


@pattern(f"{_NS}.quantize_per_tensor", f"{_NS}.quantize_per_tensor.tensor")
def lower_quantize_per_tensor(cx):
    """``(x, scale, zero_point, quant_min, quant_max, dtype)`` -> ``kiln.quantize``."""
    x = cx.tensor(0)
    if dtype_of(x) != "f32":
        x = cx.cast(x, "f32")
    scale = float(_scalar_param(cx, 1, "scale"))
    zp = int(_scalar_param(cx, 2, "zero point"))
    dtype = _qdtype(cx, 5)
    lo, hi, narrow = _bounds(cx, 3, 4, dtype)
    v = cx.build("mul", x, cx.const(1.0 / scale, "f32"))
    if narrow:  # clamp(round(v) + zp, lo, hi) == round(clamp(v, lo - zp, hi - zp)) + zp
        v = cx.build("minimum", cx.build("maximum", v, cx.const(float(lo - zp), "f32")), cx.const(float(hi - zp), "f32"))
    return cx.build("quantize", v, cx.const(1.0, "f32"), cx.const(zp, dtype))


@pattern(f"{_NS}.dequantize_per_tensor", f"{_NS}.dequantize_per_tensor.tensor")
def lower_dequantize_per_tensor(cx):
    """``(x, scale, zero_point, quant_min, quant_max, dtype)`` -> ``kiln.dequantize`` in f32."""
    x = cx.tensor(0)
    dtype = _qdtype(cx, 5)
    if dtype_of(x) != dtype:
        x = cx.cast(x, dtype)
    _f32_output(cx, 6)
    scale = float(_scalar_param(cx, 1, "scale"))
    zp = int(_scalar_param(cx, 2, "zero point"))
    return cx.build("dequantize", x, cx.const(scale, "f32"), cx.const(zp, dtype))


@pattern(f"{_NS}.dequantize_per_channel")
def lower_dequantize_per_channel(cx):
    """``(x, scales, zero_points, axis, quant_min, quant_max, dtype)`` ->
    per-axis ``kiln.dequantize`` (scales as f32, zero points in x's dtype)."""
    x = cx.tensor(0)
    dtype = _qdtype(cx, 6)
    if dtype_of(x) != dtype:
        x = cx.cast(x, dtype)
    _f32_output(cx, 7)
    scales, zps = cx.cast(cx.tensor(1), "f32"), cx.cast(cx.tensor(2), dtype)
    axis = cx.int(3)
    if not -rank_of(x) <= axis < rank_of(x):
        raise Decline(f"axis {axis} is out of range for rank {rank_of(x)}")
    if rank_of(scales) != 1 or dims_of(scales)[0] != dims_of(x)[axis % rank_of(x)]:
        if not (rank_of(scales) == 1 and dims_of(scales)[0] == dim(1)):
            raise Decline(f"per-channel scales of shape {dims_of(scales)} for axis {axis} of {dims_of(x)}")
    return cx.build("dequantize", x, scales, zps, axis=axis % rank_of(x))


@pattern(f"{_NS}.quantize_per_channel")
def lower_quantize_per_channel(cx):
    """``(x, scales, zero_points, axis, quant_min, quant_max, dtype)`` -> per-axis
    ``kiln.quantize`` (x * (1 / scales) in f32, as torch computes it)."""
    x = cx.cast(cx.tensor(0), "f32")
    dtype = _qdtype(cx, 6)
    _, _, narrow = _bounds(cx, 4, 5, dtype)
    if narrow:
        raise Decline("quantize_per_channel with a range narrower than the dtype's")
    axis = cx.int(3) % rank_of(x)
    scales = cx.cast(cx.tensor(1), "f32")
    shape = [dims_of(scales)[0] if k == axis else dim(1) for k in range(rank_of(x))]
    inv = cx.build("div", cx.const(1.0, "f32"), cx.build("reshape", scales, shape=shape))
    n = dims_of(scales)[0]
    if not n.is_static:
        raise Decline("per-channel scales of symbolic length")
    ones = cx.const(1.0, "f32", shape=[n.value])
    return cx.build("quantize", cx.build("mul", x, inv), ones, cx.cast(cx.tensor(2), dtype), axis=axis)
