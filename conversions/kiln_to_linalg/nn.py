"""Lowerings of contractions, reductions, normalizations, convolution, pooling (attention: attention.py).

Contractions are ``linalg.matmul`` (2-D) or a ``linalg.generic`` contraction
whose maps implement numpy batch broadcasting; reductions are generics with
``reduction`` iterators into a filled init; softmax and the norms are short
chains of those; convolution is an im2col copy and a contraction on a
padded input, pooling pads and uses the named NCHW ops.
"""

from __future__ import annotations

import math as pymath

from ..._mlir import arith, ir, linalg, math, tensor
from ...dialects.dims import dim
from ...dialects.kiln import is_float
from ...dialects.kiln.shapes import matrix_transpose
from .common import (
    DYN,
    DimEnv,
    Lowering,
    affine_map,
    const_index,
    elementwise,
    empty_tensor,
    fill,
    generic,
    identity_map,
    loop_index,
    lowest,
    scalar_const,
    to_float,
)
from .elementwise import _scf, exp
from .library_call import CONV2D, chosen, mark_contraction, mark_part


def _batch_exprs(shape, out_batch, n_batch_loops):
    """Map exprs for an operand's leading (batch) dims, right-aligned into the batch loops."""
    exprs = []
    for k, size in enumerate(shape):
        axis = k + n_batch_loops - len(shape)
        od = out_batch[axis]
        exprs.append(("c", 0) if size == 1 and not (od.is_static and od.value == 1) else axis)
    return exprs


def _add(a, b):
    return arith.addf(a, b) if is_float(a.type) else arith.addi(a, b)


def _mul(a, b):
    return arith.mulf(a, b) if is_float(a.type) else arith.muli(a, b)


#: Float types narrower than f32 whose products sum in an f32 accumulator
#: (then one rounding to the result's type): summing K products in bf16
#: itself loses about log2(K) of its 8 bits, past the bf16 tolerance at K = 768.
_WIDEN = ("bf16", "f16")


def _accumulator(dtype: ir.Type) -> ir.Type:
    """The type a contraction over ``dtype`` operands sums in: f32 for bf16 / f16, else ``dtype``."""
    return ir.F32Type.get() if str(dtype) in _WIDEN else dtype


def _narrow(value: ir.Value, dtype: ir.Type, out_dims, env) -> ir.Value:
    """``value`` (a contraction's accumulator) rounded to ``dtype`` by one elementwise truncf, when they differ."""
    if ir.RankedTensorType(value.type).element_type == dtype:
        return value
    return elementwise([value], out_dims, dtype, env, lambda x: arith.truncf(dtype, x))


def contract(lhs, rhs, out_dims, dtype, env, lhs_vec: bool, rhs_vec: bool, lhs_t: bool = False,
             rhs_t: bool = False, mark=None) -> ir.Value:
    """numpy ``matmul`` as one generic: loops are batch..., m?, n?, k (bf16 / f16
    operands: extended to an f32 accumulator, rounded to ``dtype`` after).
    ``lhs_t`` / ``rhs_t``: the operand holds its matrix transposed (``[.., k, m]``
    / ``[.., n, k]``) and is read through the map.  ``mark(value)``: called
    with the contraction's result (a library kernel's placeholder)."""
    lt, rt = ir.RankedTensorType(lhs.type), ir.RankedTensorType(rhs.type)
    n_out = len(out_dims)
    n_batch = n_out - (0 if lhs_vec else 1) - (0 if rhs_vec else 1)
    k = n_out  # the reduction loop
    m = n_batch
    n = n_batch + (0 if lhs_vec else 1)
    batch = list(out_dims[:n_batch])
    if lhs_vec:
        lmap = [k]
    else:
        lmap = _batch_exprs(lt.shape[:-2], batch, n_batch) + ([k, m] if lhs_t else [m, k])
    if rhs_vec:
        rmap = [k]
    else:
        rmap = _batch_exprs(rt.shape[:-2], batch, n_batch) + ([n, k] if rhs_t else [k, n])
    acc_t = _accumulator(dtype)
    init = fill(scalar_const(acc_t, 0), empty_tensor(out_dims, acc_t, env))
    maps = [affine_map(n_out + 1, lmap), affine_map(n_out + 1, rmap), affine_map(n_out + 1, list(range(n_out)))]
    iters = ["parallel"] * n_out + ["reduction"]
    if acc_t != dtype:
        def body(a, b, acc):
            return arith.addf(acc, arith.mulf(arith.extf(acc_t, a), arith.extf(acc_t, b)))
    else:
        def body(a, b, acc):
            return _add(acc, _mul(a, b))
    sums = generic([lhs, rhs], [init], maps, iters, body)[0]
    if mark is not None:
        mark(sums)
    return _narrow(sums, dtype, out_dims, env)


