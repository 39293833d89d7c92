// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// Verifier messages of kiln.argmax / argmin, kiln.reduce_prod, kiln.floor and kiln.scatter_nd.

func.func @argmax$rank0(%x: !kiln.tensor<[], f32>) {
  // expected-error @below {{'kiln.argmax' op requires an operand of rank >= 1}}
  %0 = "kiln.argmax"(%x) {axis = 0 : i64} : (!kiln.tensor<[], f32>) -> !kiln.tensor<[], i64>
  return
}
// -----
func.func @argmin$bool(%x: !kiln.tensor<[4], i1>) {
  // expected-error @below {{'kiln.argmin' op requires a numeric operand, got i1}}
  %0 = "kiln.argmin"(%x) {axis = 0 : i64} : (!kiln.tensor<[4], i1>) -> !kiln.tensor<[1], i64>
  return
}
// -----
func.func @argmax$axis(%x: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.argmax' op axis 2 is out of range for rank 2}}
  %0 = "kiln.argmax"(%x) {axis = 2 : i64} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, 1], i64>
  return
}
// -----
func.func @argmax$result_dtype(%x: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.argmax' op result #0 has dtype f32, but the operands give i64}}
  %0 = "kiln.argmax"(%x) {axis = 1 : i64} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, 1], f32>
  return
}
// -----
func.func @reduce_prod$keepdims(%x: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.reduce_prod' op result #0 has rank 1 [4], but its shape function gives rank 2 [4, 1]}}
  %0 = "kiln.reduce_prod"(%x) {axes = array<i64: 1>, keepdims = true} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4], f32>
  return
}
// -----
func.func @floor$int(%x: !kiln.tensor<[4], i64>) {
  // expected-error @below {{'kiln.floor' op requires a floating-point operand, got i64}}
  %0 = "kiln.floor"(%x) : (!kiln.tensor<[4], i64>) -> !kiln.tensor<[4], i64>
  return
}
// -----
func.func @scatter_nd$reduction(%d: !kiln.tensor<[4, 4], f32>, %i: !kiln.tensor<[2, 1], i64>, %u: !kiln.tensor<[2, 4], f32>) {
  // expected-error @below {{'kiln.scatter_nd' op attribute 'reduction' must be one of none, add, mul, max, min, got "sum"}}
  %0 = "kiln.scatter_nd"(%d, %i, %u) {reduction = "sum"} : (!kiln.tensor<[4, 4], f32>, !kiln.tensor<[2, 1], i64>, !kiln.tensor<[2, 4], f32>) -> !kiln.tensor<[4, 4], f32>
  return
}
// -----
func.func @scatter_nd$index_depth(%d: !kiln.tensor<[4, 4], f32>, %i: !kiln.tensor<[2, 3], i64>, %u: !kiln.tensor<[2], f32>) {
  // expected-error @below {{'kiln.scatter_nd' op the last dim of indices must be a static size <= the rank of data (2), got 3}}
  %0 = "kiln.scatter_nd"(%d, %i, %u) : (!kiln.tensor<[4, 4], f32>, !kiln.tensor<[2, 3], i64>, !kiln.tensor<[2], f32>) -> !kiln.tensor<[4, 4], f32>
  return
}
// -----
func.func @scatter_nd$updates(%d: !kiln.tensor<[4, "L"], f32>, %i: !kiln.tensor<[2, 1], i64>, %u: !kiln.tensor<[2, 4], f32>) {
  // expected-error @below {{'kiln.scatter_nd' op updates must have shape [2, L], got [2, 4]}}
  %0 = "kiln.scatter_nd"(%d, %i, %u) : (!kiln.tensor<[4, "L"], f32>, !kiln.tensor<[2, 1], i64>, !kiln.tensor<[2, 4], f32>) -> !kiln.tensor<[4, "L"], f32>
  return
}
// -----
func.func @scatter_nd$float_indices(%d: !kiln.tensor<[4, 4], f32>, %i: !kiln.tensor<[2, 1], f32>, %u: !kiln.tensor<[2, 4], f32>) {
  // expected-error @below {{'kiln.scatter_nd' op indices must have an integer dtype, got f32}}
  %0 = "kiln.scatter_nd"(%d, %i, %u) : (!kiln.tensor<[4, 4], f32>, !kiln.tensor<[2, 1], f32>, !kiln.tensor<[2, 4], f32>) -> !kiln.tensor<[4, 4], f32>
  return
}
// -----
func.func @scatter_nd$dtype(%d: !kiln.tensor<[4, 4], f32>, %i: !kiln.tensor<[2, 1], i64>, %u: !kiln.tensor<[2, 4], i32>) {
  // expected-error @below {{'kiln.scatter_nd' op data and updates must have the same dtype, got f32 and i32 (operand #1)}}
  %0 = "kiln.scatter_nd"(%d, %i, %u) : (!kiln.tensor<[4, 4], f32>, !kiln.tensor<[2, 1], i64>, !kiln.tensor<[2, 4], i32>) -> !kiln.tensor<[4, 4], f32>
  return
}
