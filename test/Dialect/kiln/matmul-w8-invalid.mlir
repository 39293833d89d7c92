// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// kiln.matmul_w8 verifier messages.

func.func @weight_dtype(%x: !kiln.tensor<[2, 8], f32>, %w: !kiln.tensor<[4, 8], ui8>, %s: !kiln.tensor<[4, 1], f32>) {
  // expected-error @below {{'kiln.matmul_w8' op w must have dtype i8, got ui8}}
  %0 = "kiln.matmul_w8"(%x, %w, %s) {group_size = 8 : i64} : (!kiln.tensor<[2, 8], f32>, !kiln.tensor<[4, 8], ui8>, !kiln.tensor<[4, 1], f32>) -> !kiln.tensor<[2, 4], f32>
  return
}
// -----
func.func @int_x(%x: !kiln.tensor<[2, 8], i32>, %w: !kiln.tensor<[4, 8], i8>, %s: !kiln.tensor<[4, 1], f32>) {
  // expected-error @below {{'kiln.matmul_w8' op x must be a float tensor, got i32}}
  %0 = "kiln.matmul_w8"(%x, %w, %s) {group_size = 8 : i64} : (!kiln.tensor<[2, 8], i32>, !kiln.tensor<[4, 8], i8>, !kiln.tensor<[4, 1], f32>) -> !kiln.tensor<[2, 4], f32>
  return
}
// -----
func.func @scale_dtype(%x: !kiln.tensor<[2, 8], f32>, %w: !kiln.tensor<[4, 8], i8>, %s: !kiln.tensor<[4, 1], bf16>) {
  // expected-error @below {{'kiln.matmul_w8' op scale must have x's dtype f32, got bf16}}
  %0 = "kiln.matmul_w8"(%x, %w, %s) {group_size = 8 : i64} : (!kiln.tensor<[2, 8], f32>, !kiln.tensor<[4, 8], i8>, !kiln.tensor<[4, 1], bf16>) -> !kiln.tensor<[2, 4], f32>
  return
}
// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
func.func @contracting(%x: !kiln.tensor<["B", 8], f32>, %w: !kiln.tensor<[4, 6], i8>, %s: !kiln.tensor<[4, 1], f32>) {
  // expected-error @below {{'kiln.matmul_w8' op contracting dims differ between [B, 8] and w [4, 6]: 8 vs 6}}
  %0 = "kiln.matmul_w8"(%x, %w, %s) {group_size = 8 : i64} : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[4, 6], i8>, !kiln.tensor<[4, 1], f32>) -> !kiln.tensor<["B", 4], f32>
  return
}
// -----
func.func @scale_count(%x: !kiln.tensor<[2, 8], f32>, %w: !kiln.tensor<[4, 8], i8>, %s: !kiln.tensor<[3, 1], f32>) {
  // expected-error @below {{'kiln.matmul_w8' op scale [3, 1] must have a row per row of w [4, 8]: 4 vs 3}}
  %0 = "kiln.matmul_w8"(%x, %w, %s) {group_size = 8 : i64} : (!kiln.tensor<[2, 8], f32>, !kiln.tensor<[4, 8], i8>, !kiln.tensor<[3, 1], f32>) -> !kiln.tensor<[2, 4], f32>
  return
}
// -----
func.func @weight_rank(%x: !kiln.tensor<[2, 8], f32>, %w: !kiln.tensor<[1, 4, 8], i8>, %s: !kiln.tensor<[4, 1], f32>) {
  // expected-error @below {{'kiln.matmul_w8' op expected x [..., K], w [N, K] and scale [N, groups], got [2, 8], [1, 4, 8] and [4, 1]}}
  %0 = "kiln.matmul_w8"(%x, %w, %s) {group_size = 8 : i64} : (!kiln.tensor<[2, 8], f32>, !kiln.tensor<[1, 4, 8], i8>, !kiln.tensor<[4, 1], f32>) -> !kiln.tensor<[2, 4], f32>
  return
}
// -----
func.func @result_type(%x: !kiln.tensor<[2, 8], f32>, %w: !kiln.tensor<[4, 8], i8>, %s: !kiln.tensor<[4, 1], f32>) {
  // expected-error @below {{'kiln.matmul_w8' op result #0 dim 1 is 5, but its shape function gives 4 (result [2, 5] vs inferred [2, 4])}}
  %0 = "kiln.matmul_w8"(%x, %w, %s) {group_size = 8 : i64} : (!kiln.tensor<[2, 8], f32>, !kiln.tensor<[4, 8], i8>, !kiln.tensor<[4, 1], f32>) -> !kiln.tensor<[2, 5], f32>
  return
}
// -----
func.func @groups(%x: !kiln.tensor<[2, 8], f32>, %w: !kiln.tensor<[4, 8], i8>, %s: !kiln.tensor<[4, 1], f32>) {
  // expected-error @below {{'kiln.matmul_w8' op scale [4, 1] must have ceil(8 / 3) = 3 groups per row}}
  %0 = "kiln.matmul_w8"(%x, %w, %s) {group_size = 3 : i64} : (!kiln.tensor<[2, 8], f32>, !kiln.tensor<[4, 8], i8>, !kiln.tensor<[4, 1], f32>) -> !kiln.tensor<[2, 4], f32>
  return
}
// -----
func.func @group_size(%x: !kiln.tensor<[2, 8], f32>, %w: !kiln.tensor<[4, 8], i8>, %s: !kiln.tensor<[4, 1], f32>) {
  // expected-error @below {{'kiln.matmul_w8' op group_size must be positive, got 0}}
  %0 = "kiln.matmul_w8"(%x, %w, %s) {group_size = 0 : i64} : (!kiln.tensor<[2, 8], f32>, !kiln.tensor<[4, 8], i8>, !kiln.tensor<[4, 1], f32>) -> !kiln.tensor<[2, 4], f32>
  return
}
