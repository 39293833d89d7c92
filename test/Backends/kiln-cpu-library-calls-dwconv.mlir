// RUN: kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library-calls | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library-calls | FileCheck %s --check-prefix=GEN

// MobileNetV2's stride-2 depthwise 3x3, chosen for native.conv2d_depthwise by
// kiln-select-kernels: one kiln_dwconv2d call with the planes (B * 96), the
// channels, the input and output sizes, the window, strides, dilations, the
// top / left pads, the input, weight and bias, no ReLU; no padded copy and no
// bias init.  Without the native runtime the padding, init and window
// generics stay.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK: func.func private @kiln_dwconv2d(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i32)
// CHECK-LABEL: func.func private @kiln_dwconv2d_0(
// CHECK-SAME: %[[X:.*]]: memref<?x96x112x112xf32>, %[[W:.*]]: memref<96x1x3x3xf32>, %[[B:.*]]: memref<96xf32>, %[[Y:.*]]: memref<?x96x56x56xf32>)
// CHECK: %[[N:.*]] = memref.dim %[[X]], %c0
// CHECK: %[[NC:.*]] = arith.muli %{{.*}}, %c96 : index
// CHECK: %[[PLANES:.*]] = arith.index_cast %[[NC]] : index to i64
// CHECK: %[[S:.*]] = arith.constant 2 : i64
// CHECK: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK: call @kiln_dwconv2d(%[[PLANES]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[S]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %c0_i64, %{{.*}}, %[[THR]])
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.alloc
// CHECK: call @kiln_dwconv2d_0(%arg0, %arg1, %arg2, %arg3)
// CHECK-NEXT: return

// GEN-NOT: kiln_dwconv2d
// GEN-LABEL: func.func @main(
// GEN: linalg.generic
func.func @main(%x: !kiln.tensor<["B", 96, 112, 112], f32>, %w: !kiln.tensor<[96, 1, 3, 3], f32>, %b: !kiln.tensor<[96], f32>) -> !kiln.tensor<["B", 96, 56, 56], f32> {
  %r = "kiln.conv2d"(%x, %w, %b) {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, groups = 96 : i64, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["B", 96, 112, 112], f32>, !kiln.tensor<[96, 1, 3, 3], f32>, !kiln.tensor<[96], f32>) -> !kiln.tensor<["B", 96, 56, 56], f32>
  return %r : !kiln.tensor<["B", 96, 56, 56], f32>
}

// -----

// Without a bias the bias pointer is 0; a channel multiplier of 2 (96 -> 192
// channels, groups 96) and a bf16 depthwise one are not taken.
// CHECK-LABEL: func.func private @kiln_dwconv2d_0(
// CHECK-SAME: memref<1x8x9x9xf32>, %{{.*}}: memref<8x1x5x5xf32>, %{{.*}}: memref<1x8x5x5xf32>)
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i64
// CHECK: call @kiln_dwconv2d({{.*}}, %[[ZERO]], %{{.*}}, %{{.*}})
// CHECK-LABEL: func.func @others(
// CHECK: call @kiln_dwconv2d_0(%arg0, %arg1, %{{.*}})
// CHECK-COUNT-2: linalg.generic
// CHECK-NOT: kiln_dwconv2d
// CHECK: return
func.func @others(%x: !kiln.tensor<[1, 8, 9, 9], f32>, %w: !kiln.tensor<[8, 1, 5, 5], f32>, %m: !kiln.tensor<[16, 1, 3, 3], f32>, %h: !kiln.tensor<[1, 8, 9, 9], bf16>, %hw: !kiln.tensor<[8, 1, 3, 3], bf16>)
    -> (!kiln.tensor<[1, 8, 5, 5], f32>, !kiln.tensor<[1, 16, 7, 7], f32>, !kiln.tensor<[1, 8, 7, 7], bf16>) {
  %a = "kiln.conv2d"(%x, %w) {groups = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<[1, 8, 9, 9], f32>, !kiln.tensor<[8, 1, 5, 5], f32>) -> !kiln.tensor<[1, 8, 5, 5], f32>
  %b = "kiln.conv2d"(%x, %m) {groups = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<[1, 8, 9, 9], f32>, !kiln.tensor<[16, 1, 3, 3], f32>) -> !kiln.tensor<[1, 16, 7, 7], f32>
  %c = "kiln.conv2d"(%h, %hw) {groups = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<[1, 8, 9, 9], bf16>, !kiln.tensor<[8, 1, 3, 3], bf16>) -> !kiln.tensor<[1, 8, 7, 7], bf16>
  return %a, %b, %c : !kiln.tensor<[1, 8, 5, 5], f32>, !kiln.tensor<[1, 16, 7, 7], f32>, !kiln.tensor<[1, 8, 7, 7], bf16>
}

// -----

// A weight whose window width is a symbol is left to the generated
// convolution (the selection read its static value and failed the pass).
"kiln.symbol"() {sym_name = "K", min = 1 : i64, max = 5 : i64} : () -> ()
// CHECK-LABEL: func.func @symbolic_window(
// CHECK-NOT: kiln_dwconv2d
// CHECK: return
func.func @symbolic_window(%x: !kiln.tensor<[1, 8, 9, 9], f32>, %w: !kiln.tensor<[8, 1, 3, "K"], f32>) -> !kiln.tensor<[1, 8, 7, "10-K"], f32> {
  %a = "kiln.conv2d"(%x, %w) {groups = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<[1, 8, 9, 9], f32>, !kiln.tensor<[8, 1, 3, "K"], f32>) -> !kiln.tensor<[1, 8, 7, "10-K"], f32>
  return %a : !kiln.tensor<[1, 8, 7, "10-K"], f32>
}
