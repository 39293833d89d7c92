"""Buffers of bufferized kernels, as ``kiln-cpu-library``'s rewrites see them.

A rewrite that folds several generics into one library call (a convolution
with its epilogue, an attention chain) needs three things: the ops that only
*view* a buffer (:func:`view_closure`, :func:`view_root`), the ops that use
it otherwise, and, once the call is in, the removal of everything that only
fed what it replaced (:func:`erase_dead_buffers`).
"""

from __future__ import annotations

from ..._mlir import ir
from ...module import ops_where

__all__ = ["erase_dead_buffers", "indexing_maps", "op_of", "view_closure", "view_root"]

#: Ops that only view a buffer (their result aliases operand 0).
_VIEWS = frozenset(["memref.reshape", "memref.expand_shape", "memref.collapse_shape", "memref.subview",
                    "memref.cast", "memref.reinterpret_cast"])
#: The views that keep an identity layout (a reshape of a contiguous buffer).
RESHAPES = frozenset(["memref.reshape", "memref.expand_shape", "memref.collapse_shape"])


def op_of(owner) -> ir.Operation:
    """``owner`` (an OpView or an Operation, e.g. a use's owner) as an ``ir.Operation``."""
    return owner.operation if hasattr(owner, "operation") else owner


def indexing_maps(op) -> list:
    """The ``ir.AffineMap``s of a linalg op's ``indexing_maps``, in operand order."""
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def view_root(value, views=RESHAPES):
    """The value ``value`` views through a chain of ``views`` ops (itself if none)."""
    op = getattr(value.owner, "operation", None)
    while op is not None and op.name in views:
        value = op.operands[0]
        op = getattr(value.owner, "operation", None)
    return value


def view_closure(buffer) -> tuple[list, list]:
    """``(views, users)``: the view ops reaching ``buffer`` (it and them in
    order) and the other ops using any of them."""
    views, users, todo = [], [], [buffer]
    while todo:
        value = todo.pop()
        for use in value.uses:
            user = op_of(use.owner)
            if user.name in _VIEWS and user.operands[0] == value:
                views.append(user)
                todo.append(user.results[0])
            else:
                users.append(user)
    return views, users


def loaded_memref(op):
    """The memref the one ``memref.load`` in ``op``'s body reads (a padding
    generic's source), or None when its body loads none or several."""
    loads = ops_where(op, lambda inner: inner.name == "memref.load")
    return loads[0].operands[0] if len(loads) == 1 else None


def erase_dead_buffers(fn) -> int:
    """Erase the ``linalg`` ops of ``fn`` that write only ``memref.alloc``
    buffers nobody else reads, and those buffers (with their views and
    deallocs); the count of ops erased.

    A buffer is dead when every op using it (through views) is a dealloc or
    one of the dead ops; an op is dead when all its ``outs`` are dead
    buffers.  Both sets start full and shrink to the greatest fixpoint, so a
    chain of passes that only fed an erased op goes as a whole.
    """
    allocs, writers = [], []

    def visit(op):
        if op.name == "memref.alloc":
            allocs.append(op)
        elif (op.name.startswith("linalg.") and len(op.results) == 0 and op.name != "linalg.yield"
              or op.name == "memref.copy"):
            writers.append(op)
        return ir.WalkResult.ADVANCE

    fn.walk(visit)
    closure = {a: view_closure(a.results[0]) for a in allocs}
    root = {}  # every view result (and alloc result) -> its alloc
    for a, (views, _) in closure.items():
        root[a.results[0]] = a
        for v in views:
            root[v.results[0]] = a
    dead_ops = set()
    for op in writers:
        outs = _outs(op)
        if outs and all(v in root for v in outs):
            dead_ops.add(op)
    dead_bufs = set(allocs)
    changed = True
    while changed:
        changed = False
        for a in list(dead_bufs):
            if any(u.name != "memref.dealloc" and u not in dead_ops for u in closure[a][1]):
                dead_bufs.discard(a)
                changed = True
        for op in list(dead_ops):
            if any(root[v] not in dead_bufs for v in _outs(op)):
                dead_ops.discard(op)
                changed = True
    for op in dead_ops:
        op.erase()
    for a in dead_bufs:
        views, users = closure[a]
        for u in users:
            if u.name == "memref.dealloc":
                u.erase()
        for v in reversed(views):
            v.erase()
        a.erase()
    return len(dead_ops)


def _outs(op) -> list:
    """The ``outs`` operands of a destination-style linalg op (bufferized), or
    a ``memref.copy``'s target."""
    if op.name == "memref.copy":
        return [op.operands[1]]
    sizes = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    n_ins, n_outs = sizes[0], sizes[1]
    return list(op.operands)[n_ins:n_ins + n_outs]
