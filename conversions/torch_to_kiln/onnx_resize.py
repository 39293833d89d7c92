"""ONNX ``Resize`` (opsets 10-19) and the deprecated ``Upsample`` as kiln gathers and weighted sums.

Resize is separable: each resized axis is resampled on its own, in the order
the op lists its axes, exactly as ONNX's reference implementation does.  One
axis of size ``n_in`` resampled to ``n_out`` is, for every output position
``y``, a source coordinate ``x(y)`` (the ``coordinate_transformation_mode``),
a few integer taps around it (clamped to the axis: edge padding) and one
weight per tap (the ``mode``: nearest, linear, cubic, with ``antialias`` a
wider filter when downsampling).  In kiln that is one ``kiln.gather`` per tap
along the axis, each multiplied by its weights (a ``[n_out, 1, ...]``
tensor) and summed; ``tf_crop_and_resize`` adds a ``kiln.where`` with the
extrapolation value.

The coordinate / tap / weight arithmetic is written once over an array
namespace: with the axis sizes static it runs in numpy at import time and
its results become constants (nearest: a single gather; a wide antialias
filter: a dense ``[n_in, n_out]`` weight matrix and ``kiln.matmul``); with a
symbolic axis the same formulas are built from kiln ops (``kiln.range`` for
the output positions, the input size as ``reduce_sum`` of ones, ``floor``
through an integer cast), so the result is right for every value of the
symbol.  A scale on a symbolic axis must give an output size that is a kiln
dim expression (``floor(H * s)`` with ``s`` a short binary fraction: 2, 0.5,
1.5, ...); otherwise the op declines with that reason.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..._mlir import ir
from ...dialects.dims import Dim, dim
from ...dialects.kiln import tensor_type
from ...dialects.kiln.data import SLICE_END
from .aten import dims_of, dtype_of, rank_of
from .driver import Decline, Known
from .onnx import _attr_array, pattern

__all__ = ["AxisPlan", "axis_plan", "lower_resize"]

# A filter with more taps than this (antialias at a small scale) is applied
# as a dense weight matrix when that matrix is small enough.
_MAX_TAPS = 6
_MAX_DENSE = 1 << 20

_MODES = ("nearest", "linear", "cubic")
_COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
           "tf_crop_and_resize")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_POLICIES = ("stretch", "not_larger", "not_smaller")


# ----------------------------------------------------------------------------
# Attributes and inputs
# ----------------------------------------------------------------------------


def _str(cx, name, default):
    v = cx.attr(name, default)
    return v.decode() if isinstance(v, bytes) else v


def _float_input(cx, i):
    """Operand ``i`` as a float64 numpy array known at import time; None when absent or empty."""
    if not cx.has(i):
        return None
    v = cx.value(i)
    arr = None
    if isinstance(v, Known):
        arr = v.array()
    elif isinstance(v, ir.Value) and v.owner is not None:
        owner = v.owner.operation if hasattr(v.owner, "operation") else v.owner
        if owner.name == "kiln.constant":
            arr = _attr_array(cx, owner.attributes["value"])
    if arr is None:
        arr = cx.known(i).array()  # a run-time input: Decline with the driver's reason
    arr = np.asarray(arr, dtype=np.float64).reshape(-1)
    return arr if arr.size else None


def _sizes_input(cx, i):
    """Operand ``i`` (sizes) as a list of Dims; None when absent or empty."""
    if not cx.has(i):
        return None
    v = cx.value(i)
    if isinstance(v, Known):
        vals = v.ints()
    else:
        arr = _float_input(cx, i)
        vals = [] if arr is None else [int(a) for a in arr]
    return [dim(s) for s in vals] or None


class _Params:
    """The decoded attributes of one Resize / Upsample node."""

    def __init__(self, cx):
        legacy = cx.name == "onnx.Upsample" or cx.opset < 11
        self.mode = _str(cx, "mode", "nearest")
        if self.mode == "bilinear" and cx.name == "onnx.Upsample":
            self.mode = "linear"  # Upsample-7 spelling
        if self.mode not in _MODES:
            raise Decline(f"Resize mode '{self.mode}'")
        self.legacy = legacy
        # Resize-10 and Upsample: asymmetric coordinates; nearest rounds
        # down when upsampling and up when downsampling (ONNX Runtime's rule).
        self.coord = "asymmetric" if legacy else _str(cx, "coordinate_transformation_mode", "half_pixel")
        if self.coord not in _COORDS:
            raise Decline(f"Resize coordinate_transformation_mode '{self.coord}'")
        self.nearest = "legacy" if legacy else _str(cx, "nearest_mode", "round_prefer_floor")
        if self.nearest not in _NEAREST + ("legacy",):
            raise Decline(f"Resize nearest_mode '{self.nearest}'")
        self.cubic_a = float(cx.attr("cubic_coeff_a", -0.75))
        self.exclude_outside = bool(cx.attr("exclude_outside", 0))
        self.extrapolation = float(cx.attr("extrapolation_value", 0.0))
        self.antialias = bool(cx.attr("antialias", 0)) and self.mode != "nearest"
        self.policy = _str(cx, "keep_aspect_ratio_policy", "stretch")
        if self.policy not in _POLICIES:
            raise Decline(f"Resize keep_aspect_ratio_policy '{self.policy}'")


# ----------------------------------------------------------------------------
# The per-axis arithmetic, over numpy or kiln values
# ----------------------------------------------------------------------------


class _NumpyOps:
    """The array namespace of the static path (float64 numpy)."""

    floor = staticmethod(np.floor)
    abs = staticmethod(np.abs)
    where = staticmethod(np.where)
    minimum = staticmethod(np.minimum)
    maximum = staticmethod(np.maximum)

    def __init__(self, n_out: int):
        self.y = np.arange(n_out, dtype=np.float64)

    @staticmethod
    def to_index(x):
        return np.asarray(x).astype(np.int64)

    @staticmethod
    def or_(a, b):
        return a | b

    @staticmethod
    def row(values):
        return np.asarray(values, dtype=np.float64)

    @staticmethod
    def f32_mul(c, v):
        return float(np.float32(c) * np.float32(v))

    @staticmethod
    def column(v):
        return np.asarray(v)[:, None]

    @staticmethod
    def sum_taps(w):
        return w.sum(axis=1, keepdims=True)


class _KV:
    """A kiln tensor with numpy-style operators (numbers become rank-0 constants)."""

    __array_priority__ = 100

    def __init__(self, cx, v):
        self.cx, self.v = cx, v

    def _lift(self, o):
        if isinstance(o, _KV):
            return o.v
        return self.cx.like(o, self.v)

    def _op(self, kind, o, rev=False):
        neutral = {"add": 0, "mul": 1} if rev else {"add": 0, "sub": 0, "mul": 1, "div": 1}
        if isinstance(o, (int, float)) and not isinstance(o, bool) and neutral.get(kind) == o:
            return self  # x + 0, x * 1, x / 1: no op
        a, b = self.v, self._lift(o)
        if rev:
            a, b = b, a
        return _KV(self.cx, self.cx.build(kind, a, b))

    def __add__(self, o):
        return self._op("add", o)

    def __radd__(self, o):
        return self._op("add", o, True)

    def __sub__(self, o):
        return self._op("sub", o)

    def __rsub__(self, o):
        return self._op("sub", o, True)

    def __mul__(self, o):
        return self._op("mul", o)

    def __rmul__(self, o):
        return self._op("mul", o, True)

    def __truediv__(self, o):
        return self._op("div", o)

    def __rtruediv__(self, o):
        return self._op("div", o, True)

    def __neg__(self):
        return _KV(self.cx, self.cx.build("neg", self.v))

    def __lt__(self, o):
        return self._op("lt", o)

    def __le__(self, o):
        return self._op("le", o)

    def __gt__(self, o):
        return self._op("gt", o)

    def __ge__(self, o):
        return self._op("ge", o)

    def __eq__(self, o):  # noqa: D105 - elementwise, as in numpy
        return self._op("eq", o)

    __hash__ = None


class _KilnOps:
    """The array namespace of the symbolic path: kiln ops on f64 tensors."""

    def __init__(self, cx, n_out: Dim):
        self.cx, self.n_out = cx, n_out
        self.y = _KV(cx, cx.build("range", shape=[n_out], start=0.0, step=1.0,
                                  results=[tensor_type([n_out], "f64")]))

    def _kv(self, v, like=None):
        if isinstance(v, _KV):
            return v
        return _KV(self.cx, self.cx.const(v, "f64" if like is None else like))

    def floor(self, x):
        # floor(x) = trunc(x) - (trunc(x) > x): exact for every value an
        # index takes, without a floor op.
        t = _KV(self.cx, self.cx.cast(self.cx.cast(x.v, "i64"), "f64"))
        return self.where(t > x, t - 1.0, t)

    def abs(self, x):
        return _KV(self.cx, self.cx.build("abs", x.v))

    def where(self, c, a, b):
        a = self._kv(a)
        b = self._kv(b)
        return _KV(self.cx, self.cx.build("where", c.v, a.v, b.v))

    def minimum(self, a, b):
        a = self._kv(a)
        return _KV(self.cx, self.cx.build("minimum", a.v, a._lift(b)))

    def maximum(self, a, b):
        a = self._kv(a)
        return _KV(self.cx, self.cx.build("maximum", a.v, a._lift(b)))

    def to_index(self, x):
        return _KV(self.cx, self.cx.cast(x.v, "i64"))

    def or_(self, a, b):
        return _KV(self.cx, self.cx.build("where", a.v, a.v, b.v))

    def f32_mul(self, c, v):
        """``c * v`` rounded as float32 arithmetic rounds it (as a float64 value)."""
        if isinstance(v, (int, float)):
            return float(np.float32(c) * np.float32(v))
        v32 = self.cx.cast(v.v, "f32")
        return _KV(self.cx, self.cx.cast(self.cx.build("mul", v32, self.cx.like(float(c), v32)), "f64"))

    def row(self, values):
        return _KV(self.cx, self.cx.conv.materialize(Known(np.asarray(values, dtype=np.float64), "f64"), self.cx.loc))

    def column(self, v):
        return _KV(self.cx, self.cx.build("reshape", v.v, shape=[self.n_out, dim(1)]))

    def sum_taps(self, w):
        return _KV(self.cx, self.cx.build("reduce_sum", w.v, axes=[1], keepdims=True))


def _choose(xp, value, equal_to, then, otherwise):
    """``then`` where ``value == equal_to`` else ``otherwise`` (a Python choice for a number)."""
    if isinstance(value, (int, float)):
        return then() if value == equal_to else otherwise()
    return xp.where(value == equal_to, then(), otherwise())


def _safe(xp, d):
    """A denominator ``d`` with 0 replaced by 1 (its branch is then not taken)."""
    if isinstance(d, (int, float)):
        return d if d != 0 else 1.0
    return xp.where(d == 0.0, 1.0, d)


def _coordinates(xp, coord, n_in, n_out, scale, roi):
    """The source coordinate of each output position, as ONNX's reference
    computes it (same operation order, so float64 results agree bit for bit).
    ``n_out`` is the integer output size; the float ``width = scale * n_in``
    is what the reference tests against 1."""
    y = xp.y
    width = scale * n_in
    if coord == "align_corners":
        return _choose(xp, width, 1.0, lambda: y * 0.0, lambda: y * (n_in - 1) / _safe(xp, width - 1))
    if coord == "asymmetric":
        return y / scale
    if coord == "tf_crop_and_resize":
        # The reference holds the roi in float32: its products with the size
        # are float32 too (they decide nearest's ties).
        lo, hi = np.float32(roi[0]), np.float32(roi[1])
        extent = hi - lo
        x = _choose(xp, width, 1.0, lambda: y * 0.0 + xp.f32_mul(extent, n_in - 1) / 2,
                    lambda: y * float(extent) * (n_in - 1) / _safe(xp, width - 1))
        return x + xp.f32_mul(lo, n_in - 1)
    if coord == "pytorch_half_pixel":
        return _choose(xp, width, 1.0, lambda: y * 0.0 - 0.5, lambda: (y + 0.5) / scale - 0.5)
    if coord == "half_pixel_symmetric":
        adjustment = (n_out() if callable(n_out) else n_out) / width
        center = n_in / 2
        offset = center * (1 - adjustment)
        return offset + (y + 0.5) / scale - 0.5
    return (y + 0.5) / scale - 0.5  # half_pixel


def _cubic(xp, d, a):
    """The cubic convolution kernel (Keys, coefficient ``a``) at distance ``d``."""
    d = xp.abs(d)
    d2 = d * d
    d3 = d2 * d
    near = d3 * (a + 2) - d2 * (a + 3) + 1.0
    far = d3 * a - d2 * (5 * a) + d * (8 * a) - 4 * a
    return xp.where(d <= 1.0, near, xp.where(d < 2.0, far, 0.0))


def _taps(p, filter_scale):
    """Tap offsets from ``floor(x)``: 2 (linear), 4 (cubic), wider with antialias."""
    s = min(filter_scale, 1.0) if p.antialias else 1.0
    reach = 1 if p.mode == "linear" else 2
    start = math.floor(-reach / s) + 1
    return list(range(start, 2 - start))


def _nearest_offset(xp, p, t, filter_scale):
    """1 where nearest mode rounds ``x`` up from ``floor(x)``, else 0 (``t = x - floor(x)``)."""
    rule = p.nearest
    if rule == "legacy":
        rule = "ceil" if filter_scale < 1 else "floor"
    if rule == "floor":
        return t * 0.0
    if rule == "ceil":
        return xp.where(t > 0.0, 1.0, 0.0)
    if rule == "round_prefer_ceil":
        return xp.where(t >= 0.5, 1.0, 0.0)
    return xp.where(t > 0.5, 1.0, 0.0)


class AxisPlan:
    """How one axis is resampled: ``index`` (``[n_out, K]``: the taps of each
    output position, clamped to the axis, i.e. edge padding; ``[n_out]`` for
    nearest), ``weight`` (``[n_out, K]``, None for nearest) and ``outside``
    (None, or where the extrapolation value replaces the result)."""

    def __init__(self, index, weight, outside):
        self.index, self.weight, self.outside = index, weight, outside


def axis_plan(xp, p, n_in, n_out, scale, filter_scale, roi=None) -> AxisPlan:
    """The plan of one axis in array namespace ``xp`` (numpy or kiln).

    ``n_in`` / ``n_out`` are the input and output sizes (ints, or rank-0 f64
    kiln values), ``scale`` the axis's scale (a float, or a kiln value),
    ``filter_scale`` the scale as a number for the filter's width and
    nearest's legacy rule (1.0 where it is only known at run time)."""
    x = _coordinates(xp, p.coord, n_in, n_out, scale, roi)
    outside = xp.or_(x < 0.0, x > n_in - 1) if p.coord == "tf_crop_and_resize" else None
    base = xp.floor(x)
    t = x - base
    last = n_in - 1
    if p.mode == "nearest":
        idx = xp.minimum(xp.maximum(base + _nearest_offset(xp, p, t, filter_scale), 0.0), last)
        return AxisPlan(xp.to_index(idx), None, outside)
    s = min(filter_scale, 1.0) if p.antialias else 1.0
    # All taps at once: [n_out, K] tables (K = 2 linear, 4 cubic, more with antialias).
    j = xp.row([float(k) for k in _taps(p, filter_scale)])
    t, base = xp.column(t), xp.column(base)
    d = (t - j) * s
    w = xp.maximum(1.0 - xp.abs(d), 0.0) if p.mode == "linear" else _cubic(xp, d, p.cubic_a)
    tap = base + j
    if p.exclude_outside:
        w = xp.where(xp.or_(tap < 0.0, tap > last), 0.0, w)
    if p.antialias or p.exclude_outside:
        total = xp.sum_taps(w)
        if p.exclude_outside:
            total = xp.where(total == 0.0, 1.0, total)
        w = w / total
    return AxisPlan(xp.to_index(xp.minimum(xp.maximum(tap, 0.0), last)), w, outside)


