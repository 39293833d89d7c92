"""Patterns for torch's slice updates: ``kiln.update_slice``.

torch.export functionalizes an in-place write into a tensor
(``cache[:, :, p:p+L] = new``, ``cache.index_copy_(2, arange(p, p+L), new)``,
``cache[:, :, arange(p, p+L)] = new``) to an out-of-place op whose result
is returned as the mutated input: ``aten.slice_scatter`` (after
``aten.copy``, which broadcasts and casts the written value) or
``aten.index_put`` / ``aten.index_copy``.  Each writes a contiguous run of
positions along one axis, which is ``kiln.update_slice``; the compiler then
donates the input's buffer (see :mod:`kiln.compile_prepare`), so the call
writes the ``L`` positions into the caller's array and copies nothing else.

Index tensors are recognized when torch-mlir built them with ``arange``
(step 1) over sizes; any other index declines (and falls back, as before).
"""

from __future__ import annotations

from ..._mlir import ir
from ...dialects.dims import Dim, dim
from .aten import as_dim, dims_of, dtype_of, pattern, rank_of
from .driver import Decline


def _fit(cx, x: ir.Value, dims: list, dtype: str) -> ir.Value:
    """``x`` broadcast to ``dims`` and cast to ``dtype`` (what ``aten.copy``
    and ``index_put`` do to the written value)."""
    x = cx.cast(x, dtype)
    src = dims_of(x)
    if len(src) != len(dims) or any(a != b for a, b in zip(src, dims)):
        if len(src) < len(dims):
            x = cx.build("reshape", x, shape=[1] * (len(dims) - len(src)) + src)
        x = cx.build("expand", x, shape=list(dims))
    return x


def _update(cx, dest: ir.Value, update: ir.Value, axis: int, start) -> ir.Value:
    """``kiln.update_slice`` of ``update`` into ``dest`` at ``start`` along
    ``axis``, with the per-call bound ``start + L <= size`` recorded when
    the verifier cannot prove it."""
    start = as_dim(start)
    size = dims_of(dest)[axis]
    if start.is_static and start.value < 0:
        if not size.is_static:
            raise Decline("slice update with a negative start on a symbolic axis")
        start = dim(size.value + start.value)
    end = start + dims_of(update)[axis]
    if not (end.is_static and size.is_static) and end != size:
        cx.check_bounds(start, end, size)
    return cx.build("update_slice", dest, update, axis=axis, offset=[start])


@pattern("torch.aten.copy")
def lower_copy(cx):
    """``copy(self, src)``: ``src`` broadcast to ``self``'s dims in its dtype."""
    dest, src = cx.tensor(0), cx.tensor(1)
    return _fit(cx, src, dims_of(dest), dtype_of(dest))


@pattern("torch.aten.slice_scatter")
def lower_slice_scatter(cx):
    """``slice_scatter(self, src, dim, start, end, step=1)``."""
    dest, src = cx.tensor(0), cx.tensor(1)
    axis = cx.int(2, 0) % rank_of(dest)
    if cx.int(5, 1) != 1:
        raise Decline("slice_scatter with a step other than 1")
    start = cx.scalar(3, 0)
    return _update(cx, dest, _fit(cx, src, dims_of(src), dtype_of(dest)), axis, 0 if start is None else start)


def _arange_run(cx, v: ir.Value):
    """``(start, n)`` when the torch value ``v`` is ``arange(start, end)``
    with step 1 (bounds from sizes or constants), else None."""
    owner = v.owner
    op = owner.operation if isinstance(owner, ir.OpView) else owner
    if not isinstance(op, ir.Operation) or not op.name.startswith("torch.aten.arange"):
        return None
    lookup = [cx.conv.lookup(o) for o in op.operands]
    if op.name == "torch.aten.arange.start_step":
        start, end, step = lookup[:3]
    elif op.name == "torch.aten.arange.start":
        (start, end), step = lookup[:2], 1
    else:
        start, end, step = 0, lookup[0], 1
    if any(not isinstance(a, (int, Dim)) or isinstance(a, bool) for a in (start, end, step)):
        return None
    if dim(step) != dim(1):
        return None
    return dim(start), dim(end) - dim(start)


@pattern("torch.aten.index_put", "torch.aten.index_put_", "torch.aten._index_put_impl")
def lower_index_put(cx):
    """``index_put(self, [None, ..., arange(p, p+L)], values)``: one index
    tensor, an ``arange`` with step 1, after leading ``None``\\ s."""
    dest = cx.tensor(0)
    if cx.num_operands > 3 and cx.scalar(3, False):
        raise Decline("index_put with accumulate=True")
    lst = cx.op.operands[1]
    owner = lst.owner
    lop = owner.operation if isinstance(owner, ir.OpView) else owner
    if not isinstance(lop, ir.Operation) or lop.name != "torch.prim.ListConstruct":
        raise Decline("index_put indices are not a list")
    items = [cx.conv.lookup(o) for o in lop.operands]
    axis = len(items) - 1
    if axis < 0 or any(i is not None for i in items[:-1]) or items[-1] is None:
        raise Decline("index_put with other than one index tensor after leading Nones")
    run = _arange_run(cx, lop.operands[axis])
    if run is None:
        raise Decline("index_put whose index is not an arange with step 1")
    start, n = run
    dims = dims_of(dest)
    dims[axis] = n
    return _update(cx, dest, _fit(cx, cx.tensor(2), dims, dtype_of(dest)), axis, start)


@pattern("torch.aten.index_copy")
def lower_index_copy(cx):
    """``index_copy(self, dim, arange(p, p+L), source)``."""
    dest = cx.tensor(0)
    axis = cx.int(1) % rank_of(dest)
    run = _arange_run(cx, cx.op.operands[2])
    if run is None:
        raise Decline("index_copy whose index is not an arange with step 1")
    start, n = run
    dims = dims_of(dest)
    dims[axis] = n
    return _update(cx, dest, _fit(cx, cx.tensor(3), dims, dtype_of(dest)), axis, start)
