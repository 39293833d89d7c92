"""Patterns for ONNX ops as torch-mlir's ONNX importer leaves them
(``torch.operator "onnx.Conv"`` with ``torch.onnx.*`` attributes).

ONNX ops map onto kiln directly (kiln's op set follows ONNX conventions for
pads and axes), so these patterns skip torch-mlir's ONNX -> ATen lowering,
which would turn every shape computation into runtime scalar arithmetic.
Shape subgraphs (``Shape``, ``Gather``, ``Concat``, ``Unsqueeze``, ... on
shape tensors) are folded at import time into :class:`Known` values and end
up as kiln attributes.  Each pattern handles the attribute-vs-input forms of
the opsets it names; anything else declines and falls back.
"""

from __future__ import annotations

import numpy as np

from ..._mlir import ir
from ...dialects.dims import Dim, dim
from ...dialects.kiln.shapes import matrix_transpose, product
from ...transforms._graph import NUMPY_DTYPES
from .aten import dims_of, dtype_of, rank_of, tensor_type
from .driver import Decline, Known

ONNX_PATTERNS: dict = {}

# ONNX TensorProto data types -> kiln dtypes.
ONNX_DTYPES = {1: "f32", 2: "ui8", 3: "i8", 4: None, 5: "i16", 6: "i32", 7: "i64", 9: "i1", 10: "f16", 11: "f64",
               16: "bf16"}


def pattern(*names):
    """Register the decorated function for ONNX ops ``names`` (without ``onnx.``)."""

    def register(fn):
        for n in names:
            ONNX_PATTERNS[f"onnx.{n}"] = fn
        return fn

    return register


def _np_dtype(dtype: str):
    """The numpy dtype folded values of ``dtype`` are held in (bf16 as f32)."""
    return np.float32 if dtype == "bf16" else NUMPY_DTYPES[dtype]


def _attr_array(cx, a) -> np.ndarray | None:
    arr = cx.conv.resource(a)
    if arr is not None:
        return np.asarray(arr)
    if isinstance(a, ir.DenseElementsAttr):
        t = ir.RankedTensorType(a.type)
        if a.is_splat:
            v = a.get_splat_value()
            scalar = v.value if hasattr(v, "value") else float(v)
            return np.full(t.shape, scalar)
        try:
            return np.array(a)
        except Exception:
            return None
    return None


def _all_known(cx, idx) -> bool:
    return all(isinstance(cx.value(i), Known) for i in idx if cx.has(i))


# ----------------------------------------------------------------------------
# Constants and shapes
# ----------------------------------------------------------------------------


@pattern("Constant")
def lower_constant(cx):
    a = cx.op.attributes
    dtype = cx.result_dtype()
    if "torch.onnx.value" in a:
        value = a["torch.onnx.value"]
        el = str(ir.RankedTensorType(value.type).element_type)
        shape = list(ir.RankedTensorType(value.type).shape)
        small = int(np.prod(shape)) <= 64 if shape else True
        # Small integer tensors and float scalars stay import-time known
        # (shapes, axes, Range bounds); used as data they materialize.
        if el == dtype and not (small and (dtype.startswith("i") or not shape)):
            return cx.build("constant", value=value)
        arr = _attr_array(cx, value)
        if arr is None:
            raise Decline(f"constant of element type {el} without readable data")
        return Known(arr.astype(_np_dtype(dtype)).reshape(shape), dtype)
    for key, conv in (("value_float", float), ("value_int", int)):
        if f"torch.onnx.{key}" in a:
            return Known(np.asarray(conv(cx.attr(key)), dtype=_np_dtype(dtype)), dtype)
    for key in ("value_floats", "value_ints"):
        if f"torch.onnx.{key}" in a:
            return Known(np.asarray(cx.attr(key), dtype=_np_dtype(dtype)), dtype)
    raise Decline("Constant without a supported value attribute")


@pattern("Shape")
def lower_shape(cx):
    dims = dims_of(cx.tensor(0))
    start, end = cx.attr("start", 0), cx.attr("end", None)
    dims = dims[start:end] if end is not None else dims[start:]
    if any(d.is_unknown for d in dims):
        raise Decline("Shape of a tensor with unknown dims")
    return Known([d.value if d.is_static else d for d in dims], "i64")


