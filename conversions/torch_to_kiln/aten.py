"""Patterns for torch's own ops (``torch.aten.*``, ``torch.prim.*``, constants).

Each pattern is a small function ``lower_<op>(cx) -> value(s)`` registered in
``ATEN_PATTERNS`` under the torch op name (``@pattern("torch.aten.mm")``).
Scalar and list ops fold into Python values (see ``driver``); a pattern that
cannot handle its op's arguments raises :class:`Decline` and the op falls back.
"""

from __future__ import annotations

import numpy as np

from ..._mlir import ir
from ...dialects.dims import Dim, dim
from ...dialects.kiln import tensor_info, tensor_type
from ...dialects.kiln.data import SLICE_END
from ...dialects.kiln.shapes import product
from ...transforms._graph import NUMPY_DTYPES
from .driver import Decline, Known

ATEN_PATTERNS: dict = {}


def pattern(*names):
    """Register the decorated function as the pattern for op ``names``."""

    def register(fn):
        for n in names:
            ATEN_PATTERNS[n] = fn
        return fn

    return register


def dims_of(v: ir.Value) -> list:
    return list(tensor_info(v.type).dims)


def rank_of(v: ir.Value) -> int:
    return len(tensor_info(v.type).dims)


def dtype_of(v: ir.Value) -> str:
    return str(tensor_info(v.type).dtype)


def as_dim(v) -> Dim:
    if isinstance(v, bool) or v is None or isinstance(v, float):
        raise Decline(f"expected an integer, got {v!r}")
    return dim(v)


# ----------------------------------------------------------------------------
# Constants, scalars, lists
# ----------------------------------------------------------------------------


@pattern("torch.constant.int")
def lower_constant_int(cx):
    return ir.IntegerAttr(cx.op.attributes["value"]).value


@pattern("torch.constant.float")
def lower_constant_float(cx):
    return ir.FloatAttr(cx.op.attributes["value"]).value


@pattern("torch.constant.bool")
def lower_constant_bool(cx):
    return ir.BoolAttr(cx.op.attributes["value"]).value


@pattern("torch.constant.str")
def lower_constant_str(cx):
    return ir.StringAttr(cx.op.attributes["value"]).value


@pattern("torch.constant.none")
def lower_constant_none(cx):
    return None


@pattern("torch.constant.device")
def lower_constant_device(cx):
    return "device"


@pattern("torch.prim.ListConstruct")
def lower_list(cx):
    return [cx.value(i) for i in range(cx.num_operands)]


@pattern("torch.aten.size.int", "torch.aten.sym_size.int")
def lower_size(cx):
    x = cx.tensor(0)
    dims = dims_of(x)
    d = dims[cx.int(1) % len(dims)]
    return d.value if d.is_static else d


def _int_scalar(v):
    """An integer scalar operand: a Python int (negative allowed, as a scalar
    is no dim: ``H + -1`` in a size computation) or a symbolic Dim."""
    if isinstance(v, bool) or v is None or isinstance(v, float):
        raise Decline(f"expected an integer, got {v!r}")
    if isinstance(v, Dim):
        return v.value if v.is_static else v
    return int(v)


def _int_binop(fn):
    def lower(cx):
        a, b = _int_scalar(cx.scalar(0)), _int_scalar(cx.scalar(1))
        if isinstance(a, int) and isinstance(b, int):
            return fn(a, b)  # Python's // floors, as torch's SymInt division does
        # Dim arithmetic takes a negative int as a constant term (dim(0) + a keeps a's sign).
        a = a if isinstance(a, Dim) else dim(0) + a
        r = fn(a, b)
        return r.value if r.is_static else r

    return lower


