// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// kiln.quantize / kiln.dequantize verifier messages.

func.func @int_input(%x: !kiln.tensor<[4], i32>, %s: !kiln.tensor<[], f32>, %z: !kiln.tensor<[], i8>) {
  // expected-error @below {{'kiln.quantize' op x must be a float tensor, got i32}}
  %0 = "kiln.quantize"(%x, %s, %z) : (!kiln.tensor<[4], i32>, !kiln.tensor<[], f32>, !kiln.tensor<[], i8>) -> !kiln.tensor<[4], i8>
  return
}
// -----
func.func @scale_dtype(%x: !kiln.tensor<[4], f32>, %s: !kiln.tensor<[], f16>, %z: !kiln.tensor<[], i8>) {
  // expected-error @below {{'kiln.quantize' op scale must have x's dtype f32, got f16}}
  %0 = "kiln.quantize"(%x, %s, %z) : (!kiln.tensor<[4], f32>, !kiln.tensor<[], f16>, !kiln.tensor<[], i8>) -> !kiln.tensor<[4], i8>
  return
}
// -----
func.func @zp_dtype(%x: !kiln.tensor<[4], f32>, %s: !kiln.tensor<[], f32>, %z: !kiln.tensor<[], i16>) {
  // expected-error @below {{'kiln.quantize' op zero_point must have dtype i8, ui8, i32, got i16}}
  %0 = "kiln.quantize"(%x, %s, %z) : (!kiln.tensor<[4], f32>, !kiln.tensor<[], f32>, !kiln.tensor<[], i16>) -> !kiln.tensor<[4], i16>
  return
}
// -----
func.func @result_dtype(%x: !kiln.tensor<[4], f32>, %s: !kiln.tensor<[], f32>, %z: !kiln.tensor<[], ui8>) {
  // expected-error @below {{'kiln.quantize' op result #0 has dtype i8, but the operands give ui8}}
  %0 = "kiln.quantize"(%x, %s, %z) : (!kiln.tensor<[4], f32>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<[4], i8>
  return
}
// -----
func.func @per_tensor_shape(%x: !kiln.tensor<[2, 4], f32>, %s: !kiln.tensor<[4], f32>, %z: !kiln.tensor<[4], i8>) {
  // expected-error @below {{'kiln.quantize' op per-tensor scale must have rank 0 or one element, got [4] (set 'axis' for per-axis parameters)}}
  %0 = "kiln.quantize"(%x, %s, %z) : (!kiln.tensor<[2, 4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], i8>) -> !kiln.tensor<[2, 4], i8>
  return
}
// -----
func.func @axis_size(%x: !kiln.tensor<[2, 4], f32>, %s: !kiln.tensor<[4], f32>, %z: !kiln.tensor<[4], i8>) {
  // expected-error @below {{'kiln.quantize' op per-axis scale has 4 values, but x has 2 along axis 0}}
  %0 = "kiln.quantize"(%x, %s, %z) {axis = 0 : i64} : (!kiln.tensor<[2, 4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], i8>) -> !kiln.tensor<[2, 4], i8>
  return
}
// -----
func.func @axis_range(%x: !kiln.tensor<[2, 4], f32>, %s: !kiln.tensor<[4], f32>, %z: !kiln.tensor<[4], i8>) {
  // expected-error @below {{'kiln.quantize' op axis 2 is out of range for rank 2}}
  %0 = "kiln.quantize"(%x, %s, %z) {axis = 2 : i64} : (!kiln.tensor<[2, 4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], i8>) -> !kiln.tensor<[2, 4], i8>
  return
}
// -----
func.func @zp_shape(%x: !kiln.tensor<[2, 4], f32>, %s: !kiln.tensor<[4], f32>, %z: !kiln.tensor<[], i8>) {
  // expected-error @below {{'kiln.quantize' op zero_point has shape [], but scale has [4] (they must match)}}
  %0 = "kiln.quantize"(%x, %s, %z) {axis = 1 : i64} : (!kiln.tensor<[2, 4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[], i8>) -> !kiln.tensor<[2, 4], i8>
  return
}
// -----
func.func @dq_float_input(%x: !kiln.tensor<[4], f32>, %s: !kiln.tensor<[], f32>, %z: !kiln.tensor<[], f32>) {
  // expected-error @below {{'kiln.dequantize' op x must have dtype i8, ui8, i32, got f32}}
  %0 = "kiln.dequantize"(%x, %s, %z) : (!kiln.tensor<[4], f32>, !kiln.tensor<[], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<[4], f32>
  return
}
// -----
func.func @dq_zp_dtype(%x: !kiln.tensor<[4], ui8>, %s: !kiln.tensor<[], f32>, %z: !kiln.tensor<[], i8>) {
  // expected-error @below {{'kiln.dequantize' op zero_point must have x's dtype ui8, got i8}}
  %0 = "kiln.dequantize"(%x, %s, %z) : (!kiln.tensor<[4], ui8>, !kiln.tensor<[], f32>, !kiln.tensor<[], i8>) -> !kiln.tensor<[4], f32>
  return
}
// -----
func.func @dq_int_scale(%x: !kiln.tensor<[4], i8>, %s: !kiln.tensor<[], i32>, %z: !kiln.tensor<[], i8>) {
  // expected-error @below {{'kiln.dequantize' op scale must be a float tensor, got i32}}
  %0 = "kiln.dequantize"(%x, %s, %z) : (!kiln.tensor<[4], i8>, !kiln.tensor<[], i32>, !kiln.tensor<[], i8>) -> !kiln.tensor<[4], f32>
  return
}
// -----
func.func @dq_result(%x: !kiln.tensor<[4], i8>, %s: !kiln.tensor<[], f32>, %z: !kiln.tensor<[], i8>) {
  // expected-error @below {{'kiln.dequantize' op result #0 has dtype f16, but the operands give f32}}
  %0 = "kiln.dequantize"(%x, %s, %z) : (!kiln.tensor<[4], i8>, !kiln.tensor<[], f32>, !kiln.tensor<[], i8>) -> !kiln.tensor<[4], f16>
  return
}
// -----
func.func @blocked_dim(%x: !kiln.tensor<[2, 4], i8>, %s: !kiln.tensor<[2, 3], f32>, %z: !kiln.tensor<[2, 3], i8>) {
  // expected-error @below {{'kiln.dequantize' op blocked scale dim 1 is 3, expected 2 (x [2, 4], block_size 2 along axis 1)}}
  %0 = "kiln.dequantize"(%x, %s, %z) {axis = 1 : i64, block_size = 2 : i64} : (!kiln.tensor<[2, 4], i8>, !kiln.tensor<[2, 3], f32>, !kiln.tensor<[2, 3], i8>) -> !kiln.tensor<[2, 4], f32>
  return
}
// -----
func.func @blocked_rank(%x: !kiln.tensor<[2, 4], i8>, %s: !kiln.tensor<[2], f32>, %z: !kiln.tensor<[2], i8>) {
  // expected-error @below {{'kiln.dequantize' op blocked scale must have x's rank 2, got [2]}}
  %0 = "kiln.dequantize"(%x, %s, %z) {axis = 1 : i64, block_size = 2 : i64} : (!kiln.tensor<[2, 4], i8>, !kiln.tensor<[2], f32>, !kiln.tensor<[2], i8>) -> !kiln.tensor<[2, 4], f32>
  return
}
// -----
func.func @blocked_no_axis(%x: !kiln.tensor<[2, 4], i8>, %s: !kiln.tensor<[2, 2], f32>, %z: !kiln.tensor<[2, 2], i8>) {
  // expected-error @below {{'kiln.dequantize' op blocked quantization (block_size) needs an 'axis'}}
  %0 = "kiln.dequantize"(%x, %s, %z) {block_size = 2 : i64} : (!kiln.tensor<[2, 4], i8>, !kiln.tensor<[2, 2], f32>, !kiln.tensor<[2, 2], i8>) -> !kiln.tensor<[2, 4], f32>
  return
}
// -----
func.func @blocked_size(%x: !kiln.tensor<[2, 4], i8>, %s: !kiln.tensor<[2, 2], f32>, %z: !kiln.tensor<[2, 2], i8>) {
  // expected-error @below {{'kiln.dequantize' op block_size must be positive, got 0}}
  %0 = "kiln.dequantize"(%x, %s, %z) {axis = 1 : i64, block_size = 0 : i64} : (!kiln.tensor<[2, 4], i8>, !kiln.tensor<[2, 2], f32>, !kiln.tensor<[2, 2], i8>) -> !kiln.tensor<[2, 4], f32>
  return
}
