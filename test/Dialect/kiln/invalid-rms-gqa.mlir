// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// Verifier errors of kiln.rms_norm and of grouped-query kiln.attention.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @rms_norm$weight(%x: !kiln.tensor<["B", 8], f32>, %w: !kiln.tensor<[4], f32>) {
  // expected-error @below {{'kiln.rms_norm' op weight must have shape [8], got [4]}}
  %0 = "kiln.rms_norm"(%x, %w) {operandSegmentSizes = array<i32: 1, 1>} : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["B", 8], f32>
  return
}
// -----
func.func @rms_norm$int(%x: !kiln.tensor<[2, 8], i32>) {
  // expected-error @below {{'kiln.rms_norm' op requires a floating-point operand, got i32}}
  %0 = "kiln.rms_norm"(%x) {operandSegmentSizes = array<i32: 1, 0>} : (!kiln.tensor<[2, 8], i32>) -> !kiln.tensor<[2, 8], i32>
  return
}
// -----
// 6 q heads over 4 k / v heads: not a group.
func.func @attention$gqa_heads(%q: !kiln.tensor<[2, 6, 8, 16], f32>, %k: !kiln.tensor<[2, 4, 8, 16], f32>) {
  // expected-error @below {{'kiln.attention' op batch dims of q, k, v are not broadcast-compatible}}
  %0 = "kiln.attention"(%q, %k, %k) {operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<[2, 6, 8, 16], f32>, !kiln.tensor<[2, 4, 8, 16], f32>, !kiln.tensor<[2, 4, 8, 16], f32>) -> !kiln.tensor<[2, 6, 8, 16], f32>
  return
}
// -----
// k and v with different head counts.
func.func @attention$gqa_kv(%q: !kiln.tensor<[2, 8, 8, 16], f32>, %k: !kiln.tensor<[2, 4, 8, 16], f32>, %v: !kiln.tensor<[2, 2, 8, 16], f32>) {
  // expected-error @below {{'kiln.attention' op batch dims of q, k, v are not broadcast-compatible}}
  %0 = "kiln.attention"(%q, %k, %v) {operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<[2, 8, 8, 16], f32>, !kiln.tensor<[2, 4, 8, 16], f32>, !kiln.tensor<[2, 2, 8, 16], f32>) -> !kiln.tensor<[2, 8, 8, 16], f32>
  return
}