ATEN_PATTERNS["torch.aten.mul.int"] = _int_binop(lambda a, b: a * b)
ATEN_PATTERNS["torch.aten.add.int"] = _int_binop(lambda a, b: a + b)
ATEN_PATTERNS["torch.aten.sub.int"] = _int_binop(lambda a, b: a - b)
ATEN_PATTERNS["torch.aten.floordiv.int"] = _int_binop(lambda a, b: a // b)


@pattern("torch.aten.Int.bool")
def lower_int_bool(cx):
    return int(bool(cx.scalar(0)))


@pattern("torch.vtensor.literal")
def lower_literal(cx):
    value = cx.op.attributes["value"]
    t = value.type
    dtype = cx.result_dtype()
    if str(ir.RankedTensorType(t).element_type) != dtype:
        # si64 and friends: kiln uses signless integers. Rebuild small ones.
        arr = cx.conv.resource(value)
        if arr is None and isinstance(value, ir.DenseElementsAttr):
            arr = np.array(value)
        if arr is None:
            raise Decline(f"constant of element type {ir.RankedTensorType(t).element_type} without data")
        return Known(np.asarray(arr), dtype)
    return cx.build("constant", value=value)


# ----------------------------------------------------------------------------
# Elementwise
# ----------------------------------------------------------------------------


def dim_value(cx, d: Dim, like: ir.Value):
    """The size ``d`` as a rank-0 tensor of ``like``'s dtype: a constant, or
    for a symbolic size its value computed at run time."""
    if d.is_static:
        return cx.like(d.value, like)
    from .onnx_fold import symbolic_tensor

    return cx.cast(symbolic_tensor(cx, Known([d], "i64", rank0=True)), dtype_of(like))


def _operand(cx, i, like: ir.Value):
    """Operand ``i`` as a tensor, scalars becoming rank-0 constants like ``like``."""
    v = cx.value(i)
    if isinstance(v, (ir.Value, Known)):
        return cx.cast(cx.tensor(i), dtype_of(like))
    if isinstance(v, Dim):
        # A size in arithmetic (``arange(L) + past_length`` in a KV-cache step's mask).
        return dim_value(cx, v, like)
    if not isinstance(v, (int, float, bool)):
        raise Decline(f"operand #{i} is not a number")
    return cx.like(v, like)


def _binary(kind, with_alpha=False, reverse=False):
    def lower(cx):
        a = cx.tensor(0)
        out_dtype = cx.result_dtype()
        if kind in ("eq", "ne", "lt", "le", "gt", "ge"):
            b = _operand(cx, 1, a)
        else:
            a = cx.cast(a, out_dtype)
            b = _operand(cx, 1, a)
        if with_alpha and cx.has(2) and cx.scalar(2) != 1:
            b = cx.build("mul", b, cx.like(cx.scalar(2), b))
        if reverse:
            a, b = b, a
        if kind == "div" and not out_dtype.startswith(("f", "b")):
            raise Decline("integer true division")
        return cx.build(kind, a, b)

    return lower


for _name, _kind in (("add", "add"), ("sub", "sub")):
    ATEN_PATTERNS[f"torch.aten.{_name}.Tensor"] = _binary(_kind, with_alpha=True)
    ATEN_PATTERNS[f"torch.aten.{_name}.Scalar"] = _binary(_kind, with_alpha=True)
ATEN_PATTERNS["torch.aten.rsub.Scalar"] = _binary("sub", with_alpha=True, reverse=True)
for _name in ("mul", "div"):
    ATEN_PATTERNS[f"torch.aten.{_name}.Tensor"] = _binary(_name)
    ATEN_PATTERNS[f"torch.aten.{_name}.Scalar"] = _binary(_name)
ATEN_PATTERNS["torch.aten.pow.Tensor_Scalar"] = _binary("pow")
ATEN_PATTERNS["torch.aten.pow.Tensor_Tensor"] = _binary("pow")
ATEN_PATTERNS["torch.aten.maximum"] = _binary("maximum")
ATEN_PATTERNS["torch.aten.minimum"] = _binary("minimum")
for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    ATEN_PATTERNS[f"torch.aten.{_cmp}.Tensor"] = _binary(_cmp)
    ATEN_PATTERNS[f"torch.aten.{_cmp}.Scalar"] = _binary(_cmp)


def _unary(kind):
    def lower(cx):
        return cx.build(kind, cx.tensor(0))

    return lower


for _name in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "silu", "erf", "cos", "sin"):
    ATEN_PATTERNS[f"torch.aten.{_name}"] = _unary(_name)