def _transposed_source(v: ir.Value) -> ir.Value | None:
    """The input of the ``linalg.transpose`` that made ``v`` when it swaps only
    the last two dims (a matrix transposed), else None."""
    owner = v.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)) or owner.name != "linalg.transpose":
        return None
    perm = list(ir.DenseI64ArrayAttr(owner.attributes["permutation"]))
    if len(perm) < 2 or perm != matrix_transpose(len(perm)):
        return None
    return owner.operands[0]


def lower_matmul(lw: Lowering):
    a, b = lw.operands
    out = lw.results[0]
    ra, rb = ir.RankedTensorType(a.type).rank, ir.RankedTensorType(b.type).rank
    # A matrix transposed in the same kernel (``nn.Linear``'s weight too large
    # to fold at compile time, which kiln-partition copies into the kernel
    # with its transpose) is read through the contraction's map: no copy per
    # call, and kiln-cpu-library passes BLAS its transpose flag (an LM head's
    # [32000, 768] weight streamed row by row: 19 against 12 GB/s for its
    # transposed copy, and the copy's 98 MB not kept).
    at = _transposed_source(a) if ra >= 2 else None
    bt = _transposed_source(b) if rb >= 2 else None
    mark = (lambda v: mark_contraction(lw, v)) if chosen(lw) else None
    if at is not None or bt is not None:
        return [contract(at if at is not None else a, bt if bt is not None else b, out.dims, out.dtype, lw.env,
                         ra == 1, rb == 1, lhs_t=at is not None, rhs_t=bt is not None, mark=mark)]
    if ra == 2 and rb == 2 and mark is None:  # (a library kernel's placeholder is the generic contraction)
        acc_t = _accumulator(out.dtype)  # linalg.matmul extends mixed operands to its output's type
        init = fill(scalar_const(acc_t, 0), lw.empty(out.dims, acc_t))
        return [_narrow(linalg.matmul(a, b, outs=[init]), out.dtype, out.dims, lw.env)]
    return [contract(a, b, out.dims, out.dtype, lw.env, ra == 1, rb == 1, mark=mark)]


# -- reductions ----------------------------------------------------------------


def reduce(x: ir.Value, axes, keepdims: bool, init_value, combine, env: DimEnv, out_dims=None,
           centre: ir.Value | None = None) -> ir.Value:
    """Reduce ``x`` over ``axes`` with ``combine(acc, v)`` from ``init_value``.

    ``centre`` (keepdims only: a tensor of the result's shape, 1 along
    ``axes``) is read beside ``x``, and ``combine`` gets ``v - centre``: a
    layer norm's variance from ``x`` and its mean, without ``x - mean`` as a
    tensor of ``x``'s size."""
    xt = ir.RankedTensorType(x.type)
    rank = xt.rank
    axes = sorted(a % rank for a in axes) if rank else []
    if out_dims is None:
        out_dims = []
        for i in range(rank):
            if i in axes:
                if keepdims:
                    out_dims.append(dim(1))
            else:
                out_dims.append(_dim_of(x, i, env))
    sizes = [d if not hasattr(d, "is_static") else d for d in out_dims]
    init = fill(init_value, _empty_from(sizes, xt.element_type, env))
    groups = _reduction_groups(rank, axes)
    if len(groups) < rank:
        x = _collapse(x, groups)  # the centre keeps its dims: it is read through the result's map
    loops = len(groups)
    out_exprs = []
    for loop, group in enumerate(groups):
        if group[0] in axes:
            if keepdims:
                out_exprs.extend([("c", 0)] * len(group))
        else:
            out_exprs.append(loop)
    maps = [identity_map(loops), affine_map(loops, out_exprs)]
    iters = ["reduction" if g[0] in axes else "parallel" for g in groups]
    if centre is not None:
        assert keepdims, "a centred reduction keeps the reduced dims (the centre's map is the result's)"
        return generic([x, centre], [init], [maps[0], maps[1], maps[1]], iters,
                       lambda v, c, acc: combine(acc, arith.subf(v, c)))[0]
    return generic([x], [init], maps, iters, lambda v, acc: combine(acc, v))[0]


