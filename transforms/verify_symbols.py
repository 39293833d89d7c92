"""``kiln-verify-symbols``: the symbols of a module are declared and consistent.

Beyond the verifier's checks (every symbol a dim names is declared, ranges
well-formed), this pass checks that

- every dim expression stays non-negative over the symbols' ranges (checked
  at every corner of the range box, which is exact for the affine dims
  frontends produce);
- a symbol with ``multiple_of`` has at least one admissible value;
- and warns about symbols that no type uses.
"""

from __future__ import annotations

import itertools

from .._mlir import ir
from ..dialects.dims import evaluate
from ..dialects.kiln import TensorType, tensor_info
from ..errors import KilnError
from ..module import symbols_of, top_level_ops
from ..pipelines.registry import Pass, register_pass

# Dims over more symbols than this are checked at the all-min and all-max corners only.
_MAX_CORNER_SYMBOLS = 6


@register_pass
class VerifySymbols(Pass):
    """Check symbol declarations against every dim that uses them."""

    name = "kiln-verify-symbols"
    summary = "Check that dim symbols are declared, ranges consistent and dims non-negative"

    def run(self, module) -> None:
        syms = symbols_of(module)
        used: set[str] = set()
        failed = False
        checked: set[str] = set()

        for op in top_level_ops(module):
            if op.operation.name != "kiln.symbol":
                continue
            s = syms.get(op.operation.opview.attr("sym_name"))
            if s is not None and s.multiple_of and not any(True for _ in _multiples(s)):
                op.location.emit_error(
                    f"symbol '{s.name}' has no value in [{s.min}, {s.max}] that is a multiple of {s.multiple_of}"
                )
                failed = True

        def check(t, loc, where):
            nonlocal failed
            if not isinstance(t, TensorType):
                return
            for axis, d in enumerate(tensor_info(t).dims):
                names = d.symbols
                used.update(names)
                if d.is_static or d.is_unknown or not names or str(d) in checked:
                    continue
                checked.add(str(d))
                missing = sorted(names - set(syms))
                if missing:
                    loc.emit_error(f"{where} dim {axis} ('{d}') uses undeclared symbol '{missing[0]}'")
                    failed = True
                    continue
                bad = _negative_corner(d, [syms[n] for n in sorted(names)])
                if bad is not None:
                    binding = ", ".join(f"{k} = {v}" for k, v in bad[0].items())
                    loc.emit_error(f"{where} dim {axis} ('{d}') is {bad[1]} < 0 when {binding}")
                    failed = True

        def visit(op):
            if op.name == "func.func":
                ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
                for i, t in enumerate(ftype.inputs):
                    check(t, op.location, f"function argument #{i}")
            for i, r in enumerate(op.results):
                check(r.type, op.location, f"'{op.name}' op result #{i}")
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        for name in sorted(set(syms) - used):
            for op in top_level_ops(module):
                if op.operation.name == "kiln.symbol" and op.operation.opview.attr("sym_name") == name:
                    self.warn(op.location, f"symbol '{name}' is declared but no dim uses it")
        self.statistics["symbols checked"] = len(syms)
        if failed:
            raise KilnError("symbol verification failed")


def _multiples(s):
    first = -(-s.min // s.multiple_of) * s.multiple_of
    return range(first, s.max + 1, s.multiple_of)


def _negative_corner(d, infos):
    if len(infos) > _MAX_CORNER_SYMBOLS:
        corners = [tuple(i.min for i in infos), tuple(i.max for i in infos)]
    else:
        corners = itertools.product(*[(i.min, i.max) for i in infos])
    for corner in corners:
        binding = {i.name: v for i, v in zip(infos, corner)}
        value = evaluate(d, binding)
        if value < 0:
            return binding, value
    return None