@pattern("torch.aten.floor", "torch.aten.ceil")
def lower_floor_ceil(cx):
    """``floor`` / ``ceil``: an integer or boolean tensor is its own value (torch keeps its dtype)."""
    x = cx.tensor(0)
    if not dtype_of(x).startswith(("f", "b")):
        return x
    return cx.build("floor" if cx.name.endswith("floor") else "ceil", x)


@pattern("torch.aten.sign")
def lower_sign(cx):
    """``sign(x)`` as two selects (-1, 0, 1; 0 for 0 and -0), for floats and integers alike."""
    x = cx.tensor(0)
    if dtype_of(x) == "i1":
        return x
    zero = cx.like(0, x)
    neg = cx.build("where", cx.build("lt", x, zero), cx.like(-1, x), zero)
    return cx.build("where", cx.build("gt", x, zero), cx.like(1, x), neg)


@pattern("torch.aten.logical_not", "torch.aten.bitwise_not")
def lower_not(cx):
    """``~mask`` / ``logical_not(x)``: ``x == 0``.  Integer ``bitwise_not`` (two's
    complement, not a boolean) declines."""
    x = cx.tensor(0)
    if cx.name == "torch.aten.bitwise_not" and dtype_of(x) != "i1":
        raise Decline("bitwise_not of a non-boolean tensor")
    return cx.build("eq", x, cx.like(0, x))


@pattern("torch.aten.bitwise_and.Tensor", "torch.aten.__and__.Tensor", "torch.aten.logical_and")
def lower_bool_and(cx):
    """``a & b`` on booleans is their product (i1 multiplication is AND)."""
    a, b = cx.tensor(0), cx.tensor(1)
    if dtype_of(a) != "i1" or dtype_of(b) != "i1":
        raise Decline("bitwise_and of non-boolean tensors")
    return cx.build("mul", a, b)


@pattern("torch.aten.gelu")
def lower_gelu(cx):
    approx = cx.scalar(1) if cx.has(1) else "none"
    return cx.build("gelu", cx.tensor(0), approximate=approx)


@pattern("torch.aten.clamp", "torch.aten.hardtanh")
def lower_clamp(cx):
    x = cx.tensor(0)
    lo = cx.scalar(1) if cx.has(1) else None
    hi = cx.scalar(2) if cx.has(2) else None
    if cx.name == "torch.aten.hardtanh":
        lo, hi = (-1.0 if lo is None else lo), (1.0 if hi is None else hi)
    if lo is not None:
        x = cx.build("maximum", x, cx.like(lo, x))
    if hi is not None:
        x = cx.build("minimum", x, cx.like(hi, x))
    return x


@pattern("torch.aten.where.self")
def lower_where(cx):
    cond = cx.cast(cx.tensor(0), "i1")
    dtype = cx.result_dtype()
    x = cx.cast(cx.tensor(1), dtype) if isinstance(cx.value(1), (ir.Value, Known)) else cx.const(cx.scalar(1), dtype)
    y = cx.cast(cx.tensor(2), dtype) if isinstance(cx.value(2), (ir.Value, Known)) else cx.const(cx.scalar(2), dtype)
    return cx.build("where", cond, x, y)


@pattern("torch.aten.clone", "torch.aten.contiguous", "torch.aten.detach", "torch.aten.alias",
         "torch.aten.lift_fresh_copy", "torch.aten.dropout")
def lower_identity(cx):
    return cx.value(0)


@pattern("torch.aten._to_copy", "torch.aten.to.dtype", "torch.aten.to.dtype_layout", "torch.aten.to.device",
         "torch.prims.convert_element_type")
def lower_to(cx):
    """A conversion to the result's dtype (layout, device and memory format
    do not matter to kiln's CPU tensors; the same dtype is the value itself)."""
    return cx.cast(cx.tensor(0), cx.result_dtype())


# ----------------------------------------------------------------------------
# Data movement
# ----------------------------------------------------------------------------


