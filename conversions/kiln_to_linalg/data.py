"""Lowerings of the data-movement ops and constants.

Views (slice, reshape) become ``tensor`` ops; anything that gathers
(gather, reflect/edge padding, negative-step slices) is a ``linalg.generic``
reading its source with ``tensor.extract`` at computed indices.  Concat
copies each operand into a slice of one destination (``linalg.copy`` into
``tensor.extract_slice``, then ``tensor.insert_slice``), a form one-shot
bufferization performs in place.
"""

from __future__ import annotations

from ..._mlir import arith, ir, linalg, tensor
from ...dialects.kiln import is_float
from ...dialects.kiln.data import SLICE_END
from ...errors import ConversionError
from .common import (
    DYN,
    Lowering,
    builtin_tensor_type,
    const_index,
    copy_contiguous,
    dense_of_resource,
    elementwise,
    empty_tensor,
    generic,
    identity_map,
    loop_index,
    needs_dense_data,
    scalar_const,
)
from .elementwise import cast_scalar
from .quant import signless_constant


def _dims_of(x: ir.Value) -> list:
    """Static sizes as ints, dynamic ones as ``tensor.dim`` values."""
    xt = ir.RankedTensorType(x.type)
    return [s if s != DYN else tensor.dim(x, const_index(i)) for i, s in enumerate(xt.shape)]


def _idx(v) -> ir.Value:
    return const_index(v) if isinstance(v, int) else v


def lower_constant(lw: Lowering):
    value = lw.attrs["value"]
    if needs_dense_data(value):  # rank 0 hangs finalize-memref-to-llvm, i1 fails the LLVM translation
        value = dense_of_resource(value, getattr(lw.op, "operation", lw.op))
    value = signless_constant(value, getattr(lw.op, "operation", lw.op))  # ui8 data held as i8
    return [arith.ConstantOp(lw.result_type(), value).result]


def lower_expand(lw: Lowering):
    out = lw.results[0]
    return [elementwise(lw.operands, out.dims, out.dtype, lw.env, lambda v: v)]


def lower_transpose(lw: Lowering):
    out = lw.results[0]
    init = lw.empty(out.dims, out.dtype)
    return [linalg.transpose(lw.operands[0], outs=[init], permutation=lw.attrs["perm"])]


def contiguous(x: ir.Value) -> ir.Value:
    """``x``, copied into a fresh tensor when it is a strided view (a slice):
    ``memref.reshape`` needs an identity layout, and bufferization would
    otherwise copy with ``memref.copy`` (whose runtime the wheel lacks)."""
    owner = x.owner
    if isinstance(owner, ir.OpView):
        owner = owner.operation
    if isinstance(owner, ir.Operation) and owner.name == "tensor.extract_slice":
        return copy_contiguous(x)
    return x


def lower_reshape(lw: Lowering):
    out = lw.results[0]
    x = contiguous(lw.operands[0])
    values = [arith.index_cast(ir.IntegerType.get_signless(64), lw.env.value(d)) for d in out.dims]
    i64 = ir.IntegerType.get_signless(64)
    shape = tensor.from_elements(ir.RankedTensorType.get([len(values)], i64), values)
    return [tensor.reshape(lw.result_type(), x, shape)]


def _clamp(v: ir.Value, lo: ir.Value, hi: ir.Value) -> ir.Value:
    return arith.minsi(arith.maxsi(v, lo), hi)


def lower_slice(lw: Lowering):
    x = lw.operands[0]
    out = lw.results[0]
    xt = ir.RankedTensorType(x.type)
    rank = xt.rank
    attrs = lw.attrs
    steps = attrs["steps"] if attrs["steps"] is not None else [1] * len(attrs["axes"])
    offsets = [0] * rank
    strides = [1] * rank
    sizes = _dims_of(x)
    for start, end, axis, step in zip(attrs["starts"], attrs["ends"], attrs["axes"], steps):
        axis %= rank
        size = xt.shape[axis]
        if size != DYN:
            r = range(size)[slice(start, end if end < SLICE_END else None, step)]
            offsets[axis] = r.start if len(r) else 0
            strides[axis] = step
        else:
            if step < 0:
                raise lw.error(f"a negative step on axis {axis} needs a static dim")
            n = sizes[axis]
            s = const_index(start) if start >= 0 else arith.addi(n, const_index(start))
            offsets[axis] = _clamp(s, const_index(0), n)
            strides[axis] = step
    if any(d.is_static and d.value == 0 for d in out.dims):
        # An empty result: tensor.extract_slice's verifier rejects an offset
        # equal to the dim (0 of a dim of 0, or past the last row), which
        # canonicalization may make static.
        return [lw.empty(out.dims, out.dtype)]
    if any(s < 0 for s in strides):
        return [_gather_slice(lw, x, offsets, strides)]
    out_sizes = [d.value if d.is_static else lw.env.value(d) for d in out.dims]
    return [_extract_slice(x, offsets, out_sizes, strides, lw.result_type())]


