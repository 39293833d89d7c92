// RUN: kiln-opt %s --split-input-file --verify-diagnostics

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @above(%x: !kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32> {
  // expected-note @below {{required by region isolation constraints}}
  %u = "kiln.fused"(%x) ({
  ^bb0(%a: !kiln.tensor<["B", 64], f32>):
    // expected-error @below {{using value defined outside the region}}
    %0 = "kiln.add"(%a, %x) : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32>
    "kiln.yield"(%0) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>) -> ()
  }) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32>
  return %u : !kiln.tensor<["B", 64], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @yield_type(%x: !kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 32], f32> {
  // expected-error @below {{'kiln.fused' op result #0 dim 1 is 32, but its shape function gives 64}}
  %u = "kiln.fused"(%x) ({
  ^bb0(%a: !kiln.tensor<["B", 64], f32>):
    "kiln.yield"(%a) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>) -> ()
  }) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 32], f32>
  return %u : !kiln.tensor<["B", 32], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @yield_outside(%x: !kiln.tensor<["B", 64], f32>) {
  // expected-error @below {{'kiln.yield' op must be the terminator of a 'kiln.fused' body}}
  "kiln.yield"(%x) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>) -> ()
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @kind(%x: !kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32> {
  // expected-error @below {{attribute 'kind' must be one of elementwise, matmul_epilogue, conv_epilogue, reduction, conv_pair, got "conv"}}
  %u = "kiln.fused"(%x) ({
  ^bb0(%a: !kiln.tensor<["B", 64], f32>):
    "kiln.yield"(%a) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>) -> ()
  }) {kind = "conv", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32>
  return %u : !kiln.tensor<["B", 64], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @args(%x: !kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32> {
  // expected-error @below {{body has 0 arguments, but the op has 1 operands}}
  %u = "kiln.fused"(%x) ({
    %c = "kiln.constant"() {value = dense<1.0> : tensor<1x64xf32>} : () -> !kiln.tensor<[1, 64], f32>
    "kiln.yield"(%c) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[1, 64], f32>) -> ()
  }) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32>
  return %u : !kiln.tensor<["B", 64], f32>
}
