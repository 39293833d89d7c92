"""Elementwise ops: binary with numpy broadcasting, comparisons, unary, where, cast."""

# No `from __future__ import annotations`: the ext DSL reads annotations as objects.

from ..._mlir import ext, ir
from ...errors import VerifyError
from .base import ATTR, KilnOp, TensorInfo, TensorType, is_float
from .shapes import broadcast_dims, same_dtype


class BinaryOp(KilnOp):
    """Shared shape rule of the binary ops: broadcast the dims, keep the dtype."""

    lhs: ext.Operand[TensorType]
    rhs: ext.Operand[TensorType]
    res: ext.Result[TensorType]

    def shape(self, operands, attrs):
        dtype = same_dtype(operands)
        dims = broadcast_dims([o.dims for o in operands])
        return [TensorInfo(dims, self.result_dtype(dtype))]

    @staticmethod
    def result_dtype(operand_dtype):
        return operand_dtype


class AddOp(BinaryOp, name="add", traits=[ext.Pure]):
    """Elementwise ``lhs + rhs`` with numpy broadcasting.

    ``%r = "kiln.add"(%a, %b) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16], f32>) -> !kiln.tensor<["B", 16], f32>``
    """


class SubOp(BinaryOp, name="sub", traits=[ext.Pure]):
    """Elementwise ``lhs - rhs``: ``%r = "kiln.sub"(%a, %b) : (...) -> ...``."""


class MulOp(BinaryOp, name="mul", traits=[ext.Pure]):
    """Elementwise ``lhs * rhs``: ``%r = "kiln.mul"(%a, %b) : (...) -> ...``."""


class DivOp(BinaryOp, name="div", traits=[ext.Pure]):
    """Elementwise ``lhs / rhs`` (true division for floats, truncating for
    integers): ``%r = "kiln.div"(%a, %b) : (...) -> ...``."""


class PowOp(BinaryOp, name="pow", traits=[ext.Pure]):
    """Elementwise ``lhs ** rhs``: ``%r = "kiln.pow"(%a, %b) : (...) -> ...``."""


class MaximumOp(BinaryOp, name="maximum", traits=[ext.Pure]):
    """Elementwise maximum: ``%r = "kiln.maximum"(%a, %b) : (...) -> ...``."""


class MinimumOp(BinaryOp, name="minimum", traits=[ext.Pure]):
    """Elementwise minimum: ``%r = "kiln.minimum"(%a, %b) : (...) -> ...``."""


class CompareOp(BinaryOp):
    """Comparisons broadcast like the binary ops and produce ``i1``."""

    @staticmethod
    def result_dtype(operand_dtype):
        return ir.IntegerType.get_signless(1)


class EqOp(CompareOp, name="eq", traits=[ext.Pure]):
    """``lhs == rhs`` as i1: ``%r = "kiln.eq"(%a, %b) : (!kiln.tensor<["B"], f32>, !kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], i1>``."""


class NeOp(CompareOp, name="ne", traits=[ext.Pure]):
    """``lhs != rhs`` as i1: ``%r = "kiln.ne"(%a, %b) : (...) -> !kiln.tensor<[...], i1>``."""


class LtOp(CompareOp, name="lt", traits=[ext.Pure]):
    """``lhs < rhs`` as i1: ``%r = "kiln.lt"(%a, %b) : (...) -> !kiln.tensor<[...], i1>``."""


class LeOp(CompareOp, name="le", traits=[ext.Pure]):
    """``lhs <= rhs`` as i1: ``%r = "kiln.le"(%a, %b) : (...) -> !kiln.tensor<[...], i1>``."""


class GtOp(CompareOp, name="gt", traits=[ext.Pure]):
    """``lhs > rhs`` as i1: ``%r = "kiln.gt"(%a, %b) : (...) -> !kiln.tensor<[...], i1>``."""


class GeOp(CompareOp, name="ge", traits=[ext.Pure]):
    """``lhs >= rhs`` as i1: ``%r = "kiln.ge"(%a, %b) : (...) -> !kiln.tensor<[...], i1>``."""


class UnaryOp(KilnOp):
    """Shared shape rule of the unary ops: same dims and dtype as the input.

    ``FLOAT_ONLY`` ops reject integer inputs.
    """

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]
    FLOAT_ONLY = True

    def shape(self, operands, attrs):
        (x,) = operands
        if self.FLOAT_ONLY and not is_float(x.dtype):
            raise VerifyError(f"requires a floating-point operand, got {x.dtype}")
        return [x]


class NegOp(UnaryOp, name="neg", traits=[ext.Pure]):
    """``-x``: ``%r = "kiln.neg"(%x) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32>``."""

    FLOAT_ONLY = False


class AbsOp(UnaryOp, name="abs", traits=[ext.Pure]):
    """``|x|``: ``%r = "kiln.abs"(%x) : (...) -> ...``."""

    FLOAT_ONLY = False


