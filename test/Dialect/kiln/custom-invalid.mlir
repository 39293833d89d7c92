// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// kiln.custom's verifier messages (an op run by a kernel registered from user code).

func.func @custom$empty_kernel(%x: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.custom' op attribute 'kernel' must not be empty}}
  %0 = "kiln.custom"(%x) {op_name = "mylib::op", kernel = "", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @custom$missing_op_name(%x: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.custom' op requires attribute 'op_name'}}
  %0 = "kiln.custom"(%x) {kernel = "k", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @custom$no_result(%x: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.custom' op a custom op must have at least one result}}
  "kiln.custom"(%x) {op_name = "mylib::op", kernel = "k", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 0, 0, 0, 0>} : (!kiln.tensor<[4, 8], f32>) -> ()
  return
}
// -----
func.func @custom$unknown_dim(%x: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.custom' op result #0 must have known dims (they come from the kernel's shape function)}}
  %0 = "kiln.custom"(%x) {op_name = "mylib::op", kernel = "k", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, "?"], f32>
  return
}
