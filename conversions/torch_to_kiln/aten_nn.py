"""Patterns for torch's contractions and NN ops (``aten.matmul``, ``linear``,
``convolution``, pooling, norms, softmax, SDPA, reductions), registered in
:data:`~kiln.conversions.torch_to_kiln.aten.ATEN_PATTERNS` like the rest of
:mod:`.aten` (split from it: one file per op family)."""

from __future__ import annotations

from ..._mlir import ir
from ...dialects.dims import dim
from ...dialects.kiln import tensor_info
from ...dialects.kiln.nn import gqa_group
from ...dialects.kiln.shapes import matrix_transpose, product
from .aten import ATEN_PATTERNS, dims_of, dtype_of, pattern, rank_of
from .driver import Decline


@pattern("torch.aten.mm", "torch.aten.bmm", "torch.aten.matmul")
def lower_matmul(cx):
    return cx.build("matmul", cx.tensor(0), cx.tensor(1))


def transpose_last2(cx, w):
    return cx.build("transpose", w, perm=matrix_transpose(rank_of(w)))


@pattern("torch.aten.linear")
def lower_linear(cx):
    """``x @ w^T + b`` as transpose + matmul + add."""
    x, w = cx.tensor(0), cx.tensor(1)
    y = cx.build("matmul", x, transpose_last2(cx, w))
    if cx.has(2):
        y = cx.build("add", y, cx.tensor(2))
    return y


@pattern("torch.aten.addmm")
def lower_addmm(cx):
    """``beta * b + alpha * (x @ w)``."""
    b, x, w = cx.tensor(0), cx.tensor(1), cx.tensor(2)
    y = cx.build("matmul", x, w)
    beta, alpha = cx.scalar(3, 1), cx.scalar(4, 1)
    if alpha not in (None, 1):
        y = cx.build("mul", y, cx.like(alpha, y))
    if beta not in (None, 1):
        b = cx.build("mul", b, cx.like(beta, b))
    return cx.build("add", y, b)


@pattern("torch.aten._softmax", "torch.aten.softmax.int")
def lower_softmax(cx):
    x = cx.tensor(0)
    y = cx.build("softmax", x, axis=cx.int(1))
    return cx.cast(y, cx.result_dtype())


@pattern("torch.aten._log_softmax", "torch.aten.log_softmax.int")
def lower_log_softmax(cx):
    return cx.build("log", cx.build("softmax", cx.tensor(0), axis=cx.int(1)))


@pattern("torch.aten.layer_norm")
def lower_layer_norm(cx):
    x = cx.tensor(0)
    n = len(cx.ints(1))
    operands = {}
    if cx.has(2):
        operands["weight"] = cx.tensor(2)
    if cx.has(3):
        operands["bias"] = cx.tensor(3)
    return cx.build("layer_norm", x, axis=-n, epsilon=cx.scalar(4, 1e-5), **operands)


@pattern("torch.aten.native_layer_norm")
def lower_native_layer_norm(cx):
    for r in list(cx.op.results)[1:]:
        if _has_uses(r):
            raise Decline("mean/rstd results of native_layer_norm are used")
    return (lower_layer_norm(cx), None, None)


def _has_uses(v: ir.Value) -> bool:
    return any(True for _ in v.uses)


@pattern("torch.aten.batch_norm", "torch.aten._native_batch_norm_legit_no_training")
def lower_batch_norm(cx):
    legit = cx.name.endswith("no_training")
    x = cx.tensor(0)
    c = dims_of(x)[1]
    if not c.is_static:
        raise Decline("batch norm with symbolic channels")
    dtype = dtype_of(x)
    w = cx.tensor(1) if cx.has(1) else cx.const(1.0, dtype, [c.value])
    b = cx.tensor(2) if cx.has(2) else cx.const(0.0, dtype, [c.value])
    mean, var = cx.tensor(3), cx.tensor(4)
    if legit:
        eps = cx.scalar(6)
    else:
        if cx.scalar(5):
            raise Decline("batch norm in training mode")
        eps = cx.scalar(7)
    y = cx.build("batch_norm", x, w, b, mean, var, epsilon=eps)
    if legit:
        for r in list(cx.op.results)[1:]:
            if _has_uses(r):
                raise Decline("saved statistics of batch norm are used")
        return (y, None, None)
    return y


