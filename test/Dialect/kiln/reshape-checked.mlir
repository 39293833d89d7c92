// RUN: kiln-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// A `checked` reshape's element counts are compared when the symbols are
// bound (a target of run-time values: an ONNX shape input's symbols), so the
// verifier takes counts it cannot prove equal; counts it can prove unequal
// (a constant difference) stay an error.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "s0", min = 1 : i64, max = 2147483647 : i64} : () -> ()
"kiln.symbol"() {sym_name = "s1", min = 1 : i64, max = 2147483647 : i64} : () -> ()
// CHECK-LABEL: func.func @reshape$checked_runtime_target
// CHECK: "kiln.reshape"(%arg0) {checked = true, shape = ["s0", "s1"]} : (!kiln.tensor<["B", 12], f32>) -> !kiln.tensor<["s0", "s1"], f32>
// CHECK: "kiln.reshape"(%arg0) {checked = true, shape = [4, "B+(4*B)/8", 2]}
func.func @reshape$checked_runtime_target(%x: !kiln.tensor<["B", 12], f32>) {
  %0 = "kiln.reshape"(%x) {shape = ["s0", "s1"], checked = true} : (!kiln.tensor<["B", 12], f32>) -> !kiln.tensor<["s0", "s1"], f32>
  %1 = "kiln.reshape"(%x) {shape = [4, "(12*B)/8", 2], checked = true} : (!kiln.tensor<["B", 12], f32>) -> !kiln.tensor<[4, "(12*B)/8", 2], f32>
  return
}

// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "s0", min = 1 : i64, max = 2147483647 : i64} : () -> ()
func.func @reshape$unchecked_runtime_target(%x: !kiln.tensor<["B", 12], f32>) {
  // expected-error @below {{'kiln.reshape' op cannot reshape [B, 12] (12*B elements) to [s0, 12] (12*s0 elements)}}
  %0 = "kiln.reshape"(%x) {shape = ["s0", 12]} : (!kiln.tensor<["B", 12], f32>) -> !kiln.tensor<["s0", 12], f32>
  return
}

// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @reshape$checked_but_provably_unequal(%x: !kiln.tensor<["B", 12], f32>) {
  // expected-error @below {{'kiln.reshape' op cannot reshape [B, 12] (12*B elements) to [B, 12, 2] (24*B elements)}}
  %0 = "kiln.reshape"(%x) {shape = ["B", 12, 2], checked = true} : (!kiln.tensor<["B", 12], f32>) -> !kiln.tensor<["B", 12, 2], f32>
  return
}
