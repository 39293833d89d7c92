"""``kiln.fused``: a group of kiln ops that a backend lowers as one kernel.

``kiln-fuse`` outlines producer chains (elementwise chains, ``matmul`` with
its bias/activation epilogue, ``conv2d`` with its residual/activation one, a reduction with its elementwise prologue and
epilogue) into one ``kiln.fused`` op each.  The op is isolated from above:
every value the group reads is an operand, bound to the entry block's
argument of the same position, and the values it produces are the operands
of its ``kiln.yield`` terminator, in the order of the op's results::

    %r = "kiln.fused"(%x, %w, %b) ({
    ^bb0(%a: !kiln.tensor<["B", 64], f32>, %bw: !kiln.tensor<[64, 256], f32>, %bb: !kiln.tensor<[256], f32>):
      %0 = "kiln.matmul"(%a, %bw) : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64, 256], f32>) -> !kiln.tensor<["B", 256], f32>
      %1 = "kiln.add"(%0, %bb) : (!kiln.tensor<["B", 256], f32>, !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", 256], f32>
      %2 = "kiln.gelu"(%1) : (!kiln.tensor<["B", 256], f32>) -> !kiln.tensor<["B", 256], f32>
      "kiln.yield"(%2) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 256], f32>) -> ()
    }) {kind = "matmul_epilogue", operandSegmentSizes = array<i32: 1, 1, 1, 0, ...>, resultSegmentSizes = array<i32: 1, 0, 0, 0>}
       : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64, 256], f32>, !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", 256], f32>

The body is one block of ordinary kiln ops, so a backend may lower the op by
inlining its body (block argument ``i`` replaced by operand ``i``, result
``j`` by yield operand ``j``: :func:`inline_fused` does exactly that), or
generate one kernel for the whole group (the Triton backend).  ``kind``
tells which fusion rule formed the group:

- ``"elementwise"``: elementwise ops only (broadcasting allowed);
- ``"matmul_epilogue"``: one ``kiln.matmul`` whose result feeds elementwise
  ops (bias add, activation);
- ``"conv_epilogue"``: one ``kiln.conv2d`` and its elementwise consumers
  (a residual add, an activation);
- ``"reduction"``: one reduction-like op (``softmax``, ``layer_norm``,
  ``reduce_*``) with elementwise prologue and/or epilogue ops;
- ``"conv_pair"``: two ``kiln.conv2d``, each with its activation, the
  first's result read only by the second, which ends in a mean or sum over
  its pixels (a small CNN's last two convolutions and its global pool).

Up to 16 operands and 4 results (heterogeneous variadics are optional
groups, see :data:`~kiln.dialects.kiln.base.MAX_VARIADIC`); ``kiln-fuse``
never forms larger groups.  The op is ``Pure`` (its body holds only pure kiln
ops), so ``cse`` and DCE treat it as any other kiln op.
"""

# No `from __future__ import annotations`: the ext DSL reads annotations as objects.

from ..._mlir import ext, ir
from ...errors import VerifyError
from ..dims import shape_text
from .base import ATTR, MAX_VARIADIC, KilnOp, TensorInfo, check_result, optional_fields, tensor_info

#: Most results (yielded values) of one ``kiln.fused``.
MAX_FUSED_RESULTS = 4

#: The values ``kind`` may take.
FUSED_KINDS = ("elementwise", "matmul_epilogue", "conv_epilogue", "reduction", "conv_pair")
#: The kinds whose groups have one anchor: what a backend generating one
#: kernel from a group's body takes (Triton); conv_pair's two convolutions
#: run as one only in the CPU backend's native call.
ONE_ANCHOR_KINDS = FUSED_KINDS[:4]


class YieldOp(KilnOp, name="yield", traits=[ext.Pure, ir.IsTerminatorTrait]):
    """Terminator of a ``kiln.fused`` body: its operands are the op's results.

    ``"kiln.yield"(%2) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 256], f32>) -> ()``
    """

    __annotations__ = optional_fields("value", MAX_FUSED_RESULTS, "operand")
    locals().update(dict.fromkeys(__annotations__))

    def shape(self, operands, attrs):
        parent = self.operation.parent
        if parent is None or parent.name != "kiln.fused":
            raise VerifyError("must be the terminator of a 'kiln.fused' body")
        return []


