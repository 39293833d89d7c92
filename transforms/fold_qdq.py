"""``kiln-fold-qdq``: a float product of two dequantized 8-bit tensors becomes an integer product.

QDQ models (``onnxruntime.quantization.quantize_static``'s default format,
PT2E's ``quantize_pt2e`` graphs) spell an int8 layer as float work between
Q / DQ pairs::

    y = matmul(dequantize(aq, sa, za), dequantize(bq, sb, zb))

This pass rewrites it into the integer product and one scaling::

    y = cast(matmul_integer(aq, bq, za, zb), f32) * (sa * sb)

which is the same value (``sa (aq - za) . sb (bq - zb)`` summed), with the sum
exact in int32 instead of rounded in f32 at every step, and runs on the int8
GEMM (``kiln_i8_gemm``) instead of an f32 one.  ``a`` is ``[..., M, K]`` with
per-tensor parameters; ``b`` is a ``[K, N]`` matrix with per-tensor
parameters or a scale per column (axis 1) and a zero point that is the same
for every column (symmetric int8 weights: all zero), or the transpose of a
``[N, K]`` one dequantized per row (``nn.Linear`` / ``Gemm(transB=1)``
weights).  Anything else is left as it is.

It runs before ``kiln-fold-constants`` (which would turn a constant weight's
dequantization into an f32 constant) in ``kiln-default-cpu``, and only where
the native runtime is loaded: without it ``matmul_integer`` lowers to exact
f32 chunks, slower than the f32 product it replaces.  Triton's pipeline does
not run it (its ``matmul_integer`` is those chunks too).

Statistics: ``products folded``.
"""

from __future__ import annotations

import numpy as np

from .._mlir import ir
from ..dialects.kiln import create_op, tensor_info, tensor_type
from ..pipelines.registry import Option, Pass, register_pass
from ._graph import block_ops, functions, make_constant
from ._match import producer, rank, splat

__all__ = ["FoldQdq"]

_INT8 = ("i8", "ui8")


def _attr(op, name: str):
    return op.opview.attr(name)


def _dtype(value: ir.Value) -> str:
    return str(tensor_info(value.type).dtype)


class _Dequantized:
    """A dequantized 8-bit operand: its integer tensor, scale, zero point and axis."""

    def __init__(self, op):
        self.q, self.scale, self.zero = op.operands
        self.axis = _attr(op, "axis")
        self.blocked = _attr(op, "block_size") is not None

    @classmethod
    def of(cls, value: ir.Value):
        op = producer(value, "kiln.dequantize")
        if op is None:
            return None
        d = cls(op)
        if _dtype(d.q) not in _INT8 or _dtype(d.scale) != "f32" or d.blocked:
            return None
        return d


def _scalar_zero(zero: ir.Value):
    """How to make ``zero`` a rank-0 zero point: a function of ``(ip, loc)``
    building it (``zero`` itself, a reshape of a one-element one, a constant
    for a constant -- or a cast of one -- whose values are all the same), or
    None when it has several values."""
    info = tensor_info(zero.type)
    if info.rank == 0:
        return lambda ip, loc: zero
    if info.rank == 1 and info.dims[0].is_static and info.dims[0].value == 1:
        return lambda ip, loc: create_op("kiln.reshape", [zero], attrs={"shape": []}, loc=loc, ip=ip).result
    cast = producer(zero, "kiln.cast")  # PT2E's int64 zero points, cast to the weight's dtype
    value = splat(cast.operands[0] if cast is not None else zero)
    if value is None:
        return None
    value = int(value)
    if not (0 <= value <= 255 if str(info.dtype) == "ui8" else -128 <= value <= 127):
        return None
    return lambda ip, loc: make_constant(np.asarray(value), info.dtype, loc=loc, ip=ip)


@register_pass
class FoldQdq(Pass):
    """Fold Q / DQ pairs around matrix products into ``kiln.matmul_integer``."""

    name = "kiln-fold-qdq"
    summary = "matmul(dequantize(a), dequantize(b)) -> matmul_integer(a, b) * scale (int8 GEMM for QDQ models)"
    options = (Option("force", bool, False, "rewrite even without the native runtime (lit tests)"),)

    def run(self, module) -> None:
        products = [op for fn in functions(module.operation) for block in fn.regions[0].blocks
                    for op in block_ops(block) if op.name == "kiln.matmul"]
        if not products:
            return
        if not self.option("force"):
            from ..runtime.blas import native_with_blas

            if native_with_blas() is None:
                return
        self.bump("products folded", sum(self._fold(op) for op in products))

    def _fold(self, op) -> bool:
        a_val, b_val = op.operands
        y = op.results[0]
        if _dtype(y) != "f32":
            return False
        a = _Dequantized.of(a_val)
        if a is None or a.axis is not None or rank(a.q) < 2:
            return False
        b, transposed = _Dequantized.of(b_val), False
        if b is None:
            t = producer(b_val, "kiln.transpose")
            if t is None or list(_attr(t, "perm")) != [1, 0]:
                return False
            b, transposed = _Dequantized.of(t.operands[0]), True
            if b is None:
                return False
        if rank(b.q) != 2:
            return False
        # Per column of the product: axis 1 of a [K, N] b, axis 0 of the [N, K] one it is the transpose of.
        per_column = 0 if transposed else 1
        if b.axis is not None and b.axis % 2 != per_column:
            return False
        za, zb = _scalar_zero(a.zero), _scalar_zero(b.zero)
        if za is None or zb is None:
            return False
        ip, loc = ir.InsertionPoint(op), op.location
        za, zb = za(ip, loc), zb(ip, loc)
        bq = b.q
        if transposed:
            bq = create_op("kiln.transpose", [bq], attrs={"perm": [1, 0]}, loc=loc, ip=ip).result
        acc = create_op("kiln.matmul_integer", [a.q, bq, za, zb], loc=loc, ip=ip).result
        f = create_op("kiln.cast", [acc], results=[tensor_type(tensor_info(acc.type).dims, "f32")], loc=loc,
                      ip=ip).result
        scale = create_op("kiln.mul", [a.scale, b.scale], loc=loc, ip=ip).result
        out = create_op("kiln.mul", [f, scale], loc=loc, ip=ip).result
        y.replace_all_uses_with(out)
        op.erase()
        return True