@pattern("Size")
def lower_size(cx):
    n = product(dims_of(cx.tensor(0)))
    return Known(np.asarray(n.value) if n.is_static else [n], "i64")


@pattern("ConstantOfShape")
def lower_constant_of_shape(cx):
    shape = [dim(d) for d in cx.known(0).ints()]
    dtype = cx.result_dtype()
    value = 0.0
    if "torch.onnx.value" in cx.op.attributes:
        arr = _attr_array(cx, cx.op.attributes["torch.onnx.value"])
        value = arr.reshape(-1)[0].item() if arr is not None else 0.0
    if any(not d.is_static for d in shape):
        c = cx.const(value, dtype)
        return cx.build("expand", c, shape=shape)
    shape = [d.value for d in shape]
    if int(np.prod(shape)) <= 64 and dtype.startswith("i"):
        return Known(np.full(shape, value, dtype=_np_dtype(dtype)), dtype)
    return cx.const(value, dtype, shape)


def _fold(fn):
    """Evaluate an op on import-time known inputs (shape arithmetic)."""

    def lower(cx):
        vals = [cx.known(i) for i in range(cx.num_operands)]
        if any(v.is_symbolic for v in vals):
            if len(vals) == 2 and all(isinstance(v.data, list) or np.asarray(v.data).size <= 8 for v in vals):
                a, b = ([dim(x) for x in v.ints()] for v in vals)
                if len(a) == 1:
                    a = a * len(b)
                if len(b) == 1:
                    b = b * len(a)
                out = [fn(x, y) for x, y in zip(a, b)]
                return Known([o.value if o.is_static else o for o in out], "i64")
            raise Decline("symbolic shape arithmetic")
        out = fn(*[v.array() for v in vals])
        return Known(np.asarray(out).astype(_np_dtype(cx.result_dtype())), cx.result_dtype())

    return lower


def _div(a, b):
    """ONNX Div: true division for floats, truncation toward zero for integers."""
    if not isinstance(a, np.ndarray):  # symbolic dims (sizes are non-negative)
        return a // b
    if a.dtype.kind in "iu":
        return (np.abs(a) // np.abs(b)) * np.sign(a) * np.sign(b)
    return a / b


_FOLDS = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b, "Div": _div}


# ----------------------------------------------------------------------------
# Elementwise
# ----------------------------------------------------------------------------


def _is_float_dtype(dtype: str) -> bool:
    return dtype.startswith("f") or dtype == "bf16"


def _legacy_axis(cx) -> int | None:
    """Opsets < 7 broadcast B onto A only with ``broadcast=1``, B's dims
    matching A's from ``axis`` on (default: A's trailing dims, as numpy).
    The position to align B at when that is not numpy's alignment, else None."""
    if cx.opset >= 7 or not cx.attr("broadcast", 0) or cx.attr("axis", None) is None:
        return None
    ra, rb = rank_of(cx.tensor(0)), rank_of(cx.tensor(1))
    axis = cx.attr("axis") + (ra if cx.attr("axis") < 0 else 0)
    if not 0 <= axis <= ra - rb:
        raise Decline(f"legacy broadcast axis {cx.attr('axis')} does not fit B of rank {rb} in A of rank {ra}")
    return axis if axis + rb < ra else None


def _legacy_broadcast(cx, a, b, axis):
    """B reshaped so that numpy broadcasting aligns it at A's ``axis``."""
    if axis is None:
        return b
    return cx.build("reshape", b, shape=dims_of(b) + [dim(1)] * (rank_of(a) - axis - rank_of(b)))


