// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// Verifier cases found by the lit-input fuzzer (test/python/tools/test_fuzz_lit_inputs.py);
// each checks the exact message.

// A segment-size attribute of another kind (was "verifier failed: ValueError: Cannot cast attribute").
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%q: !kiln.tensor<["B", 2, 3, 4], f32>) {
  // expected-error @below {{'kiln.attention' op 'operandSegmentSizes' must be array<i32: ...>, got [1, 1, 1, 0]}}
  %a = "kiln.attention"(%q, %q, %q) {operandSegmentSizes = [1, 1, 1, 0]} : (!kiln.tensor<["B", 2, 3, 4], f32>, !kiln.tensor<["B", 2, 3, 4], f32>, !kiln.tensor<["B", 2, 3, 4], f32>) -> !kiln.tensor<["B", 2, 3, 4], f32>
  return
}
// -----
// Sizes that do not fit the groups: the verifier passed them and kiln-decompose failed (KeyError, IndexError).
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%q: !kiln.tensor<["B", 2, 3, 4], f32>) {
  // expected-error @below {{'kiln.attention' op 'operandSegmentSizes' gives the required operand 'q' 2 values, not 1}}
  %a = "kiln.attention"(%q, %q, %q) {operandSegmentSizes = array<i32: 2, 1, 0, 0>} : (!kiln.tensor<["B", 2, 3, 4], f32>, !kiln.tensor<["B", 2, 3, 4], f32>, !kiln.tensor<["B", 2, 3, 4], f32>) -> !kiln.tensor<["B", 2, 3, 4], f32>
  return
}
// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%q: !kiln.tensor<["B", 2, 3, 4], f32>) {
  // expected-error @below {{'kiln.attention' op 'operandSegmentSizes' gives the required operand 'q' -1 values, not 1}}
  %a = "kiln.attention"(%q, %q, %q) {operandSegmentSizes = array<i32: -1, 1, 1, 2>} : (!kiln.tensor<["B", 2, 3, 4], f32>, !kiln.tensor<["B", 2, 3, 4], f32>, !kiln.tensor<["B", 2, 3, 4], f32>) -> !kiln.tensor<["B", 2, 3, 4], f32>
  return
}
// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%q: !kiln.tensor<["B", 2, 3, 4], f32>) {
  // expected-error @below {{'kiln.attention' op 'operandSegmentSizes' gives the optional operand 'mask' 5 values, not 0 or 1}}
  %a = "kiln.attention"(%q, %q, %q) {operandSegmentSizes = array<i32: 1, 1, 1, 5>} : (!kiln.tensor<["B", 2, 3, 4], f32>, !kiln.tensor<["B", 2, 3, 4], f32>, !kiln.tensor<["B", 2, 3, 4], f32>) -> !kiln.tensor<["B", 2, 3, 4], f32>
  return
}
// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%q: !kiln.tensor<["B", 2, 3, 4], f32>) {
  // expected-error @below {{'kiln.attention' op 'operandSegmentSizes' sizes add up to 4, but the op has 3 operands}}
  %a = "kiln.attention"(%q, %q, %q) {operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<["B", 2, 3, 4], f32>, !kiln.tensor<["B", 2, 3, 4], f32>, !kiln.tensor<["B", 2, 3, 4], f32>) -> !kiln.tensor<["B", 2, 3, 4], f32>
  return
}
// -----
// A head dim of 0 with the default scale 1/sqrt(0) (was ZeroDivisionError in kiln-decompose, exit 70).
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%q: !kiln.tensor<["B", 2, 3, 0], f32>) {
  // expected-error @below {{'kiln.attention' op head dim is 0, so the default scale 1/sqrt(0) is undefined: give 'scale'}}
  %a = "kiln.attention"(%q, %q, %q) {operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, 3, 0], f32>, !kiln.tensor<["B", 2, 3, 0], f32>, !kiln.tensor<["B", 2, 3, 0], f32>) -> !kiln.tensor<["B", 2, 3, 0], f32>
  return
}
// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%q: !kiln.tensor<["B", 2, 3, 0], f32>) {
  %a = "kiln.attention"(%q, %q, %q) {scale = 1.0 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, 3, 0], f32>, !kiln.tensor<["B", 2, 3, 0], f32>, !kiln.tensor<["B", 2, 3, 0], f32>) -> !kiln.tensor<["B", 2, 3, 0], f32>
  return
}
// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["B", 3, 0], f32>) {
  // expected-error @below {{'kiln.packed_attention' op head dim is 0, so the default scale 1/sqrt(0) is undefined: give 'scale'}}
  %a = "kiln.packed_attention"(%x) {heads = 2 : i64} : (!kiln.tensor<["B", 3, 0], f32>) -> !kiln.tensor<["B", 3, 0], f32>
  return
}
