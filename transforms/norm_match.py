"""``kiln-simplify``'s RMS-norm patterns: the root-mean-square norm written
out, as one ``kiln.rms_norm``.

- ``rms-norm``: ``x * rsqrt(mean(x**2) + eps)`` (either order), or ``x /
  sqrt(mean(x**2) + eps)``, the square as ``pow(x, 2)`` or ``x * x``, the
  mean a ``keepdims`` ``reduce_mean`` over trailing axes and ``eps`` a
  one-element constant -> ``kiln.rms_norm(x) {axis, epsilon}``;
- ``rms-norm-weight``: ``rms_norm(x) * w`` (either order) with ``w`` shaped
  like the normalized dims and of x's dtype -> ``rms_norm(x, weight = w)``;
- ``rms-norm-cast``: ``cast(rms_norm(cast(x, f32)), dt)`` with ``x`` of the
  ``f16`` / ``bf16`` dtype ``dt`` -> ``rms_norm(x)`` (kiln.rms_norm computes
  low-precision input in f32 and rounds once: transformers' ``LlamaRMSNorm``
  upcasts, normalizes and casts back before its weight).

Near-misses stay as written: a mean over a leading axis or without
``keepdims``, ``eps`` added after the square root, a square of another
value, a power other than 2.  A layer norm (``x - mean`` normalized) is
matched by ``layer-norm`` first, which comes earlier in the table.
"""

from __future__ import annotations

from ..dialects.kiln import tensor_info
from ._match import Pattern, axes_of, build, dims_of, producer, rank, same_value, single_use, splat
from .fold_constants import operand_map

__all__ = ["NORM_PATTERNS", "rms_norm", "rms_norm_cast", "rms_norm_weight"]


def _epsilon(value) -> float | None:
    """The splat of a one-element constant (so the add cannot widen), else None."""
    if any(not d.is_static or d.value != 1 for d in dims_of(value)):
        return None
    return splat(value)


def _mean_square_of(value, x) -> list[int] | None:
    """The (trailing) axes when ``value`` is ``reduce_mean(x**2, axes, keepdims)``."""
    mean = producer(value, "kiln.reduce_mean")
    if mean is None:
        return None
    axes = axes_of(mean)
    r = rank(x)
    if not axes or axes != list(range(r - len(axes), r)):
        return None
    sq = mean.operands[0]
    mul = producer(sq, "kiln.mul")
    if mul is not None:
        ok = same_value(mul.operands[0], x) and same_value(mul.operands[1], x)
    else:
        power = producer(sq, "kiln.pow")
        ok = power is not None and same_value(power.operands[0], x) and _epsilon(power.operands[1]) == 2.0
    return axes if ok else None


def rms_norm(root):
    """``x * rsqrt(mean(x**2) + eps)`` or ``x / sqrt(...)`` -> ``kiln.rms_norm``."""
    if root.name == "kiln.div":
        x, den = root.operands
        pairs = [(x, producer(den, "kiln.sqrt"))]
    else:
        a, b = root.operands
        pairs = [(a, producer(b, "kiln.rsqrt")), (b, producer(a, "kiln.rsqrt"))]
    for x, root_op in pairs:
        if root_op is None or x.type != root.results[0].type:
            continue
        plus = producer(root_op.operands[0], "kiln.add")
        if plus is None:
            continue
        for ms, eps_v in (plus.operands, list(plus.operands)[::-1]):
            eps = _epsilon(eps_v)
            axes = _mean_square_of(ms, x) if eps is not None else None
            if axes is not None:
                return build(root, "kiln.rms_norm", [x], {"axis": axes[0] - rank(x), "epsilon": eps})
    return None


def _rms(value):
    """The ``kiln.rms_norm`` op making ``value`` when only one op reads it, else None."""
    op = producer(value, "kiln.rms_norm")
    return op if op is not None and single_use(value) else None


def _attrs(op) -> dict:
    return {"axis": op.opview.attr("axis"), "epsilon": op.opview.attr("epsilon")}


def rms_norm_weight(root):
    """``rms_norm(x) * w`` -> ``rms_norm(x, weight = w)``."""
    for i in (0, 1):
        op = _rms(root.operands[i])
        if op is None or "weight" in operand_map(op):
            continue
        x, w = op.operands[0], root.operands[1 - i]
        info, wi = tensor_info(x.type), tensor_info(w.type)
        axis = op.opview.attr("axis") % info.rank
        if wi.dtype != info.dtype or tuple(wi.dims) != tuple(info.dims[axis:]):
            continue
        return build(root, "kiln.rms_norm", [x], _attrs(op), weight=w)
    return None


def rms_norm_cast(root):
    """``cast(rms_norm(cast(x, f32)), dt)`` with x of dtype ``dt`` (f16 / bf16) -> ``rms_norm(x)``."""
    op = _rms(root.operands[0])
    if op is None or "weight" in operand_map(op):
        return None
    up = producer(op.operands[0], "kiln.cast")
    if up is None:
        return None
    x = up.operands[0]
    dt = str(tensor_info(x.type).dtype)
    if dt not in ("f16", "bf16") or str(tensor_info(op.operands[0].type).dtype) != "f32" \
            or x.type != root.results[0].type:
        return None
    return build(root, "kiln.rms_norm", [x], _attrs(op))


#: The table entries :mod:`kiln.transforms.simplify` adds to its own (after ``layer-norm``).
NORM_PATTERNS = [
    Pattern("rms-norm", "kiln.mul", rms_norm),
    Pattern("rms-norm", "kiln.div", rms_norm),
    Pattern("rms-norm-weight", "kiln.mul", rms_norm_weight),
    Pattern("rms-norm-cast", "kiln.cast", rms_norm_cast),
]
