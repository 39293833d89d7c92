// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// kiln.cumsum's verifier messages.

func.func @cumsum$axis_out_of_range(%x: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.cumsum' op axis 2 is out of range for rank 2}}
  %0 = "kiln.cumsum"(%x) {axis = 2 : i64} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @cumsum$bool(%x: !kiln.tensor<[4, 8], i1>) {
  // expected-error @below {{'kiln.cumsum' op requires a numeric operand, got i1}}
  %0 = "kiln.cumsum"(%x) {axis = 1 : i64} : (!kiln.tensor<[4, 8], i1>) -> !kiln.tensor<[4, 8], i1>
  return
}
// -----
func.func @cumsum$rank0(%x: !kiln.tensor<[], f32>) {
  // expected-error @below {{'kiln.cumsum' op requires an operand of rank >= 1}}
  %0 = "kiln.cumsum"(%x) {axis = 0 : i64} : (!kiln.tensor<[], f32>) -> !kiln.tensor<[], f32>
  return
}
// -----
func.func @cumsum$wrong_result(%x: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.cumsum' op result #0 dim 1 is 9, but its shape function gives 8 (result [4, 9] vs inferred [4, 8])}}
  %0 = "kiln.cumsum"(%x) {axis = 1 : i64} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, 9], f32>
  return
}
// -----
func.func @cumsum$missing_axis(%x: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.cumsum' op requires attribute 'axis'}}
  %0 = "kiln.cumsum"(%x) : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
