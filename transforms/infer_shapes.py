"""``kiln-infer-shapes``: fill in and refine result types from the shape functions.

Walks every function in order; for each kiln op it runs the op's shape
function on the (already refined) operand types and replaces ``?`` dims of
the declared result types with the inferred ones.  A declared dim that
contradicts the inferred one is an error at the op.  Function result types
follow the values returned.
"""

from __future__ import annotations

from .._mlir import ir
from ..dialects.kiln import KilnOp, check_result, merge_result, tensor_info, tensor_type
from ..errors import KilnError, VerifyError
from ..module import top_level_ops
from ..pipelines.registry import Pass, register_pass


def _functions(module):
    for op in top_level_ops(module):
        if op.operation.name == "func.func":
            yield op.operation


@register_pass
class InferShapes(Pass):
    """Refine kiln result types with the ops' shape functions."""

    name = "kiln-infer-shapes"
    summary = "Fill in '?' result dims from the ops' shape functions; error on conflicts"

    def run(self, module) -> None:
        failed = False
        for fn in _functions(module):
            failed |= not self._run_on_function(fn)
        if failed:
            raise KilnError("shape inference failed")

    def _run_on_function(self, fn) -> bool:
        ok = True

        def visit(op):
            nonlocal ok
            view = op.opview
            if isinstance(view, KilnOp) and op.name != "kiln.symbol":
                ok &= self._refine(view)
            elif op.name == "func.return":
                ok &= self._refine_signature(fn, op)
            return ir.WalkResult.ADVANCE

        fn.walk(visit)
        return ok

    def _refine(self, view) -> bool:
        op = view.operation
        try:
            operands = [tensor_info(v.type) for v in op.operands]
            inferred = view.shape(operands, view.decoded_attrs())
            for i, (want, r) in enumerate(zip(inferred, op.results)):
                if want is None:
                    continue
                got = tensor_info(r.type)
                check_result(i, want, got)
                merged = merge_result(want, got)
                if merged != got:
                    r.set_type(tensor_type(merged.dims, merged.dtype))
                    self.bump("results refined")
        except VerifyError as e:
            op.location.emit_error(f"'{op.name}' op {e.message}")
            return False
        return True

    def _refine_signature(self, fn, ret) -> bool:
        # func.return requires the returned types to equal the declared ones,
        # so the refined signature is exactly the returned values' types.
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        results = [v.type for v in ret.operands]
        if results != list(ftype.results):
            fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs), results))
            self.bump("signatures refined")
        return True
