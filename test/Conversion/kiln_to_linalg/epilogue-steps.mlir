// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg | FileCheck %s

// Ops kiln-select-kernels marked as steps a library call applies after its
// product (kiln.epilogue: the role) keep their own loops, and every linalg
// op their lowering builds carries the role: kiln-cpu-library reads it and
// never a body.  The unmarked ReLU after them carries nothing.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @gemm_steps(
// CHECK: linalg.generic {{.*}} library_call = "native.gemm"
// CHECK: linalg.generic {{.*}} attrs = {kiln.call_part = "bias"}
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}} attrs = {kiln.call_part = "gelu"}
// CHECK: arith.maximumf
// CHECK: linalg.generic {{.*}} attrs = {kiln.call_part = "residual"}
// CHECK: arith.addf
// CHECK-NOT: kiln.epilogue
// CHECK: return
func.func @gemm_steps(%x: !kiln.tensor<["B", 16], f32>, %r: !kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<16x32xf32>} : () -> !kiln.tensor<[16, 32], f32>
  %b = "kiln.constant"() {value = dense<0.25> : tensor<32xf32>} : () -> !kiln.tensor<[32], f32>
  %m = "kiln.matmul"(%x, %w) {kiln.impl = "native.gemm"} : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %s = "kiln.add"(%m, %b) {kiln.epilogue = "bias", kiln.impl = "native.gemm"} : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<["B", 32], f32>
  %g = "kiln.gelu"(%s) {kiln.epilogue = "gelu", kiln.impl = "native.gemm"} : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %o = "kiln.add"(%r, %g) {kiln.epilogue = "residual", kiln.impl = "native.gemm"} : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %z = "kiln.relu"(%o) : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  return %z : !kiln.tensor<["B", 32], f32>
}

// -----

// A mean over the pixels: its zero fill, its sum and its division all carry
// the role.
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func @conv_mean(
// CHECK: library_call = "native.conv2d"
// CHECK: linalg.generic {{.*}} attrs = {kiln.call_part = "relu"}
// CHECK: linalg.fill {kiln.call_part = "mean"}
// CHECK: linalg.generic {{.*}} attrs = {kiln.call_part = "mean"}
// CHECK: linalg.generic {{.*}} attrs = {kiln.call_part = "mean"}
// CHECK: arith.divf
// CHECK: return
func.func @conv_mean(%x: !kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> !kiln.tensor<[4, 4, 3, 3], f32>
  %c = "kiln.conv2d"(%x, %w) {kiln.impl = "native.conv2d", pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 6, 6], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%c) {kiln.epilogue = "relu", kiln.impl = "native.conv2d"} : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %m = "kiln.reduce_mean"(%r) {axes = array<i64: 2, 3>, keepdims = true, kiln.epilogue = "mean", kiln.impl = "native.conv2d"} : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32>
  return %m : !kiln.tensor<["N", 4, 1, 1], f32>
}
