"""Patterns for ONNX data-movement ops (Reshape, Transpose, Concat, Slice, Gather, ...).

Registered into :data:`.onnx.ONNX_PATTERNS`; import-time known shape tensors
(:class:`Known`) are folded here rather than materialized.
"""

from __future__ import annotations

import numpy as np

from ...dialects.dims import Dim, dim
from ...dialects.kiln.data import SLICE_END
from ...dialects.kiln.shapes import product
from .aten import _slice_by_gather, concat, dims_of, rank_of, reshape_dims, squeeze_dims
from .driver import Decline, Known
from .onnx import _axes, pattern

# ----------------------------------------------------------------------------
# Data movement
# ----------------------------------------------------------------------------


@pattern("Reshape")
def lower_reshape(cx):
    x = cx.tensor(0)
    target = cx.known(1).ints() if cx.opset >= 5 else cx.attr("shape")
    src = dims_of(x)
    if not cx.attr("allowzero", 0):
        target = [src[i] if (isinstance(t, int) and t == 0) else t for i, t in enumerate(target)]
    shape = reshape_dims(src, target)
    # A target of run-time values (a shape input's symbols, or a constant -1
    # that divides only some sizes) has an element count that only the
    # binding decides: checked per call, as ONNX Runtime does.
    checked = product(src) != product(shape)
    return cx.build("reshape", x, shape=shape, **({"checked": True} if checked else {}))


@pattern("Flatten")
def lower_flatten(cx):
    x = cx.tensor(0)
    dims = dims_of(x)
    axis = cx.attr("axis", 1)
    axis = axis + len(dims) if axis < 0 else axis  # ONNX: negative counts from the rank
    return cx.build("reshape", x, shape=[product(dims[:axis]), product(dims[axis:])])


@pattern("Transpose")
def lower_transpose(cx):
    x = cx.tensor(0)
    perm = cx.attr("perm", None) or list(reversed(range(rank_of(x))))
    return cx.build("transpose", x, perm=perm)


@pattern("Squeeze")
def lower_squeeze(cx):
    v = cx.value(0)
    axes = _axes(cx, since=13)
    if isinstance(v, Known) and isinstance(v.data, list):
        if len(v.data) != 1:
            raise Decline("Squeeze of a shape tensor")
        return Known(v.data, v.dtype, rank0=True)
    x = cx.tensor(0)
    return cx.build("reshape", x, shape=squeeze_dims(dims_of(x), axes))


@pattern("Unsqueeze")
def lower_unsqueeze(cx):
    axes = _axes(cx, since=13)
    v = cx.value(0)
    if isinstance(v, Known) and isinstance(v.data, list) and v.rank0 and [a % 1 for a in axes] == [0]:
        return Known(v.data, v.dtype)
    if isinstance(v, Known):
        if not isinstance(v.data, list) and np.asarray(v.data).ndim == 0 and axes in ([0], [-1]):
            return Known(np.asarray(v.data).reshape(1), v.dtype)
        if not isinstance(v.data, list):
            out = np.asarray(v.data)
            n = out.ndim + len(axes)
            for a in sorted(a % n for a in axes):
                out = np.expand_dims(out, a)
            return Known(out, v.dtype)
    x = cx.tensor(0)
    dims = dims_of(x)
    n = len(dims) + len(axes)
    axes = sorted(a % n for a in axes)
    for a in axes:
        dims.insert(a, dim(1))
    return cx.build("reshape", x, shape=dims)


@pattern("Concat")
def lower_concat(cx):
    axis = cx.attr("axis", 1 if cx.opset < 4 else None)  # Concat-1: optional, default 1
    if axis is None:
        raise Decline("Concat without attribute 'axis'")
    vals = [cx.value(i) for i in range(cx.num_operands)]
    if all(isinstance(v, Known) for v in vals):
        if any(isinstance(v.data, list) for v in vals):
            out = []
            for v in vals:
                out.extend(v.ints())
            return Known(out, "i64")
        return Known(np.concatenate([v.array() for v in vals], axis=axis), vals[0].dtype)
    tensors = [cx.tensor(i) for i in range(cx.num_operands)]
    tensors = [t for t in tensors if not any(d.is_static and d.value == 0 for d in dims_of(t))] or tensors[:1]
    return concat(cx, tensors, axis % rank_of(tensors[0]))