def reshape_dims(src: list, target: list) -> list:
    """Resolve ``-1`` in a torch/ONNX target shape against the source dims."""
    holes = [i for i, t in enumerate(target) if isinstance(t, int) and t == -1]
    target = [dim(1) if i in holes else as_dim(t) for i, t in enumerate(target)]
    if len(holes) > 1:
        raise Decline("reshape with more than one -1")
    if holes:
        known = product([t for i, t in enumerate(target) if i != holes[0]])
        total = product(src)
        if total.is_unknown or known.is_unknown:
            raise Decline("reshape of unknown dims")
        target[holes[0]] = exact_div(total, known)
    return target


def exact_div(total: Dim, part: Dim) -> Dim:
    """``total / part`` when it divides exactly (``B*L*8 / B`` is ``L*8``)."""
    import sympy

    if part.is_static:
        return total // part
    q = sympy.cancel(total.expr / part.expr)
    num, den = sympy.fraction(q)
    if den != 1:
        raise Decline(f"cannot infer -1 in a reshape: {total} is not a multiple of {part}")
    return dim(num)


@pattern("torch.aten.view", "torch.aten.reshape", "torch.aten._unsafe_view")
def lower_view(cx):
    x = cx.tensor(0)
    return cx.build("reshape", x, shape=reshape_dims(dims_of(x), cx.ints(1)))


@pattern("torch.aten.permute")
def lower_permute(cx):
    x = cx.tensor(0)
    r = rank_of(x)
    return cx.build("transpose", x, perm=[int(p) % r for p in cx.ints(1)])


@pattern("torch.aten.transpose.int")
def lower_transpose(cx):
    x = cx.tensor(0)
    r = rank_of(x)
    perm = list(range(r))
    a, b = cx.int(1) % r, cx.int(2) % r
    perm[a], perm[b] = perm[b], perm[a]
    return cx.build("transpose", x, perm=perm)


@pattern("torch.aten.t", "torch.aten.numpy_T")
def lower_t(cx):
    x = cx.tensor(0)
    return x if rank_of(x) < 2 else cx.build("transpose", x, perm=list(reversed(range(rank_of(x)))))


def squeeze_dims(dims: list, axes) -> list:
    r = len(dims)
    if axes is None:
        return [d for d in dims if not (d.is_static and d.value == 1)]
    axes = {int(a) % r for a in axes}
    return [d for i, d in enumerate(dims) if not (i in axes and d.is_static and d.value == 1)]


@pattern("torch.aten.squeeze.dims", "torch.aten.squeeze.dim", "torch.aten.squeeze", "torch.prims.squeeze")
def lower_squeeze(cx):
    x = cx.tensor(0)
    axes = cx.ints(1) if cx.has(1) else None
    return cx.build("reshape", x, shape=squeeze_dims(dims_of(x), axes))


@pattern("torch.aten.unsqueeze")
def lower_unsqueeze(cx):
    x = cx.tensor(0)
    dims = dims_of(x)
    axis = cx.int(1) % (len(dims) + 1)
    return cx.build("reshape", x, shape=dims[:axis] + [dim(1)] + dims[axis:])


@pattern("torch.aten.unflatten.int")
def lower_unflatten(cx):
    """``x.unflatten(dim, sizes)``: a reshape to the result's dims (torch
    resolved a ``-1`` among ``sizes`` there)."""
    return cx.build("reshape", cx.tensor(0), shape=cx.result_dims())


@pattern("torch.aten.diff")
def lower_diff(cx):
    """``torch.diff(x, n=1, dim, prepend, append)``: ``x[1:] - x[:-1]`` along
    ``dim`` of ``x`` with ``prepend`` / ``append`` concatenated first
    (transformers' mask code: ``diff(position_ids, prepend=...)``)."""
    x = cx.tensor(0)
    if cx.int(1, 1) != 1:
        raise Decline("diff with n != 1")
    axis = cx.int(2, -1) % rank_of(x)
    parts = [cx.tensor(3)] if cx.has(3) and cx.value(3) is not None else []
    parts += [x] + ([cx.tensor(4)] if cx.has(4) and cx.value(4) is not None else [])
    if len(parts) > 1:
        x = cx.build("concat", *parts, axis=axis)
    if dims_of(x)[axis].is_static and dims_of(x)[axis].value < 1:
        raise Decline("diff over an empty axis")
    later = cx.build("slice", x, starts=[1], ends=[SLICE_END], axes=[axis], steps=[1])
    earlier = cx.build("slice", x, starts=[0], ends=[-1], axes=[axis], steps=[1])
    return cx.build("sub", later, earlier)


