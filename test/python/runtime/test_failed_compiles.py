"""A failed compile leaves the process healthy (issue 35).

A failed ``convert-kiln-to-linalg`` used to roll back its tracked rewrites
under the ops the lowerings had built with the Python builders, leaving
those ops pointing at freed values: the next compile in the process, of any
model, aborted in malloc or segfaulted.  Each check runs in a subprocess so
that a crash is seen as a signal, not as the test runner dying.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Kernels over a symbol no argument carries ('B' here): the lowering of
# kiln.range fails after kiln.relu's lowering succeeded, and kiln.reshape,
# kiln.add and kiln.tanh use the failed op's result.
MISSING_SYMBOL = """
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 8 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["L"], f32>) -> !kiln.tensor<["B", "L"], f32> {
  %r = "kiln.relu"(%x) : (!kiln.tensor<["L"], f32>) -> !kiln.tensor<["L"], f32>
  %b = "kiln.range"() {shape = ["B"], start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : () -> !kiln.tensor<["B"], f32>
  %b2 = "kiln.reshape"(%b) {shape = ["B", 1]} : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B", 1], f32>
  %s = "kiln.add"(%b2, %r) : (!kiln.tensor<["B", 1], f32>, !kiln.tensor<["L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  %t = "kiln.tanh"(%s) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  return %t : !kiln.tensor<["B", "L"], f32>
}
"""

# Lowered IR the LLVM stage cannot legalize (math.ipowi has no LLVM lowering).
LLVM_FAILURE = """
func.func @f(%a: memref<4xi64>, %b: memref<4xi64>, %o: memref<4xi64>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %x = memref.load %a[%c0] : memref<4xi64>
  %y = memref.load %b[%c0] : memref<4xi64>
  %z = math.ipowi %x, %y : i64
  memref.store %z, %o[%c0] : memref<4xi64>
  return
}
"""

SHAPE_MISMATCH = """
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["N", 4], f32>, %y: !kiln.tensor<["N", 5], f32>) -> !kiln.tensor<["N", 4], f32> {
  %r = "kiln.add"(%x, %y) : (!kiln.tensor<["N", 4], f32>, !kiln.tensor<["N", 5], f32>) -> !kiln.tensor<["N", 4], f32>
  return %r : !kiln.tensor<["N", 4], f32>
}
"""


def _run(script: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout)


def test_failed_conversion_then_more_passes_in_one_process():
    """The pass alone, ten times over in fresh contexts: a crash on the old code by the second run."""
    proc = _run(f"""
        import gc
        import kiln
        from kiln._mlir import ir
        from kiln.context import make_context
        from kiln.module import parse_module
        from kiln.pipelines import Pipeline

        for i in range(10):
            with make_context(), ir.Location.unknown():
                m = parse_module({MISSING_SYMBOL!r}, "bad.mlir")
                try:
                    Pipeline.parse("builtin.module(convert-kiln-to-linalg)").run(m)
                except kiln.PipelineError as e:
                    assert "symbol 'B' is not the exact dim of any function argument" in str(e), str(e)
                else:
                    raise SystemExit("the conversion did not fail")
                del m
            gc.collect()
        print("survived")
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "survived" in proc.stdout


def test_compiles_failing_in_every_stage_leave_valid_compiles_correct():
    """20 compiles failing at import, verification, torch conversion, kiln -> linalg
    and the LLVM lowering, interleaved with valid compiles that must still match eager."""
    proc = _run(f"""
        import gc
        import numpy as np
        import torch
        import kiln
        from kiln._mlir import ir
        from kiln.context import make_context
        from kiln.module import parse_module
        from kiln.pipelines import Pipeline
        from torch.export import Dim

        torch.manual_seed(0)
        mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()

        class Sorts(torch.nn.Module):
            def forward(self, x):
                return torch.sort(x, dim=-1).values * 2

        def import_error():
            kiln.compile("func.func @f(%x: !kiln.tensor<[4], f32>) -> ", optimize=False)

        def verify_error():
            kiln.compile({SHAPE_MISMATCH!r})

        def unsupported_op():
            kiln.compile(Sorts(), (torch.randn(3, 5),), dynamic_shapes=({{0: Dim("N", min=1, max=8)}},),
                         fallback=False)

        def lowering_error():
            kiln.compile({MISSING_SYMBOL!r})

        def lowering_pass_error():
            with make_context(), ir.Location.unknown():
                m = parse_module({MISSING_SYMBOL!r}, "bad.mlir")
                Pipeline.parse("builtin.module(convert-kiln-to-linalg)").run(m)

        def llvm_error():
            with make_context(), ir.Location.unknown():
                m = parse_module({LLVM_FAILURE!r}, "ipowi.mlir")
                Pipeline.parse("builtin.module(kiln-cpu-to-llvm)").run(m)

        failures = [import_error, verify_error, unsupported_op, lowering_error, lowering_pass_error, llvm_error]
        rng = np.random.default_rng(0)
        for i in range(20):
            fail = failures[i % len(failures)]
            try:
                fail()
            except kiln.KilnError:
                pass
            else:
                raise SystemExit(f"{{fail.__name__}} did not fail")
            gc.collect()
            if i % 2 == 1:
                model = kiln.compile(mlp, (torch.randn(4, 16),), dynamic_shapes=({{0: Dim("B", min=1, max=64)}},))
                for b in (1, 33, 64):
                    x = torch.from_numpy(rng.standard_normal((b, 16), dtype=np.float32))
                    diff = (model(x) - mlp(x)).abs().max().item()
                    assert diff < 1e-4, (i, b, diff)
                del model
        print("all valid compiles matched")
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "all valid compiles matched" in proc.stdout


def test_a_feature_the_backend_lacks_stays_an_unsupported_error():
    """A pass that raises UnsupportedError fails the pipeline with an error of both classes."""
    import kiln
    from kiln._mlir import ir
    from kiln.context import make_context
    from kiln.module import parse_module
    from kiln.pipelines import Pipeline

    with make_context(), ir.Location.unknown():
        module = parse_module(LLVM_FAILURE, "ipowi.mlir")
        try:
            Pipeline.parse("builtin.module(kiln-cpu-to-llvm)").run(module)
        except kiln.UnsupportedError as e:
            assert isinstance(e, kiln.PipelineError)
            assert "cannot lower 'math.ipowi' on (i64, i64) -> i64" in str(e)
        else:
            raise AssertionError("the LLVM lowering of math.ipowi did not fail")
