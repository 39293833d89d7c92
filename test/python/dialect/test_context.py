"""make_context: the kiln dialect's Python module is found by the bindings
(so OpView lookups of kiln ops do not retry a failing import each time)."""

import importlib.abc
import sys

from kiln._mlir import ir
from kiln.context import make_context
from kiln.dialects.kiln import KilnOp
from kiln.module import parse_module


class _Recorder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.names = []

    def find_spec(self, name, path=None, target=None):
        self.names.append(name)
        return None


def test_kiln_opviews_without_import_attempts():
    with make_context(), ir.Location.unknown():
        assert ir._globals._check_dialect_module_loaded("kiln")
        module = parse_module('''
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32> {
  %0 = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  return %0 : !kiln.tensor<["B", 4], f32>
}''')
        relu = module.body.operations[1].operation.regions[0].blocks[0].operations[0].operation
        recorder = _Recorder()
        sys.meta_path.insert(0, recorder)
        try:
            views = [relu.opview for _ in range(50)]
        finally:
            sys.meta_path.remove(recorder)
        assert all(isinstance(v, KilnOp) for v in views)
        assert recorder.names == []  # no module search per OpView
