// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library | FileCheck %s

// Two convolutions (kiln-fuse's conv_pair group, here one function): the
// first + bias + ReLU writes a local buffer that only the second (stride 2,
// no bias, ReLU, mean over its 4 x 4 pixels) reads through its padding.
// One kiln_conv2d_pair call takes both: the geometry of each (3x3, strides
// 1 and 2, padding 1 and 1), the first's bias, no second bias (0), both
// ReLUs, the divisor 16; the helpers of the two single calls, the buffer
// between them and the padded copy are gone.
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-NOT: func.func private @kiln_gemm_
// CHECK-LABEL: func.func private @kiln_conv_pair_0(
// CHECK-SAME: %[[W1:[^:]*]]: memref<32x27xf32>, %[[X:[^:]*]]: memref<?x3x8x8xf32>, %[[W2:[^:]*]]: memref<32x288xf32>, %[[Y:[^:]*]]: memref<?x32xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %[[B1:[^:]*]]: memref<32xf32>)
// CHECK-DAG: %[[DIV:.*]] = arith.constant 1.600000e+01 : f32
// CHECK-DAG: %[[QB1:.*]] = memref.extract_aligned_pointer_as_index %[[B1]]
// CHECK-DAG: %[[PB1:.*]] = arith.index_cast %[[QB1]] : index to i64
// CHECK-DAG: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// The second's strides and padding, X, W1, the first's bias, its ReLU, W2,
// no second bias, its ReLU, ..., the divisor:
// CHECK: call @kiln_conv2d_pair(
// CHECK-SAME: %c2_i64{{[_0-9]*}}, %c2_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}}, %c1_i64{{[_0-9]*}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[PB1]], %c1_i32{{[_0-9]*}}, %{{[0-9]+}}, %c0_i64{{[_0-9]*}}, %c1_i32{{[_0-9]*}},
// CHECK-SAME: %[[THR]], %{{.*}}, %{{.*}}, %[[DIV]]) :
// CHECK-NOT: func.func private @kiln_gemm_
// CHECK-LABEL: func.func @main(
// CHECK-NOT: memref<?x32x8x8xf32>
// CHECK-NOT: memref<?x32x10x10xf32>
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_conv_pair_0({{.*}}, %arg0, {{.*}}, %arg1, {{.*}}) :
// CHECK-NOT: call @kiln_gemm_
// CHECK: return
func.func @main(%x: !kiln.tensor<["N", 3, 8, 8], f32>) -> !kiln.tensor<["N", 32], f32> {
  %w1 = "kiln.constant"() {value = dense<0.1> : tensor<32x3x3x3xf32>} : () -> !kiln.tensor<[32, 3, 3, 3], f32>
  %b1 = "kiln.constant"() {value = dense<0.5> : tensor<32xf32>} : () -> !kiln.tensor<[32], f32>
  %w2 = "kiln.constant"() {value = dense<-0.02> : tensor<32x32x3x3xf32>} : () -> !kiln.tensor<[32, 32, 3, 3], f32>
  %c1 = "kiln.conv2d"(%x, %w1, %b1) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 3, 8, 8], f32>, !kiln.tensor<[32, 3, 3, 3], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<["N", 32, 8, 8], f32>
  %r1 = "kiln.relu"(%c1) : (!kiln.tensor<["N", 32, 8, 8], f32>) -> !kiln.tensor<["N", 32, 8, 8], f32>
  %c2 = "kiln.conv2d"(%r1, %w2) {pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 32, 8, 8], f32>, !kiln.tensor<[32, 32, 3, 3], f32>) -> !kiln.tensor<["N", 32, 4, 4], f32>
  %r2 = "kiln.relu"(%c2) : (!kiln.tensor<["N", 32, 4, 4], f32>) -> !kiln.tensor<["N", 32, 4, 4], f32>
  %m = "kiln.reduce_mean"(%r2) {axes = array<i64: 2, 3>, keepdims = false} : (!kiln.tensor<["N", 32, 4, 4], f32>) -> !kiln.tensor<["N", 32], f32>
  return %m : !kiln.tensor<["N", 32], f32>
}

// -----

// Not paired: the first convolution's output is also a result, so it is
// written (kiln_conv2d) and the second reads it (kiln_conv2d_mean).
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-NOT: kiln_conv_pair
// CHECK: call @kiln_conv2d(
// CHECK: call @kiln_conv2d_mean(
// CHECK-LABEL: func.func @main(
// CHECK: call @kiln_gemm_0(
// CHECK: call @kiln_gemm_1(
// CHECK-NOT: kiln_conv_pair
func.func @main(%x: !kiln.tensor<["N", 3, 8, 8], f32>) -> (!kiln.tensor<["N", 32], f32>, !kiln.tensor<["N", 32, 8, 8], f32>) {
  %w1 = "kiln.constant"() {value = dense<0.1> : tensor<32x3x3x3xf32>} : () -> !kiln.tensor<[32, 3, 3, 3], f32>
  %w2 = "kiln.constant"() {value = dense<-0.02> : tensor<32x32x3x3xf32>} : () -> !kiln.tensor<[32, 32, 3, 3], f32>
  %c1 = "kiln.conv2d"(%x, %w1) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 3, 8, 8], f32>, !kiln.tensor<[32, 3, 3, 3], f32>) -> !kiln.tensor<["N", 32, 8, 8], f32>
  %r1 = "kiln.relu"(%c1) : (!kiln.tensor<["N", 32, 8, 8], f32>) -> !kiln.tensor<["N", 32, 8, 8], f32>
  %c2 = "kiln.conv2d"(%r1, %w2) {pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 32, 8, 8], f32>, !kiln.tensor<[32, 32, 3, 3], f32>) -> !kiln.tensor<["N", 32, 4, 4], f32>
  %r2 = "kiln.relu"(%c2) : (!kiln.tensor<["N", 32, 4, 4], f32>) -> !kiln.tensor<["N", 32, 4, 4], f32>
  %m = "kiln.reduce_mean"(%r2) {axes = array<i64: 2, 3>, keepdims = false} : (!kiln.tensor<["N", 32, 4, 4], f32>) -> !kiln.tensor<["N", 32], f32>
  return %m, %r1 : !kiln.tensor<["N", 32], f32>, !kiln.tensor<["N", 32, 8, 8], f32>
}