def _int(v) -> int:
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, Dim) and v.is_static:
        return v.value
    raise Decline(f"symbolic value {v} where a constant is needed")


def _clamp_end(e):
    return SLICE_END if e >= 2**31 - 1 else e


@pattern("Slice")
def lower_slice(cx):
    """``kiln.slice``; a symbolic bound (``position_ids[:, :L]`` exported) is a
    gather of a ``kiln.range`` on its axis, a symbolic end equal to the axis
    size is "to the end"."""
    v = cx.value(0)
    if cx.opset >= 10:
        starts, ends = cx.known(1).ints(), cx.known(2).ints()
        axes = cx.known(3).ints() if cx.has(3) else list(range(len(starts)))
        steps = cx.known(4).ints() if cx.has(4) else [1] * len(starts)
    else:
        starts, ends = cx.attr("starts"), cx.attr("ends")
        axes = cx.attr("axes", None) or list(range(len(starts)))
        steps = [1] * len(starts)
    axes, steps = [_int(a) for a in axes], [_int(a) for a in steps]
    starts, ends = [_bound(a) for a in starts], [_bound(a) for a in ends]
    symbolic = any(isinstance(b, Dim) for b in starts + ends)
    if isinstance(v, Known) and isinstance(v.data, list) and axes in ([0], [-1]) and not symbolic:
        s, e = starts[0], ends[0]
        return Known(v.data[slice(s, None if e >= 2**31 - 1 else e, steps[0])], v.dtype)
    x = cx.tensor(0)
    r = rank_of(x)
    axes = [a % r for a in axes]
    dims = dims_of(x)
    plain, gathered = [], []
    for s, e, a, st in zip(starts, ends, axes, steps):
        if isinstance(e, Dim) and e == dims[a]:
            e = SLICE_END  # x[:, :L] of an L-long axis: all of it
        if isinstance(s, Dim) or isinstance(e, Dim):
            gathered.append((a, s, e, st))
            continue
        if e <= -(2**31) or (dims[a].is_static and e < -dims[a].value):
            if not dims[a].is_static:
                raise Decline("Slice to before the start of a symbolic axis")
            e = -(dims[a].value + 1)  # through index 0 (a negative step), or empty
        e = _clamp_end(e)
        if not dims[a].is_static:
            s, e = _symbolic_axis_bounds(cx, dims[a], s, e, st)
        plain.append((s, e, a, st))
    if plain:
        s_, e_, a_, st_ = (list(t) for t in zip(*plain))
        x = cx.build("slice", x, starts=s_, ends=e_, axes=a_, steps=st_)
    for a, s, e, st in gathered:
        if isinstance(e, int) and e < 0 or isinstance(s, int) and s < 0:
            raise Decline("Slice with a symbolic bound and a negative index")
        x = _slice_by_gather(cx, x, a, s, None if isinstance(e, int) and e >= SLICE_END else e, st)
    return x


def _symbolic_axis_bounds(cx, d: Dim, s: int, e: int, step: int) -> tuple[int, int]:
    """``(start, end)`` of a Slice on the symbolic axis ``d`` that kiln.slice
    may take as they are: ONNX clamps each index to ``[0, d]``, kiln.slice
    does not, so an index must lie inside the axis for every ``d`` in the
    symbols' ranges — or, for an end, past it for every ``d`` (then it means
    "to the end").  Any other index (``x[1:1000]`` where L may be 500 or
    2000) would give a result dim that is wrong for some L: Decline.  A
    slice empty at every size (``x[2:2]``, ``x[-1:-3]``) is ``[0:0]``."""
    if step > 0 and e < SLICE_END and (0 <= e <= s or e <= s < 0):
        return 0, 0
    for index, what in ((s, "start"), (e, "end")):
        if what == "end" and index >= SLICE_END:
            continue
        if index >= 0 and _at_least(cx, d, index):
            continue
        if index < 0 and _at_least(cx, d, -index):
            continue
        if what == "end" and index >= 0 and _at_most(cx, d, index):
            e = SLICE_END
            continue
        raise Decline(f"Slice {what} {index} on the symbolic axis {d}: the symbols' ranges put it inside "
                      f"the axis for some sizes and past it for others (a range for {', '.join(sorted(d.symbols))} "
                      "in symbols= that keeps it inside decides it)")
    return s, e


