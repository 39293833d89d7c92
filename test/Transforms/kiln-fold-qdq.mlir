// RUN: kiln-opt %s --split-input-file --kiln-fold-qdq='force=true' | FileCheck %s

// kiln-fold-qdq: matmul(dequantize(a), dequantize(b)) -> cast(matmul_integer(a, b, za, zb)) * (sa * sb).
// (force=true: kiln.compile runs it only where the native int8 GEMM is loaded.)

// A QDQ nn.Linear: per-tensor activation, the [N, K] weight dequantized per
// row (axis 0, zero points all 0) and transposed: the integer product takes
// the transposed int8 weight, a rank-0 zero point 0, and one scale per column.
// CHECK-LABEL: func.func @linear
// CHECK: %[[S:.*]] = "kiln.constant"() {value = dense<5.000000e-02> : tensor<f32>}
// CHECK: %[[Z:.*]] = "kiln.constant"() {value = dense<3> : tensor<ui8>}
// CHECK: %[[Q:.*]] = "kiln.quantize"(%arg0, %[[S]], %[[Z]])
// CHECK: %[[WQ:.*]] = "kiln.constant"() {value = dense<7> : tensor<32x64xi8>}
// CHECK: %[[WS:.*]] = "kiln.constant"() {value = dense<{{.*}}> : tensor<32xf32>}
// CHECK: %[[ZB:.*]] = "kiln.constant"() {value = dense<0> : tensor<i8>} : () -> !kiln.tensor<[], i8>
// CHECK: %[[WT:.*]] = "kiln.transpose"(%[[WQ]]) {perm = array<i64: 1, 0>} : (!kiln.tensor<[32, 64], i8>) -> !kiln.tensor<[64, 32], i8>
// CHECK: %[[P:.*]] = "kiln.matmul_integer"(%[[Q]], %[[WT]], %[[Z]], %[[ZB]]) : (!kiln.tensor<["B", 64], ui8>, !kiln.tensor<[64, 32], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 32], i32>
// CHECK: %[[F:.*]] = "kiln.cast"(%[[P]]) : (!kiln.tensor<["B", 32], i32>) -> !kiln.tensor<["B", 32], f32>
// CHECK: %[[SC:.*]] = "kiln.mul"(%[[S]], %[[WS]]) : (!kiln.tensor<[], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<[32], f32>
// CHECK: %[[Y:.*]] = "kiln.mul"(%[[F]], %[[SC]])
// CHECK-NOT: "kiln.matmul"(
// CHECK: return %[[Y]]
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @linear(%x: !kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 32], f32> {
  %s = "kiln.constant"() {value = dense<0.05> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %z = "kiln.constant"() {value = dense<3> : tensor<ui8>} : () -> !kiln.tensor<[], ui8>
  %q = "kiln.quantize"(%x, %s, %z) : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<["B", 64], ui8>
  %a = "kiln.dequantize"(%q, %s, %z) : (!kiln.tensor<["B", 64], ui8>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<["B", 64], f32>
  %wq = "kiln.constant"() {value = dense<7> : tensor<32x64xi8>} : () -> !kiln.tensor<[32, 64], i8>
  %ws = "kiln.constant"() {value = dense<0.01> : tensor<32xf32>} : () -> !kiln.tensor<[32], f32>
  %wz = "kiln.constant"() {value = dense<0> : tensor<32xi8>} : () -> !kiln.tensor<[32], i8>
  %w = "kiln.dequantize"(%wq, %ws, %wz) {axis = 0 : i64} : (!kiln.tensor<[32, 64], i8>, !kiln.tensor<[32], f32>, !kiln.tensor<[32], i8>) -> !kiln.tensor<[32, 64], f32>
  %wt = "kiln.transpose"(%w) {perm = array<i64: 1, 0>} : (!kiln.tensor<[32, 64], f32>) -> !kiln.tensor<[64, 32], f32>
  %y = "kiln.matmul"(%a, %wt) : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  return %y : !kiln.tensor<["B", 32], f32>
}

// -----

// An ONNX QDQ MatMul: a 3-D activation, a [K, N] weight with per-tensor
// parameters (a one-element zero point reshaped to rank 0).
// CHECK-LABEL: func.func @matmul_per_tensor
// CHECK: %[[ZB:.*]] = "kiln.reshape"(%arg2) {shape = []} : (!kiln.tensor<[1], i8>) -> !kiln.tensor<[], i8>
// CHECK: %[[P:.*]] = "kiln.matmul_integer"(%arg0, %arg1, %{{.*}}, %[[ZB]]) : (!kiln.tensor<["B", 5, 16], ui8>, !kiln.tensor<[16, 8], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 5, 8], i32>
// CHECK: %[[SC:.*]] = "kiln.mul"(%{{.*}}, %{{.*}}) : (!kiln.tensor<[], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<[1], f32>
// CHECK: "kiln.mul"(%{{.*}}, %[[SC]]) : (!kiln.tensor<["B", 5, 8], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B", 5, 8], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @matmul_per_tensor(%aq: !kiln.tensor<["B", 5, 16], ui8>, %bq: !kiln.tensor<[16, 8], i8>, %zb: !kiln.tensor<[1], i8>) -> !kiln.tensor<["B", 5, 8], f32> {
  %s = "kiln.constant"() {value = dense<0.05> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %z = "kiln.constant"() {value = dense<3> : tensor<ui8>} : () -> !kiln.tensor<[], ui8>
  %sb = "kiln.constant"() {value = dense<0.02> : tensor<1xf32>} : () -> !kiln.tensor<[1], f32>
  %a = "kiln.dequantize"(%aq, %s, %z) : (!kiln.tensor<["B", 5, 16], ui8>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<["B", 5, 16], f32>
  %b = "kiln.dequantize"(%bq, %sb, %zb) : (!kiln.tensor<[16, 8], i8>, !kiln.tensor<[1], f32>, !kiln.tensor<[1], i8>) -> !kiln.tensor<[16, 8], f32>
  %y = "kiln.matmul"(%a, %b) : (!kiln.tensor<["B", 5, 16], f32>, !kiln.tensor<[16, 8], f32>) -> !kiln.tensor<["B", 5, 8], f32>
  return %y : !kiln.tensor<["B", 5, 8], f32>
}

// -----

// A PT2E nn.Linear: the per-channel zero points are an int64 constant cast
// to the weight's dtype (all 0): one rank-0 zero point.
// CHECK-LABEL: func.func @pt2e_cast_zero_points
// CHECK: %[[ZB:.*]] = "kiln.constant"() {value = dense<0> : tensor<i8>} : () -> !kiln.tensor<[], i8>
// CHECK: "kiln.matmul_integer"(%arg0, %{{.*}}, %{{.*}}, %[[ZB]])
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @pt2e_cast_zero_points(%aq: !kiln.tensor<["B", 16], ui8>, %wq: !kiln.tensor<[10, 16], i8>) -> !kiln.tensor<["B", 10], f32> {
  %s = "kiln.constant"() {value = dense<0.05> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %z = "kiln.constant"() {value = dense<3> : tensor<ui8>} : () -> !kiln.tensor<[], ui8>
  %a = "kiln.dequantize"(%aq, %s, %z) : (!kiln.tensor<["B", 16], ui8>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<["B", 16], f32>
  %ws = "kiln.constant"() {value = dense<0.01> : tensor<10xf32>} : () -> !kiln.tensor<[10], f32>
  %wz64 = "kiln.constant"() {value = dense<0> : tensor<10xi64>} : () -> !kiln.tensor<[10], i64>
  %wz = "kiln.cast"(%wz64) : (!kiln.tensor<[10], i64>) -> !kiln.tensor<[10], i8>
  %w = "kiln.dequantize"(%wq, %ws, %wz) {axis = 0 : i64} : (!kiln.tensor<[10, 16], i8>, !kiln.tensor<[10], f32>, !kiln.tensor<[10], i8>) -> !kiln.tensor<[10, 16], f32>
  %wt = "kiln.transpose"(%w) {perm = array<i64: 1, 0>} : (!kiln.tensor<[10, 16], f32>) -> !kiln.tensor<[16, 10], f32>
  %y = "kiln.matmul"(%a, %wt) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 10], f32>) -> !kiln.tensor<["B", 10], f32>
  return %y : !kiln.tensor<["B", 10], f32>
}

// -----

// Left alone: a weight whose zero points differ per column (not one
// integer product), a per-row scale on a [K, N] weight (per K: not a scale
// of the product's columns), a per-axis activation, one operand float.
// CHECK-LABEL: func.func @near_misses
// CHECK-NOT: matmul_integer
// CHECK-COUNT-4: "kiln.matmul"(
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @near_misses(%aq: !kiln.tensor<["B", 4], ui8>, %bq: !kiln.tensor<[4, 2], i8>, %x: !kiln.tensor<["B", 4], f32>) -> (!kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], f32>) {
  %s = "kiln.constant"() {value = dense<0.05> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %z = "kiln.constant"() {value = dense<3> : tensor<ui8>} : () -> !kiln.tensor<[], ui8>
  %a = "kiln.dequantize"(%aq, %s, %z) : (!kiln.tensor<["B", 4], ui8>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<["B", 4], f32>
  %s2 = "kiln.constant"() {value = dense<[0.1, 0.2]> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  %z2 = "kiln.constant"() {value = dense<[0, 1]> : tensor<2xi8>} : () -> !kiln.tensor<[2], i8>
  %b1 = "kiln.dequantize"(%bq, %s2, %z2) {axis = 1 : i64} : (!kiln.tensor<[4, 2], i8>, !kiln.tensor<[2], f32>, !kiln.tensor<[2], i8>) -> !kiln.tensor<[4, 2], f32>
  %y1 = "kiln.matmul"(%a, %b1) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  %s4 = "kiln.constant"() {value = dense<0.1> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %z4 = "kiln.constant"() {value = dense<0> : tensor<4xi8>} : () -> !kiln.tensor<[4], i8>
  %b2 = "kiln.dequantize"(%bq, %s4, %z4) {axis = 0 : i64} : (!kiln.tensor<[4, 2], i8>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], i8>) -> !kiln.tensor<[4, 2], f32>
  %y2 = "kiln.matmul"(%a, %b2) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  %sa = "kiln.constant"() {value = dense<0.1> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %za = "kiln.constant"() {value = dense<0> : tensor<4xui8>} : () -> !kiln.tensor<[4], ui8>
  %a3 = "kiln.dequantize"(%aq, %sa, %za) {axis = 1 : i64} : (!kiln.tensor<["B", 4], ui8>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], ui8>) -> !kiln.tensor<["B", 4], f32>
  %y3 = "kiln.matmul"(%a3, %b2) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  %y4 = "kiln.matmul"(%x, %b1) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  return %y1, %y2, %y3, %y4 : !kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], f32>
}
