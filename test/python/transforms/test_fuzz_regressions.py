"""Inputs the lit-input fuzzer found crashing kiln-opt (exit 70 or a Python
exception out of a pass), each run through the pipeline that crashed: every
one is now a ``KilnError`` with a message naming the problem."""

import pytest

from kiln._mlir import ir
from kiln.context import make_context
from kiln.errors import KilnError
from kiln.module import parse_module
from kiln.pipelines import Pipeline

SYM = '"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()\n'
T = '!kiln.tensor<["B", 2, 3, 4], f32>'
Z = '!kiln.tensor<["B", 2, 3, 0], f32>'


def _attention(seg, t=T, attrs=""):
    return SYM + f"""func.func @f(%q: {t}) -> {t} {{
  %a = "kiln.attention"(%q, %q, %q) {{{attrs}operandSegmentSizes = {seg}}} : ({t}, {t}, {t}) -> {t}
  return %a : {t}
}}"""


CASES = [
    # kiln-plan-memory on a '?' dim: TypeError (NoneType * Symbol).
    ("plan-memory-unknown-dim", SYM + """func.func @f(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", "?"], f32> {
  %0 = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", "?"], f32>
  %1 = "kiln.relu"(%0) : (!kiln.tensor<["B", "?"], f32>) -> !kiln.tensor<["B", "?"], f32>
  return %1 : !kiln.tensor<["B", "?"], f32>
}""", "builtin.module(kiln-plan-memory)", r"'\?' dim: run kiln-infer-shapes before kiln-plan-memory"),
    # Segment sizes that do not fit the groups: KeyError / IndexError in kiln-decompose.
    ("segments-too-many", _attention("array<i32: 2, 1, 0, 0>"), "builtin.module(kiln-decompose)",
     "gives the required operand 'q' 2 values, not 1"),
    ("segments-sum", _attention("array<i32: 1, 1, 1, 1>"), "builtin.module(kiln-decompose)",
     "sizes add up to 4, but the op has 3 operands"),
    ("segments-missing-q", _attention("array<i32: 0, 1, 1, 1>"), "builtin.module(kiln-decompose)",
     "gives the required operand 'q' 0 values, not 1"),
    ("segments-kind", _attention("array<i64: 1, 1, 1, 0>"), "builtin.module(kiln-decompose)",
     r"'operandSegmentSizes' must be array<i32: \.\.\.>"),
    # A head dim of 0 and the default scale: ZeroDivisionError.
    ("head-dim-0", _attention("array<i32: 1, 1, 1, 0>", Z), "builtin.module(kiln-decompose)",
     r"head dim is 0, so the default scale 1/sqrt\(0\) is undefined"),
    ("head-dim-0-lowering", _attention("array<i32: 1, 1, 1, 0>", Z), "builtin.module(convert-kiln-to-linalg)",
     r"head dim is 0, so the default scale 1/sqrt\(0\) is undefined"),
    # A function result that is not a ranked tensor reaching the CPU lowering
    # (torch IR, an index): "Cannot cast type to RankedTensorType".
    ("cpu-unranked-result", """func.func @f(%x: tensor<*xf32>) -> tensor<*xf32> {
  return %x : tensor<*xf32>
}""", "builtin.module(kiln-cpu-prepare)", r"cannot return tensor<\*xf32> from @f: results must be ranked tensors"),
    ("cpu-index-result", """func.func @g(%x: index) -> index {
  return %x : index
}""", "builtin.module(kiln-cpu-lower)", "cannot return index from @g: results must be ranked tensors"),
    # A static dim past i64: std::bad_cast while canonicalizing the types.
    ("static-dim-past-i64", """func.func @f(%x: !kiln.tensor<["99999999999999999999"], f32>) {
  return
}""", "builtin.module(kiln-infer-shapes)", "does not fit in 64 bits"),
]


@pytest.mark.parametrize("name, text, pipeline, message", CASES, ids=[c[0] for c in CASES])
def test_fuzzer_finding_is_a_kiln_error(name, text, pipeline, message):
    with make_context(), ir.Location.unknown():
        with pytest.raises(KilnError, match=message):
            module = parse_module(text, f"{name}.mlir")
            Pipeline.parse(pipeline).run(module)


def test_huge_causal_mask_keeps_the_attention():
    # kiln-decompose allocated the 2**31 x 2**31 mask (MemoryError).
    t = '!kiln.tensor<["B", 2, 2147483648, 8], f32>'
    text = _attention("array<i32: 1, 1, 1, 0>", t, "causal = true, ")
    with make_context(), ir.Location.unknown():
        module = parse_module(text, "mask.mlir")
        Pipeline.parse("builtin.module(kiln-decompose)").run(module)
        assert '"kiln.attention"' in module.operation.get_asm()