def _binary(kind):
    fold = _fold(_FOLDS[kind.capitalize()]) if kind.capitalize() in _FOLDS else None

    def lower(cx):
        axis = _legacy_axis(cx)
        if fold is not None and axis is None and _all_known(cx, range(cx.num_operands)):
            try:
                return fold(cx)
            except Decline:
                pass
        a, b = cx.tensor(0), cx.tensor(1)
        b = _legacy_broadcast(cx, a, b, axis)
        if kind == "pow" and dtype_of(b) != dtype_of(a):
            da, db = dtype_of(a), dtype_of(b)
            if _is_float_dtype(db) and not _is_float_dtype(da):
                # An integer base to a float power is computed in floating
                # point and truncated, as ONNX Runtime does (casting the
                # exponent to the base's type gave 4 ** 0.5 = 1, not 2).
                return cx.cast(cx.build(kind, cx.cast(a, db), b), da)
            b = cx.cast(b, da)
        return cx.build(kind, a, b)

    return lower


for _onnx, _kind in (("Add", "add"), ("Sub", "sub"), ("Mul", "mul"), ("Div", "div"), ("Pow", "pow"),
                     ("Equal", "eq"), ("Less", "lt"), ("LessOrEqual", "le"), ("Greater", "gt"),
                     ("GreaterOrEqual", "ge")):
    ONNX_PATTERNS[f"onnx.{_onnx}"] = _binary(_kind)


# Known (import-time) operands fold: shape arithmetic over frozen inputs (Max of two shapes).
_KNOWN_FOLDS = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum, "neg": np.negative, "abs": np.abs}


def _fold_known(cx, kind):
    """The folded value when every operand is a non-symbolic Known, else None."""
    vals = [cx.value(i) for i in range(cx.num_operands)]
    if kind not in _KNOWN_FOLDS or not all(isinstance(v, Known) and not v.is_symbolic for v in vals):
        return None
    out = vals[0].array()
    for v in vals[1:]:
        out = _KNOWN_FOLDS[kind](out, v.array())
    if kind in ("neg", "abs"):
        out = _KNOWN_FOLDS[kind](out)
    return Known(np.asarray(out).astype(_np_dtype(cx.result_dtype())), cx.result_dtype())


def _variadic(kind):
    def lower(cx):
        folded = _fold_known(cx, kind)
        if folded is not None:
            return folded
        vals = [cx.tensor(i) for i in range(cx.num_operands)]
        out = vals[0]
        for v in vals[1:]:
            out = cx.build(kind, out, v)
        return out

    return lower


ONNX_PATTERNS["onnx.Sum"] = _variadic("add")
ONNX_PATTERNS["onnx.Max"] = _variadic("maximum")
ONNX_PATTERNS["onnx.Min"] = _variadic("minimum")


@pattern("Mean")
def lower_mean(cx):
    out = _variadic("add")(cx)
    return cx.build("div", out, cx.like(cx.num_operands, out)) if cx.num_operands > 1 else out


def _unary(kind):
    def lower(cx):
        folded = _fold_known(cx, kind)
        if folded is not None:
            return folded
        return cx.build(kind, cx.tensor(0))

    return lower


for _onnx, _kind in (("Neg", "neg"), ("Abs", "abs"), ("Exp", "exp"), ("Log", "log"), ("Sqrt", "sqrt"),
                     ("Tanh", "tanh"), ("Sigmoid", "sigmoid"), ("Relu", "relu"), ("Erf", "erf")):
    ONNX_PATTERNS[f"onnx.{_onnx}"] = _unary(_kind)


@pattern("Identity", "Dropout")
def lower_identity(cx):
    if cx.name == "onnx.Dropout" and cx.has(2) and cx.known(2).ints() != [0]:
        # Training mode drops at random; with ratio 0 it keeps everything (the identity).
        ratio = float(np.asarray(cx.known(1).array()).reshape(-1)[0]) if cx.has(1) else 0.5
        if ratio != 0.0:
            raise Decline(f"Dropout in training mode with ratio {ratio} (random; kiln compiles inference)")
    if cx.name == "onnx.Dropout" and len(cx.op.results) > 1:
        x = cx.tensor(0)
        mask = cx.const(1, "i1", [])
        return (x, cx.build("expand", mask, shape=dims_of(x)))
    return cx.value(0)


@pattern("Reciprocal")
def lower_reciprocal(cx):
    x = cx.tensor(0)
    return cx.build("div", cx.like(1.0, x), x)