def _reduction_groups(rank: int, axes) -> list[list[int]]:
    """The dims of a reduction as loops: each run of adjacent reduced dims one
    loop, every other dim its own.

    A mean over the 16 x 16 pixels of ``[B, 64, 16, 16]`` as two nested
    loops left LLVM a 16-trip inner loop, and it vectorized across channels
    with gathers instead (60 us at B = 8); one 256-trip loop is a contiguous
    vector sum (35 us).
    """
    groups: list[list[int]] = []
    for i in range(rank):
        if groups and i in axes and groups[-1][-1] == i - 1 and groups[-1][0] in axes:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _collapse(x: ir.Value, groups) -> ir.Value:
    """``tensor.collapse_shape`` of ``x`` by ``groups`` (a dynamic dim makes its group's size dynamic)."""
    xt = ir.RankedTensorType(x.type)
    shape = []
    for g in groups:
        sizes = [xt.shape[i] for i in g]
        shape.append(DYN if DYN in sizes else pymath.prod(sizes))
    rt = ir.RankedTensorType.get(shape, xt.element_type)
    reassociation = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)
                                                         for i in g]) for g in groups])
    return tensor.collapse_shape(rt, x, reassociation)


class _Size:
    """A dim known only as an SSA value (``tensor.dim`` of a converted tensor)."""

    def __init__(self, static: int | None, value: ir.Value | None):
        self.static, self.value_ = static, value


def _dim_of(x: ir.Value, axis: int, env: DimEnv):
    s = ir.RankedTensorType(x.type).shape[axis]
    if s != DYN:
        return dim(s)
    return _Size(None, tensor.dim(x, const_index(axis)))


def _empty_from(sizes, dtype, env: DimEnv) -> ir.Value:
    out = []
    for s in sizes:
        if isinstance(s, _Size):
            out.append(s.value_)
        elif s.is_static:
            out.append(s.value)
        else:
            out.append(env.value(s))
    return tensor.empty(out, dtype)


def _count(x: ir.Value, axes) -> ir.Value:
    """Number of elements over ``axes`` of ``x``, as an index value."""
    rank = ir.RankedTensorType(x.type).rank
    total = const_index(1)
    for a in axes:
        total = arith.muli(total, tensor.dim(x, const_index(a % rank)))
    return total


def _reduce_axes(lw: Lowering):
    rank = ir.RankedTensorType(lw.operands[0].type).rank
    return [a % rank for a in lw.attrs["axes"]] if lw.attrs["axes"] else list(range(rank))


def _reduce_over_axes(lw: Lowering, init, combine):
    """``combine`` over the op's axes from ``init``, into its result's dims."""
    return [reduce(lw.operands[0], _reduce_axes(lw), lw.attrs["keepdims"], init, combine, lw.env,
                   list(lw.results[0].dims))]


def lower_reduce_sum(lw: Lowering):
    return _reduce_over_axes(lw, scalar_const(lw.results[0].dtype, 0), _add)


def lower_reduce_max(lw: Lowering):
    t = lw.results[0].dtype

    def mx(a, b):
        return arith.maximumf(a, b) if is_float(t) else arith.maxsi(a, b)

    if str(t) == "i1":
        # Signed i1 has true = -1 < false = 0 (maxsi picked false): a max of
        # booleans is an or, from false (an empty set gives false, as ONNX).
        return _reduce_over_axes(lw, scalar_const(t, 0), arith.ori)
    return _reduce_over_axes(lw, lowest(t), mx)


def lower_reduce_mean(lw: Lowering):
    x = lw.operands[0]
    out = lw.results[0]
    axes = _reduce_axes(lw)
    s = reduce(x, axes, lw.attrs["keepdims"], scalar_const(out.dtype, 0), _add, lw.env, list(out.dims))
    if not is_float(out.dtype):
        raise lw.error(f"needs a floating-point operand, got {out.dtype}")
    n = to_float(_count(x, axes), out.dtype)
    return [elementwise([s], out.dims, out.dtype, lw.env, lambda v: arith.divf(v, n))]


def lower_reduce_prod(lw: Lowering):
    """Product over the axes, from 1 (so an empty set gives 1)."""
    return _reduce_over_axes(lw, scalar_const(lw.results[0].dtype, 1), _mul)


def lower_reduce_min(lw: Lowering):
    """Minimum from the identity (+inf, the type's maximum; for booleans an and from true)."""
    t = lw.results[0].dtype
    if str(t) == "i1":
        init, mn = scalar_const(t, 1), arith.andi
    else:
        init = _highest(t)

        def mn(a, b):
            return arith.minimumf(a, b) if is_float(t) else arith.minsi(a, b)

    return _reduce_over_axes(lw, init, mn)


def _highest(t: ir.Type) -> ir.Value:
    """The identity of ``min``: +inf for floats, the maximum for integers."""
    if is_float(t):
        return arith.constant(t, float("inf"))
    return arith.constant(t, 2 ** (ir.IntegerType(t).width - 1) - 1)


