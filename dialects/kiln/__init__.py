"""The kiln dialect: ``!kiln.tensor`` with symbolic dims, symbols and ops.

Import this package to define the dialect's Python classes; a context gets
the dialect through :func:`kiln.context.make_context` (the one function that
loads dialects).  Ops are built with :func:`create_op` or the per-op builders
in :mod:`kiln.dialects.kiln.builders`.
"""

from __future__ import annotations

from ..._mlir import ir
from ...errors import VerifyError
from .base import (  # noqa: F401
    ATTR,
    MAX_VARIADIC,
    AttrSpec,
    Kiln,
    KilnOp,
    TensorInfo,
    TensorType,
    check_result,
    compatible,
    dtype_name,
    encode_attr,
    is_float,
    is_integer,
    is_kiln_tensor,
    merge_result,
    parse_dtype,
    tensor_info,
    tensor_type,
)
from .data import (  # noqa: F401
    ConcatOp,
    ConstantOp,
    CustomOp,
    ExpandOp,
    FallbackOp,
    GatherElementsOp,
    GatherOp,
    PadOp,
    RangeOp,
    ReshapeOp,
    SliceOp,
    SymbolOp,
    TransposeOp,
)
from .elementwise import BINARY_OPS, COMPARE_OPS, UNARY_OPS, CastOp, WhereOp  # noqa: F401
from .fused import (  # noqa: F401
    FUSED_KINDS,
    MAX_FUSED_RESULTS,
    ONE_ANCHOR_KINDS,
    FusedOp,
    YieldOp,
    create_fused,
    create_yield,
    inline_fused,
)
from .nn import (  # noqa: F401
    AttentionOp,
    AvgPool2dOp,
    BatchNormOp,
    Conv2dOp,
    CumsumOp,
    LayerNormOp,
    MatmulOp,
    MaxPool2dOp,
    PackedAttentionOp,
    ReduceMaxOp,
    ReduceMeanOp,
    ReduceSumOp,
    SoftmaxOp,
)
from .quant import DequantizeOp, MatmulIntegerOp, MatmulW8Op, QuantizeOp  # noqa: F401

#: Every kiln op class, by full op name (``"kiln.add"``).
OPS: dict[str, type[KilnOp]] = {cls.OPERATION_NAME: cls for cls in Kiln.operations}


def op_class(name: str) -> type[KilnOp]:
    """The op class for ``"kiln.add"`` or ``"add"``; VerifyError if unknown."""
    full = name if name.startswith("kiln.") else f"kiln.{name}"
    try:
        return OPS[full]
    except KeyError:
        raise VerifyError(f"unknown kiln op '{full}'") from None


def _operand_layout(cls) -> list[tuple[str, bool]]:
    """``(field name, is_optional)`` for each operand field, in order."""
    from ..._mlir import ext

    return [
        (f.name, f.variadicity != ext.Variadicity.single)
        for f in cls._fields
        if isinstance(f, ext.OperandDef)
    ]


def _result_layout(cls) -> list[tuple[str, bool]]:
    from ..._mlir import ext

    return [
        (f.name, f.variadicity != ext.Variadicity.single)
        for f in cls._fields
        if isinstance(f, ext.ResultDef)
    ]


def _segments(layout, values_by_field) -> tuple[list, list[int]]:
    values, sizes = [], []
    for name, _ in layout:
        v = values_by_field.get(name)
        sizes.append(0 if v is None else 1)
        if v is not None:
            values.append(v)
    return values, sizes


def create_op(
    cls: type[KilnOp] | str,
    operands=(),
    *,
    attrs: dict | None = None,
    results: list | None = None,
    loc: ir.Location | None = None,
    ip: ir.InsertionPoint | None = None,
    **named_operands,
) -> KilnOp:
    """Build a kiln op, inferring its result types from its shape function.

    Positional ``operands`` fill the op's required operands, then its optional
    ones in order (``conv2d(x, w, b)``; ``concat(a, b, c)``); optional operands
    can also be named (``layer_norm(x, weight=g)``).  ``attrs`` maps attribute
    names to Python values (encoded per the op's ``ATTRS``) or MLIR attributes.
    ``results`` gives result types explicitly (needed for ``cast`` and
    ``fallback``); otherwise they are inferred and a VerifyError is raised if
    the operands break the op's rules.
    """
    if isinstance(cls, str):
        cls = op_class(cls)
    layout = _operand_layout(cls)
    by_field: dict = {}
    pending = list(operands)
    for name, optional in layout:
        if name in named_operands:
            by_field[name] = named_operands.pop(name)
        elif not optional:
            if not pending:
                raise VerifyError(f"'{cls.OPERATION_NAME}' needs operand '{name}'")
            by_field[name] = pending.pop(0)
    for name, optional in layout:
        if optional and name not in by_field and pending:
            by_field[name] = pending.pop(0)
    if pending or named_operands:
        extra = list(named_operands) or [f"{len(pending)} more"]
        raise VerifyError(f"'{cls.OPERATION_NAME}' got unexpected operands: {', '.join(map(str, extra))}")
    values, sizes = _segments(layout, by_field)

    attributes = {}
    for name, value in (attrs or {}).items():
        if name not in cls.ATTRS:
            raise VerifyError(f"'{cls.OPERATION_NAME}' has no attribute '{name}'")
        if value is None:
            continue
        attributes[name] = encode_attr(cls.ATTRS[name], value)
    if cls._ODS_OPERAND_SEGMENTS is not None:
        attributes["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(sizes)

    rlayout = _result_layout(cls)
    infer = results is None
    if infer:
        n_results = sum(1 for _, opt in rlayout if not opt)
        placeholder = values[0].type if values else tensor_type([], "f32")
        results = [placeholder] * n_results
    if cls._ODS_RESULT_SEGMENTS is not None:
        sizes_r = [1 if i < len(results) else 0 for i in range(len(rlayout))]
        attributes["resultSegmentSizes"] = ir.DenseI32ArrayAttr.get(sizes_r)

    op = ir.Operation.create(
        cls.OPERATION_NAME, results=results, operands=values, attributes=attributes, loc=loc, ip=ip
    ).opview
    if infer:
        try:
            infos = [tensor_info(v.type) for v in values]
            inferred = op.shape(infos, op.decoded_attrs())
        except VerifyError as e:
            op.operation.erase()
            raise VerifyError(f"'{cls.OPERATION_NAME}' op {e.message}") from None
        for r, info in zip(op.operation.results, inferred):
            if info is None or info.dtype is None:
                op.operation.erase()
                raise VerifyError(f"'{cls.OPERATION_NAME}' needs explicit result types")
            r.set_type(tensor_type(info.dims, info.dtype))
    return op


def result_types_of(op) -> list[TensorInfo]:
    """The TensorInfo of each result of a kiln op."""
    return [tensor_info(r.type) for r in op.results]
