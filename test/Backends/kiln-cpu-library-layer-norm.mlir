// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library | FileCheck %s --check-prefix=GEN

// A layer norm over the last dim with weight and bias: its lowered chain
// (sum, mean, centred squares, inverse deviation, normalize) becomes one
// kiln_layer_norm call with rows = B * L, N = 256, both pointers and
// epsilon; the row buffers and their passes are gone.  Without the native
// runtime the chain stays.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK: func.func private @kiln_layer_norm(i64, i64, i64, i64, i64, f32, i64, i32)
// CHECK-LABEL: func.func private @kiln_layer_norm_0(
// CHECK-SAME: %[[X:.*]]: memref<?x?x256xf32>, %[[W:.*]]: memref<256xf32>, %[[B:.*]]: memref<256xf32>, %[[Y:.*]]: memref<?x?x256xf32>)
// CHECK-DAG: %[[D0:.*]] = memref.dim %[[X]], %c0
// CHECK-DAG: %[[D1:.*]] = memref.dim %[[X]], %c1
// CHECK: %[[R0:.*]] = arith.muli %{{.*}}, %[[D0]] : index
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
// GEN: kiln.layer_norm = {bias = true, epsilon = 1.000000e-05 : f64, weight = true}
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

// Not matched: f64 (the native call is f32 only); the chain stays.
// CHECK-LABEL: func.func @f64(
// CHECK-NOT: kiln_layer_norm
// CHECK: math.sqrt
func.func @f64(%x: !kiln.tensor<[4, 8], f64>) -> !kiln.tensor<[4, 8], f64> {
  %0 = "kiln.layer_norm"(%x) {axis = -1 : i64, epsilon = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<[4, 8], f64>) -> !kiln.tensor<[4, 8], f64>
  return %0 : !kiln.tensor<[4, 8], f64>
}