def lower_arg_reduce(lw: Lowering):
    """``kiln.argmax`` / ``kiln.argmin``: one reduction generic carrying the
    best value and its index (two outputs).  A strict comparison keeps the
    first extreme, a non-strict one the last (``select_last_index``); from
    the identity (-inf / +inf), a row of only that value gives index 0 or the
    last index, as it should.  A NaN wins over any number (numpy's rule)."""
    x = lw.operands[0]
    out = lw.results[0]
    xt = ir.RankedTensorType(x.type)
    rank, et = xt.rank, xt.element_type
    axis = lw.attrs["axis"] % rank
    keep, last = lw.attrs["keepdims"], lw.attrs["select_last_index"]
    is_max = lw.name == "kiln.argmax"
    i64 = ir.IntegerType.get_signless(64)
    init_v = fill(lowest(et) if is_max else _highest(et), lw.empty(out.dims, et))
    init_i = fill(scalar_const(i64, 0), lw.empty(out.dims, i64))
    out_exprs = [("c", 0) if i == axis else i for i in range(rank) if keep or i != axis]
    maps = [identity_map(rank), affine_map(rank, out_exprs), affine_map(rank, out_exprs)]
    iters = ["reduction" if i == axis else "parallel" for i in range(rank)]
    if is_float(et):
        pred = {(True, False): "OGT", (True, True): "OGE", (False, False): "OLT", (False, True): "OLE"}[(is_max, last)]
    else:
        pred = {(True, False): "sgt", (True, True): "sge", (False, False): "slt", (False, True): "sle"}[(is_max, last)]

    def body(v, acc_v, acc_i):
        if is_float(et):
            take = arith.cmpf(getattr(arith.CmpFPredicate, pred), v, acc_v)
            v_nan = arith.cmpf(arith.CmpFPredicate.UNO, v, v)
            acc_num = arith.cmpf(arith.CmpFPredicate.ORD, acc_v, acc_v)
            # A NaN replaces a number; once held, a NaN stays (the first) or moves to a later NaN (the last).
            nan_take = arith.andi(v_nan, acc_num) if not last else v_nan
            take = arith.ori(take, nan_take)
        else:
            take = arith.cmpi(getattr(arith.CmpIPredicate, pred), v, acc_v)
        i = arith.index_cast(i64, loop_index(axis))
        return [arith.select(take, v, acc_v), arith.select(take, i, acc_i)]

    return [generic([x], [init_v, init_i], maps, iters, body)[1]]


def lower_cumsum(lw: Lowering):
    """A sequential scan: ``scf.for`` loops over the other dims, and innermost
    one along ``axis`` carrying the running sum and writing each partial sum
    with ``tensor.insert``.  A ``linalg.generic`` cannot carry a value from one
    iteration to the next, and a masked sum over ``k <= i`` would cost
    ``O(n^2)``; the loops are ``O(n)`` and bufferize in place."""
    scf = _scf()
    x = lw.operands[0]
    out = lw.results[0]
    t = out.dtype
    rank = len(out.dims)
    axis = lw.attrs["axis"] % rank
    xt = ir.RankedTensorType(x.type)
    sizes = [const_index(s) if s != DYN else tensor.dim(x, const_index(i)) for i, s in enumerate(xt.shape)]
    c0, c1 = const_index(0), const_index(1)
    order = [d for d in range(rank) if d != axis] + [axis]
    add = arith.addf if is_float(t) else arith.addi

    def nest(level: int, acc: ir.Value, idx: dict) -> ir.Value:
        d = order[level]
        if d == axis:
            loop = scf.ForOp(c0, sizes[d], c1, [acc, scalar_const(t, 0)])
            with ir.InsertionPoint(loop.body):
                dest, running = loop.inner_iter_args
                at = [loop.induction_variable if k == axis else idx[k] for k in range(rank)]
                running = add(running, tensor.extract(x, at))
                scf.YieldOp([tensor.insert(running, dest, at), running])
            return loop.results[0]
        loop = scf.ForOp(c0, sizes[d], c1, [acc])
        with ir.InsertionPoint(loop.body):
            scf.YieldOp([nest(level + 1, loop.inner_iter_args[0], {**idx, d: loop.induction_variable})])
        return loop.results[0]

    return [nest(0, lw.empty(out.dims, t), {})]