# ----------------------------------------------------------------------------
# Emitting one axis
# ----------------------------------------------------------------------------


def _compute_dtype(x_dtype: str) -> str:
    return "f64" if x_dtype == "f64" else "f32"


def _trunc_floor(cx, v):
    """``floor(v)`` of a float tensor through an integer cast (trunc, then
    one less where that rounded up)."""
    t = cx.cast(cx.cast(v, "i64"), dtype_of(v))
    return cx.build("where", cx.build("gt", t, v), cx.build("sub", t, cx.like(1.0, t)), t)


def _finish(cx, acc, x_dtype):
    """``acc`` (float) back in the input's dtype.  Integers round half to even
    and saturate, as ONNX's reference does (``saturate_cast``)."""
    if dtype_of(acc) == x_dtype:
        return acc
    if not x_dtype.startswith("i") or x_dtype == "i1":
        return cx.cast(acc, x_dtype)
    info = np.iinfo({"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64}[x_dtype])
    half = cx.build("add", acc, cx.like(0.5, acc))
    r = _trunc_floor(cx, half)  # round half up
    # A tie (v + 0.5 an integer) that landed on an odd integer goes down by one.
    odd = cx.build("ne", cx.build("sub", r, cx.build("mul", _trunc_floor(cx, cx.build("mul", r, cx.like(0.5, r))),
                                                        cx.like(2.0, r))), cx.like(0.0, r))
    tie = cx.build("eq", r, half)
    r = cx.build("where", cx.build("where", tie, odd, tie), cx.build("sub", r, cx.like(1.0, r)), r)
    r = cx.build("minimum", cx.build("maximum", r, cx.like(float(info.min), r)), cx.like(float(info.max), r))
    return cx.cast(r, x_dtype)


def _fill(cx, p, out):
    """The extrapolation value as a rank-0 constant of ``out``'s dtype (rounded for integers)."""
    v = p.extrapolation if dtype_of(out).startswith(("f", "b")) else round(p.extrapolation)
    return cx.like(v, out)


def _column(cx, arr, axis, rank, dtype):
    """A constant ``[n_out, 1, ...]`` that broadcasts along ``axis`` of a rank-``rank`` tensor."""
    arr = np.asarray(arr).reshape([-1] + [1] * (rank - axis - 1))
    return cx.conv.materialize(Known(arr, dtype), cx.loc)


def _simplify(index, weight):
    """Drop all-zero taps; rows picking exactly one tap with weight 1 become
    one gather (nearest-like plans).  Returns ``(index, weight or None)``."""
    weight = [np.asarray(w, dtype=np.float64) for w in weight]
    keep = [k for k, w in enumerate(weight) if np.any(w != 0.0)] or [0]
    index, weight = [index[k] for k in keep], [weight[k] for k in keep]
    w = np.stack(weight)
    picked = w != 0.0
    if np.all(picked.sum(axis=0) <= 1):
        rows = np.arange(w.shape[1])
        chosen = np.argmax(picked, axis=0)
        if np.all(w[chosen, rows][picked.any(axis=0)] == 1.0) and picked.any(axis=0).all():
            return [np.stack(index)[chosen, rows]], None
    return index, weight


def _static_axis(cx, x, axis, plan: AxisPlan, p):
    """Resample ``x`` along ``axis`` with a plan computed in numpy (constants)."""
    rank = rank_of(x)
    x_dtype = dtype_of(x)
    n_in = dims_of(x)[axis]
    table = np.asarray(plan.index, dtype=np.int64)
    n_out = table.shape[0]
    if plan.weight is None:
        index, weight = [table], None
    else:
        w = np.asarray(plan.weight, dtype=np.float64)
        index, weight = _simplify([table[:, k] for k in range(table.shape[1])], [w[:, k] for k in range(w.shape[1])])
    outside = None if plan.outside is None or not np.any(plan.outside) else np.asarray(plan.outside, np.bool_)
    if weight is None and outside is None and n_in.is_static and n_in.value == n_out and np.array_equal(
            index[0], np.arange(n_out)):
        return x
    if weight is None:
        out = cx.build("gather", x, cx.conv.materialize(Known(index[0], "i64"), cx.loc), axis=axis)
    else:
        cdtype = _compute_dtype(x_dtype)
        xc = cx.cast(x, cdtype)
        if len(index) > _MAX_TAPS and n_in.is_static and n_in.value * n_out <= _MAX_DENSE:
            out = _dense(cx, xc, axis, index, weight, n_in.value, cdtype)
        else:
            # One gather of the [n_out, K] taps, weighted, summed over the tap
            # axis (fewer, faster kernels than one gather per tap).
            k = len(index)
            idx = cx.conv.materialize(Known(np.stack(index, axis=1), "i64"), cx.loc)
            g = cx.build("gather", xc, idx, axis=axis)
            wc = cx.conv.materialize(Known(np.stack(weight, axis=1).reshape([n_out, k] + [1] * (rank - axis - 1)),
                                           cdtype), cx.loc)
            out = cx.build("reduce_sum", cx.build("mul", g, wc), axes=[axis + 1], keepdims=False)
    if outside is not None:
        out = cx.build("where", _column(cx, outside, axis, rank, "i1"), _fill(cx, p, out), out)
    return _finish(cx, out, x_dtype)


def _dense(cx, x, axis, index, weight, n_in, dtype):
    """``x`` contracted along ``axis`` with the ``[n_in, n_out]`` matrix of a wide filter."""
    n_out = index[0].shape[0]
    m = np.zeros((n_in, n_out))
    for idx, w in zip(index, weight):
        np.add.at(m, (idx, np.arange(n_out)), w)
    rank = rank_of(x)
    perm = [a for a in range(rank) if a != axis] + [axis]
    xt = cx.build("transpose", x, perm=perm) if axis != rank - 1 else x
    y = cx.build("matmul", xt, cx.conv.materialize(Known(m, dtype), cx.loc))
    if axis == rank - 1:
        return y
    back = [0] * rank
    for i, a in enumerate(perm):
        back[a] = i
    return cx.build("transpose", y, perm=back)


def _dim_value(cx, d: Dim):
    """A rank-0 f64 tensor holding the value of dim ``d`` at run time: the
    last entry of ``1, 2, ..., d``.  Not a reduction: two reductions of one
    result shape fused into one CPU kernel returned the same value (a backend
    bug seen with two such dim values)."""
    count = cx.build("range", shape=[d], start=1.0, step=1.0, results=[tensor_type([d], "f64")])
    last = cx.build("slice", count, starts=[-1], ends=[SLICE_END], axes=[0])
    return cx.build("reshape", last, shape=[])


def _symbolic_axis(cx, x, axis, p, n_out: Dim, scale, roi):
    """Resample ``x`` along ``axis`` with the plan built from kiln ops (a
    symbolic input or output size).  ``scale`` is a float, or None for
    ``n_out / n_in`` computed at run time."""
    rank = rank_of(x)
    x_dtype = dtype_of(x)
    n_in_dim = dims_of(x)[axis]
    xp = _KilnOps(cx, n_out)
    n_in = float(n_in_dim.value) if n_in_dim.is_static else _KV(cx, _dim_value(cx, n_in_dim))

    def out_size():
        if n_out.is_static:
            return float(n_out.value)
        if scale is not None:  # floor(scale * n_in): exact for the scales _exact_scale admits
            return xp.floor(n_in * float(scale))
        return _KV(cx, _dim_value(cx, n_out))

    if scale is None:
        if p.antialias:
            raise Decline("Resize antialias to a symbolic size: the filter's width depends on the scale")
        scale_v, filter_scale = out_size() / n_in, 1.0
    else:
        scale_v, filter_scale = float(scale), float(scale)
    plan = axis_plan(xp, p, n_in, out_size, scale_v, filter_scale, roi)
    column = [n_out] + [dim(1)] * (rank - axis - 1)
    if plan.weight is None:
        out = cx.build("gather", x, plan.index.v, axis=axis)
    else:
        # One gather of the [n_out, K] taps, weighted, summed over the tap axis.
        cdtype = _compute_dtype(x_dtype)
        g = cx.build("gather", cx.cast(x, cdtype), plan.index.v, axis=axis)
        k = dims_of(plan.index.v)[1]
        w = cx.build("reshape", cx.cast(plan.weight.v, cdtype), shape=[n_out, k] + [dim(1)] * (rank - axis - 1))
        out = cx.build("reduce_sum", cx.build("mul", g, w), axes=[axis + 1], keepdims=False)
    if plan.outside is not None:
        mask = cx.build("reshape", plan.outside.v, shape=column)
        out = cx.build("where", mask, _fill(cx, p, out), out)
    return _finish(cx, out, x_dtype)


# ----------------------------------------------------------------------------
# The pattern
# ----------------------------------------------------------------------------


def _exact_scale(cx, scale: float, size: Dim) -> Dim:
    """``floor(size * scale)`` as a dim, for a scale that is a short binary fraction."""
    frac = Fraction(scale)
    if frac.denominator > 256 or frac.numerator > 1 << 16:
        s = str(np.float32(scale))  # as the model wrote it
        raise Decline(f"Resize scale {s} on the symbolic dim {size}: floor({size} * {s}) is not a kiln dim expression")
    return (size * frac.numerator) // frac.denominator


def _ratio(out: Dim, size: Dim):
    """``out / size`` as a float when it is a constant (``2*H / H``), else None."""
    if out.is_static and size.is_static:
        return out.value / size.value
    q = (out.expr / size.expr).simplify() if not (out.is_unknown or size.is_unknown) else None
    return float(q) if q is not None and q.is_Rational else None


def _inputs(cx, rank, coord):
    """``(scales, sizes, roi, axes)`` over the listed axes (``axes`` is the list).
    Inputs the op does not use (roi outside tf_crop_and_resize, scales next to
    sizes) are not read, so they may be run-time values."""
    if cx.name == "onnx.Upsample" and cx.opset < 9:
        scales = cx.attr("scales", None)
        return np.asarray(scales, dtype=np.float64), None, None, list(range(rank))
    if cx.name == "onnx.Upsample" or cx.opset < 11:
        return _float_input(cx, 1), None, None, list(range(rank))
    roi = _float_input(cx, 1) if coord == "tf_crop_and_resize" else None
    sizes = _sizes_input(cx, 3)
    scales = _float_input(cx, 2) if sizes is None else None
    axes = cx.attr("axes", None) if cx.opset >= 18 else None
    axes = [a % rank for a in axes] if axes else list(range(rank))
    if len(set(axes)) != len(axes):
        raise Decline(f"Resize axes {axes} with repeated axes")
    return scales, sizes, roi, axes


@pattern("Resize", "Upsample")
def lower_resize(cx):
    """ONNX Resize (10, 11, 13, 18, 19) and Upsample (7, 9): one resampling per resized axis."""
    p = _Params(cx)
    x = cx.tensor(0)
    rank = rank_of(x)
    dims = dims_of(x)
    scales, sizes, roi, axes = _inputs(cx, rank, p.coord)
    n = len(axes)
    if sizes is not None:
        if len(sizes) != n:
            raise Decline(f"Resize sizes of length {len(sizes)} for {n} axes")
        outs = list(sizes)
        ratios = [_ratio(o, dims[a]) for o, a in zip(outs, axes)]
        if p.policy != "stretch":
            if any(r is None for r in ratios) or not all(dims[a].is_static for a in axes):
                raise Decline(f"Resize keep_aspect_ratio_policy '{p.policy}' over symbolic dims")
            s = min(ratios) if p.policy == "not_larger" else max(ratios)
            ratios = [s] * n
            outs = [dim(int(s * dims[a].value + 0.5)) for a in axes]
    elif scales is not None:
        if len(scales) != n:
            raise Decline(f"Resize scales of length {len(scales)} for {n} axes")
        if np.any(scales <= 0):
            raise Decline(f"Resize scales {scales.tolist()}: scales must be positive")
        ratios = [float(s) for s in scales]
        outs = [dim(int(math.floor(s * dims[a].value))) if dims[a].is_static else _exact_scale(cx, s, dims[a])
                for s, a in zip(ratios, axes)]
    else:
        raise Decline("Resize without scales or sizes")
    if p.coord == "tf_crop_and_resize":
        if roi is None or len(roi) != 2 * n:
            raise Decline(f"Resize tf_crop_and_resize needs an roi of {2 * n} values")
        rois = [(float(roi[i]), float(roi[n + i])) for i in range(n)]
    else:
        rois = [None] * n
    x_dtype = dtype_of(x)
    if p.mode != "nearest" and x_dtype not in ("f32", "f64"):
        # Interpolate in float (float64 for integers, as ONNX's reference
        # does) and round once at the end.
        x = cx.cast(x, "f64" if x_dtype.startswith("i") else "f32")
    out = x
    for a, o, s, r in zip(axes, outs, ratios, rois):
        if o.is_unknown:
            raise Decline(f"Resize output size of axis {a} is unknown")
        if o.is_static and o.value == 0 or (s is not None and s <= 0):
            raise Decline(f"Resize axis {a} resized to nothing")
        trivial_roi = r is None or (math.isclose(r[0], 0.0) and math.isclose(r[1], 1.0))
        if s is not None and math.isclose(s, 1.0) and o == dims[a] and trivial_roi:
            continue  # identity along this axis (as ONNX's reference skips it)
        if dims[a].is_static and o.is_static:
            xp = _NumpyOps(o.value)
            plan = axis_plan(xp, p, dims[a].value, o.value, s, s, r)
            out = _static_axis(cx, out, a, plan, p)
        else:
            out = _symbolic_axis(cx, out, a, p, o, s, r)
    return _finish(cx, out, x_dtype)