@pattern("LeakyRelu")
def lower_leaky_relu(cx):
    x = cx.tensor(0)
    alpha = cx.attr("alpha", 0.01)
    return cx.build("where", cx.build("ge", x, cx.like(0.0, x)), x, cx.build("mul", x, cx.like(alpha, x)))


@pattern("PRelu")
def lower_prelu(cx):
    """``where(x >= 0, x, x * slope)``; slope broadcasts to X one way only
    (opset >= 7).  Opsets 1 and 6 (Caffe2's PRelu) give a 1-D slope one
    value per channel, axis 1 (PyTorch exported ``nn.PReLU(C)`` so)."""
    x, slope = cx.tensor(0), cx.tensor(1)
    xd, sd = dims_of(x), dims_of(slope)
    if cx.opset < 7 and len(sd) == 1 and len(xd) > 2 and sd[0] != dim(1):
        if sd[0] != xd[1] and sd[0].is_static and xd[1].is_static:
            raise Decline(f"PRelu-{cx.opset} slope of {sd[0]} values for {xd[1]} channels")
        slope = cx.build("reshape", slope, shape=[sd[0]] + [dim(1)] * (len(xd) - 2))
        sd = dims_of(slope)
    # Unidirectional: every slope dim is 1 or X's (aligned at the right).
    lead, tail = sd[:max(0, len(sd) - len(xd))], sd[max(0, len(sd) - len(xd)):]
    bad = any(d != dim(1) for d in lead) or any(
        s != dim(1) and s != d and (s.is_static and d.is_static or d == dim(1))
        for s, d in zip(tail, xd[len(xd) - len(tail):]))
    if bad:
        raise Decline(f"PRelu slope of shape {[str(d) for d in sd]} does not broadcast to X of shape "
                      f"{[str(d) for d in xd]}")
    if lead:
        slope = cx.build("reshape", slope, shape=tail)
    return cx.build("where", cx.build("ge", x, cx.like(0.0, x)), x, cx.build("mul", x, slope))


@pattern("Elu")
def lower_elu(cx):
    x = cx.tensor(0)
    alpha = cx.attr("alpha", 1.0)
    neg = cx.build("mul", cx.build("sub", cx.build("exp", x), cx.like(1.0, x)), cx.like(alpha, x))
    return cx.build("where", cx.build("gt", x, cx.like(0.0, x)), x, neg)


@pattern("Selu")
def lower_selu(cx):
    x = cx.tensor(0)
    alpha, gamma = cx.attr("alpha", 1.67326319217681884765625), cx.attr("gamma", 1.05070102214813232421875)
    neg = cx.build("mul", cx.build("sub", cx.build("exp", x), cx.like(1.0, x)), cx.like(alpha, x))
    return cx.build("mul", cx.build("where", cx.build("gt", x, cx.like(0.0, x)), x, neg), cx.like(gamma, x))


@pattern("HardSigmoid")
def lower_hard_sigmoid(cx):
    x = cx.tensor(0)
    alpha, beta = cx.attr("alpha", 0.2), cx.attr("beta", 0.5)
    y = cx.build("add", cx.build("mul", x, cx.like(alpha, x)), cx.like(beta, x))
    return cx.build("minimum", cx.build("maximum", y, cx.like(0.0, x)), cx.like(1.0, x))


@pattern("HardSwish")
def lower_hard_swish(cx):
    x = cx.tensor(0)
    y = cx.build("add", cx.build("mul", x, cx.like(1 / 6, x)), cx.like(0.5, x))
    y = cx.build("minimum", cx.build("maximum", y, cx.like(0.0, x)), cx.like(1.0, x))
    return cx.build("mul", x, y)


@pattern("Softplus")
def lower_softplus(cx):
    x = cx.tensor(0)
    return cx.build("log", cx.build("add", cx.build("exp", x), cx.like(1.0, x)))


@pattern("Softsign")
def lower_softsign(cx):
    x = cx.tensor(0)
    return cx.build("div", x, cx.build("add", cx.build("abs", x), cx.like(1.0, x)))


@pattern("Gelu")
def lower_gelu(cx):
    return cx.build("gelu", cx.tensor(0), approximate=cx.attr("approximate", "none"))