def softmax(x: ir.Value, axis: int, dims, env: DimEnv, empty_rows_zero: bool = False) -> ir.Value:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``.

    ``empty_rows_zero``: a row of only ``-inf`` gives zeros, not NaN -- what
    torch's ``scaled_dot_product_attention`` returns for a query every key is
    masked from (a left-padded prompt's padding rows, whose keys and values
    later rows read through the cache: a NaN there poisons them all).
    """
    t = ir.RankedTensorType(x.type).element_type
    m = reduce(x, [axis], True, lowest(t), arith.maximumf, env)
    e = elementwise([x, m], dims, t, env, lambda a, b: exp(arith.subf(a, b)))
    s = reduce(e, [axis], True, scalar_const(t, 0.0), arith.addf, env)
    if empty_rows_zero:
        # Tested on the row's max, not on the sum: the f32 exp clamps its
        # argument at -87.3, so exp(-inf) is 1e-38, not 0 (elementwise.exp).
        ninf, zero = scalar_const(t, float("-inf")), scalar_const(t, 0.0)
        return elementwise([e, s, m], dims, t, env, lambda a, b, top: arith.select(
            arith.cmpf(arith.CmpFPredicate.OEQ, top, ninf), zero, arith.divf(a, b)))
    return elementwise([e, s], dims, t, env, arith.divf)


def lower_softmax(lw: Lowering):
    x = lw.operands[0]
    out = lw.results[0]
    return [softmax(x, lw.attrs["axis"] % len(out.dims), out.dims, lw.env)]


def lower_layer_norm(lw: Lowering):
    x = lw.operands[0]
    out = lw.results[0]
    t = out.dtype
    rank = len(out.dims)
    axes = list(range(lw.attrs["axis"] % rank, rank))
    n = to_float(_count(x, axes), t)
    zero = scalar_const(t, 0.0)
    mean = elementwise(
        [reduce(x, axes, True, zero, arith.addf, lw.env)], _kept(out.dims, axes), t, lw.env, lambda v: arith.divf(v, n)
    )
    # The variance reads x and the mean, and the output recomputes x - mean:
    # x - mean and its square as tensors of x's size had been two buffers
    # allocated (4 MiB each at the transformer block's 4096 x 256) and two
    # more passes over memory per call.
    sq = reduce(x, axes, True, zero, lambda acc, dv: arith.addf(acc, arith.mulf(dv, dv)), lw.env, centre=mean)
    eps = scalar_const(t, lw.attrs["epsilon"])
    inv = elementwise(
        [sq], _kept(out.dims, axes), t, lw.env,
        lambda v: arith.divf(scalar_const(t, 1.0), math.sqrt(arith.addf(arith.divf(v, n), eps))),
    )
    extra = lw.operands[1:]  # weight, bias (either optional)
    # operandSegmentSizes says which of weight and bias are present
    segments = list(ir.DenseI32ArrayAttr(lw.op.attributes["operandSegmentSizes"]))
    names = [n for n, k in zip(("weight", "bias"), segments[1:]) if k]

    def body(xv, mv, iv, *wb):
        y = arith.mulf(arith.subf(xv, mv), iv)
        for name, val in zip(names, wb):
            y = arith.mulf(y, val) if name == "weight" else arith.addf(y, val)
        return y

    return [elementwise([x, mean, inv, *extra], out.dims, t, lw.env, body)]


def _kept(dims, axes):
    return [dim(1) if i in axes else d for i, d in enumerate(dims)]


def lower_batch_norm(lw: Lowering):
    x, scale, bias, mean, var = lw.operands
    out = lw.results[0]
    t = out.dtype
    rank = len(out.dims)
    eps = scalar_const(t, lw.attrs["epsilon"])
    init = lw.empty(out.dims, t)
    chan = affine_map(rank, [1])
    maps = [identity_map(rank), chan, chan, chan, chan, identity_map(rank)]

    def body(xv, s, b, m, v, _):
        inv = arith.divf(scalar_const(t, 1.0), math.sqrt(arith.addf(v, eps)))
        return arith.addf(arith.mulf(arith.mulf(arith.subf(xv, m), inv), s), b)

    return generic([x, scale, bias, mean, var], [init], maps, ["parallel"] * rank, body)


# -- convolution and pooling ---------------------------------------------------


def pad_tensor(x: ir.Value, low, high, value) -> ir.Value:
    """Constant padding; ``low``/``high`` hold ints or index values.

    A generic reading ``x`` at clamped indices and selecting ``value``
    outside it, rather than ``tensor.pad``: its bufferization copies into a
    strided subview (``memref.copy``, whose runtime the wheel lacks).
    """
    xt = ir.RankedTensorType(x.type)
    rank = xt.rank
    sizes, shape = [], []
    src = []
    for i, (lo, hi) in enumerate(zip(low, high)):
        s = xt.shape[i]
        n = const_index(s) if s != DYN else tensor.dim(x, const_index(i))
        src.append(n)
        if s != DYN and isinstance(lo, int) and isinstance(hi, int):
            sizes.append(s + lo + hi)
            shape.append(s + lo + hi)
        else:
            sizes.append(arith.addi(arith.addi(n, _as_index(lo)), _as_index(hi)))
            shape.append(DYN)
    init = tensor.empty(sizes, xt.element_type)
    zero = None

    def body(_):
        nonlocal zero
        zero = const_index(0)
        inside = None
        idx = []
        for i in range(rank):
            p = arith.subi(loop_index(i), _as_index(low[i]))
            ok = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, p, zero), arith.cmpi(arith.CmpIPredicate.slt, p, src[i]))
            inside = ok if inside is None else arith.andi(inside, ok)
            idx.append(arith.minsi(arith.maxsi(p, zero), arith.subi(src[i], const_index(1))))
        v = tensor.extract(x, idx)
        return arith.select(inside, v, value) if inside is not None else v

    return generic([], [init], [identity_map(rank)], ["parallel"] * rank, body)[0]


def _as_index(v):
    return const_index(v) if isinstance(v, int) else v


def _pairs(v, default):
    return list(v) if v is not None else list(default)


def lower_conv2d(lw: Lowering):
    x, w = lw.operands[0], lw.operands[1]
    bias = lw.operands[2] if len(lw.operands) > 2 else None
    out = lw.results[0]
    t = out.dtype
    strides = _pairs(lw.attrs["strides"], [1, 1])
    pads = _pairs(lw.attrs["pads"], [0, 0, 0, 0])
    dil = _pairs(lw.attrs["dilations"], [1, 1])
    groups = lw.attrs["groups"]
    # The zero padding, the bias init and the im2col copy are parts of a
    # chosen native.conv2d's call (kiln-cpu-library folds them in): marked.
    if any(pads):
        x = mark_part(lw, pad_tensor(x, [0, 0, pads[0], pads[1]], [0, 0, pads[2], pads[3]], scalar_const(t, 0.0)), "pad")
    acc_t = _accumulator(t)  # bf16 / f16 sum in f32 (the bias too), rounded once after
    init = lw.empty(out.dims, acc_t)
    if bias is not None:
        rank = 4
        init = generic([bias], [init], [affine_map(rank, [1]), identity_map(rank)], ["parallel"] * rank,
                       lambda b, _: b if acc_t == t else arith.extf(acc_t, b))[0]
    else:
        init = fill(scalar_const(acc_t, 0.0), init)
    mark_part(lw, init, "init")
    if groups == 1:
        res = _conv_im2col(lw, x, w, init, strides, dil)
    else:
        res = _conv_grouped(lw, x, w, init, strides, dil, groups)
    return [_narrow(res, t, out.dims, lw.env)]


def _mac(a, b, acc):
    """``acc + a * b``; a float ``a`` or ``b`` narrower than ``acc`` (bf16 / f16 into an f32 sum) widened first."""
    if is_float(acc.type):
        a, b = (arith.extf(acc.type, x) if x.type != acc.type else x for x in (a, b))
    return _add(acc, _mul(a, b))


def _conv_grouped(lw: Lowering, x, w, init, strides, dil, groups: int) -> ir.Value:
    """Grouped (and depthwise) convolution as one generic over
    ``(n, g, o, oh, ow, c, kh, kw)``: the input channel is ``g*Cg + c`` (an
    affine map, Cg static), weight and output viewed as ``[G, Og, ...]``."""
    out = lw.results[0]
    t = out.dtype
    wt = ir.RankedTensorType(w.type)
    o, cg, kh, kw = wt.shape
    og = o // groups
    n, oh, ow = (lw.env.value(d) if not d.is_static else d.value for d in (out.dims[0], out.dims[2], out.dims[3]))
    d = [ir.AffineDimExpr.get(i) for i in range(8)]
    xmap = ir.AffineMap.get(8, 0, [d[0], d[1] * cg + d[5], d[3] * strides[0] + d[6] * dil[0],
                                   d[4] * strides[1] + d[7] * dil[1]])
    wmap = ir.AffineMap.get(8, 0, [d[1], d[2], d[5], d[6], d[7]])
    omap = ir.AffineMap.get(8, 0, d[:5])
    acc_t = ir.RankedTensorType(init.type).element_type
    w5 = _reshape(w, [groups, og, cg, kh, kw], t)
    init5 = _reshape(init, [n, groups, og, oh, ow], acc_t)
    res = generic([x, w5], [init5], [xmap, wmap, omap], ["parallel"] * 5 + ["reduction"] * 3,
                  _mac)[0]  # integer convolutions too (ConvInteger)
    return _reshape(res, [n, o, oh, ow], acc_t)


def _reshape(x: ir.Value, sizes, dtype) -> ir.Value:
    """``tensor.reshape`` of a contiguous tensor to ``sizes`` (ints or index values)."""
    i64 = ir.IntegerType.get_signless(64)
    vals = [arith.index_cast(i64, const_index(v) if isinstance(v, int) else v) for v in sizes]
    shape = tensor.from_elements(ir.RankedTensorType.get([len(vals)], i64), vals)
    rt = ir.RankedTensorType.get([v if isinstance(v, int) else DYN for v in sizes], dtype)
    return tensor.reshape(rt, x, shape)


def _conv_im2col(lw: Lowering, x, w, init, strides, dil) -> ir.Value:
    """Convolution as im2col plus one contraction per image.

    ``col[n, c, kh, kw, oh, ow] = x[n, c, oh*s + kh*d, ow*s + kw*d]`` (a
    generic copy with an affine input map), reshaped to ``[N, C*KH*KW, OH*OW]``;
    then ``out[n, o, p] = sum_k w[o, k] * col[n, k, p]``, the form
    ``kiln-cpu-library`` turns into sgemm calls, reshaped to ``[N, O, OH, OW]``.
    """
    out = lw.results[0]
    t = out.dtype
    wt = ir.RankedTensorType(w.type)
    o, c, kh, kw = wt.shape
    n, oh, ow = (lw.env.value(d) if not d.is_static else d.value for d in (out.dims[0], out.dims[2], out.dims[3]))
    ohw = oh * ow if isinstance(oh, int) and isinstance(ow, int) else arith.muli(_as_index(oh), _as_index(ow))
    if (kh, kw) == (1, 1) and list(strides) == [1, 1] and chosen(lw) != CONV2D:
        # A pointwise convolution's im2col is its (padded) input: read in place.  native.conv2d
        # (kiln-cpu-library) takes its geometry from the copy, which it never runs.
        col = _reshape(x, [n, c, ohw], t)
    else:
        d = [ir.AffineDimExpr.get(i) for i in range(6)]
        xmap = ir.AffineMap.get(6, 0, [d[0], d[1], d[4] * strides[0] + d[2] * dil[0],
                                       d[5] * strides[1] + d[3] * dil[1]])
        col6 = empty_tensor([out.dims[0], c, kh, kw, out.dims[2], out.dims[3]], t, lw.env)
        col6 = mark_part(lw, generic([x], [col6], [xmap, identity_map(6)], ["parallel"] * 6, lambda v, _: v)[0],
                         "im2col")
        col = _reshape(col6, [n, c * kh * kw, ohw], t)
    w2 = _reshape(w, [o, c * kh * kw], t)
    acc_t = ir.RankedTensorType(init.type).element_type
    init3 = _reshape(init, [n, o, ohw], acc_t)
    res = generic([w2, col], [init3],
                  [affine_map(4, [1, 3]), affine_map(4, [0, 3, 2]), affine_map(4, [0, 1, 2])],
                  ["parallel", "parallel", "parallel", "reduction"],
                  _mac)[0]  # integer convolutions too (ConvInteger)
    mark_contraction(lw, res)  # native.conv2d's placeholder, when chosen: kiln-cpu-library folds the im2col in
    return _reshape(res, [n, o, oh, ow], acc_t)


def _pool_input(lw: Lowering, x: ir.Value, value, user_pad_value=None):
    """Pad ``x`` for pooling: the user pads, plus the extra high pad that
    ``ceil_mode`` windows need (computed from the result dims)."""
    out = lw.results[0]
    kernel = lw.attrs["kernel"]
    strides = _pairs(lw.attrs["strides"], kernel)
    pads = _pairs(lw.attrs["pads"], [0, 0, 0, 0])
    dil = _pairs(lw.attrs.get("dilations"), [1, 1])
    if user_pad_value is None:
        user_pad_value = value
    if any(pads):
        x = pad_tensor(x, [0, 0, pads[0], pads[1]], [0, 0, pads[2], pads[3]], user_pad_value)
    if lw.attrs["ceil_mode"]:
        highs = [0, 0]
        for axis, od in ((2, out.dims[2]), (3, out.dims[3])):
            k = kernel[axis - 2]
            s, d = strides[axis - 2], dil[axis - 2]
            need = arith.addi(arith.muli(arith.subi(lw.env.value(od), const_index(1)), const_index(s)),
                              const_index((k - 1) * d + 1))
            have = tensor.dim(x, const_index(axis))
            highs.append(arith.maxsi(arith.subi(need, have), const_index(0)))
        x = pad_tensor(x, [0, 0, 0, 0], highs, value)
    return x, kernel, strides, dil


#: Windows up to this many taps are unrolled into one generic (see lower_max_pool2d).
MAX_UNROLLED_WINDOW = 64


def lower_max_pool2d(lw: Lowering):
    """Max pooling.  A strided window (both strides above 1) of at most
    :data:`MAX_UNROLLED_WINDOW` taps is one parallel generic over the output
    reading one operand per tap (the same tensor through shifted, strided
    maps) and taking their maximum: ``linalg.pooling_nchw_max`` loops over
    the window innermost, 3 trips that LLVM left scalar (ResNet-50's 3x3
    stride-2 pool took 1.4 ms).  With a stride of 1 the first tap's map is
    the identity, from which linalg would take the loop bounds (the padded
    input's extent, past the output's): those keep the named op."""
    out = lw.results[0]
    t = out.dtype
    x, kernel, strides, dil = _pool_input(lw, lw.operands[0], lowest(t))
    init = lw.empty(out.dims, t)
    taps = [(i, j) for i in range(kernel[0]) for j in range(kernel[1])]
    if len(taps) > MAX_UNROLLED_WINDOW or min(strides) < 2:
        window = tensor.empty(kernel, t)
        return [linalg.pooling_nchw_max(x, window, outs=[fill(lowest(t), init)], strides=strides, dilations=dil)]
    d = [ir.AffineDimExpr.get(k) for k in range(4)]
    maps = [affine_map(4, [0, 1, d[2] * strides[0] + i * dil[0], d[3] * strides[1] + j * dil[1]]) for i, j in taps]

    def body(*args):
        m = args[0]
        for v in args[1:-1]:
            m = arith.maximumf(m, v) if is_float(t) else arith.maxsi(m, v)
        return m

    return generic([x] * len(taps), [init], maps + [identity_map(4)], ["parallel"] * 4, body)


def lower_avg_pool2d(lw: Lowering):
    out = lw.results[0]
    t = out.dtype
    src = lw.operands[0]
    zero = scalar_const(t, 0.0)
    x, kernel, strides, dil = _pool_input(lw, src, zero)
    window = tensor.empty(kernel, t)
    sums = linalg.pooling_nchw_sum(x, window, outs=[fill(zero, lw.empty(out.dims, t))], strides=strides, dilations=dil)
    # Divisors: pool a [1, 1, H, W] tensor of ones padded like the input (1s in
    # the user padding when count_include_pad, 0s in the ceil-mode extra).
    h, w_ = tensor.dim(src, const_index(2)), tensor.dim(src, const_index(3))
    ones = fill(scalar_const(t, 1.0), tensor.empty([1, 1, h, w_], t))
    inc = scalar_const(t, 1.0 if lw.attrs["count_include_pad"] else 0.0)
    cx, _, _, _ = _pool_input(lw, ones, zero, inc)
    cdims = [dim(1), dim(1), out.dims[2], out.dims[3]]
    counts = linalg.pooling_nchw_sum(cx, window, outs=[fill(zero, empty_tensor(cdims, t, lw.env))],
                                     strides=strides, dilations=dil)
    # A window wholly in the padding (pads past the kernel) counts no cell
    # without count_include_pad: its average is 0 (ONNX Runtime's), not 0 / 0.
    one = scalar_const(t, 1.0)
    return [elementwise([sums, counts], out.dims, t, lw.env, lambda s, c: arith.divf(s, arith.maximumf(c, one)))]


# -- attention -----------------------------------------------------------------


def table() -> dict:
    """The nn part of the lowering table."""
    return {
        "kiln.matmul": lower_matmul,
        "kiln.reduce_sum": lower_reduce_sum,
        "kiln.reduce_mean": lower_reduce_mean,
        "kiln.reduce_max": lower_reduce_max,
        "kiln.cumsum": lower_cumsum,
        "kiln.reduce_prod": lower_reduce_prod,
        "kiln.reduce_min": lower_reduce_min,
        "kiln.argmax": lower_arg_reduce,
        "kiln.argmin": lower_arg_reduce,
        "kiln.softmax": lower_softmax,
        "kiln.layer_norm": lower_layer_norm,
        "kiln.batch_norm": lower_batch_norm,
        "kiln.conv2d": lower_conv2d,
        "kiln.max_pool2d": lower_max_pool2d,
        "kiln.avg_pool2d": lower_avg_pool2d,
    }