@pattern("torch.aten.scaled_dot_product_attention")
def lower_sdpa(cx):
    q, k, v = cx.tensor(0), cx.tensor(1), cx.tensor(2)
    if cx.has(4) and cx.scalar(4) not in (0, 0.0):
        raise Decline("attention dropout")
    if cx.num_operands > 7 and cx.scalar(7):
        # enable_gqa: k and v may have fewer heads (dim -3) than q, which
        # kiln.attention takes as they are (q head h reads k / v head h // group).
        qd, kd, vd = dims_of(q), dims_of(k), dims_of(v)
        same = min(len(qd), len(kd), len(vd)) >= 3 and qd[-3] == kd[-3] == vd[-3]
        if not same and gqa_group(qd, kd, vd) == 1:
            raise Decline(f"grouped-query attention (enable_gqa) with q heads {qd[-3] if len(qd) >= 3 else 1} "
                          f"not a static multiple of k / v heads {kd[-3] if len(kd) >= 3 else 1}")
    extra = {}
    if cx.has(3):
        extra["mask"] = cx.tensor(3)
    scale = cx.scalar(6) if cx.has(6) else None
    return cx.build("attention", q, k, v, causal=bool(cx.scalar(5, False)), scale=scale, **extra)


def _pair(v, n=2):
    v = [int(x) for x in v]
    return v * n if len(v) == 1 else v


@pattern("torch.aten.convolution", "torch.aten.conv2d")
def lower_convolution(cx):
    x, w = cx.tensor(0), cx.tensor(1)
    if rank_of(x) == 3:
        return _conv1d(cx, x, w)
    if rank_of(x) != 4:
        raise Decline(f"{rank_of(x) - 2}-D convolution (kiln has conv2d)")
    stride, padding, dilation = _pair(cx.ints(3)), _pair(cx.ints(4)), _pair(cx.ints(5))
    groups = _conv_groups(cx)
    operands = [x, w] + ([cx.tensor(2)] if cx.has(2) else [])
    return cx.build("conv2d", *operands, strides=stride, pads=padding + padding, dilations=dilation, groups=groups)


def _conv_groups(cx) -> int:
    if cx.name.endswith("convolution"):
        if cx.scalar(6):
            raise Decline("transposed convolution")
        return cx.int(8)
    return cx.int(6)


def _conv1d(cx, x, w):
    """A 1-D convolution (Whisper's front end) as ``kiln.conv2d`` over a unit
    height: ``[N, C, L]`` becomes ``[N, C, 1, L]``, the kernel ``[O, C/g, 1, K]``,
    and the result loses its unit dim again."""
    if rank_of(w) != 3:
        raise Decline("1-D convolution with a weight that is not rank 3")
    padding = cx.ints(4)
    if any(isinstance(p, str) for p in padding):
        raise Decline("1-D convolution with string padding")
    (stride,), (pad,), (dilation,) = ([int(v) for v in cx.ints(i)][:1] for i in (3, 4, 5))
    n, c, length = dims_of(x)
    x4 = cx.build("reshape", x, shape=[n, c, dim(1), length])
    w4 = cx.build("reshape", w, shape=dims_of(w)[:2] + [dim(1), dims_of(w)[2]])
    operands = [x4, w4] + ([cx.tensor(2)] if cx.has(2) else [])
    y = cx.build("conv2d", *operands, strides=[1, stride], pads=[0, pad, 0, pad], dilations=[1, dilation],
                 groups=_conv_groups(cx))
    yn, yc, _, yl = dims_of(y)
    return cx.build("reshape", y, shape=[yn, yc, yl])


@pattern("torch.aten.max_pool2d", "torch.aten.max_pool2d_with_indices")
def lower_max_pool2d(cx):
    # torch.export's decompositions turn max_pool2d into the variant with
    # indices; without this pattern every torch max-pool ran as a fallback.
    with_indices = cx.name.endswith("with_indices")
    if with_indices and _has_uses(cx.op.results[1]):
        raise Decline("the indices of max_pool2d_with_indices are used")
    k = _pair(cx.ints(1))
    s = _pair(cx.ints(2)) if cx.ints(2) else k
    p = _pair(cx.ints(3, [0]))
    d = _pair(cx.ints(4, [1]))
    y = cx.build("max_pool2d", cx.tensor(0), kernel=k, strides=s, pads=p + p, dilations=d,
                 ceil_mode=bool(cx.scalar(5, False)))
    return (y, None) if with_indices else y


@pattern("torch.aten.avg_pool2d")
def lower_avg_pool2d(cx):
    k = _pair(cx.ints(1))
    s = _pair(cx.ints(2)) if cx.ints(2) else k
    p = _pair(cx.ints(3, [0]))
    if cx.has(6):
        raise Decline("avg_pool2d divisor_override")
    return cx.build("avg_pool2d", cx.tensor(0), kernel=k, strides=s, pads=p + p,
                    ceil_mode=bool(cx.scalar(4, False)), count_include_pad=bool(cx.scalar(5, True)))


