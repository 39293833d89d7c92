"""What the torch -> kiln patterns pass around: :class:`Decline`, :class:`Known`
values, the torch -> kiln type converter and the dims of
``torch.bind_symbolic_shape`` maps (see :mod:`.driver` for the conversion)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import sympy

from ..._mlir import ir
from ...dialects.dims import UNKNOWN, Dim, dim
from ...dialects.kiln import tensor_type

__all__ = ["Decline", "KilnTypeConverter", "Known", "affine_dims", "describe_type", "is_tensor_type"]


class Decline(Exception):
    """Raised by a pattern that cannot convert its op: the op falls back."""


@dataclass
class Known:
    """A tensor whose value is known at import time: ``data`` is a numpy array,
    or for a 1-D shape tensor, a list of Dims (possibly symbolic)."""

    data: object
    dtype: str  # kiln dtype name
    rank0: bool = False  # a one-element list standing for a scalar (Gather of one dim)

    def ints(self) -> list:
        """The contents as a flat list of ints / Dims."""
        if isinstance(self.data, list):
            return list(self.data)
        return [int(v) for v in np.asarray(self.data).reshape(-1)]

    @property
    def is_symbolic(self) -> bool:
        return isinstance(self.data, list) and any(isinstance(d, Dim) and not d.is_static for d in self.data)

    def array(self) -> np.ndarray:
        if isinstance(self.data, list):
            if self.is_symbolic:
                raise Decline("shape tensor with symbolic dims used as data")
            return np.asarray([d.value if isinstance(d, Dim) else int(d) for d in self.data], dtype=np.int64)
        return np.asarray(self.data)


# ----------------------------------------------------------------------------
# Types
# ----------------------------------------------------------------------------

_DTYPE = {
    "f32": "f32", "f16": "f16", "bf16": "bf16", "f64": "f64",
    "si64": "i64", "si32": "i32", "si16": "i16", "si8": "i8", "ui8": "ui8", "i1": "i1",
    "i64": "i64", "i32": "i32",
}
_VTENSOR = re.compile(r"^!torch\.vtensor<\[(.*)\],(\w+)>$")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class KilnTypeConverter:
    """``!torch.vtensor<[?,?,16],f32>`` -> ``!kiln.tensor<["B", "L", 16], f32>``.

    ``dims`` (from ``torch.bind_symbolic_shape`` or the kiln shape functions)
    fill the ``?`` dims; a ``?`` without a dim stays ``?``.
    """

    def parse(self, t: ir.Type) -> tuple[list, str]:
        """``(dims, kiln dtype)`` of a torch value tensor type; Decline otherwise."""
        m = _VTENSOR.match(str(t))
        if not m:
            raise Decline(f"type {t} is not a ranked value tensor")
        sizes, dtype = m.groups()
        if dtype not in _DTYPE:
            raise Decline(f"dtype {dtype} is not supported by kiln")
        dims = [UNKNOWN if s == "?" else dim(int(s)) for s in sizes.split(",")] if sizes else []
        return dims, _DTYPE[dtype]

    def convert(self, t: ir.Type, dims=None):
        """The kiln tensor type for torch type ``t``."""
        base, dtype = self.parse(t)
        if dims is not None and len(dims) == len(base):
            base = [b if not b.is_unknown else dim(d) for b, d in zip(base, dims)]
        return tensor_type(base, dtype)


def is_tensor_type(t: ir.Type) -> bool:
    return str(t).startswith("!torch.vtensor<")


def describe_type(t: ir.Type) -> str:
    """A torch type for a message: ``sequence type !torch.list<...>``."""
    text = str(t)
    for prefix, kind in (("!torch.list<", "sequence type"), ("!torch.optional<", "optional type"),
                         ("!torch.str", "string type"), ("!torch.dict<", "map type")):
        if text.startswith(prefix):
            return f"{kind} {text}"
    if text.startswith("!torch.vtensor<") and ",!torch.str>" in text:
        return f"string tensor type {text}"
    return f"type {text}"


# ----------------------------------------------------------------------------
# Affine maps of torch.bind_symbolic_shape -> dims
# ----------------------------------------------------------------------------


def affine_dims(amap: ir.AffineMap, symbols: list[str]) -> list[Dim]:
    """The dims of ``affine_map<()[s0, s1] -> (s1, s0 * s1, 256)>`` with
    ``s_i`` named ``symbols[i]``."""

    def conv(e):
        e = e.maybe_downcast() if hasattr(e, "maybe_downcast") else e
        if isinstance(e, ir.AffineConstantExpr):
            # A negative constant is a term (``s0 - 1`` is ``s0 + -1`` for
            # ``x[:, 1:]``), not a size: ``dim()`` would reject it.
            return Dim(sympy.Integer(e.value))
        if isinstance(e, ir.AffineSymbolExpr):
            name = symbols[e.position]
            return UNKNOWN if name == "?" else dim(name)
        if not isinstance(e, (ir.AffineAddExpr, ir.AffineMulExpr, ir.AffineFloorDivExpr, ir.AffineCeilDivExpr)):
            return UNKNOWN  # mod: not a kiln dim expression
        lhs, rhs = conv(e.lhs), conv(e.rhs)
        if lhs.is_unknown or rhs.is_unknown:
            return UNKNOWN
        if isinstance(e, ir.AffineAddExpr):
            return lhs + rhs
        if isinstance(e, ir.AffineMulExpr):
            return lhs * rhs
        if isinstance(e, ir.AffineFloorDivExpr):
            return lhs // rhs
        return (lhs + rhs - 1) // rhs

    return [conv(e) for e in amap.results]