@pattern("torch.aten.flatten.using_ints")
def lower_flatten(cx):
    x = cx.tensor(0)
    dims = dims_of(x)
    if not dims:
        return cx.build("reshape", x, shape=[1])
    a, b = cx.int(1) % len(dims), cx.int(2) % len(dims)
    return cx.build("reshape", x, shape=dims[:a] + [product(dims[a:b + 1])] + dims[b + 1:])


@pattern("torch.aten.expand")
def lower_expand(cx):
    x = cx.tensor(0)
    target = cx.ints(1)
    src = dims_of(x)
    off = len(target) - len(src)
    out = [src[i - off] if (isinstance(t, int) and t == -1) else as_dim(t) for i, t in enumerate(target)]
    return cx.build("expand", x, shape=out)


@pattern("torch.aten.slice.Tensor")
def lower_slice(cx):
    x = cx.tensor(0)
    axis = cx.int(1, 0) % rank_of(x)
    start = cx.scalar(2, 0)
    end = cx.scalar(3, None)
    step = cx.int(4, 1)
    start = 0 if start is None else start
    if isinstance(start, Dim) or isinstance(end, Dim):
        return _slice_by_gather(cx, x, axis, start, end, step)
    end = SLICE_END if end is None or end >= SLICE_END or end > 2**40 else int(end)
    return cx.build("slice", x, starts=[int(start)], ends=[end], axes=[axis], steps=[step])


def _slice_by_gather(cx, x, axis, start, end, step):
    """A slice with a symbolic bound (``position_ids[:, :L]``) as a gather of
    ``range(start, end, step)``: kiln.slice bounds are integers, a range's
    length may be any dim."""
    if step <= 0:
        raise Decline("slice with symbolic bounds and a non-positive step")
    size = dims_of(x)[axis]
    start, end = dim(start), size if end is None else dim(end)
    if (start.is_static and start.value < 0) or (end.is_static and end.value < 0):
        raise Decline("slice with symbolic bounds and a negative index")
    if end.is_static and end.value >= SLICE_END:
        end = size
    n = (end - start + (step - 1)) // step
    if start.is_static:
        idx = cx.build("range", shape=[n], start=start.value, step=step, results=[tensor_type([n], "i64")])
    else:  # range(n) * step + start, the start computed at run time
        from .onnx_fold import symbolic_tensor

        idx = cx.build("range", shape=[n], start=0, step=step, results=[tensor_type([n], "i64")])
        idx = cx.build("add", idx, symbolic_tensor(cx, Known([start], "i64")))
    if not (start.is_static and end == size):
        # The gather reads inside the axis only for in-range bounds, which a
        # source slice need not have (it clamps): checked per call.
        cx.check_bounds(start, end, size)
    return cx.build("gather", x, idx, axis=axis)


def _symbolic_arange(cx, args):
    """``arange`` with a symbolic integer bound (``arange(L)``) as ``kiln.range``."""
    start, end, step = ([0] + args + [1])[:3] if len(args) == 1 else (args + [1])[:3]
    if any(isinstance(v, float) and not float(v).is_integer() for v in (start, end, step)):
        raise Decline("arange with fractional and symbolic bounds")
    start, end, step = as_dim(start), as_dim(end), int(step)
    if step <= 0:
        raise Decline("arange with a symbolic bound and a non-positive step")
    n = (end - start + (step - 1)) // step
    if start.is_static:
        return cx.build("range", shape=[n], start=start.value, step=step,
                        results=[tensor_type([n], cx.result_dtype())])
    # arange(P, P + L): range(L) * step + P, the start computed at run time (as _slice_by_gather).
    from .onnx_fold import symbolic_tensor

    idx = cx.build("range", shape=[n], start=0, step=step, results=[tensor_type([n], cx.result_dtype())])
    return cx.build("add", idx, symbolic_tensor(cx, Known([start], cx.result_dtype())))


