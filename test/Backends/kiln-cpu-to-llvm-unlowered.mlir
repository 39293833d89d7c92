// RUN: not kiln-opt %s --kiln-cpu-to-llvm 2>&1 | FileCheck %s

// An op the LLVM lowering has no pattern for is named with its types and
// location (it was MLIR's raw "failed to legalize operation ... that was
// explicitly marked illegal" with a "see current operation" note).
// CHECK: kiln-cpu-to-llvm-unlowered.mlir:[[# @LINE + 3]]:8: error: the CPU backend cannot lower 'math.ipowi' on (i64, i64) -> i64
// CHECK-NOT: failed to legalize
func.func @ipowi(%a: i64, %b: i64) -> i64 {
  %0 = math.ipowi %a, %b : i64
  return %0 : i64
}
