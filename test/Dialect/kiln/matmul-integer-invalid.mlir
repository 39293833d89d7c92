// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// kiln.matmul_integer verifier messages.

func.func @a_dtype(%a: !kiln.tensor<[2, 8], f32>, %b: !kiln.tensor<[8, 4], i8>, %za: !kiln.tensor<[], f32>, %zb: !kiln.tensor<[], i8>) {
  // expected-error @below {{'kiln.matmul_integer' op a must have dtype i8 or ui8, got f32}}
  %0 = "kiln.matmul_integer"(%a, %b, %za, %zb) : (!kiln.tensor<[2, 8], f32>, !kiln.tensor<[8, 4], i8>, !kiln.tensor<[], f32>, !kiln.tensor<[], i8>) -> !kiln.tensor<[2, 4], i32>
  return
}
// -----
func.func @b_dtype(%a: !kiln.tensor<[2, 8], ui8>, %b: !kiln.tensor<[8, 4], i32>, %za: !kiln.tensor<[], ui8>, %zb: !kiln.tensor<[], i32>) {
  // expected-error @below {{'kiln.matmul_integer' op b must have dtype i8 or ui8, got i32}}
  %0 = "kiln.matmul_integer"(%a, %b, %za, %zb) : (!kiln.tensor<[2, 8], ui8>, !kiln.tensor<[8, 4], i32>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i32>) -> !kiln.tensor<[2, 4], i32>
  return
}
// -----
func.func @zero_point_dtype(%a: !kiln.tensor<[2, 8], ui8>, %b: !kiln.tensor<[8, 4], i8>, %za: !kiln.tensor<[], i8>, %zb: !kiln.tensor<[], i8>) {
  // expected-error @below {{'kiln.matmul_integer' op a_zero_point must be a rank-0 tensor of dtype ui8, got [] of i8}}
  %0 = "kiln.matmul_integer"(%a, %b, %za, %zb) : (!kiln.tensor<[2, 8], ui8>, !kiln.tensor<[8, 4], i8>, !kiln.tensor<[], i8>, !kiln.tensor<[], i8>) -> !kiln.tensor<[2, 4], i32>
  return
}
// -----
func.func @zero_point_per_column(%a: !kiln.tensor<[2, 8], ui8>, %b: !kiln.tensor<[8, 4], i8>, %za: !kiln.tensor<[], ui8>, %zb: !kiln.tensor<[4], i8>) {
  // expected-error @below {{'kiln.matmul_integer' op b_zero_point must be a rank-0 tensor of dtype i8, got [4] of i8}}
  %0 = "kiln.matmul_integer"(%a, %b, %za, %zb) : (!kiln.tensor<[2, 8], ui8>, !kiln.tensor<[8, 4], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[4], i8>) -> !kiln.tensor<[2, 4], i32>
  return
}
// -----
func.func @batched_b(%a: !kiln.tensor<[2, 3, 8], ui8>, %b: !kiln.tensor<[2, 8, 4], i8>, %za: !kiln.tensor<[], ui8>, %zb: !kiln.tensor<[], i8>) {
  // expected-error @below {{'kiln.matmul_integer' op expected a [..., M, K] and b [K, N], got [2, 3, 8] and [2, 8, 4]}}
  %0 = "kiln.matmul_integer"(%a, %b, %za, %zb) : (!kiln.tensor<[2, 3, 8], ui8>, !kiln.tensor<[2, 8, 4], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<[2, 3, 4], i32>
  return
}
// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
func.func @contracting(%a: !kiln.tensor<["B", 8], ui8>, %b: !kiln.tensor<[6, 4], i8>, %za: !kiln.tensor<[], ui8>, %zb: !kiln.tensor<[], i8>) {
  // expected-error @below {{'kiln.matmul_integer' op contracting dims differ between [B, 8] and [6, 4]: 8 vs 6}}
  %0 = "kiln.matmul_integer"(%a, %b, %za, %zb) : (!kiln.tensor<["B", 8], ui8>, !kiln.tensor<[6, 4], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 4], i32>
  return
}
// -----
func.func @result_dtype(%a: !kiln.tensor<[2, 8], ui8>, %b: !kiln.tensor<[8, 4], i8>, %za: !kiln.tensor<[], ui8>, %zb: !kiln.tensor<[], i8>) {
  // expected-error @below {{'kiln.matmul_integer' op result #0 has dtype f32, but the operands give i32}}
  %0 = "kiln.matmul_integer"(%a, %b, %za, %zb) : (!kiln.tensor<[2, 8], ui8>, !kiln.tensor<[8, 4], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<[2, 4], f32>
  return
}
