// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library | FileCheck %s

// A convolution whose only reader is a ReLU: kiln_conv2d applies the ReLU
// (relu = 1) and writes the ReLU's output (here the function's result)
// directly; the ReLU generic and the convolution's own buffer are gone.

"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK-SAME: %{{.*}}: memref<4x18xf32>, %{{.*}}: memref<?x2x6x6xf32>, %{{.*}}: memref<?x4x6x6xf32>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: memref<4xf32>)
// CHECK: %[[RELU:.*]] = arith.constant 1 : i32
// CHECK: call @kiln_conv2d({{.*}}, %[[RELU]], {{.*}})
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.alloc(%{{.*}}) {{.*}} : memref<?x4x6x6xf32>
// CHECK: call @kiln_gemm_0({{.*}}, %arg0, %arg1, {{.*}}) : (memref<4x18xf32>, memref<?x2x6x6xf32>, memref<?x4x6x6xf32>, index, index, memref<4xf32>) -> ()
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @main(%x: !kiln.tensor<["N", 2, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32> {
  %wc = "kiln.constant"() {value = dense<0.5> : tensor<4x2x3x3xf32>} : () -> !kiln.tensor<[4, 2, 3, 3], f32>
  %b = "kiln.constant"() {value = dense<[1.0, -1.0, 0.5, 0.0]> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %c = "kiln.conv2d"(%x, %wc, %b) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 2, 6, 6], f32>, !kiln.tensor<[4, 2, 3, 3], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%c) : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  return %r : !kiln.tensor<["N", 4, 6, 6], f32>
}

// -----

// Not fused: the convolution's result is also a result of the function, so
// the ReLU stays a generic reading it (relu = 0 in the call).
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK: %[[NORELU:.*]] = arith.constant 0 : i32
// CHECK: call @kiln_conv2d({{.*}}, %[[NORELU]], {{.*}})
// CHECK-LABEL: func.func @main(
// CHECK: call @kiln_gemm_0(
// CHECK: linalg.generic
// CHECK: arith.cmpf olt
func.func @main(%x: !kiln.tensor<["N", 2, 6, 6], f32>) -> (!kiln.tensor<["N", 4, 6, 6], f32>, !kiln.tensor<["N", 4, 6, 6], f32>) {
  %wc = "kiln.constant"() {value = dense<0.5> : tensor<4x2x3x3xf32>} : () -> !kiln.tensor<[4, 2, 3, 3], f32>
  %c = "kiln.conv2d"(%x, %wc) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 2, 6, 6], f32>, !kiln.tensor<[4, 2, 3, 3], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%c) : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  return %r, %c : !kiln.tensor<["N", 4, 6, 6], f32>, !kiln.tensor<["N", 4, 6, 6], f32>
}

// -----

// A ResNet block's tail, conv + residual add + ReLU: the call adds the
// residual (the block's input, its last argument) and applies the ReLU,
// writing the function's result; no generic is left.
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK-SAME: %{{.*}}: memref<4xf32>, %[[RES:.*]]: memref<?x4x6x6xf32>)
// CHECK: %[[RELU:.*]] = arith.constant 1 : i32
// CHECK: %[[RP:.*]] = memref.extract_aligned_pointer_as_index %[[RES]]
// CHECK: %[[R:.*]] = arith.index_cast %[[RP]] : index to i64
// CHECK: call @kiln_conv2d({{.*}}, %[[R]], %{{.*}}, %[[RELU]], {{.*}})
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_gemm_0({{.*}}, %arg0, %arg1, {{.*}}, %arg0) :
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @main(%x: !kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32> {
  %wc = "kiln.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> !kiln.tensor<[4, 4, 3, 3], f32>
  %b = "kiln.constant"() {value = dense<[1.0, -1.0, 0.5, 0.0]> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %c = "kiln.conv2d"(%x, %wc, %b) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 4, 6, 6], f32>, !kiln.tensor<[4, 4, 3, 3], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %a = "kiln.add"(%c, %x) : (!kiln.tensor<["N", 4, 6, 6], f32>, !kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%a) : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  return %r : !kiln.tensor<["N", 4, 6, 6], f32>
}

// -----

// No activation: the function's result was copied out of the convolution's
// own buffer (the product went through reshapes, so bufferization could not
// place it in the result); the call writes the result and the copy is gone.
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK: %[[NORELU:.*]] = arith.constant 0 : i32
// CHECK: call @kiln_conv2d({{.*}}, %[[NORELU]], {{.*}})
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.alloc(%{{.*}}) {{.*}} : memref<?x4x6x6xf32>
// CHECK: call @kiln_gemm_0({{.*}}, %arg0, %arg1, {{.*}}) : (memref<4x18xf32>, memref<?x2x6x6xf32>, memref<?x4x6x6xf32>, index, index, memref<4xf32>) -> ()
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @main(%x: !kiln.tensor<["N", 2, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32> {
  %wc = "kiln.constant"() {value = dense<0.5> : tensor<4x2x3x3xf32>} : () -> !kiln.tensor<[4, 2, 3, 3], f32>
  %b = "kiln.constant"() {value = dense<[1.0, -1.0, 0.5, 0.0]> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %c = "kiln.conv2d"(%x, %wc, %b) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 2, 6, 6], f32>, !kiln.tensor<[4, 2, 3, 3], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  return %c : !kiln.tensor<["N", 4, 6, 6], f32>
}

// -----

// The same at a static batch of 1, whose copy loads at a constant 0 for the
// batch index: a 1x1 convolution without bias writes the result directly.
// CHECK-LABEL: func.func @main(
// CHECK-NOT: memref.alloc
// CHECK: call @kiln_gemm_0(%{{.*}}, %arg0, %arg1, %{{.*}}, %{{.*}}) : (memref<16x8xf32>, memref<1x8x5x5xf32>, memref<1x16x5x5xf32>, index, index) -> ()
// CHECK-NEXT: return
func.func @main(%x: !kiln.tensor<[1, 8, 5, 5], f32>) -> !kiln.tensor<[1, 16, 5, 5], f32> {
  %wc = "kiln.constant"() {value = dense<0.5> : tensor<16x8x1x1xf32>} : () -> !kiln.tensor<[16, 8, 1, 1], f32>
  %c = "kiln.conv2d"(%x, %wc) {operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<[1, 8, 5, 5], f32>, !kiln.tensor<[16, 8, 1, 1], f32>) -> !kiln.tensor<[1, 16, 5, 5], f32>
  return %c : !kiln.tensor<[1, 16, 5, 5], f32>
}
