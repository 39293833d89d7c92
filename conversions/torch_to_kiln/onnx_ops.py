"""Patterns for ONNX ops added for issue 36: ArgMax / ArgMin, GatherElements,
ReduceProd, Floor / Ceil / Sin / Cos, ScatterND, GroupNormalization and
BatchNormalization (inference and training mode).

Registered into :data:`.onnx.ONNX_PATTERNS` (this module is imported after
:mod:`.onnx`, so its ``BatchNormalization`` is the one in the table).
"""

from __future__ import annotations

from ...dialects.dims import dim
from ...dialects.kiln import tensor_type
from .aten import dims_of, dtype_of, index_axes, rank_of
from .driver import Decline
from .onnx import ONNX_PATTERNS, _reduce, _unary, pattern

# ----------------------------------------------------------------------------
# Elementwise and reductions
# ----------------------------------------------------------------------------

for _onnx, _kind in (("Floor", "floor"), ("Ceil", "ceil"), ("Sin", "sin"), ("Cos", "cos")):
    ONNX_PATTERNS[f"onnx.{_onnx}"] = _unary(_kind)

# Axes as an attribute before opset 18, as an input since (see ``_reduce``).
ONNX_PATTERNS["onnx.ReduceProd"] = _reduce("reduce_prod")


@pattern("ArgMax", "ArgMin")
def lower_arg_reduce(cx):
    """``kiln.argmax`` / ``kiln.argmin`` (``select_last_index`` since opset 12)."""
    x = cx.tensor(0)
    r = rank_of(x)
    axis = cx.attr("axis", 0)
    if not -r <= axis < r:
        raise Decline(f"attribute 'axis' {axis} is out of range for rank {r}")
    kind = "argmax" if cx.name == "onnx.ArgMax" else "argmin"
    return cx.build(kind, x, axis=axis % r, keepdims=bool(cx.attr("keepdims", 1)),
                    select_last_index=bool(cx.attr("select_last_index", 0)))


# ----------------------------------------------------------------------------
# Gather / scatter
# ----------------------------------------------------------------------------


@pattern("GatherElements")
def lower_gather_elements(cx):
    """``kiln.gather_elements`` (negative indices count from the end of ``axis``)."""
    x, idx = cx.tensor(0), cx.tensor(1)
    r = rank_of(x)
    axis = cx.attr("axis", 0)
    if not -r <= axis < r:
        raise Decline(f"attribute 'axis' {axis} is out of range for rank {r}")
    if rank_of(idx) != r:
        raise Decline(f"GatherElements indices of rank {rank_of(idx)} for data of rank {r}")
    for k, (d, i) in enumerate(zip(dims_of(x), dims_of(idx))):
        # Off the axis, an index position reads data at the same position.
        if k != axis % r and d.is_static and i.is_static and i.value > d.value:
            raise Decline(f"GatherElements indices dim {k} ({i.value}) exceeds data's ({d.value})")
    return cx.build("gather_elements", x, idx, axis=axis % r)


@pattern("GatherND")
def lower_gather_nd(cx):
    """Advanced indexing of data's leading axes (:func:`.aten.index_axes`):
    ``indices`` is ``[b..., i..., k]`` and each of its rows the position of a
    slice ``data[b..., p_0, ..., p_{k-1}, ...]`` (negative values count from
    the end); the first ``batch_dims`` axes of both are shared, which indexes
    them with their own positions (a ``kiln.range`` per batch axis).  What
    torch.onnx writes for ``mask[rows, cols]`` (transformers' attention masks)."""
    x, idx = cx.tensor(0), cx.tensor(1)
    b = cx.attr("batch_dims", 0)
    q, r = rank_of(idx), rank_of(x)
    k = dims_of(idx)[-1] if q else None
    if k is None or not k.is_static:
        raise Decline("GatherND with a symbolic last dim of indices")
    k = k.value
    if k == 0:
        raise Decline("GatherND with empty index rows")
    if not 0 <= b < q or b + k > r:
        raise Decline(f"GatherND with batch_dims {b} and rows of {k} indices for data of rank {r}")
    lead = dims_of(idx)[:-1]
    parts = []
    for j in range(b):
        n = lead[j]  # equal to data's dim j (ONNX); the indices' may be the static one
        pos = cx.build("range", shape=[n], start=0, step=1, results=[tensor_type([n], "i64")])
        parts.append(cx.build("reshape", pos, shape=[dim(1)] * j + [n] + [dim(1)] * (q - 2 - j)))
    for j in range(k):
        row = cx.build("slice", idx, starts=[j], ends=[j + 1], axes=[q - 1], steps=[1])
        parts.append(cx.build("reshape", row, shape=lead))
    return index_axes(cx, x, parts, 0)


@pattern("ScatterND")
def lower_scatter_nd(cx):
    """``kiln.scatter_nd``; ``reduction`` since opset 16 (add, mul) and 18 (max, min)."""
    reduction = cx.attr("reduction", "none")
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise Decline(f"ScatterND reduction '{reduction}'")
    data, idx, upd = cx.tensor(0), cx.tensor(1), cx.tensor(2)
    k = dims_of(idx)[-1] if rank_of(idx) else None
    if k is None or not k.is_static:
        raise Decline("ScatterND with a symbolic last dim of indices")
    return cx.build("scatter_nd", data, idx, upd, reduction=reduction)


# ----------------------------------------------------------------------------
# Normalization
# ----------------------------------------------------------------------------


