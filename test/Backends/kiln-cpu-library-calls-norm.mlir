// RUN: kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library-calls | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library-calls | FileCheck %s --check-prefix=GEN
// RUN: kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library-calls --kiln-cpu-library --kiln-cpu-to-llvm | FileCheck %s --check-prefix=LLVM

// Norms that kiln-select-kernels gave a library kernel (native.layer_norm,
// native.rms_norm) are one call of a helper generated from the entry's
// signature: rows = the product of the dims before the axis, N = of the
// rest, the pointers (0 for an absent weight or bias), epsilon, the pool's
// size.  No statistics loops, no row buffers.  Without the native runtime
// nothing is chosen and the generated chain stays (GEN).

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK: func.func private @kiln_layer_norm(i64, i64, i64, i64, i64, f32, i64, i32)
// CHECK-LABEL: func.func private @kiln_layer_norm_0(
// CHECK-SAME: %[[X:.*]]: memref<?x?x256xf32>, %[[W:.*]]: memref<256xf32>, %[[B:.*]]: memref<256xf32>, %[[Y:.*]]: memref<?x?x256xf32>)
// CHECK: %[[D0:.*]] = memref.dim %[[X]], %c0
// CHECK: %[[R0:.*]] = arith.muli %{{.*}}, %[[D0]] : index
// CHECK: %[[D1:.*]] = memref.dim %[[X]], %c1
// CHECK: %[[R1:.*]] = arith.muli %[[R0]], %[[D1]] : index
// CHECK: %[[ROWS:.*]] = arith.index_cast %[[R1]] : index to i64
// CHECK: %[[N:.*]] = arith.index_cast %{{.*}} : index to i64
// CHECK: %[[EPS:.*]] = arith.constant 9.99999974E-6 : f32
// CHECK: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK: call @kiln_layer_norm(%[[ROWS]], %[[N]], %{{.*}}, %{{.*}}, %{{.*}}, %[[EPS]], %{{.*}}, %[[THR]])
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.alloc
// CHECK: call @kiln_layer_norm_0(%arg0, %arg1, %arg2, %arg3)
// CHECK-NEXT: return

// GEN-NOT: kiln_layer_norm
// GEN-LABEL: func.func @main(
// GEN-COUNT-2: memref.alloc
// GEN: math.sqrt
func.func @main(%x: !kiln.tensor<["B", "L", 256], f32>, %w: !kiln.tensor<[256], f32>, %b: !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", "L", 256], f32> {
  %0 = "kiln.layer_norm"(%x, %w, %b) {axis = -1 : i64, epsilon = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["B", "L", 256], f32>, !kiln.tensor<[256], f32>, !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", "L", 256], f32>
  return %0 : !kiln.tensor<["B", "L", 256], f32>
}

// -----

// Over the last two dims, weight only (the bias pointer is 0): rows 4,
// N = 6 * 5 = 30.
// CHECK-LABEL: func.func private @kiln_layer_norm_0(
// CHECK-SAME: %[[X:.*]]: memref<4x6x5xf32>, %[[W:.*]]: memref<6x5xf32>, %[[Y:.*]]: memref<4x6x5xf32>)
// CHECK: %[[NO_B:.*]] = arith.constant 0 : i64
// CHECK: %[[EPS:.*]] = arith.constant 1.000000e-03 : f32
// CHECK: call @kiln_layer_norm(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[NO_B]], %[[EPS]], %{{.*}}, %{{.*}})
// CHECK-LABEL: func.func @weight_only(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_layer_norm_0(%arg0, %arg1, %arg2)
func.func @weight_only(%x: !kiln.tensor<[4, 6, 5], f32>, %w: !kiln.tensor<[6, 5], f32>) -> !kiln.tensor<[4, 6, 5], f32> {
  %0 = "kiln.layer_norm"(%x, %w) {axis = 1 : i64, epsilon = 1.000000e-03 : f64, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<[4, 6, 5], f32>, !kiln.tensor<[6, 5], f32>) -> !kiln.tensor<[4, 6, 5], f32>
  return %0 : !kiln.tensor<[4, 6, 5], f32>
}

// -----

// Not chosen: f64 (the native call is f32 only); the chain stays.
// CHECK-LABEL: func.func @f64(
// CHECK-NOT: kiln_layer_norm
// CHECK: math.sqrt
func.func @f64(%x: !kiln.tensor<[4, 8], f64>) -> !kiln.tensor<[4, 8], f64> {
  %0 = "kiln.layer_norm"(%x) {axis = -1 : i64, epsilon = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<[4, 8], f64>) -> !kiln.tensor<[4, 8], f64>
  return %0 : !kiln.tensor<[4, 8], f64>
}

// -----

// The norm of a column slice: bufferization gives the call a strided view,
// which the helper copies into a dense buffer for the C function (which
// reads dense rows) and frees after.  RMS norm's call: rows, N, x, weight,
// epsilon, y, threads.
// CHECK: func.func private @kiln_rms_norm(i64, i64, i64, i64, f32, i64, i32)
// CHECK-LABEL: func.func private @kiln_rms_norm_0(
// CHECK-SAME: %[[X:.*]]: memref<4x8xf32, strided<[16, 1], offset: 8>>, %[[W:.*]]: memref<8xf32>, %[[Y:.*]]: memref<4x8xf32>)
// CHECK: %[[D:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
// CHECK: linalg.copy ins(%[[X]] : memref<4x8xf32, strided<[16, 1], offset: 8>>) outs(%[[D]] : memref<4x8xf32>)
// CHECK: memref.extract_aligned_pointer_as_index %[[D]]
// CHECK: call @kiln_rms_norm(
// CHECK: memref.dealloc %[[D]]
// The copies are linalg.copy, lowered to loops (memref.copy of a strided
// view calls memrefCopy, a runtime function the JIT cannot resolve).
// LLVM-NOT: memrefCopy
// LLVM: llvm.call @kiln_rms_norm(
// CHECK-LABEL: func.func @sliced(
// CHECK: %[[V:.*]] = memref.subview %arg0
// CHECK: call @kiln_rms_norm_0(%[[V]], %arg1, %arg2)
// GEN-LABEL: func.func @sliced(
// GEN-NOT: kiln_rms_norm
func.func @sliced(%x: !kiln.tensor<[4, 16], f32>, %w: !kiln.tensor<[8], f32>) -> !kiln.tensor<[4, 8], f32> {
  %0 = "kiln.slice"(%x) {starts = array<i64: 8>, ends = array<i64: 16>, axes = array<i64: 1>, steps = array<i64: 1>} : (!kiln.tensor<[4, 16], f32>) -> !kiln.tensor<[4, 8], f32>
  %1 = "kiln.rms_norm"(%0, %w) {axis = -1 : i64, epsilon = 1.000000e-06 : f64, operandSegmentSizes = array<i32: 1, 1>} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<[4, 8], f32>
  return %1 : !kiln.tensor<[4, 8], f32>
}