class ExpOp(UnaryOp, name="exp", traits=[ext.Pure]):
    """``e**x``: ``%r = "kiln.exp"(%x) : (...) -> ...``."""


class LogOp(UnaryOp, name="log", traits=[ext.Pure]):
    """Natural logarithm: ``%r = "kiln.log"(%x) : (...) -> ...``."""


class SqrtOp(UnaryOp, name="sqrt", traits=[ext.Pure]):
    """Square root: ``%r = "kiln.sqrt"(%x) : (...) -> ...``."""


class RsqrtOp(UnaryOp, name="rsqrt", traits=[ext.Pure]):
    """``1/sqrt(x)``: ``%r = "kiln.rsqrt"(%x) : (...) -> ...``."""


class TanhOp(UnaryOp, name="tanh", traits=[ext.Pure]):
    """Hyperbolic tangent: ``%r = "kiln.tanh"(%x) : (...) -> ...``."""


class SigmoidOp(UnaryOp, name="sigmoid", traits=[ext.Pure]):
    """``1/(1+exp(-x))``: ``%r = "kiln.sigmoid"(%x) : (...) -> ...``."""


class ReluOp(UnaryOp, name="relu", traits=[ext.Pure]):
    """``max(x, 0)``: ``%r = "kiln.relu"(%x) : (...) -> ...``."""

    FLOAT_ONLY = False


class GeluOp(UnaryOp, name="gelu", traits=[ext.Pure]):
    """GELU, exact (``approximate = "none"``, the default) or ``"tanh"``.

    ``%r = "kiln.gelu"(%x) {approximate = "tanh"} : (...) -> ...``
    """

    ATTRS = {"approximate": ATTR.str(default="none")}

    def shape(self, operands, attrs):
        if attrs["approximate"] not in ("none", "tanh"):
            raise VerifyError(f"attribute 'approximate' must be \"none\" or \"tanh\", got \"{attrs['approximate']}\"")
        return super().shape(operands, attrs)


class SiluOp(UnaryOp, name="silu", traits=[ext.Pure]):
    """``x * sigmoid(x)``: ``%r = "kiln.silu"(%x) : (...) -> ...``."""


class ErfOp(UnaryOp, name="erf", traits=[ext.Pure]):
    """The error function: ``%r = "kiln.erf"(%x) : (...) -> ...``."""


class CosOp(UnaryOp, name="cos", traits=[ext.Pure]):
    """Cosine: ``%r = "kiln.cos"(%x) : (!kiln.tensor<["L", 16], f32>) -> !kiln.tensor<["L", 16], f32>``."""


class SinOp(UnaryOp, name="sin", traits=[ext.Pure]):
    """Sine: ``%r = "kiln.sin"(%x) : (!kiln.tensor<["L", 16], f32>) -> !kiln.tensor<["L", 16], f32>``."""


class FloorOp(UnaryOp, name="floor", traits=[ext.Pure]):
    """Round toward -inf: ``%r = "kiln.floor"(%x) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32>``."""


class CeilOp(UnaryOp, name="ceil", traits=[ext.Pure]):
    """Round toward +inf: ``%r = "kiln.ceil"(%x) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32>``."""


class WhereOp(KilnOp, name="where", traits=[ext.Pure]):
    """``cond ? x : y`` elementwise, the three operands broadcast together.

    ``%r = "kiln.where"(%c, %x, %y) : (!kiln.tensor<["B"], i1>, !kiln.tensor<["B"], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B"], f32>``
    """

    cond: ext.Operand[TensorType]
    x: ext.Operand[TensorType]
    y: ext.Operand[TensorType]
    res: ext.Result[TensorType]

    def shape(self, operands, attrs):
        cond, x, y = operands
        if str(cond.dtype) != "i1":
            raise VerifyError(f"condition must have dtype i1, got {cond.dtype}")
        dtype = same_dtype([x, y], "the selected operands")
        return [TensorInfo(broadcast_dims([cond.dims, x.dims, y.dims]), dtype)]


class CastOp(KilnOp, name="cast", traits=[ext.Pure]):
    """Convert the element type; the result type names the target dtype.

    ``%r = "kiln.cast"(%x) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f16>``
    """

    x: ext.Operand[TensorType]
    res: ext.Result[TensorType]

    def shape(self, operands, attrs):
        (x,) = operands
        return [TensorInfo(x.dims, None)]


BINARY_OPS = [AddOp, SubOp, MulOp, DivOp, PowOp, MaximumOp, MinimumOp]
COMPARE_OPS = [EqOp, NeOp, LtOp, LeOp, GtOp, GeOp]
UNARY_OPS = [NegOp, AbsOp, ExpOp, LogOp, SqrtOp, RsqrtOp, TanhOp, SigmoidOp, ReluOp, GeluOp, SiluOp, ErfOp, CosOp, SinOp,
             FloorOp, CeilOp]