@pattern("Clip")
def lower_clip(cx):
    x = cx.tensor(0)
    if cx.opset < 11:
        lo, hi = cx.attr("min", None), cx.attr("max", None)
        lo = cx.like(lo, x) if lo is not None else None
        hi = cx.like(hi, x) if hi is not None else None
    else:
        lo = cx.tensor(1) if cx.has(1) else None
        hi = cx.tensor(2) if cx.has(2) else None
    if lo is not None:
        x = cx.build("maximum", x, lo)
    if hi is not None:
        x = cx.build("minimum", x, hi)
    return x


@pattern("Where")
def lower_where(cx):
    return cx.build("where", cx.tensor(0), cx.tensor(1), cx.tensor(2))


@pattern("Not")
def lower_not(cx):
    x = cx.tensor(0)
    return cx.build("eq", x, cx.like(0, x))


@pattern("IsNaN")
def lower_isnan(cx):
    # x != x is true exactly for NaN (kiln.ne on floats is the unordered compare).
    x = cx.tensor(0)
    return cx.build("ne", x, x)


@pattern("IsInf")
def lower_isinf(cx):
    x = cx.tensor(0)
    pos, neg = cx.attr("detect_positive", 1), cx.attr("detect_negative", 1)
    if not (pos or neg):
        return cx.build("lt", x, x)  # false everywhere, NaN included
    if pos and neg:
        return cx.build("eq", cx.build("abs", x), cx.like(float("inf"), x))
    return cx.build("eq", x, cx.like(float("inf") if pos else float("-inf"), x))


@pattern("Cast")
def lower_cast(cx):
    to = cx.result_dtype()
    v = cx.value(0)
    if isinstance(v, Known) and v.is_symbolic and to not in ("i64", "i32"):
        return cx.cast(cx.tensor(0), to)  # dims as data (a 1/sqrt(L) scale): computed at run time
    if isinstance(v, Known):
        if isinstance(v.data, list) and to in ("i64", "i32"):
            return Known(v.data, to, rank0=v.rank0)
        return Known(v.array().astype(_np_dtype(to)), to)
    return cx.cast(cx.tensor(0), to)


@pattern("CastLike")
def lower_cast_like(cx):
    return cx.cast(cx.tensor(0), cx.result_dtype())


# ----------------------------------------------------------------------------
# Contractions, convolution, pooling, normalization
# ----------------------------------------------------------------------------


@pattern("MatMul")
def lower_matmul(cx):
    return cx.build("matmul", cx.tensor(0), cx.tensor(1))


def _t(cx, x):
    return cx.build("transpose", x, perm=matrix_transpose(rank_of(x)))


@pattern("Gemm")
def lower_gemm(cx):
    """``alpha * A' B' + beta * C`` as transpose + matmul + mul + add."""
    a, b = cx.tensor(0), cx.tensor(1)
    if cx.attr("transA", 0):
        a = _t(cx, a)
    if cx.attr("transB", 0):
        b = _t(cx, b)
    y = cx.build("matmul", a, b)
    alpha, beta = cx.attr("alpha", 1.0), cx.attr("beta", 1.0)
    if alpha != 1.0:
        y = cx.build("mul", y, cx.like(alpha, y))
    if cx.has(2) and beta != 0.0:
        c = cx.tensor(2)
        if beta != 1.0:
            c = cx.build("mul", c, cx.like(beta, c))
        y = cx.build("add", y, c)
    return y


# Conv, ConvTranspose, MaxPool and AveragePool: see onnx_nn.py.


@pattern("GlobalAveragePool", "GlobalMaxPool")
def lower_global_pool(cx):
    x = cx.tensor(0)
    kind = "reduce_mean" if "Average" in cx.name else "reduce_max"
    return cx.build(kind, x, axes=list(range(2, rank_of(x))), keepdims=True)


def _used(v) -> bool:
    return any(True for _ in v.uses)


