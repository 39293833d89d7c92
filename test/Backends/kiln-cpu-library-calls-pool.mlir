// RUN: kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library-calls | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library-calls | FileCheck %s --check-prefix=GEN

// ResNet-50's max pool (3x3, stride 2, pad 1), chosen for native.max_pool2d
// by kiln-select-kernels: one kiln_maxpool2d call with the planes (B * 64),
// the input and output sizes, the window, strides, dilations and the top /
// left pads; no padded copy.  Without the native runtime the padding and
// window generics stay.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK: func.func private @kiln_maxpool2d(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i32)
// CHECK-LABEL: func.func private @kiln_maxpool2d_0(
// CHECK-SAME: %[[X:.*]]: memref<?x64x112x112xf32>, %[[Y:.*]]: memref<?x64x56x56xf32>)
// CHECK: %[[N:.*]] = memref.dim %[[X]], %c0
// CHECK: %[[NC:.*]] = arith.muli %{{.*}}, %c64 : index
// CHECK: %[[PLANES:.*]] = arith.index_cast %[[NC]] : index to i64
// CHECK: %[[K:.*]] = arith.constant 3 : i64
// CHECK: %[[S:.*]] = arith.constant 2 : i64
// CHECK: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK: call @kiln_maxpool2d(%[[PLANES]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[K]], %{{.*}}, %[[S]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[THR]])
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.alloc
// CHECK: call @kiln_maxpool2d_0(%arg0, %arg1)
// CHECK-NEXT: return

// GEN-NOT: kiln_maxpool
// GEN-LABEL: func.func @main(
// GEN-COUNT-2: linalg.generic
func.func @main(%x: !kiln.tensor<["B", 64, 112, 112], f32>) -> !kiln.tensor<["B", 64, 56, 56], f32> {
  %r = "kiln.max_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, ceil_mode = false} : (!kiln.tensor<["B", 64, 112, 112], f32>) -> !kiln.tensor<["B", 64, 56, 56], f32>
  return %r : !kiln.tensor<["B", 64, 56, 56], f32>
}

// -----

// Without padding the native call too; with ceil_mode (a second, computed
// pad) nothing is chosen and the generics stay.
// CHECK-LABEL: func.func @unpadded_and_ceil(
// CHECK: call @kiln_maxpool2d_0(%arg0, %{{.*}})
// CHECK: linalg.generic
// CHECK-NOT: kiln_maxpool2d
// CHECK: return
func.func @unpadded_and_ceil(%x: !kiln.tensor<[1, 4, 9, 9], f32>) -> (!kiln.tensor<[1, 4, 4, 4], f32>, !kiln.tensor<[1, 4, 5, 5], f32>) {
  %a = "kiln.max_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = false} : (!kiln.tensor<[1, 4, 9, 9], f32>) -> !kiln.tensor<[1, 4, 4, 4], f32>
  %b = "kiln.max_pool2d"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = true} : (!kiln.tensor<[1, 4, 9, 9], f32>) -> !kiln.tensor<[1, 4, 5, 5], f32>
  return %a, %b : !kiln.tensor<[1, 4, 4, 4], f32>, !kiln.tensor<[1, 4, 5, 5], f32>
}