def _normalize(cx, x, axes, eps):
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` (population variance)."""
    mean = cx.build("reduce_mean", x, axes=axes, keepdims=True)
    xc = cx.build("sub", x, mean)
    var = cx.build("reduce_mean", cx.build("mul", xc, xc), axes=axes, keepdims=True)
    return cx.build("mul", xc, cx.build("rsqrt", cx.build("add", var, cx.like(eps, x))))


@pattern("GroupNormalization")
def lower_group_norm(cx):
    """Normalize each of ``num_groups`` channel groups over its channels and
    spatial dims, then ``* scale + bias``: per group before opset 21 (``scale``
    of shape ``[num_groups]``), per channel since (``[C]``).  With
    ``stash_type = 1`` (opset 21's default) the statistics of a non-f32 input
    are computed in f32."""
    x = cx.tensor(0)
    dims = dims_of(x)
    r = len(dims)
    if r < 2:
        raise Decline(f"GroupNormalization of rank {r} (needs N, C, ...)")
    groups = cx.attr("num_groups")
    c = dims[1]
    if not c.is_static:
        raise Decline("GroupNormalization over a symbolic channel dim")
    if groups is None or groups <= 0 or c.value % groups:
        raise Decline(f"attribute 'num_groups' {groups} does not divide {c.value} channels")
    eps = cx.attr("epsilon", 1e-5)
    dtype = dtype_of(x)
    stash = cx.opset >= 21 and cx.attr("stash_type", 1) == 1 and dtype != "f32"
    xs = cx.cast(x, "f32") if stash else x
    grouped = [dims[0], dim(groups), dim(c.value // groups)] + dims[2:]
    y = _normalize(cx, cx.build("reshape", xs, shape=grouped), list(range(2, r + 1)), eps)
    y = cx.cast(y, dtype) if stash else y
    scale, bias = cx.tensor(1), cx.tensor(2)
    per_group = cx.opset < 21
    want = groups if per_group else c.value
    for name, v in (("scale", scale), ("bias", bias)):
        if rank_of(v) != 1 or dims_of(v)[0] != dim(want):
            raise Decline(f"GroupNormalization {name} of shape {dims_of(v)}, expected [{want}]")
    if per_group:
        shape = [dim(groups)] + [dim(1)] * (r - 1)
        y = cx.build("mul", y, cx.build("reshape", scale, shape=shape))
        y = cx.build("add", y, cx.build("reshape", bias, shape=shape))
        return cx.build("reshape", y, shape=dims)
    y = cx.build("reshape", y, shape=dims)
    shape = [c] + [dim(1)] * (r - 2)
    y = cx.build("mul", y, cx.build("reshape", scale, shape=shape))
    return cx.build("add", y, cx.build("reshape", bias, shape=shape))


def _used(v) -> bool:
    return any(True for _ in v.uses)


@pattern("BatchNormalization")
def lower_batch_norm(cx):
    """Inference form as ``kiln.batch_norm``; training mode (opset 14+,
    ``training_mode = 1``) normalizes with the batch's mean and population
    variance over every axis but 1 and also returns the running statistics
    ``running * momentum + batch * (1 - momentum)``."""
    results = list(cx.op.results)
    training = bool(cx.attr("training_mode", 0)) if cx.opset >= 14 else False
    if cx.opset < 14 and len(results) > 1 and any(_used(r) for r in results[1:]):
        raise Decline(f"BatchNormalization (opset {cx.opset}) with its training outputs "
                      "(mean, var, saved_mean, saved_var) used")
    if cx.opset < 7 and not cx.attr("is_test", 0):
        training = True
    if cx.opset < 9 and cx.attr("spatial", 1) == 0:
        raise Decline("BatchNormalization with attribute 'spatial' = 0 (per-activation statistics)")
    if training and cx.opset < 14:
        raise Decline(f"BatchNormalization in training mode (attribute 'is_test' = 0, opset {cx.opset})")
    x = cx.tensor(0)
    dtype = dtype_of(x)
    if rank_of(x) < 2:
        raise Decline(f"BatchNormalization of rank {rank_of(x)} (needs N, C, ...)")
    params = [cx.cast(cx.tensor(i), dtype) for i in range(1, 5)]
    eps = cx.attr("epsilon", 1e-5)
    if not training:
        y = cx.build("batch_norm", x, *params, epsilon=eps)
        return tuple([y] + [None] * (len(results) - 1)) if len(results) > 1 else y
    scale, bias, running_mean, running_var = params
    r = rank_of(x)
    axes = [0] + list(range(2, r))
    c = dims_of(x)[1]
    mean = cx.build("reduce_mean", x, axes=axes, keepdims=False)
    xc = cx.build("sub", x, cx.build("reshape", mean, shape=[c] + [dim(1)] * (r - 2)))
    var = cx.build("reduce_mean", cx.build("mul", xc, xc), axes=axes, keepdims=False)
    y = cx.build("batch_norm", x, scale, bias, mean, var, epsilon=eps)
    momentum = cx.attr("momentum", 0.9)
    outs = [y]
    for run, batch in ((running_mean, mean), (running_var, var)):
        outs.append(cx.build("add", cx.build("mul", run, cx.like(momentum, run)),
                             cx.build("mul", batch, cx.like(1.0 - momentum, batch))))
    return tuple(outs[: len(results)]) if len(results) > 1 else y
