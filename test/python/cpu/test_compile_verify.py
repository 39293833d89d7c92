"""kiln.compile verifies the graph pipeline's output once (not after every
pass); a pass that breaks the IR still stops the compile with a PipelineError."""

import pytest

import kiln
from kiln._mlir import ir
from kiln.errors import PipelineError
from kiln.module import ops_where
from kiln.pipelines.registry import Pass, register_pass

TEXT = '''
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
func.func @main(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32> {
  %0 = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  %1 = "kiln.tanh"(%0) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  return %1 : !kiln.tensor<["B", 4], f32>
}
'''


@register_pass
class BreakRelu(Pass):
    """Test only: gives the first kiln.relu a result type its verifier rejects."""

    name = "test-break-relu"
    summary = "give kiln.relu a wrong result type (tests)"

    def run(self, module) -> None:
        found = ops_where(module, lambda op: op.name == "kiln.relu")
        found[0].results[0].set_type(ir.Type.parse('!kiln.tensor<["B", 5], f32>'))


@pytest.fixture(autouse=True, scope="module")
def _unregister_after():
    yield
    from kiln.pipelines import registry

    registry._REGISTRY.pop(BreakRelu.name, None)  # the pass exists for this module's tests only


@pytest.mark.parametrize("each", ["0", "1"])
def test_broken_ir_from_the_graph_pipeline_is_an_error(each, monkeypatch):
    monkeypatch.setenv("KILN_VERIFY_EACH", each)
    with pytest.raises(PipelineError) as e:
        kiln.compile(TEXT, optimize="builtin.module(test-break-relu)")
    text = str(e.value)
    if each == "1":
        assert "stage 'test-break-relu' produced invalid IR" in text
    else:
        assert "produced invalid IR (KILN_VERIFY_EACH=1 names the pass)" in text
    assert "kiln.relu" in text or "kiln.tanh" in text
