"""``kiln-fold-constants``: evaluate kiln ops whose operands are all constants.

Each foldable op has a numpy evaluator in :data:`EVALUATORS` that computes the
op's documented meaning (numpy reference semantics: broadcasting, ``matmul``,
``take``, ...) in the result's dtype.  The op is replaced by a
``kiln.constant`` holding the result, and constants left without users are
erased.  That covers shape arithmetic as frontends emit it: a ``reshape`` or
``transpose`` of a constant, or ``x * (2*3)`` becoming ``x * 6``.

Option ``max-bytes`` keeps folding from inflating the model: an op is folded
when its result has at most ``max-bytes`` bytes, or when the result is no
larger than the constant operands it frees (operands used by nothing else,
e.g. the ``transpose`` of a weight).  Ops with a dtype numpy lacks (bf16), a
non-static result, or an evaluation error (integer division by zero, an index
out of range) are left alone.

Option ``keep-transposed`` leaves a weight's transpose alone: a
``kiln.transpose`` of the last two dims of a constant of more than that many
bytes that only products read (``nn.Linear``'s ``W^T``, ONNX ``Gemm``'s
``transB``).  The products read the weight through their maps, so the model
keeps one copy of it in its own layout (kiln-partition's ``inline-limit``
passes it to the kernels as it is; a GEMV streams ``[N, K]`` rows as fast as
``[K, N]`` panels), where folding made a transposed second copy.

Statistics: ``ops folded``, ``ops left (max-bytes)``, ``weight transposes
kept``, ``constants erased``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .._mlir import ir
from ..dialects.kiln import KilnOp, tensor_info
from ..dialects.kiln.data import SLICE_END
from ..pipelines.registry import Option, Pass, register_pass
from ._graph import (
    block_ops,
    constant_array,
    constant_nbytes,
    functions,
    is_constant,
    is_weight_transpose,
    make_constant,
    numpy_dtype,
)

__all__ = ["EVALUATORS", "FoldConstants", "evaluate", "interpret", "operand_map"]

# Constant operands above this size are never read (reading a dense_resource
# goes through its printed hex form).
_MAX_OPERAND_BYTES = 64 << 20


def operand_map(op) -> dict[str, int]:
    """``{operand field name: index in op.operands}`` for the fields present.

    Needed for ops with optional operands (``layer_norm``'s weight and bias),
    whose positions depend on ``operandSegmentSizes``.
    """
    from ..dialects.kiln import _operand_layout

    layout = _operand_layout(type(op.opview))
    attrs = op.attributes
    if "operandSegmentSizes" in attrs:
        sizes = list(ir.DenseI32ArrayAttr(attrs["operandSegmentSizes"]))
    else:
        sizes = [1] * len(layout)
    out, at = {}, 0
    for (name, _), size in zip(layout, sizes):
        if size:
            out[name] = at
        at += size
    return out


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _int_div(a, b):
    if np.any(b == 0):
        raise ZeroDivisionError("integer division by zero")
    q = np.floor_divide(a, b)
    # floor -> truncation toward zero (the op's integer semantics)
    return q + ((q < 0) & (q * b != a))


def _div(args, attrs, op):
    a, b = args
    if np.issubdtype(a.dtype, np.integer):
        return _int_div(a, b)
    return a / b


def _pow(args, attrs, op):
    a, b = args
    if np.issubdtype(b.dtype, np.integer) and np.any(b < 0):
        raise ValueError("negative integer power")
    return np.power(a, b)


def _axes(attrs, rank):
    axes = attrs["axes"] or list(range(rank))
    return tuple(a % rank for a in axes) if rank else ()


def _reduce(fn):
    def run(args, attrs, op):
        (x,) = args
        return fn(x, axis=_axes(attrs, x.ndim), keepdims=attrs["keepdims"])

    return run


def _arg_reduce(fn):
    """argmax / argmin with ``select_last_index`` (the first index of the flipped axis)."""

    def run(args, attrs, op):
        (x,) = args
        axis = attrs["axis"] % x.ndim
        if attrs["select_last_index"]:
            r = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            r = fn(x, axis=axis)
        return np.expand_dims(r, axis) if attrs["keepdims"] else r

    return run


def _softmax(args, attrs, op):
    (x,) = args
    axis = attrs["axis"]
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _layer_norm(args, attrs, op):
    fields = operand_map(op)
    x = args[0]
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + attrs["epsilon"])
    if "weight" in fields:
        y = y * args[fields["weight"]]
    if "bias" in fields:
        y = y + args[fields["bias"]]
    return y


def _batch_norm(args, attrs, op):
    x, scale, bias, mean, var = args
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale.reshape(shape) / np.sqrt(var.reshape(shape) + attrs["epsilon"])
    return (x - mean.reshape(shape)) * inv + bias.reshape(shape)


def _slice(args, attrs, op):
    (x,) = args
    index = [slice(None)] * x.ndim
    steps = attrs["steps"] or [1] * len(attrs["axes"])
    for s, e, a, st in zip(attrs["starts"], attrs["ends"], attrs["axes"], steps):
        index[a % x.ndim] = slice(s, None if e >= SLICE_END else e, st)
    return x[tuple(index)]


def _pad(args, attrs, op):
    (x,) = args
    pads = attrs["pads"]
    widths = [(pads[i], pads[i + x.ndim]) for i in range(x.ndim)]
    if attrs["mode"] == "constant":
        return np.pad(x, widths, mode="constant", constant_values=attrs["value"])
    return np.pad(x, widths, mode=attrs["mode"])


def _gather(args, attrs, op):
    data, idx = args
    axis = attrs["axis"] % data.ndim
    if np.any(idx >= data.shape[axis]) or np.any(idx < -data.shape[axis]):
        raise IndexError("gather index out of range")
    return np.take(data, idx, axis=axis)


def _update_slice(args, attrs, op):
    dest, upd = args
    off = attrs["offset"][0]
    if not off.is_static:  # a position known per call only (a KV cache's P)
        raise ValueError("kiln.update_slice at a symbolic offset")
    axis = attrs["axis"] % dest.ndim
    out = np.array(dest, copy=True)
    index = [slice(None)] * dest.ndim
    index[axis] = slice(off.value, off.value + upd.shape[axis])
    out[tuple(index)] = upd
    return out


def _gather_elements(args, attrs, op):
    data, idx = args
    axis = attrs["axis"] % data.ndim
    n = data.shape[axis]
    if np.any(idx >= n) or np.any(idx < -n):
        raise IndexError("gather_elements index out of range")
    idx = np.where(idx < 0, idx + n, idx)
    index = [np.arange(s).reshape([-1 if a == d else 1 for a in range(idx.ndim)]) for d, s in enumerate(idx.shape)]
    index[axis] = idx
    return data[tuple(index)]


_SCATTER = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_nd(args, attrs, op):
    data, idx, upd = args
    k = idx.shape[-1]
    out = np.array(data, copy=True)
    rows = idx.reshape(-1, k)
    ups = upd.reshape((len(rows),) + data.shape[k:])
    combine = _SCATTER.get(attrs["reduction"])
    for row, u in zip(rows, ups):  # in order: duplicate positions accumulate
        pos = tuple(int(p) + data.shape[j] if p < 0 else int(p) for j, p in enumerate(row))
        out[pos] = u if combine is None else combine(out[pos], u)
    return out


def _attention(args, attrs, op):
    fields = operand_map(op)
    q, k, v = (args[fields[n]] for n in ("q", "k", "v"))
    return _sdpa(q, k, v, args[fields["mask"]] if "mask" in fields else None, attrs)


def _packed_attention(args, attrs, op):
    (qkv,) = args
    heads = attrs["heads"]
    d = qkv.shape[-1] // (3 * heads)
    split = np.moveaxis(qkv.reshape(qkv.shape[:-1] + (3, heads, d)), -2, -4)  # [..., heads, L, 3, D]
    out = _sdpa(split[..., 0, :], split[..., 1, :], split[..., 2, :], None, attrs)  # [..., heads, L, D]
    return np.moveaxis(out, -3, -2).reshape(qkv.shape[:-1] + (heads * d,))


def _sdpa(q, k, v, mask, attrs):
    """``softmax(q k^T * scale + mask) v`` (see kiln.attention)."""
    if q.ndim >= 3 and k.ndim >= 3 and 1 < k.shape[-3] < q.shape[-3]:  # grouped-query: q head h reads h // group
        group = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    scale = attrs["scale"] if attrs["scale"] is not None else 1 / math.sqrt(q.shape[-1])
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.asarray(scale, dtype=q.dtype)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
    if attrs["causal"]:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=np.bool_)), s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isneginf(top), 0, top))
    total = e.sum(axis=-1, keepdims=True)
    # A query row with every key masked gives 0, as torch's SDPA.
    return np.matmul(np.divide(e, total, out=np.zeros_like(e), where=total > 0), v)


def _rms_norm(args, attrs, op):
    fields = operand_map(op)
    x = args[0]
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    wide = x.astype(np.float32) if x.dtype != np.float64 else x
    y = (wide / np.sqrt((wide * wide).mean(axis=axes, keepdims=True) + attrs["epsilon"])).astype(x.dtype)
    return y * args[fields["weight"]] if "weight" in fields else y


def _matmul_w8(args, attrs, op):
    x, w, scale = args  # the blocked dequantize's scales: scale[n, k // group_size] at w[n, k]
    wide = x.astype(np.float32) if x.dtype != np.float64 else x
    per_k, _ = _quant_params(w, scale.astype(wide.dtype), scale, {"axis": 1, "block_size": attrs["group_size"]})
    return np.matmul(wide, (w.astype(wide.dtype) * per_k).T).astype(x.dtype)


def _matmul_integer(args, attrs, op):
    a, b, za, zb = (v.astype(np.int64) for v in args)
    return np.matmul(a - za, b - zb).astype(np.int32)  # int64 sums, wrapped to int32 as the kernels' sums


def _quant_params(x, scale, zero_point, attrs):
    """scale and zero point broadcast against ``x`` (per tensor, per axis, blocked)."""
    axis = attrs.get("axis")
    if axis is None:
        return scale.reshape(()), zero_point.reshape(())
    axis %= x.ndim
    if attrs.get("block_size") is not None:
        b = attrs["block_size"]
        take = lambda p: np.repeat(p, b, axis=axis).take(range(x.shape[axis]), axis=axis)  # noqa: E731
        return take(scale), take(zero_point)
    shape = [1] * x.ndim
    shape[axis] = -1
    return scale.reshape(shape), zero_point.reshape(shape)


def _quantize(args, attrs, op):
    x, scale, zp = args
    s, z = _quant_params(x, scale, zp, attrs)
    lo, hi = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}.get(zp.dtype, (-(2**31), 2**31 - 1))
    return np.clip(np.rint(x / s).astype(np.float64) + z, lo, hi)  # x / scale in x's dtype, as ONNX's reference


def _dequantize(args, attrs, op):
    x, scale, zp = args
    s, z = _quant_params(x, scale, zp, attrs)
    return (x.astype(np.int64) - z.astype(np.int64)).astype(scale.dtype) * s


def _window_out(size: int, kernel: int, stride: int, lo: int, hi: int, dilation: int, ceil: bool = False) -> int:
    from ..dialects.dims import dim
    from ..dialects.kiln.shapes import window_out

    return window_out(dim(size), dim(kernel), stride, lo, hi, dilation, ceil).value


def _windows(x, kernel, strides, dilations, out):
    """``[N, C, OH, OW, KH, KW]`` view of the windows of padded NCHW ``x``."""
    span = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    w = np.lib.stride_tricks.sliding_window_view(x, span, axis=(2, 3))
    w = w[:, :, ::strides[0], ::strides[1], ::dilations[0], ::dilations[1]]
    return w[:, :, :out[0], :out[1]]


def _conv2d(args, attrs, op):
    fields = operand_map(op)
    x, w = args[fields["x"]], args[fields["weight"]]
    s, d, g = attrs["strides"], attrs["dilations"], attrs["groups"]
    t, left, b, r = attrs["pads"]
    o, ci, kh, kw = w.shape
    out = [_window_out(x.shape[2], kh, s[0], t, b, d[0]), _window_out(x.shape[3], kw, s[1], left, r, d[1])]
    xp = np.pad(x, [(0, 0), (0, 0), (t, b), (left, r)])
    win = _windows(xp, (kh, kw), s, d, out)  # N, C, OH, OW, KH, KW
    n = x.shape[0]
    win = win.reshape(n, g, ci, *out, kh, kw)
    y = np.einsum("ngcxyhw,gochw->ngoxy", win, w.reshape(g, o // g, ci, kh, kw), optimize=True)
    y = y.reshape(n, o, *out)
    if "bias" in fields:
        y = y + args[fields["bias"]].reshape(1, -1, 1, 1)
    return y


def _pool2d(kind: str) -> Callable:
    def run(args, attrs, op):
        (x,) = args
        k = attrs["kernel"]
        s = attrs["strides"] or k
        d = attrs["dilations"]
        t, left, b, r = attrs["pads"]
        ceil = attrs["ceil_mode"]
        out = [_window_out(x.shape[2], k[0], s[0], t, b, d[0], ceil), _window_out(x.shape[3], k[1], s[1], left, r, d[1], ceil)]
        # The cells ceil_mode adds past the padding: as many as the last window needs.
        extra = [max(0, (o - 1) * st + dd * (kk - 1) + 1 - (size + lo + hi))
                 for o, st, dd, kk, size, lo, hi in zip(out, s, d, k, x.shape[2:], (t, left), (b, r))]
        widths = [(0, 0), (0, 0), (t, b + extra[0]), (left, r + extra[1])]
        if kind == "max":
            xp = np.pad(x.astype(np.float64), widths, constant_values=-np.inf)
            return _windows(xp, k, s, d, out).max(axis=(-2, -1))
        xp = np.pad(x.astype(np.float64), widths)
        counted = np.pad(np.ones(x.shape[2:]), [(t, b), (left, r)], constant_values=float(attrs["count_include_pad"]))
        counted = np.pad(counted, [(0, extra[0]), (0, extra[1])])[None, None]
        total = _windows(xp, k, s, d, out).sum(axis=(-2, -1))
        return total / _windows(counted, k, s, d, out).sum(axis=(-2, -1))

    return run


def _cumsum(args, attrs, op):
    (x,) = args
    return np.cumsum(x, axis=attrs["axis"], dtype=x.dtype)


def _unary(fn) -> Callable:
    return lambda args, attrs, op: fn(args[0])


def _binary(fn) -> Callable:
    return lambda args, attrs, op: fn(args[0], args[1])


#: ``{op name: evaluator(operand arrays, decoded attrs, op) -> array}``, numpy
#: reference semantics of each op.  The result is cast to the result dtype.
EVALUATORS: dict[str, Callable] = {
    "kiln.add": _binary(np.add),
    "kiln.sub": _binary(np.subtract),
    "kiln.mul": _binary(np.multiply),
    "kiln.div": _div,
    "kiln.pow": _pow,
    "kiln.maximum": _binary(np.maximum),
    "kiln.minimum": _binary(np.minimum),
    "kiln.eq": _binary(np.equal),
    "kiln.ne": _binary(np.not_equal),
    "kiln.lt": _binary(np.less),
    "kiln.le": _binary(np.less_equal),
    "kiln.gt": _binary(np.greater),
    "kiln.ge": _binary(np.greater_equal),
    "kiln.neg": _unary(np.negative),
    "kiln.abs": _unary(np.abs),
    "kiln.exp": _unary(np.exp),
    "kiln.log": _unary(np.log),
    "kiln.sqrt": _unary(np.sqrt),
    "kiln.rsqrt": _unary(lambda x: 1 / np.sqrt(x)),
    "kiln.tanh": _unary(np.tanh),
    "kiln.sigmoid": _unary(_sigmoid),
    "kiln.relu": _unary(lambda x: np.maximum(x, np.zeros((), x.dtype))),
    "kiln.gelu": lambda args, attrs, op: _gelu(args[0], attrs["approximate"]),
    "kiln.silu": _unary(lambda x: x * _sigmoid(x)),
    "kiln.erf": _unary(_erf),
    "kiln.where": lambda args, attrs, op: np.where(args[0], args[1], args[2]),
    "kiln.cast": _unary(lambda x: x),  # the cast to the result dtype does it
    "kiln.reshape": None,  # handled by the result shape (see evaluate)
    "kiln.transpose": lambda args, attrs, op: np.transpose(args[0], attrs["perm"]),
    "kiln.concat": lambda args, attrs, op: np.concatenate(args, axis=attrs["axis"]),
    "kiln.slice": _slice,
    "kiln.gather": _gather,
    "kiln.gather_elements": _gather_elements,
    "kiln.scatter_nd": _scatter_nd,
    "kiln.range": None,  # its shape and start / step (see evaluate)
    "kiln.update_slice": _update_slice,
    "kiln.expand": None,  # broadcast to the result shape (see evaluate)
    "kiln.pad": _pad,
    "kiln.matmul": _binary(np.matmul),
    "kiln.reduce_sum": _reduce(np.sum),
    "kiln.reduce_mean": _reduce(np.mean),
    "kiln.reduce_max": _reduce(np.max),
    "kiln.reduce_prod": _reduce(np.prod),
    "kiln.reduce_min": _reduce(np.min),
    "kiln.argmax": _arg_reduce(np.argmax),
    "kiln.argmin": _arg_reduce(np.argmin),
    "kiln.floor": _unary(np.floor),
    "kiln.ceil": _unary(np.ceil),
    "kiln.sin": _unary(np.sin),
    "kiln.cos": _unary(np.cos),
    "kiln.softmax": _softmax,
    "kiln.layer_norm": _layer_norm,
    "kiln.batch_norm": _batch_norm,
    "kiln.attention": _attention,
    "kiln.packed_attention": _packed_attention,
    "kiln.conv2d": _conv2d,
    "kiln.max_pool2d": _pool2d("max"),
    "kiln.avg_pool2d": _pool2d("avg"),
    "kiln.cumsum": _cumsum,
    "kiln.rms_norm": _rms_norm,
    "kiln.quantize": _quantize,
    "kiln.dequantize": _dequantize,
    "kiln.matmul_w8": _matmul_w8,
    "kiln.matmul_integer": _matmul_integer,
}


def _static_shape(value) -> tuple[int, ...] | None:
    dims = tensor_info(value.type).dims
    if not all(d.is_static for d in dims):
        return None
    return tuple(d.value for d in dims)


def evaluate(op, args: list[np.ndarray], shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The value of kiln op ``op`` (single result) for operand arrays.

    ``shape`` is the result's concrete shape; by default the result type's
    (which must then be static).  Raises ``KeyError`` for ops without an
    evaluator and the evaluator's own errors (``ZeroDivisionError``,
    ``IndexError``, ...) when it cannot be evaluated.
    """
    op = op.operation
    name = op.name
    if shape is None:
        shape = _static_shape(op.results[0])
    dt = numpy_dtype(tensor_info(op.results[0].type).dtype)
    if shape is None or dt is None:
        raise ValueError("result is not static or has no numpy dtype")
    if name == "kiln.reshape":
        out = np.reshape(args[0], shape)
    elif name == "kiln.expand":
        out = np.broadcast_to(args[0], shape)
    elif name == "kiln.range":
        attrs = op.opview.decoded_attrs()
        out = attrs["start"] + attrs["step"] * np.arange(shape[0], dtype=np.float64)
    else:
        fn = EVALUATORS[name]
        with np.errstate(all="ignore"):
            out = fn(args, op.opview.decoded_attrs(), op)
    out = np.asarray(out)
    if out.shape != shape:
        raise ValueError(f"evaluator gave shape {out.shape}, the result type says {shape}")
    with np.errstate(all="ignore"):
        return out.astype(dt, copy=False)


@register_pass
class FoldConstants(Pass):
    """Replace kiln ops over constants by the constants they compute."""

    name = "kiln-fold-constants"
    summary = "Evaluate kiln ops whose operands are all constants (numpy semantics), within a size cap"
    options = (
        Option("max-bytes", int, 1 << 20, "largest folded result, unless it replaces constants at least as large"),
        Option("keep-transposed", int, 1 << 20,
               "weights (bytes) past which a transpose only products read is left to them (-1: fold it always)"),
    )

    def run(self, module) -> None:
        for fn in functions(module):
            for block in fn.regions[0].blocks:
                self._fold_block(block)

    def _fold_block(self, block) -> None:
        for op in block_ops(block):
            if op.name == "kiln.fused":
                self._fold_block(op.regions[0].blocks[0])
                continue
            if self._foldable(op):
                self._try_fold(op)

    @staticmethod
    def _foldable(op) -> bool:
        if not isinstance(op.opview, KilnOp) or len(op.results) != 1 or not op.operands:
            return False
        if op.name not in EVALUATORS:
            return False
        return all(is_constant(v) for v in op.operands)

    def _try_fold(self, op) -> None:
        max_bytes = self.option("max-bytes")
        keep = self.option("keep-transposed")
        if keep >= 0 and is_weight_transpose(op) and (constant_nbytes(op.operands[0].owner) or 0) > keep:
            self.bump("weight transposes kept")
            return
        result = op.results[0]
        shape = _static_shape(result)
        rdt = numpy_dtype(tensor_info(result.type).dtype)
        if shape is None or rdt is None:
            return
        out_bytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(rdt).itemsize
        producers = [v.owner.operation for v in op.operands]
        unique = {}  # one entry per distinct constant op (an operand may repeat)
        for p in producers:
            unique.setdefault(p, constant_nbytes(p))
        if any(s is None for s in unique.values()):
            return
        # Bytes that folding frees: constants used by this op only.
        freed = sum(s for p, s in unique.items() if all(u.owner == op for u in p.results[0].uses))
        if out_bytes > max_bytes and out_bytes > freed:
            self.bump("ops left (max-bytes)")
            return
        args = [constant_array(p, _MAX_OPERAND_BYTES) for p in producers]
        if any(a is None for a in args):
            return
        try:
            value = evaluate(op, args)
        except Exception:  # numpy could not evaluate it: leave the op to the backend
            return
        new = make_constant(value, tensor_info(result.type).dtype, loc=op.location, ip=ir.InsertionPoint(op))
        if new.type != result.type:
            new.owner.erase()
            return
        result.replace_all_uses_with(new)
        op.erase()
        self.bump("ops folded")
        for p in unique:
            if not list(p.results[0].uses):
                p.erase()
                self.bump("constants erased")


def interpret(fn, args) -> list[np.ndarray]:
    """Run a kiln ``func.func`` on numpy arrays with the ops' numpy reference
    semantics (the evaluators above); returns the function's results.

    A reference for tests: every pass must leave what this computes
    unchanged.  Symbols are bound from the arguments' dims; ``kiln.fused``
    bodies run inline.
    """
    from ..dialects.dims import evaluate as eval_dim

    fn = fn.operation
    block = fn.regions[0].blocks[0]
    binding: dict[str, int] = {}
    for arg, value in zip(block.arguments, args):
        for d, n in zip(tensor_info(arg.type).dims, np.shape(value)):
            if d.is_symbol:
                binding.setdefault(str(d), int(n))
    return _run_block(block, [np.asarray(a) for a in args], binding, eval_dim)


def _run_block(block, args, binding, eval_dim):
    env = dict(zip(block.arguments, args))
    for op in block_ops(block):
        if op.name in ("func.return", "kiln.yield"):
            return [env[v] for v in op.operands]
        operands = [env[v] for v in op.operands]
        if op.name == "kiln.constant":
            out = [constant_array(op, None)]
        elif op.name == "kiln.fused":
            out = _run_block(op.regions[0].blocks[0], operands, binding, eval_dim)
        else:
            shape = tuple(eval_dim(d, binding) for d in tensor_info(op.results[0].type).dims)
            out = [evaluate(op, operands, shape)]
        env.update(zip(op.results, out))
    raise ValueError("block has no terminator")
