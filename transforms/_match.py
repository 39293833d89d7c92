"""Matching helpers the rewrite tables of ``kiln-simplify`` share.

A pattern walks from its root op up through the producers of its operands;
these helpers answer the questions it asks on the way (which op made this
value, is this a splat constant, what are its dims) and build the
replacement ops before the root.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._mlir import ir
from ..dialects.kiln import create_op, tensor_info
from ..errors import KilnError, VerifyError
from ._graph import constant_array

__all__ = ["MAX_PROBE_BYTES", "Pattern", "axes_of", "build", "dims_of", "producer", "rank", "same_value", "single_use", "splat"]

#: Constants larger than this are never read to decide a match.
MAX_PROBE_BYTES = 1 << 16


@dataclass(frozen=True)
class Pattern:
    """One rewrite: ``fn(root op) -> replacement value | None`` (None: no match)."""

    name: str
    root: str
    fn: Callable


def producer(value, name: str):
    """The op defining ``value`` if it is a ``name`` op, else None."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    owner = owner.operation
    return owner if owner.name == name else None


def splat(value) -> float | None:
    """The value every element of a (small) constant has, else None; an
    ``expand`` of one (a ``torch.ones(L, L)`` over a symbolic L) counts."""
    owner = value.owner
    if not isinstance(owner, ir.Block) and owner.operation.name == "kiln.expand":
        value = owner.operation.operands[0]
    arr = constant_array(value, MAX_PROBE_BYTES)
    if arr is None or arr.size == 0:
        return None
    flat = arr.reshape(-1)
    first = flat[0]
    if not bool((flat == first).all()):
        return None
    # The shortest decimal that rounds to the value in its own dtype: an f32
    # epsilon of 1e-5 becomes 1e-5, not 9.99999974e-06.
    return float(str(first)) if np.issubdtype(flat.dtype, np.floating) else float(first)


def build(root, name: str, operands, attrs=None, **named):
    """Build a kiln op before ``root`` at its location; None if it is invalid."""
    try:
        return create_op(name, operands, attrs=attrs, loc=root.location, ip=ir.InsertionPoint(root), **named).result
    except (VerifyError, KilnError):
        return None


def rank(value) -> int:
    """The rank of a kiln tensor value."""
    return len(tensor_info(value.type).dims)


def dims_of(value) -> list:
    """The dims of a kiln tensor value, as a list of ``Dim``."""
    return list(tensor_info(value.type).dims)


def axes_of(op) -> list[int] | None:
    """Normalized reduction axes of a ``keepdims`` reduction, else None."""
    attrs = op.opview.decoded_attrs()
    if not attrs["keepdims"]:
        return None
    r = rank(op.operands[0])
    axes = attrs["axes"] or list(range(r))
    return sorted(a % r for a in axes)


def single_use(value) -> bool:
    """True when exactly one operand reads ``value``."""
    return len(list(value.uses)) == 1


def same_value(a, b, depth: int = 4) -> bool:
    """True when ``a`` and ``b`` are one value, or the results of two kiln ops
    of one name and attributes whose operands are the same values in this
    sense (up to ``depth`` ops deep): the ``x - mean(x)`` that torch.export
    writes twice in a hand-written norm, or once more inside ``var``, before
    CSE has run."""
    if a == b:
        return True
    oa, ob = a.owner, b.owner
    if depth == 0 or isinstance(oa, ir.Block) or isinstance(ob, ir.Block):
        return False
    oa, ob = oa.operation, ob.operation
    if oa.name != ob.name or not oa.name.startswith("kiln.") or oa.name == "kiln.constant" or a.type != b.type:
        return False
    if len(oa.results) != 1 or len(oa.regions) or len(oa.operands) != len(ob.operands):
        return False
    if _attributes(oa) != _attributes(ob):
        return False
    return all(same_value(x, y, depth - 1) for x, y in zip(oa.operands, ob.operands))


def _attributes(op) -> dict:
    attrs = op.attributes
    return {a.name: str(a.attr) for a in (attrs[i] for i in range(len(attrs)))}