def _extract_slice(x, offsets, sizes, strides, result_type) -> ir.Value:
    dyn_off = [o for o in offsets if not isinstance(o, int)]
    dyn_size = [s for s in sizes if not isinstance(s, int)]
    static_off = [o if isinstance(o, int) else DYN for o in offsets]
    static_size = [s if isinstance(s, int) else DYN for s in sizes]
    return tensor.ExtractSliceOp(result_type, x, dyn_off, dyn_size, [], static_off, static_size, strides).result


def _insert_slice(src, dest, offsets, sizes) -> ir.Value:
    dyn_off = [o for o in offsets if not isinstance(o, int)]
    dyn_size = [s for s in sizes if not isinstance(s, int)]
    static_off = [o if isinstance(o, int) else DYN for o in offsets]
    static_size = [s if isinstance(s, int) else DYN for s in sizes]
    return tensor.InsertSliceOp(src, dest, dyn_off, dyn_size, [], static_off, static_size, [1] * len(sizes)).result


def _gather_slice(lw: Lowering, x, offsets, strides):
    """A strided (possibly reversed) slice as a generic reading ``x[off + i*step]``."""
    out = lw.results[0]
    rank = len(out.dims)
    init = lw.empty(out.dims, out.dtype)

    def body(_):
        idx = []
        for i in range(rank):
            v = arith.muli(loop_index(i), const_index(strides[i]))
            idx.append(arith.addi(_idx(offsets[i]), v))
        return tensor.extract(x, idx)

    return generic([], [init], [identity_map(rank)], ["parallel"] * rank, body)[0]


def lower_concat(lw: Lowering):
    """One generic over the result: along ``axis``, each position reads the
    operand whose range holds it (``tensor.extract`` at a clamped index, then
    ``select``).  Copying into slices of one destination instead bufferizes to
    ``memref.copy`` of strided views once canonicalization folds the
    destination's slices into fresh empties."""
    out = lw.results[0]
    rank = len(out.dims)
    axis = lw.attrs["axis"] % rank
    init = lw.empty(out.dims, out.dtype)
    # An operand empty along the axis holds no position: reading it (at the
    # clamped index -1) would read outside its buffer.
    operands = [x for x in lw.operands if ir.RankedTensorType(x.type).shape[axis] != 0]
    if not operands or any(d.is_static and d.value == 0 for d in out.dims):
        return [init]
    starts, sizes, lasts = [], [], []
    offset = const_index(0)
    for x in operands:
        d = _dims_of(x)[axis]
        n = _idx(d)
        starts.append(offset)
        sizes.append(n)
        # A dynamic operand may be empty at run time: read its index 0 then
        # (never selected), not -1 (before its buffer).
        last = arith.subi(n, const_index(1))
        lasts.append(last if isinstance(d, int) else arith.maxsi(last, const_index(0)))
        offset = arith.addi(offset, n)

    def body(_):
        a = loop_index(axis)
        result = None
        for x, start, n, last in reversed(list(zip(operands, starts, sizes, lasts))):
            p = _clamp(arith.subi(a, start), const_index(0), last)
            idx = [p if i == axis else loop_index(i) for i in range(rank)]
            v = tensor.extract(x, idx)
            if result is None:
                result = v
            else:
                result = arith.select(arith.cmpi(arith.CmpIPredicate.slt, a, arith.addi(start, n)), v, result)
        return result

    return generic([], [init], [identity_map(rank)], ["parallel"] * rank, body)


def lower_gather(lw: Lowering):
    data, indices = lw.operands
    out = lw.results[0]
    dt = ir.RankedTensorType(data.type)
    it = ir.RankedTensorType(indices.type)
    axis = lw.attrs["axis"] % dt.rank
    rank = len(out.dims)
    n_idx = it.rank
    init = lw.empty(out.dims, out.dtype)
    size = _idx(_dims_of(data)[axis])
    imap = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(axis + k) for k in range(n_idx)])

    def body(i, _):
        iv = arith.index_cast(ir.IndexType.get(), cast_scalar(i, ir.IntegerType.get_signless(64)))
        neg = arith.cmpi(arith.CmpIPredicate.slt, iv, const_index(0))
        iv = arith.select(neg, arith.addi(iv, size), iv)
        # Out-of-range indices read a clamped position rather than memory outside the table.
        iv = _clamp(iv, const_index(0), arith.subi(size, const_index(1)))
        idx = [loop_index(k) for k in range(axis)] + [iv] + [loop_index(axis + n_idx + k) for k in range(dt.rank - axis - 1)]
        return tensor.extract(data, idx)

    return generic([indices], [init], [imap, identity_map(rank)], ["parallel"] * rank, body)