@pattern("torch.aten.adaptive_avg_pool2d", "torch.aten._adaptive_avg_pool2d")
def lower_adaptive_avg_pool2d(cx):
    if [int(v) for v in cx.ints(1)] not in ([1, 1], [1]):
        raise Decline("adaptive pooling to a size other than 1")
    return cx.build("reduce_mean", cx.tensor(0), axes=[2, 3], keepdims=True)


def _reduce(kind):
    def lower(cx):
        x = cx.tensor(0)
        axes = cx.ints(1) if cx.has(1) else []
        keep = bool(cx.scalar(2, False)) if cx.num_operands > 2 else False
        y = cx.build(kind, x, axes=[int(a) for a in axes], keepdims=keep)
        return cx.cast(y, cx.result_dtype())

    return lower


ATEN_PATTERNS["torch.aten.mean.dim"] = _reduce("reduce_mean")
ATEN_PATTERNS["torch.aten.sum.dim_IntList"] = _reduce("reduce_sum")
ATEN_PATTERNS["torch.aten.amax"] = _reduce("reduce_max")


@pattern("torch.aten.linalg_vector_norm")
def lower_vector_norm(cx):
    """``linalg.vector_norm(x, ord, dim, keepdim)`` of a float tensor (weight
    norm's ``|v|``): ``sqrt(sum(x*x))`` for 2, ``sum|x|`` for 1, ``max`` /
    ``min |x|`` for +-inf, ``sum(|x|^p)^(1/p)`` for other ``p > 0``."""
    x = cx.tensor(0)
    if not dtype_of(x).startswith(("f", "b")):
        raise Decline("vector_norm of a non-float tensor")
    order = float(cx.scalar(1, 2.0))
    rank = len(tensor_info(x.type).dims)
    axes = [int(a) % max(rank, 1) for a in cx.ints(2, [])] or list(range(rank))
    keep = bool(cx.scalar(3, False))
    if order == 2.0:
        y = cx.build("sqrt", cx.build("reduce_sum", cx.build("mul", x, x), axes=axes, keepdims=keep))
    elif order in (float("inf"), float("-inf")):
        kind = "reduce_max" if order > 0 else "reduce_min"
        y = cx.build(kind, cx.build("abs", x), axes=axes, keepdims=keep)
    elif order == 1.0:
        y = cx.build("reduce_sum", cx.build("abs", x), axes=axes, keepdims=keep)
    elif order > 0:
        s = cx.build("reduce_sum", cx.build("pow", cx.build("abs", x), cx.like(order, x)), axes=axes, keepdims=keep)
        y = cx.build("pow", s, cx.like(1.0 / order, s))
    else:
        raise Decline(f"vector_norm of order {order}")
    return cx.cast(y, cx.result_dtype())


@pattern("torch.aten.mean", "torch.aten.sum")
def lower_reduce_all(cx):
    kind = "reduce_mean" if cx.name.endswith("mean") else "reduce_sum"
    return cx.cast(cx.build(kind, cx.tensor(0)), cx.result_dtype())


@pattern("torch.aten.var.correction")
def lower_var(cx):
    """``var(x, dims, correction, keepdim)`` (``std`` exports as its sqrt): the
    mean of the squared deviations, times ``n / (n - correction)`` (``n`` the
    reduced element count, static when there is a correction).  Written the
    way ``kiln-simplify``'s layer-norm pattern reads a variance."""
    x = cx.tensor(0)
    dims = tensor_info(x.type).dims
    # The dims as given (a mean(-1) beside it reads as the same reduction).
    axes = [int(a) for a in cx.ints(1, [])] or list(range(len(dims)))
    correction = cx.scalar(2) if cx.has(2) else 1
    mean = cx.build("reduce_mean", x, axes=axes, keepdims=True)
    d = cx.build("sub", x, mean)
    var = cx.build("reduce_mean", cx.build("mul", d, d), axes=axes, keepdims=bool(cx.scalar(3, False)))
    if correction:
        n = product([dims[a % len(dims)] for a in set(axes)])
        if not n.is_static or n.value - correction <= 0:
            raise Decline(f"variance with correction {correction} over {n} elements")
        var = cx.build("mul", var, cx.like(n.value / (n.value - correction), var))
    return cx.cast(var, cx.result_dtype())
