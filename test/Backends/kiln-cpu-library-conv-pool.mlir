// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library | FileCheck %s

// A convolution + ReLU whose only reader is a mean over its pixels: one
// kiln_conv2d_mean call (ReLU 1, divisor OH * OW = 36) writes the [N, 4]
// result; the zero fill, the sum, the division and the convolution's own
// [N, 4, 6, 6] buffer are gone.
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK-SAME: %{{.*}}: memref<4x18xf32>, %{{.*}}: memref<?x2x6x6xf32>, %{{.*}}: memref<?x4xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: memref<4xf32>)
// CHECK: %[[RELU:.*]] = arith.constant 1 : i32
// CHECK: %[[DIV:.*]] = arith.constant 3.600000e+01 : f32
// CHECK: call @kiln_conv2d_mean({{.*}}, %[[RELU]], {{.*}}, %[[DIV]]) : ({{.*}}, f32) -> ()
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref<?x4x6x6xf32>
// CHECK: call @kiln_gemm_0({{.*}}, %arg0, %arg1, {{.*}}) : (memref<4x18xf32>, memref<?x2x6x6xf32>, memref<?x4xf32>, index, index, memref<4xf32>) -> ()
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @main(%x: !kiln.tensor<["N", 2, 6, 6], f32>) -> !kiln.tensor<["N", 4], f32> {
  %wc = "kiln.constant"() {value = dense<0.5> : tensor<4x2x3x3xf32>} : () -> !kiln.tensor<[4, 2, 3, 3], f32>
  %b = "kiln.constant"() {value = dense<[1.0, -1.0, 0.5, 0.0]> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %c = "kiln.conv2d"(%x, %wc, %b) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 2, 6, 6], f32>, !kiln.tensor<[4, 2, 3, 3], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%c) : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %m = "kiln.reduce_mean"(%r) {axes = array<i64: 2, 3>, keepdims = false} : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4], f32>
  return %m : !kiln.tensor<["N", 4], f32>
}

// -----

// keepdims (torch's adaptive average pool): the division writes the
// [N, 4, 1, 1] result out of a buffer of the sums; the call writes the
// result itself and that buffer goes too.
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK: call @kiln_conv2d_mean(
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.alloc(%{{.*}}) {{.*}} : memref<?x4x1x1xf32>
// CHECK: call @kiln_gemm_0({{.*}}, %arg0, %arg1, {{.*}}) : (memref<4x18xf32>, memref<?x2x6x6xf32>, memref<?x4x1x1xf32>, index, index, memref<4xf32>) -> ()
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @main(%x: !kiln.tensor<["N", 2, 6, 6], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32> {
  %wc = "kiln.constant"() {value = dense<0.5> : tensor<4x2x3x3xf32>} : () -> !kiln.tensor<[4, 2, 3, 3], f32>
  %b = "kiln.constant"() {value = dense<[1.0, -1.0, 0.5, 0.0]> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %c = "kiln.conv2d"(%x, %wc, %b) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 2, 6, 6], f32>, !kiln.tensor<[4, 2, 3, 3], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%c) : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %m = "kiln.reduce_mean"(%r) {axes = array<i64: 2, 3>, keepdims = true} : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32>
  return %m : !kiln.tensor<["N", 4, 1, 1], f32>
}

// -----

// A sum over the pixels, after a residual add and a ReLU (no division:
// divisor 1); the residual is the call's last argument.
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK-SAME: %[[RES:[^:]*]]: memref<?x4x6x6xf32>)
// CHECK: %[[RP:.*]] = memref.extract_aligned_pointer_as_index %[[RES]]
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: call @kiln_conv2d_mean({{.*}}, %[[ONE]]) :
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_gemm_0({{.*}}, %arg0, %arg1, {{.*}}, %arg0) :
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @main(%x: !kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4], f32> {
  %wc = "kiln.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> !kiln.tensor<[4, 4, 3, 3], f32>
  %b = "kiln.constant"() {value = dense<[1.0, -1.0, 0.5, 0.0]> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %c = "kiln.conv2d"(%x, %wc, %b) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 4, 6, 6], f32>, !kiln.tensor<[4, 4, 3, 3], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %a = "kiln.add"(%c, %x) : (!kiln.tensor<["N", 4, 6, 6], f32>, !kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%a) : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %m = "kiln.reduce_sum"(%r) {axes = array<i64: 2, 3>, keepdims = false} : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4], f32>
  return %m : !kiln.tensor<["N", 4], f32>
}

// -----

// Not fused: the ReLU's output is also a result of the function, so the
// call writes it (kiln_conv2d) and the mean stays generics reading it.
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK-NOT: kiln_conv2d_mean
// CHECK: call @kiln_conv2d(
// CHECK-LABEL: func.func @main(
// CHECK: call @kiln_gemm_0(
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK: arith.divf
func.func @main(%x: !kiln.tensor<["N", 2, 6, 6], f32>) -> (!kiln.tensor<["N", 4], f32>, !kiln.tensor<["N", 4, 6, 6], f32>) {
  %wc = "kiln.constant"() {value = dense<0.5> : tensor<4x2x3x3xf32>} : () -> !kiln.tensor<[4, 2, 3, 3], f32>
  %c = "kiln.conv2d"(%x, %wc) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 2, 6, 6], f32>, !kiln.tensor<[4, 2, 3, 3], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%c) : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %m = "kiln.reduce_mean"(%r) {axes = array<i64: 2, 3>, keepdims = false} : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4], f32>
  return %m, %r : !kiln.tensor<["N", 4], f32>, !kiln.tensor<["N", 4, 6, 6], f32>
}
