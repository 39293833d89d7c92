// RUN: not kiln-opt %s --split-input-file --convert-kiln-to-linalg 2>&1 | FileCheck %s

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()

// B appears only under a floor division of the arguments' dims (B+1 or 2*B
// would be solved for it): it has no value.
// CHECK: symbol 'B' is not the exact dim of any function argument
func.func @expression_only(%a: !kiln.tensor<["B/2"], f32>) -> !kiln.tensor<["B"], f32> {
  %0 = "kiln.range"() {shape = ["B"], start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : () -> !kiln.tensor<["B"], f32>
  return %0 : !kiln.tensor<["B"], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()

// A fallback's result used by a lowered op: the fallback is named, with the
// way out (MLIR's own message was an unresolved materialization).
// CHECK: invalid.mlir:[[# @LINE + 2]]:8: error: kiln.fallback 'aten.special_bessel_j0' feeds kiln.exp, which convert-kiln-to-linalg lowers: run kiln-partition first (a fallback runs with PyTorch in a kernel of its own)
func.func @fallback_feeds_exp(%a: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32> {
  %0 = "kiln.fallback"(%a) {op_name = "aten.special_bessel_j0", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  %1 = "kiln.exp"(%0) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  return %1 : !kiln.tensor<["B", 4], f32>
}