class FusedOp(KilnOp, name="fused", traits=[ext.Pure, ir.IsIsolatedFromAboveTrait]):
    """A fused group of kiln ops, lowered as one kernel (see the module docstring)."""

    __annotations__ = {
        **optional_fields("input", MAX_VARIADIC, "operand"),
        **optional_fields("output", MAX_FUSED_RESULTS, "result"),
        "body": ext.Region,
    }
    locals().update(dict.fromkeys(optional_fields("input", MAX_VARIADIC, "operand")))
    locals().update(dict.fromkeys(optional_fields("output", MAX_FUSED_RESULTS, "result")))
    ATTRS = {"kind": ATTR.str(default="elementwise")}

    def shape(self, operands, attrs):
        op = self.operation
        if attrs["kind"] not in FUSED_KINDS:
            raise VerifyError(f"attribute 'kind' must be one of {', '.join(FUSED_KINDS)}, got \"{attrs['kind']}\"")
        if len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
            raise VerifyError("body must have exactly one block")
        block = op.regions[0].blocks[0]
        args = list(block.arguments)
        if len(args) != len(operands):
            raise VerifyError(f"body has {len(args)} arguments, but the op has {len(operands)} operands")
        for i, (a, o) in enumerate(zip(args, operands)):
            got = tensor_info(a.type)
            if got.dtype != o.dtype or shape_text(got.dims) != shape_text(o.dims):
                raise VerifyError(
                    f"body argument #{i} has type {a.type}, but operand #{i} is {shape_text(o.dims)} {o.dtype}"
                )
        ops = list(block.operations)
        if not ops or ops[-1].operation.name != "kiln.yield":
            raise VerifyError("body must end with 'kiln.yield'")
        yielded = [tensor_info(v.type) for v in ops[-1].operation.operands]
        if len(yielded) != len(op.results):
            raise VerifyError(f"body yields {len(yielded)} values, but the op has {len(op.results)} results")
        for i, (y, r) in enumerate(zip(yielded, op.results)):
            check_result(i, y, tensor_info(r.type))
        return [TensorInfo(y.dims, y.dtype) for y in yielded]


def _segment_sizes(n: int, total: int) -> ir.Attribute:
    return ir.DenseI32ArrayAttr.get([1] * n + [0] * (total - n))


def create_fused(inputs, result_types, *, kind: str = "elementwise", loc=None, ip=None) -> FusedOp:
    """An empty ``kiln.fused`` over ``inputs`` producing ``result_types``.

    The body gets one block whose arguments have the inputs' types; the
    caller fills it and ends it with :func:`create_yield`.  VerifyError when
    the group exceeds the op's operand or result limit.
    """
    inputs, result_types = list(inputs), list(result_types)
    if len(inputs) > MAX_VARIADIC:
        raise VerifyError(f"'kiln.fused' takes at most {MAX_VARIADIC} operands, got {len(inputs)}")
    if not 1 <= len(result_types) <= MAX_FUSED_RESULTS:
        raise VerifyError(f"'kiln.fused' has 1 to {MAX_FUSED_RESULTS} results, got {len(result_types)}")
    attrs = {
        "kind": ir.StringAttr.get(kind),
        "operandSegmentSizes": _segment_sizes(len(inputs), MAX_VARIADIC),
        "resultSegmentSizes": _segment_sizes(len(result_types), MAX_FUSED_RESULTS),
    }
    op = ir.Operation.create(
        FusedOp.OPERATION_NAME, results=result_types, operands=inputs, attributes=attrs, regions=1, loc=loc, ip=ip
    )
    op.regions[0].blocks.append(*[v.type for v in inputs], arg_locs=[op.location] * len(inputs))
    return op.opview


def create_yield(values, *, loc=None, ip=None) -> YieldOp:
    """``kiln.yield`` of ``values`` (at ``ip``, usually the end of a fused body)."""
    values = list(values)
    attrs = {"operandSegmentSizes": _segment_sizes(len(values), MAX_FUSED_RESULTS)}
    return ir.Operation.create(YieldOp.OPERATION_NAME, results=[], operands=values, attributes=attrs, loc=loc, ip=ip).opview


def inline_fused(op) -> list:
    """Replace a ``kiln.fused`` by its body ops, in place; returns the values
    that replaced its results.

    The CPU path's way to lower a group: afterwards the ops are ordinary kiln
    ops again, right where the fused op was.
    """
    op = op.operation
    block = op.regions[0].blocks[0]
    for arg, value in zip(block.arguments, op.operands):
        arg.replace_all_uses_with(value)
    body = list(block.operations)
    terminator = body[-1].operation
    ip = ir.InsertionPoint(op)
    for inner in body[:-1]:
        inner = inner.operation
        inner.detach_from_parent()
        ip.insert(inner)
    produced = list(terminator.operands)
    for r, v in zip(op.results, produced):
        r.replace_all_uses_with(v)
    terminator.erase()
    op.erase()
    return produced