@pattern("torch.aten.gather")
def lower_gather_elements(cx):
    """``torch.gather(x, dim, index)`` (take along an axis) as ``kiln.gather_elements``."""
    x, idx = cx.tensor(0), cx.tensor(2)
    return cx.build("gather_elements", x, idx, axis=cx.int(1) % rank_of(x))


def select(cx, x, axis: int, i: int):
    """Item ``i`` of ``x`` along ``axis`` (negative from the end), without that axis."""
    y = cx.build("slice", x, starts=[i], ends=[i + 1 if i != -1 else SLICE_END], axes=[axis], steps=[1])
    dims = dims_of(x)
    return cx.build("reshape", y, shape=dims[:axis] + dims[axis + 1:])


@pattern("torch.aten.select.int")
def lower_select(cx):
    x = cx.tensor(0)
    return select(cx, x, cx.int(1) % rank_of(x), cx.int(2))


def concat(cx, values, axis):
    """``kiln.concat``, chained when there are more inputs than its 16 slots."""
    from ...dialects.kiln import MAX_VARIADIC

    values = list(values)
    while len(values) > MAX_VARIADIC:
        values = [cx.build("concat", *values[:MAX_VARIADIC], axis=axis)] + values[MAX_VARIADIC:]
    if len(values) == 1:
        return values[0]
    return cx.build("concat", *values, axis=axis)


@pattern("torch.aten.cat")
def lower_cat(cx):
    items = cx.value(0)
    if not isinstance(items, list):
        raise Decline("cat of a non-list")
    tensors = [cx.conv.materialize(t, cx.loc) if isinstance(t, Known) else t for t in items]
    tensors = [t for t in tensors if not (rank_of(t) == 1 and dims_of(t)[0] == dim(0))]
    axis = cx.int(1, 0) % rank_of(tensors[0])
    return concat(cx, tensors, axis)


@pattern("torch.aten.embedding")
def lower_embedding(cx):
    return cx.build("gather", cx.tensor(0), cx.tensor(1), axis=0)


@pattern("torch.aten.index_select")
def lower_index_select(cx):
    return cx.build("gather", cx.tensor(0), cx.tensor(2), axis=cx.int(1))