@pattern("LayerNormalization")
def lower_layer_norm(cx):
    x = cx.tensor(0)
    r = rank_of(x)
    axis = cx.attr("axis", -1) % r
    eps = cx.attr("epsilon", 1e-5)
    extra = len(cx.op.results) > 1 and any(_used(v) for v in list(cx.op.results)[1:])
    if extra or cx.attr("stash_type", 1) != 1 and dtype_of(x) != "f32":
        return _layer_norm_decomposed(cx, x, axis, eps)
    operands = {"weight": cx.tensor(1)}
    if cx.has(2):
        operands["bias"] = cx.tensor(2)
    # kiln wants weight shaped like the normalized dims; ONNX broadcasts.
    norm = dims_of(x)[axis:]
    for key, v in list(operands.items()):
        if dims_of(v) != norm:
            operands[key] = cx.build("expand", v, shape=norm)
    y = cx.build("layer_norm", x, axis=axis - r, epsilon=eps, **operands)
    return tuple([y] + [None] * (len(cx.op.results) - 1)) if len(cx.op.results) > 1 else y


def _layer_norm_decomposed(cx, x, axis, eps):
    """Layer norm from primitives, also producing ONNX's Mean and InvStdDev outputs."""
    axes = list(range(axis, rank_of(x)))
    mean = cx.build("reduce_mean", x, axes=axes, keepdims=True)
    xc = cx.build("sub", x, mean)
    var = cx.build("reduce_mean", cx.build("mul", xc, xc), axes=axes, keepdims=True)
    inv = cx.build("rsqrt", cx.build("add", var, cx.like(eps, x)))
    y = cx.build("mul", cx.build("mul", xc, inv), cx.tensor(1))
    if cx.has(2):
        y = cx.build("add", y, cx.tensor(2))
    return (y, mean, inv)[: len(cx.op.results)] if len(cx.op.results) > 1 else y


@pattern("RMSNormalization")
def lower_rms_norm(cx):
    """``x * rsqrt(mean(x^2 over [axis:]) + eps) * scale``."""
    x = cx.tensor(0)
    axis = cx.attr("axis", -1) % rank_of(x)
    axes = list(range(axis, rank_of(x)))
    ms = cx.build("reduce_mean", cx.build("mul", x, x), axes=axes, keepdims=True)
    y = cx.build("mul", x, cx.build("rsqrt", cx.build("add", ms, cx.like(cx.attr("epsilon", 1e-5), x))))
    return cx.build("mul", y, cx.tensor(1))


@pattern("And", "Or", "Xor")
def lower_logical(cx):
    a, b = cx.tensor(0), cx.tensor(1)
    b = _legacy_broadcast(cx, a, b, _legacy_axis(cx))
    if cx.name == "onnx.Xor":
        return cx.build("ne", a, b)
    const = cx.like(cx.name == "onnx.Or", a)
    return cx.build("where", a, b, const) if cx.name == "onnx.And" else cx.build("where", a, const, b)


@pattern("Sign")
def lower_sign(cx):
    x = cx.tensor(0)
    zero = cx.like(0, x)
    neg = cx.build("where", cx.build("lt", x, zero), cx.like(-1, x), zero)
    return cx.build("where", cx.build("gt", x, zero), cx.like(1, x), neg)


@pattern("Mish")
def lower_mish(cx):
    x = cx.tensor(0)
    sp = cx.build("log", cx.build("add", cx.build("exp", x), cx.like(1.0, x)))
    return cx.build("mul", x, cx.build("tanh", sp))


@pattern("Range")
def lower_range(cx):
    """Known bounds fold; a symbolic ``limit`` (``arange(L)`` exported) gives a
    ``kiln.range`` of ``ceil((limit - start) / delta)`` elements."""
    vals = [cx.known(i) for i in range(3)]
    if not any(v.is_symbolic for v in vals):
        start, limit, delta = (v.array().reshape(-1)[0] for v in vals)
        return Known(np.arange(start, limit, delta).astype(_np_dtype(cx.result_dtype())), cx.result_dtype())
    start, limit, delta = (v.ints()[0] if len(v.ints()) == 1 else None for v in vals)
    if None in (start, limit, delta) or isinstance(delta, Dim) and not delta.is_static:
        raise Decline("Range with a symbolic delta")
    delta = int(delta.value if isinstance(delta, Dim) else delta)
    if delta <= 0:
        raise Decline("Range over symbolic bounds with a non-positive delta")
    dtype = cx.result_dtype()
    n = (dim(limit) - start + (delta - 1)) // delta
    if isinstance(start, Dim) and not start.is_static:
        # arange(past, past + L): a range from 0 shifted by the start, computed at run time.
        r = cx.build("range", shape=[n], start=0, step=delta, results=[tensor_type([n], dtype)])
        from .onnx_fold import symbolic_tensor

        return cx.build("add", r, symbolic_tensor(cx, Known([start], dtype, rank0=True)))
    start = int(start.value if isinstance(start, Dim) else start)
    return cx.build("range", shape=[n], start=start, step=delta, results=[tensor_type([n], dtype)])


