// RUN: kiln-opt %s --split-input-file --kiln-decompose | FileCheck %s

// kiln-decompose of kiln.rms_norm (in f32 for bf16) and of grouped-query
// attention (k / v heads repeated in a row before the matmuls).
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @rms_norm
// CHECK: %[[SQ:.*]] = "kiln.mul"(%arg0, %arg0)
// CHECK: %[[MS:.*]] = "kiln.reduce_mean"(%[[SQ]]) {axes = array<i64: 1>, keepdims = true}
// CHECK: %[[A:.*]] = "kiln.add"(%[[MS]], %{{.*}})
// CHECK: %[[I:.*]] = "kiln.rsqrt"(%[[A]])
// CHECK: %[[N:.*]] = "kiln.mul"(%arg0, %[[I]])
// CHECK: %[[Y:.*]] = "kiln.mul"(%[[N]], %arg1)
// CHECK: return %[[Y]]
func.func @rms_norm(%x: !kiln.tensor<["B", 8], f32>, %g: !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", 8], f32> {
  %0 = "kiln.rms_norm"(%x, %g) {epsilon = 1.0e-06 : f64, operandSegmentSizes = array<i32: 1, 1>} : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", 8], f32>
  return %0 : !kiln.tensor<["B", 8], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @rms_norm_bf16
// CHECK: "kiln.cast"(%arg0) {{.*}} -> !kiln.tensor<["B", 8], f32>
// CHECK: "kiln.rsqrt"
// CHECK: %[[C:.*]] = "kiln.cast"(%{{.*}}) {{.*}} -> !kiln.tensor<["B", 8], bf16>
// CHECK: "kiln.mul"(%[[C]], %arg1)
func.func @rms_norm_bf16(%x: !kiln.tensor<["B", 8], bf16>, %g: !kiln.tensor<[8], bf16>) -> !kiln.tensor<["B", 8], bf16> {
  %0 = "kiln.rms_norm"(%x, %g) {epsilon = 1.0e-06 : f64, operandSegmentSizes = array<i32: 1, 1>} : (!kiln.tensor<["B", 8], bf16>, !kiln.tensor<[8], bf16>) -> !kiln.tensor<["B", 8], bf16>
  return %0 : !kiln.tensor<["B", 8], bf16>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @gqa
// CHECK: %[[K1:.*]] = "kiln.reshape"(%arg1) {shape = ["B", 2, 1, 4, 16]}
// CHECK: %[[K2:.*]] = "kiln.expand"(%[[K1]]) {shape = ["B", 2, 4, 4, 16]}
// CHECK: %[[K3:.*]] = "kiln.reshape"(%[[K2]]) {shape = ["B", 8, 4, 16]}
// CHECK: "kiln.transpose"(%[[K3]])
func.func @gqa(%q: !kiln.tensor<["B", 8, 4, 16], f32>, %k: !kiln.tensor<["B", 2, 4, 16], f32>) -> !kiln.tensor<["B", 8, 4, 16], f32> {
  %0 = "kiln.attention"(%q, %k, %k) {operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 8, 4, 16], f32>, !kiln.tensor<["B", 2, 4, 16], f32>, !kiln.tensor<["B", 2, 4, 16], f32>) -> !kiln.tensor<["B", 8, 4, 16], f32>
  return %0 : !kiln.tensor<["B", 8, 4, 16], f32>
}