def _at_most(cx, d: Dim, k: int) -> bool:
    """Whether the symbols' ranges keep ``d <= k`` (each symbol at most its maximum)."""
    import sympy

    from ...dialects.dims import symbol

    shift = {}
    for name in d.symbols:
        hi = cx.conv.symbols.get(name, (0, None))[1]
        if hi is None:
            return False
        shift[symbol(name)] = hi - sympy.Symbol(f"_t_{name}", nonnegative=True)
    return bool((k - d.expr.xreplace(shift)).is_nonnegative)


def _bound(v):
    """A Slice start or end: an int, or a symbolic Dim."""
    if isinstance(v, Dim) and not v.is_static:
        return v
    return _int(v)


@pattern("Gather")
def lower_gather(cx):
    v, idx = cx.value(0), cx.value(1)
    axis = cx.attr("axis", 0)
    if isinstance(v, Known) and isinstance(idx, Known):
        if isinstance(v.data, list):
            ids = idx.array()
            picked = [v.data[int(i)] for i in ids.reshape(-1)]
            if ids.ndim == 0:
                d = dim(picked[0])
                return Known(np.asarray(d.value) if d.is_static else [d], v.dtype, rank0=not d.is_static)
            return Known(picked, v.dtype)
        return Known(np.take(v.array(), idx.array(), axis=axis), v.dtype)
    x = cx.tensor(0)
    ind = cx.tensor(1)
    if isinstance(idx, Known) and (idx.array() < 0).any():
        size = dims_of(x)[axis % rank_of(x)]
        if not size.is_static:
            raise Decline("negative Gather indices on a symbolic axis")
        ind = cx.conv.materialize(Known(np.where(idx.array() < 0, idx.array() + size.value, idx.array()),
                                        idx.dtype), cx.loc)
    return cx.build("gather", x, ind, axis=axis)


@pattern("Expand")
def lower_expand(cx):
    x = cx.tensor(0)
    shape = [dim(s) for s in cx.known(1).ints()]  # Expand sizes are >= 1
    src = dims_of(x)
    n = max(len(src), len(shape))
    src = [dim(1)] * (n - len(src)) + src
    shape = [dim(1)] * (n - len(shape)) + shape
    out = [s if (t.is_static and t.value == 1) else t for s, t in zip(src, shape)]
    if len(out) != rank_of(x):
        x = cx.build("reshape", x, shape=src)
    return cx.build("expand", x, shape=out)


@pattern("Pad")
def lower_pad(cx):
    x = cx.tensor(0)
    r = rank_of(x)
    mode = cx.attr("mode", "constant")
    if cx.opset >= 11:
        pads = [int(p) for p in cx.known(1).ints()]
        value = float(cx.known(2).array().reshape(-1)[0]) if cx.has(2) else 0.0
        if cx.has(3):
            axes = [int(a) % r for a in cx.known(3).ints()]
            full = [0] * (2 * r)
            for i, a in enumerate(axes):
                full[a], full[r + a] = pads[i], pads[len(axes) + i]
            pads = full
    else:
        # Pad-1 named the attribute 'paddings'.
        pads, value = cx.attr("pads", None) or cx.attr("paddings", None), cx.attr("value", 0.0)
        if pads is None:
            raise Decline("Pad without attribute 'pads'")
    if any(p < 0 for p in pads):
        raise Decline("negative pads (cropping)")
    if mode == "wrap":
        return _wrap_pad(cx, x, pads)
    return cx.build("pad", x, pads=pads, value=value, mode=mode)