def lower_gather_elements(lw: Lowering):
    """``take_along_axis``: output position ``p`` reads ``data[p with p[axis] = indices[p]]``."""
    data, indices = lw.operands
    out = lw.results[0]
    rank = len(out.dims)
    axis = lw.attrs["axis"] % rank
    init = lw.empty(out.dims, out.dtype)
    size = _idx(_dims_of(data)[axis])

    def body(i, _):
        iv = arith.index_cast(ir.IndexType.get(), cast_scalar(i, ir.IntegerType.get_signless(64)))
        neg = arith.cmpi(arith.CmpIPredicate.slt, iv, const_index(0))
        iv = arith.select(neg, arith.addi(iv, size), iv)
        iv = _clamp(iv, const_index(0), arith.subi(size, const_index(1)))  # never read outside data
        idx = [iv if k == axis else loop_index(k) for k in range(rank)]
        return tensor.extract(data, idx)

    return generic([indices], [init], [identity_map(rank), identity_map(rank)], ["parallel"] * rank, body)


def _scatter_combine(reduction: str, t: ir.Type):
    """The scalar ``combine(old, update)`` of a ScatterND reduction."""
    flt = is_float(t)
    return {
        "add": arith.addf if flt else arith.addi,
        "mul": arith.mulf if flt else arith.muli,
        "max": arith.maximumf if flt else arith.maxsi,
        "min": arith.minimumf if flt else arith.minsi,
    }[reduction]


def lower_scatter_nd(lw: Lowering):
    """Sequential ``scf.for`` loops over the update rows (the batch dims of
    ``indices``) and, inside, over each row's slice, writing with
    ``tensor.insert`` into a copy of ``data``: rows apply in order, so
    duplicate positions combine (or the last one wins) as ONNX's reference
    does.  A row's ``k`` positions are read once per row; a negative one
    counts from the end, and one out of range (an error in ONNX) is clamped
    so that nothing is written outside the tensor.  The loops bufferize in
    place on the copy."""
    from .elementwise import _scf

    scf = _scf()
    data, indices, updates = lw.operands
    out = lw.results[0]
    t = out.dtype
    it = ir.RankedTensorType(indices.type)
    k = it.shape[-1]
    batch = it.rank - 1
    rank = len(out.dims)
    dsizes = [_idx(s) for s in _dims_of(data)]
    usizes = [_idx(s) for s in _dims_of(updates)]
    reduction = lw.attrs["reduction"]
    combine = None if reduction == "none" else _scatter_combine(reduction, t)
    i64 = ir.IntegerType.get_signless(64)
    c0, c1 = const_index(0), const_index(1)

    def positions(ivs):
        pos = []
        for j in range(k):
            v = tensor.extract(indices, list(ivs) + [const_index(j)])
            iv = arith.index_cast(ir.IndexType.get(), cast_scalar(v, i64))
            iv = arith.select(arith.cmpi(arith.CmpIPredicate.slt, iv, c0), arith.addi(iv, dsizes[j]), iv)
            pos.append(_clamp(iv, c0, arith.subi(dsizes[j], c1)))
        return pos

    def nest(level: int, acc: ir.Value, ivs: list, pos) -> ir.Value:
        if level == batch and pos is None:
            pos = positions(ivs)
        if level == batch + rank - k:
            at = pos + ivs[batch:]
            u = tensor.extract(updates, ivs)
            if combine is not None:
                u = combine(tensor.extract(acc, at), u)
            return tensor.insert(u, acc, at)
        loop = scf.ForOp(c0, usizes[level], c1, [acc])
        with ir.InsertionPoint(loop.body):
            scf.YieldOp([nest(level + 1, loop.inner_iter_args[0], ivs + [loop.induction_variable], pos)])
        return loop.results[0]

    return [nest(0, copy_contiguous(data), [], None)]