@pattern("torch.aten.constant_pad_nd")
def lower_constant_pad(cx):
    x = cx.tensor(0)
    r = rank_of(x)
    pad = [int(p) for p in cx.ints(1)]
    if any(p < 0 for p in pad):
        raise Decline("negative padding")
    begins, ends = [0] * r, [0] * r
    for i in range(len(pad) // 2):
        begins[r - 1 - i], ends[r - 1 - i] = pad[2 * i], pad[2 * i + 1]
    return cx.build("pad", x, pads=begins + ends, value=float(cx.scalar(2, 0.0) or 0.0))


@pattern("torch.aten.full", "torch.aten.scalar_tensor")
def lower_full(cx):
    if cx.name.endswith("scalar_tensor"):
        shape, value = [], cx.scalar(0)
    else:
        shape, value = cx.ints(0), cx.scalar(1)
    return _fill(cx, value, [as_dim(s) for s in shape])


def _fill(cx, value, dims: list):
    """``value`` everywhere in a tensor of ``dims``: a splat constant when the
    dims are static, else a rank-0 constant broadcast (``kiln.expand``) to the
    symbolic dims, which the lowering fills without reading memory."""
    if isinstance(value, Dim):
        if not value.is_static:
            raise Decline("fill with a symbolic value")
        value = value.value
    if not isinstance(value, (int, float, bool)):
        raise Decline(f"fill with a non-number {value!r}")
    dtype = cx.result_dtype()
    if all(d.is_static for d in dims):
        return cx.const(value, dtype, [d.value for d in dims])
    return cx.build("expand", cx.const(value, dtype), shape=dims)


@pattern("torch.aten.new_ones", "torch.aten.new_zeros")
def lower_new_fill(cx):
    """``x.new_ones(size)`` / ``x.new_zeros(size)``: a fill of ``size`` (the result's dtype)."""
    return _fill(cx, 1 if cx.name.endswith("new_ones") else 0, [as_dim(s) for s in cx.ints(1)])


@pattern("torch.aten.full_like", "torch.aten.zeros_like", "torch.aten.ones_like")
def lower_full_like(cx):
    """A fill shaped like operand 0 (``memory_format`` and device do not matter here)."""
    x = cx.tensor(0)
    if cx.name.endswith("zeros_like"):
        value = 0
    elif cx.name.endswith("ones_like"):
        value = 1
    else:
        value = cx.scalar(1)
    return _fill(cx, value, dims_of(x))


@pattern("torch.aten.repeat")
def lower_repeat(cx):
    """``x.repeat(r0, ..., rk)`` (tile) as reshape + expand + reshape: each axis
    ``d`` with ``r != 1`` becomes ``[1, d]``, broadcast to ``[r, d]`` and merged
    to ``r*d`` (the copies laid out one after the other, as torch does).  Extra
    leading repeats add leading axes."""
    x = cx.tensor(0)
    reps = [as_dim(r) for r in cx.ints(1)]
    dims = dims_of(x)
    if len(reps) < len(dims):
        raise Decline(f"repeat with {len(reps)} repeats for a rank-{len(dims)} tensor")
    dims = [dim(1)] * (len(reps) - len(dims)) + dims
    if all(r.is_static and r.value == 1 for r in reps):
        return cx.build("reshape", x, shape=dims) if len(dims) != rank_of(x) else x
    split, tiled, final = [], [], []
    for r, d in zip(reps, dims):
        if r.is_static and r.value == 1:
            split.append(d)
            tiled.append(d)
        else:
            split += [dim(1), d]
            tiled += [r, d]
        final.append(r * d)
    y = cx.build("reshape", x, shape=split)
    y = cx.build("expand", y, shape=tiled)
    return cx.build("reshape", y, shape=final)


@pattern("torch.aten.cumsum")
def lower_cumsum(cx):
    """``torch.cumsum`` as ``kiln.cumsum``; torch sums booleans and small
    integers in int64 (the result dtype says which), so the operand is cast first."""
    x = cx.tensor(0)
    if rank_of(x) == 0:
        return cx.cast(x, cx.result_dtype())
    x = cx.cast(x, cx.result_dtype())
    return cx.build("cumsum", x, axis=cx.int(1) % rank_of(x))


@pattern("torch.aten.index.Tensor")
def lower_index_tensor(cx):
    """Advanced indexing ``x[i0, :, i2]`` as ``kiln.gather``.

    One index tensor is a gather along its axis (negative indices wrap in the
    gather).  Several are linearized: each is wrapped to ``[0, size)``, scaled
    by the stride of its axis within the indexed axes and summed (broadcasting
    the index tensors, as torch does), then ``x`` with those axes merged into
    one is gathered at that flat index.  torch puts the broadcast index dims in
    place of adjacent indexed axes, and in front otherwise: the non-adjacent
    case moves the indexed axes to the front first.
    """
    x = cx.tensor(0)
    items = cx.value(1)
    if not isinstance(items, list):
        raise Decline("index with a non-list of indices")
    r = rank_of(x)
    if len(items) > r:
        raise Decline(f"{len(items)} indices for a rank-{r} tensor")
    idx = {}
    for axis, item in enumerate(items):
        if item is None:
            continue
        t = cx.conv.materialize(item, cx.loc) if isinstance(item, Known) else item
        if not isinstance(t, ir.Value):
            raise Decline(f"index #{axis} is not a tensor")
        dt = dtype_of(t)
        if dt == "i1" or not dt.startswith("i"):
            raise Decline(f"index #{axis} of dtype {dt} (boolean masks are not supported)")
        idx[axis] = t
    if not idx:
        return x
    axes = sorted(idx)
    if axes != list(range(axes[0], axes[-1] + 1)):
        # Non-adjacent indexed axes: bring them to the front (torch puts the
        # broadcast index dims first in that case).
        rest = [a for a in range(r) if a not in idx]
        x = cx.build("transpose", x, perm=axes + rest)
        idx = {k: idx[a] for k, a in enumerate(axes)}
        axes = list(range(len(axes)))
    return index_axes(cx, x, [idx[a] for a in axes], axes[0])


def index_axes(cx, x, indices: list, first: int):
    """``x[..., i0, i1, ...]``: the integer tensors ``indices`` index the
    adjacent axes of ``x`` from ``first`` on (negative values count from the
    end of their axis); the result has the index tensors' broadcast dims in
    place of those axes.  One index is a gather along its axis.  Several are
    linearized: each wrapped to ``[0, size)``, scaled by its stride within the
    indexed axes and summed (broadcasting them), then gathered from ``x`` with
    those axes merged into one.  A symbolic size or stride (``mask[b, kv]``
    over ``[B, L]``) is a run-time value, so the work and memory are those of
    the result.  Shared by ``aten.index.Tensor`` and ONNX ``GatherND``."""
    if len(indices) == 1:
        return cx.build("gather", x, indices[0], axis=first)
    dims = dims_of(x)
    last = first + len(indices) - 1
    flat, stride = None, dim(1)
    for i, size in reversed(list(zip(indices, dims[first:last + 1]))):
        i = cx.cast(i, "i64")
        neg = cx.build("lt", i, cx.like(0, i))
        i = cx.build("where", neg, cx.build("add", i, dim_value(cx, size, i)), i)
        if not (stride.is_static and stride.value == 1):
            i = cx.build("mul", i, dim_value(cx, stride, i))
        flat = i if flat is None else cx.build("add", i, flat)
        stride = stride * size
    merged = cx.build("reshape", x, shape=dims[:first] + [stride] + dims[last + 1:])
    return cx.build("gather", merged, flat, axis=first)


@pattern("torch.aten.split_with_sizes", "torch.aten.split.Tensor")
def lower_split(cx):
    """A list of ``kiln.slice`` results; ``prim.ListUnpack`` takes it apart."""
    x = cx.tensor(0)
    axis = cx.int(2, 0) % rank_of(x)
    size = dims_of(x)[axis]
    if cx.name.endswith("split_with_sizes"):
        sizes = [int(as_dim(s).value) for s in cx.ints(1)]
    else:
        if not size.is_static:
            raise Decline("split of a symbolic axis")
        chunk = cx.int(1)
        sizes = [min(chunk, size.value - i) for i in range(0, size.value, chunk)]
    out, start = [], 0
    for s in sizes:
        out.append(cx.build("slice", x, starts=[start], ends=[start + s], axes=[axis], steps=[1]))
        start += s
    return out


@pattern("torch.aten.unbind.int")
def lower_unbind(cx):
    """A list of the slices along the axis, reshaped without it (``prim.ListUnpack`` takes it apart)."""
    x = cx.tensor(0)
    axis = cx.int(1, 0) % rank_of(x)
    size = dims_of(x)[axis]
    if not size.is_static:
        raise Decline("unbind of a symbolic axis")
    return [select(cx, x, axis, i) for i in range(size.value)]


@pattern("torch.prim.ListUnpack")
def lower_list_unpack(cx):
    items = cx.value(0)
    if not isinstance(items, list):
        raise Decline("ListUnpack of a value that is not a folded list")
    return tuple(items)


@pattern("torch.aten._assert_tensor_metadata", "torch.aten._assert_scalar", "torch.aten.sym_constrain_range_for_size")
def lower_assert(cx):
    """Export-time checks: nothing to run (the runtime checks shapes itself)."""
    return ()


@pattern("torch.aten.arange.start_step", "torch.aten.arange.start", "torch.aten.arange")
def lower_arange(cx):
    args = [cx.scalar(i) for i in range(min(cx.num_operands, 3 if cx.name.endswith("start_step") else 2))]
    if cx.name.endswith("arange") or cx.name.endswith("arange.default"):
        args = args[:1]
    if any(isinstance(a, Dim) and not a.is_static for a in args):
        return _symbolic_arange(cx, args)
    vals = [a.value if isinstance(a, Dim) else a for a in args]
    dtype = cx.result_dtype()
    return Known(np.arange(*vals).astype(NUMPY_DTYPES.get(dtype, np.float64)),
                 dtype)


__all__ = ["ATEN_PATTERNS", "concat", "reshape_dims", "squeeze_dims", "tensor_type"]
