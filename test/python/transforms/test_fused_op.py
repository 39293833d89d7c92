"""kiln.fused / kiln.yield: building a group, verifying it, inlining it back."""

from kiln._mlir import ir
from kiln.context import make_context
from kiln.dialects.kiln import builders, create_fused, create_yield, inline_fused
from kiln.module import parse_module, verify_module

SRC = """
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["B", 8], f32>, %b: !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", 8], f32> {
  %0 = "kiln.add"(%x, %b) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", 8], f32>
  %1 = "kiln.relu"(%0) : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 8], f32>
  return %1 : !kiln.tensor<["B", 8], f32>
}
"""


def _func(module):
    return next(op for op in module.body.operations if op.operation.name == "func.func")


def test_build_verify_and_inline_round_trip():
    with make_context(), ir.Location.unknown():
        module = parse_module(SRC)
        fn = _func(module)
        block = fn.regions[0].blocks[0]
        x, b = block.arguments
        ret = list(block.operations)[-1]
        fused = create_fused([x, b], [ret.operands[0].type], ip=ir.InsertionPoint(ret))
        body = fused.operation.regions[0].blocks[0]
        with ir.InsertionPoint(body):
            s = builders.add(*body.arguments)
            r = builders.relu(s.result)
            create_yield([r.result])
        ret.operands[0] = fused.operation.results[0]
        # The original chain is now dead; erase it (users first).
        for op in reversed(list(block.operations)[:2]):
            op.operation.erase()
        verify_module(module.operation)
        text = str(module)
        assert '"kiln.fused"(%arg0, %arg1)' in text
        assert 'kind = "elementwise"' in text
        assert "kiln.yield" in text

        produced = inline_fused(fused)
        verify_module(module.operation)
        names = [op.operation.name for op in block.operations]
        assert names == ["kiln.add", "kiln.relu", "func.return"]
        assert list(block.operations)[-1].operands[0] == produced[0]


def test_too_many_operands_is_a_verify_error():
    import pytest

    from kiln.errors import VerifyError

    with make_context(), ir.Location.unknown():
        module = parse_module(SRC)
        x = _func(module).regions[0].blocks[0].arguments[0]
        with pytest.raises(VerifyError, match="at most 16 operands, got 17"):
            create_fused([x] * 17, [x.type])
