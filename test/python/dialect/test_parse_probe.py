"""MLIR's parser crashes on some malformed texts; kiln parses every text in a
forked probe first, so they are ParseErrors and the process lives on (issue 35).

Each text below crashed the process with the bindings alone (found by the
fuzz test): a redefined block label corrupted the heap (the *next* parse
aborted in malloc), floats in linalg ops' ``dimensions`` / ``permutation``
segfaulted, and a text ending inside a resource blob's string made the
parser read past its end.  The checks run in a subprocess, where a crash is
a signal instead of the end of the test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

CRASHERS = {
    "redefined block": """
#id = affine_map<(m, n) -> (m, n)>
    %1 = arith.addf %r, %0 : f32
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y, %b : memref<?x4xf32>, memref<?x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
  ^bb0(%p: f32, %q: f32, %r: f32):
""",
    "reduce dims float": """
func.func @f(%x: tensor<4x64xf32>, %init: tensor<4xf32>) -> tensor<4xf32> {
  %0 = linalg.reduce ins(%x : tensor<4x64xf32>) outs(%init : tensor<4xf32>) dimensions = [1.5]
    (%a: f32, %b: f32) {
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    }
  return %0 : tensor<4xf32>
}
""",
    "transpose permutation float": """
func.func @f(%x: tensor<4x64xf32>, %init: tensor<64x4xf32>) -> tensor<64x4xf32> {
  %0 = linalg.transpose ins(%x : tensor<4x64xf32>) outs(%init : tensor<64x4xf32>) permutation = [1.5, 0]
  return %0 : tensor<64x4xf32>
}
""",
    "broadcast dims float": """
func.func @f(%x: tensor<4xf32>, %init: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = linalg.broadcast ins(%x : tensor<4xf32>) outs(%init : tensor<4x64xf32>) dimensions = [1.5]
  return %0 : tensor<4x64xf32>
}
""",
    "truncated resource": 'func.func @f() {\n  return\n}\n{-#\n  dialect_resources: {\n    builtin: {\n      g32: "0x04000000',
}

GOOD = """
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32> {
  %0 = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  return %0 : !kiln.tensor<["B", 4], f32>
}
"""


def test_parser_crashers_are_parse_errors_and_the_process_lives_on():
    script = textwrap.dedent(f"""
        import numpy as np
        import kiln
        from kiln._mlir import ir
        from kiln.context import make_context
        from kiln.module import parse_module

        for round in range(2):
            for name, text in {CRASHERS!r}.items():
                with make_context(), ir.Location.unknown():
                    try:
                        parse_module(text, name)
                    except kiln.ParseError as e:
                        print(name, "|", str(e).splitlines()[0])
                    else:
                        raise SystemExit(name + " parsed")
                with make_context(), ir.Location.unknown():
                    parse_module({GOOD!r}, "good.mlir")
        model = kiln.compile({GOOD!r})
        x = np.random.default_rng(0).standard_normal((3, 4), dtype=np.float32)
        np.testing.assert_array_equal(model(x), np.maximum(x, 0))
        print("survived")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "survived"
    said = dict(line.split(" | ", 1) for line in lines[:len(CRASHERS)])
    assert said["redefined block"].startswith("could not parse redefined block")
    assert "the MLIR parser crashed on it (signal 11)" in said["reduce dims float"]
    assert "the MLIR parser crashed on it" in said["transpose permutation float"]
    assert said["truncated resource"] == "could not parse truncated resource"


def test_a_failing_text_reports_the_childs_diagnostics():
    import pytest

    import kiln
    from kiln._mlir import ir
    from kiln.context import make_context
    from kiln.module import parse_module

    with make_context(), ir.Location.unknown(), pytest.raises(kiln.ParseError) as info:
        parse_module(GOOD.replace('"kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>)',
                                  '"kiln.relu"(%x) : (!kiln.tensor<["B", 5], f32>)'), "bad.mlir")
    first = info.value.diagnostics[0]
    assert (first.file, first.line, first.col) == ("bad.mlir", 4, 20)
    assert "expects different type than prior uses" in first.message
    assert [n.message for n in first.notes] == ["prior use here"] and first.notes[0].line == 3
    # A verifier's error keeps its class through the probe.
    with make_context(), ir.Location.unknown(), pytest.raises(kiln.VerifyError, match="invalid IR in mismatch.mlir"):
        parse_module(GOOD.replace("kiln.relu", "kiln.erf").replace("f32", "i32"), "mismatch.mlir")