@pattern("Trilu")
def lower_trilu(cx):
    """``where(mask, x, 0)``, the mask ``col - row >= k`` (upper) or ``<= k``
    (lower).  Static matrix dims and a known ``k`` give a constant mask;
    symbolic dims (a causal mask over ``L``), a large matrix or a run-time
    ``k`` compare two ``kiln.range`` ops instead."""
    x = cx.tensor(0)
    dims = dims_of(x)
    if len(dims) < 2:
        raise Decline(f"Trilu of a rank-{len(dims)} tensor (needs rank >= 2)")
    n, m = dims[-2], dims[-1]
    upper = bool(cx.attr("upper", 1))
    k = cx.value(1) if cx.has(1) else Known(np.asarray(0, dtype=np.int64), "i64")
    static_k = isinstance(k, Known) and not k.is_symbolic
    if static_k and n.is_static and m.is_static and n.value * m.value <= _CONSTANT_MASK:
        kv = int(k.array().reshape(-1)[0])
        ones = np.ones((n.value, m.value), dtype=np.bool_)
        mask = cx.conv.materialize(Known(np.triu(ones, kv) if upper else np.tril(ones, kv), "i1"), cx.loc)
    else:
        rows = cx.build("range", shape=[n], start=0, step=1, results=[tensor_type([n], "i64")])
        cols = cx.build("range", shape=[m], start=0, step=1, results=[tensor_type([m], "i64")])
        diff = cx.build("sub", cx.build("reshape", cols, shape=[dim(1), m]),
                        cx.build("reshape", rows, shape=[n, dim(1)]))
        if static_k:
            kt = cx.const(int(k.array().reshape(-1)[0]), "i64")
        else:
            kt = cx.tensor(1)
            if rank_of(kt) != 0:
                kt = cx.build("reshape", kt, shape=[])
            kt = cx.cast(kt, "i64")
        mask = cx.build("ge" if upper else "le", diff, kt)
    return cx.build("where", mask, x, cx.like(0, x))


# A Trilu mask up to this many elements is a constant; a larger one is computed.
_CONSTANT_MASK = 1 << 16