def _wrap_pad(cx, x, pads):
    """Pad mode 'wrap' (Pad-19), one axis at a time.  A static axis of n
    is tiled enough times and sliced ``[(-a) mod n, ... + a + n + b)`` (any
    amount, as ONNX Runtime allows); a symbolic axis is the concatenation
    ``x[n-a:], x, x[:b]``, exact only when n >= a and n >= b, which the
    symbol's range must guarantee."""
    r = rank_of(x)
    for axis in range(r):
        a, b = pads[axis], pads[r + axis]
        if a == 0 and b == 0:
            continue
        n = dims_of(x)[axis]
        if n.is_static:
            n = n.value
            if n == 0:
                raise Decline(f"Pad mode 'wrap' of {a}+{b} on axis {axis} of size 0")
            start = (-a) % n
            reps = -(-(start + a + n + b) // n)
            src = dims_of(x)
            spread = src[:axis] + [dim(1)] + src[axis:]
            wide = src[:axis] + [dim(reps)] + src[axis:]
            tiled = cx.build("expand", cx.build("reshape", x, shape=spread), shape=wide)
            tiled = cx.build("reshape", tiled, shape=src[:axis] + [dim(reps * n)] + src[axis + 1:])
            x = cx.build("slice", tiled, starts=[start], ends=[start + a + n + b], axes=[axis])
            continue
        if not _at_least(cx, n, max(a, b)):
            raise Decline(f"Pad mode 'wrap' of {a}+{b} on axis {axis} of size {n}: the symbol's range "
                          f"must keep the size >= {max(a, b)}")
        parts = []
        if a:
            parts.append(cx.build("slice", x, starts=[-a], ends=[SLICE_END], axes=[axis]))
        parts.append(x)
        if b:
            parts.append(cx.build("slice", x, starts=[0], ends=[b], axes=[axis]))
        x = concat(cx, parts, axis)
    return x


def _at_least(cx, d: Dim, k: int) -> bool:
    """Whether the symbols' ranges (minimum 0 when not given) keep ``d >= k``."""
    from ...dialects.dims import symbol

    shift = {symbol(s): symbol(s) + cx.conv.symbols.get(s, (0, None))[0] for s in d.symbols}
    return bool((d.expr.xreplace(shift) - k).is_nonnegative)


@pattern("Split")
def lower_split(cx):
    x = cx.tensor(0)
    r = rank_of(x)
    axis = cx.attr("axis", 0) % r
    n = len(cx.op.results)
    size = dims_of(x)[axis]
    if (cx.opset >= 13 or cx.opset < 2) and cx.has(1):  # Split-1 took the sizes as an input too
        split = [int(s) for s in cx.known(1).ints()]
    elif cx.attr("split", None):
        split = cx.attr("split")
    else:
        if not size.is_static:
            raise Decline("Split of a symbolic axis without sizes")
        k = cx.attr("num_outputs", n)
        chunk = -(-size.value // k)
        split = [min(chunk, size.value - i * chunk) for i in range(k)]
    outs, start = [], 0
    for s in split:
        outs.append(cx.build("slice", x, starts=[start], ends=[start + s], axes=[axis]))
        start += s
    return tuple(outs)


@pattern("Tile")
def lower_tile(cx):
    """``[a, b]`` tiled ``[r, s]`` times: reshape to ``[1, a, 1, b]``, expand to
    ``[r, a, s, b]``, reshape to ``[r*a, s*b]``, which holds for symbolic
    repeats too (a shape input); repeats of 0 give an empty tensor."""
    x = cx.tensor(0)
    reps = [dim(v) for v in cx.known(1).ints()]
    src = dims_of(x)
    if len(reps) != len(src):
        raise Decline(f"Tile with {len(reps)} repeats for a rank-{len(src)} input")
    if all(r.is_static and r.value == 1 for r in reps):
        return x
    if any(r.is_static and r.value == 0 for r in reps):
        from ...dialects.kiln import tensor_info

        if not all((r * d).is_static for r, d in zip(reps, src)):
            raise Decline("Tile with a 0 repeat of a symbolic dim")
        return cx.const(0, str(tensor_info(x.type).dtype), [(r * d).value for r, d in zip(reps, src)])
    spread = [d for a in src for d in (dim(1), a)]
    wide = [d for r, a in zip(reps, src) for d in (r, a)]
    out = cx.build("expand", cx.build("reshape", x, shape=spread), shape=wide)
    return cx.build("reshape", out, shape=[r * a for r, a in zip(reps, src)])
