// RUN: kiln-opt %s | FileCheck %s
// kiln.quantize / kiln.dequantize: per-tensor and per-axis forms round-trip.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()

// CHECK-LABEL: func.func @per_tensor
// CHECK: "kiln.quantize"(%arg0, %arg1, %arg2) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<["B", 4], ui8>
// CHECK: "kiln.dequantize"(%{{.*}}, %arg1, %arg2) : (!kiln.tensor<["B", 4], ui8>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<["B", 4], f32>
func.func @per_tensor(%x: !kiln.tensor<["B", 4], f32>, %s: !kiln.tensor<[], f32>, %z: !kiln.tensor<[], ui8>) -> !kiln.tensor<["B", 4], f32> {
  %q = "kiln.quantize"(%x, %s, %z) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<["B", 4], ui8>
  %y = "kiln.dequantize"(%q, %s, %z) : (!kiln.tensor<["B", 4], ui8>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<["B", 4], f32>
  return %y : !kiln.tensor<["B", 4], f32>
}

// CHECK-LABEL: func.func @per_axis
// CHECK: "kiln.quantize"(%arg0, %arg1, %arg2) {axis = 1 : i64}
// CHECK-SAME: -> !kiln.tensor<["B", 4], i8>
// CHECK: "kiln.dequantize"
// CHECK-SAME: axis = -1 : i64
func.func @per_axis(%x: !kiln.tensor<["B", 4], f32>, %s: !kiln.tensor<[4], f32>, %z: !kiln.tensor<[4], i8>) -> !kiln.tensor<["B", 4], f32> {
  %q = "kiln.quantize"(%x, %s, %z) {axis = 1 : i64} : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], i8>) -> !kiln.tensor<["B", 4], i8>
  %y = "kiln.dequantize"(%q, %s, %z) {axis = -1 : i64} : (!kiln.tensor<["B", 4], i8>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], i8>) -> !kiln.tensor<["B", 4], f32>
  return %y : !kiln.tensor<["B", 4], f32>
}

// CHECK-LABEL: func.func @bias
// CHECK: "kiln.dequantize"(%arg0, %arg1, %arg2) : (!kiln.tensor<[8], i32>, !kiln.tensor<[1], f64>, !kiln.tensor<[1], i32>) -> !kiln.tensor<[8], f64>
func.func @bias(%b: !kiln.tensor<[8], i32>, %s: !kiln.tensor<[1], f64>, %z: !kiln.tensor<[1], i32>) -> !kiln.tensor<[8], f64> {
  %y = "kiln.dequantize"(%b, %s, %z) : (!kiln.tensor<[8], i32>, !kiln.tensor<[1], f64>, !kiln.tensor<[1], i32>) -> !kiln.tensor<[8], f64>
  return %y : !kiln.tensor<[8], f64>
}

// Blocked: scale of x's rank, ceil(4 / 3) = 2 blocks along axis 1.
// CHECK-LABEL: func.func @blocked
// CHECK: "kiln.dequantize"(%arg0, %arg1, %arg2) {axis = 1 : i64, block_size = 3 : i64}
func.func @blocked(%x: !kiln.tensor<[2, 4], i8>, %s: !kiln.tensor<[2, 2], f32>, %z: !kiln.tensor<[2, 2], i8>) -> !kiln.tensor<[2, 4], f32> {
  %y = "kiln.dequantize"(%x, %s, %z) {axis = 1 : i64, block_size = 3 : i64} : (!kiln.tensor<[2, 4], i8>, !kiln.tensor<[2, 2], f32>, !kiln.tensor<[2, 2], i8>) -> !kiln.tensor<[2, 4], f32>
  return %y : !kiln.tensor<[2, 4], f32>
}

// kiln.matmul_w8: x [..., K] times int8 rows [N, K] with a scale per row and group of k (ceil(10 / 4) = 3).
// CHECK-LABEL: func.func @matmul_w8
// CHECK: "kiln.matmul_w8"(%arg0, %arg1, %arg2) {group_size = 4 : i64} : (!kiln.tensor<["B", 3, 10], f32>, !kiln.tensor<[4, 10], i8>, !kiln.tensor<[4, 3], f32>) -> !kiln.tensor<["B", 3, 4], f32>
func.func @matmul_w8(%x: !kiln.tensor<["B", 3, 10], f32>, %w: !kiln.tensor<[4, 10], i8>, %s: !kiln.tensor<[4, 3], f32>) -> !kiln.tensor<["B", 3, 4], f32> {
  %0 = "kiln.matmul_w8"(%x, %w, %s) {group_size = 4 : i64} : (!kiln.tensor<["B", 3, 10], f32>, !kiln.tensor<[4, 10], i8>, !kiln.tensor<[4, 3], f32>) -> !kiln.tensor<["B", 3, 4], f32>
  return %0 : !kiln.tensor<["B", 3, 4], f32>
}

// kiln.matmul_integer: ui8 rows [..., M, K] times an i8 [K, N] with rank-0 zero points, summed in i32.
// CHECK-LABEL: func.func @matmul_integer
// CHECK: "kiln.matmul_integer"(%arg0, %arg1, %arg2, %arg3) : (!kiln.tensor<["B", 3, 10], ui8>, !kiln.tensor<[10, 4], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 3, 4], i32>
func.func @matmul_integer(%a: !kiln.tensor<["B", 3, 10], ui8>, %b: !kiln.tensor<[10, 4], i8>, %za: !kiln.tensor<[], ui8>, %zb: !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 3, 4], i32> {
  %0 = "kiln.matmul_integer"(%a, %b, %za, %zb) : (!kiln.tensor<["B", 3, 10], ui8>, !kiln.tensor<[10, 4], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 3, 4], i32>
  return %0 : !kiln.tensor<["B", 3, 4], i32>
}