@pattern("InstanceNormalization")
def lower_instance_norm(cx):
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the spatial dims."""
    x, scale, bias = cx.tensor(0), cx.tensor(1), cx.tensor(2)
    r = rank_of(x)
    axes = list(range(2, r))
    eps = cx.attr("epsilon", 1e-5)
    mean = cx.build("reduce_mean", x, axes=axes, keepdims=True)
    xc = cx.build("sub", x, mean)
    var = cx.build("reduce_mean", cx.build("mul", xc, xc), axes=axes, keepdims=True)
    y = cx.build("mul", xc, cx.build("rsqrt", cx.build("add", var, cx.like(eps, x))))
    c = dims_of(scale)
    shape = c + [dim(1)] * (r - 2)
    y = cx.build("mul", y, cx.build("reshape", scale, shape=shape))
    return cx.build("add", y, cx.build("reshape", bias, shape=shape))


@pattern("LRN")
def lower_lrn(cx):
    """``x / (bias + alpha/size * sum over a channel window of x^2) ** beta``:
    square, pad the channel axis, add ``size`` shifted slices."""
    x = cx.tensor(0)
    size = cx.attr("size")
    alpha, beta, bias = cx.attr("alpha", 1e-4), cx.attr("beta", 0.75), cx.attr("bias", 1.0)
    r = rank_of(x)
    sq = cx.build("mul", x, x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    pads = [0] * (2 * r)
    pads[1], pads[r + 1] = lo, hi
    padded = cx.build("pad", sq, pads=pads, value=0.0)
    c = dims_of(x)[1]
    acc = None
    for i in range(size):
        end = c + i
        part = cx.build("slice", padded, starts=[i], ends=[end.value if end.is_static else _dyn(end)], axes=[1])
        acc = part if acc is None else cx.build("add", acc, part)
    den = cx.build("add", cx.build("mul", acc, cx.like(alpha / size, x)), cx.like(bias, x))
    return cx.build("div", x, cx.build("pow", den, cx.like(beta, x)))


def _dyn(d: Dim):
    raise Decline(f"LRN over symbolic channels ({d})")


def _axes(cx, attr_name="axes", input_index=1, since=13):
    """Axes from the attribute (older opsets) or the input (newer)."""
    if cx.opset >= since and cx.has(input_index):
        return [int(a) for a in cx.known(input_index).ints()]
    return cx.attr(attr_name, None)


def _reduce(kind, since=18):
    def lower(cx):
        x = cx.tensor(0)
        axes = _axes(cx, since=since) if kind != "reduce_sum" else _axes(cx, since=13)
        keep = bool(cx.attr("keepdims", 1))
        if not axes:
            if cx.attr("noop_with_empty_axes", 0):
                return x
            axes = list(range(rank_of(x)))
        return _reduce_kind(cx, kind, x, axes, keep)

    return lower


def _reduce_kind(cx, kind, x, axes, keep):
    if kind == "reduce_sum_square":
        return cx.build("reduce_sum", cx.build("mul", x, x), axes=axes, keepdims=keep)
    if kind == "reduce_l2":
        return cx.build("sqrt", cx.build("reduce_sum", cx.build("mul", x, x), axes=axes, keepdims=keep))
    if kind == "reduce_l1":
        return cx.build("reduce_sum", cx.build("abs", x), axes=axes, keepdims=keep)
    if kind == "reduce_log_sum":
        return cx.build("log", cx.build("reduce_sum", x, axes=axes, keepdims=keep))
    if kind == "reduce_log_sum_exp":
        m = cx.build("reduce_max", x, axes=axes, keepdims=True)
        s = cx.build("reduce_sum", cx.build("exp", cx.build("sub", x, m)), axes=axes, keepdims=keep)
        mk = m if keep else cx.build("reshape", m, shape=dims_of(s))
        return cx.build("add", cx.build("log", s), mk)
    return cx.build(kind, x, axes=axes, keepdims=keep)


for _onnx, _kind in (("ReduceSum", "reduce_sum"), ("ReduceMean", "reduce_mean"), ("ReduceMax", "reduce_max"),
                     ("ReduceMin", "reduce_min"), ("ReduceSumSquare", "reduce_sum_square"),
                     ("ReduceL2", "reduce_l2"), ("ReduceL1", "reduce_l1"), ("ReduceLogSum", "reduce_log_sum"),
                     ("ReduceLogSumExp", "reduce_log_sum_exp")):
    ONNX_PATTERNS[f"onnx.{_onnx}"] = _reduce(_kind)


def _softmax(log=False):
    def lower(cx):
        x = cx.tensor(0)
        r = rank_of(x)
        axis = cx.attr("axis", -1 if cx.opset >= 13 else 1) % max(r, 1)
        if cx.opset < 13 and axis != r - 1:
            # Old opsets: softmax over the flattened trailing dims [axis:].
            dims = dims_of(x)
            flat = cx.build("reshape", x, shape=[product(dims[:axis]), product(dims[axis:])])
            y = cx.build("softmax", flat, axis=-1)
            y = cx.build("log", y) if log else y
            return cx.build("reshape", y, shape=dims)
        y = cx.build("softmax", x, axis=axis)
        return cx.build("log", y) if log else y

    return lower


ONNX_PATTERNS["onnx.Softmax"] = _softmax()
ONNX_PATTERNS["onnx.LogSoftmax"] = _softmax(log=True)


__all__ = ["ONNX_DTYPES", "ONNX_PATTERNS"]
