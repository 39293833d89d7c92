"""The Dialect Conversion wrappers keep the bindings' known crashers out of reach.

Sharp edges 1 and 2 of MLIR_NOTES.md: a TypeConverter callback collected by
Python, and a dialect passed as a string to ConversionTarget.  Each test
does what used to crash, through kiln's API, in a subprocess-free way: if
the wrapper regressed, the test process would die.
"""

import gc

import pytest

from kiln._mlir import ir, rewrite
from kiln.conversions.framework import KilnTypeConverter, NoMatch, PatternTable, conversion_target
from kiln.dialects.kiln import create_op, tensor_type
from kiln.dialects.kiln.elementwise import AbsOp, NegOp
from kiln.errors import ConversionError
from kiln.module import parse_module

SRC = """
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32> {
  %0 = "kiln.neg"(%x) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32>
  return %0 : !kiln.tensor<["B"], f32>
}
"""


def _converter():
    tc = KilnTypeConverter()
    # Inline lambdas, no other reference: the raw bindings would lose them.
    tc.add(lambda t: t)
    tc.add(lambda t: None if "i1" in str(t) else t)
    return tc


def test_type_converter_callbacks_survive_garbage_collection(ctx):
    tc = _converter()
    for _ in range(3):
        gc.collect()
    t = tensor_type(["B"], "f32")
    assert tc.convert(t) == t


def test_string_dialects_and_a_pattern_table_convert_without_crashing(ctx):
    module = parse_module(SRC)
    tc = _converter()
    gc.collect()
    table = PatternTable()

    def lower_neg(op, adaptor, converter, rewriter):
        with rewriter.ip:
            new = create_op(AbsOp, [adaptor.operands[0]], loc=op.location)
        rewriter.replace_op(op, new.operation)

    table.add(NegOp, lower_neg)
    patterns = rewrite.RewritePatternSet()
    table.populate(patterns, tc)
    target = conversion_target(legal=["kiln", "func"], illegal_ops=[NegOp])
    gc.collect()
    rewrite.apply_partial_conversion(module.operation, target, patterns.freeze())
    text = str(module)
    assert '"kiln.abs"' in text and '"kiln.neg"' not in text
    assert table.errors == []


def test_pattern_failures_are_reported_not_raised_into_mlir(ctx):
    module = parse_module(SRC)
    tc = _converter()
    table = PatternTable()

    def broken(op, adaptor, converter, rewriter):
        raise ValueError("bug in a lowering")

    def no_match(op, adaptor, converter, rewriter):
        raise NoMatch

    table.add(NegOp, no_match)
    table.add(NegOp, broken)
    patterns = rewrite.RewritePatternSet()
    table.populate(patterns, tc)
    target = conversion_target(legal=["kiln", "func"], illegal_ops=[NegOp])
    with pytest.raises(ir.MLIRError, match="failed to legalize operation 'kiln.neg'"):
        rewrite.apply_partial_conversion(module.operation, target, patterns.freeze())
    assert [str(e) for e in table.errors] == ["lowering of 'kiln.neg' failed: ValueError: bug in a lowering"]


def test_unknown_dialect_name_is_a_kiln_error(ctx):
    with pytest.raises(ConversionError, match="unknown dialect 'nosuch'"):
        conversion_target(legal=["nosuch"])