def lower_range(lw: Lowering):
    """``start + i * step`` for ``i`` in ``[0, n)``, computed in the result dtype."""
    out = lw.results[0]
    t = out.dtype
    init = lw.empty(out.dims, t)
    start, step = lw.attrs["start"], lw.attrs["step"]

    def body(_):
        i = arith.index_cast(ir.IntegerType.get_signless(64), loop_index(0))
        i = cast_scalar(i, t)
        return (arith.addf if is_float(t) else arith.addi)(
            scalar_const(t, start), (arith.mulf if is_float(t) else arith.muli)(i, scalar_const(t, step))
        )

    return generic([], [init], [identity_map(1)], ["parallel"], body)


def lower_pad(lw: Lowering):
    x = lw.operands[0]
    out = lw.results[0]
    pads = lw.attrs["pads"]
    rank = len(out.dims)
    lo, hi = pads[:rank], pads[rank:]
    mode = lw.attrs["mode"]
    t = out.dtype
    if mode == "constant":
        from .nn import pad_tensor

        v = pad_tensor(x, lo, hi, scalar_const(t, lw.attrs["value"]))
        if ir.RankedTensorType(v.type).shape != lw.result_type().shape:
            v = tensor.CastOp(lw.result_type(), v).result
        return [v]
    sizes = [_idx(s) for s in _dims_of(x)]
    init = lw.empty(out.dims, t)

    def body(_):
        idx = []
        for i in range(rank):
            p = arith.subi(loop_index(i), const_index(lo[i]))  # position in x, may be outside
            n = sizes[i]
            last = arith.subi(n, const_index(1))
            if mode == "edge":
                p = _clamp(p, const_index(0), last)
            else:  # reflect (no edge repeat): -1 -> 1, n -> n-2
                p = arith.maxsi(p, arith.subi(const_index(0), p))
                over = arith.subi(p, last)
                p = arith.select(arith.cmpi(arith.CmpIPredicate.sgt, over, const_index(0)),
                                 arith.subi(last, over), p)
                p = _clamp(p, const_index(0), last)
            idx.append(p)
        return tensor.extract(x, idx)

    return generic([], [init], [identity_map(rank)], ["parallel"] * rank, body)


def lower_update_slice(lw: Lowering):
    """``dest`` with ``update`` at ``offset`` along ``axis``: a generic over
    the update's extent writing into ``tensor.extract_slice`` of dest, then
    ``tensor.insert_slice`` back -- the form one-shot bufferization performs
    in place, so only the update's positions are copied.  Where the memory
    plan donates dest's buffer (``in_place``; the kernel's ``kiln.inplace``,
    see ``kiln-cpu-prepare``) that is all the kernel does; otherwise dest is
    copied first (kernel arguments bufferize as writable).  The generic reads the update with
    ``tensor.extract``: an identity generic would fold away and leave a
    ``memref.copy`` into a strided view (no runtime for it in the wheel)."""
    dest, upd = lw.operands
    ut = ir.RankedTensorType(upd.type)
    rank = ut.rank
    axis = lw.attrs["axis"] % rank
    off = lw.attrs["offset"][0]
    offsets = [0] * rank
    offsets[axis] = off.value if off.is_static else lw.env.value(off)
    sizes = _dims_of(upd)
    if any(s == 0 for s in ut.shape):  # nothing to write (extract_slice rejects some empty offsets)
        return [dest]
    if not lw.attrs["in_place"]:
        # Kernel arguments bufferize as writable: without donation, write into a copy.
        dest = copy_contiguous(dest)
    sub_type = ir.RankedTensorType.get(ut.shape, ut.element_type)
    sub = _extract_slice(dest, offsets, sizes, [1] * rank, sub_type)
    written = generic([], [sub], [identity_map(rank)], ["parallel"] * rank,
                      lambda _: tensor.extract(upd, [loop_index(i) for i in range(rank)]))[0]
    return [_insert_slice(written, dest, offsets, sizes)]


def table() -> dict:
    """The data-movement part of the lowering table."""
    return {
        "kiln.constant": lower_constant,
        "kiln.expand": lower_expand,
        "kiln.transpose": lower_transpose,
        "kiln.reshape": lower_reshape,
        "kiln.slice": lower_slice,
        "kiln.concat": lower_concat,
        "kiln.gather": lower_gather,
        "kiln.gather_elements": lower_gather_elements,
        "kiln.scatter_nd": lower_scatter_nd,
        "kiln.range": lower_range,
        "kiln.pad": lower_pad,
        "kiln.update_slice": lower_update_slice,
    }


__all__ = ["ConversionError", "builtin_tensor_type", "empty_tensor", "table"]
