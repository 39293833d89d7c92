// RUN: kiln-opt %s --split-input-file --kiln-fold-constants | FileCheck %s
// kiln.update_slice of constants at a static offset folds (a mask written
// slice by slice); at a symbolic offset (a KV cache's P) it stays.

// CHECK-LABEL: func.func @static_offset
// CHECK-NEXT: %[[C:.*]] = "kiln.constant"() {value = dense<{{\[}}[0.000000e+00, 1.000000e+00, 1.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00, 1.000000e+00, 0.000000e+00]]> : tensor<2x4xf32>}
// CHECK-NEXT: return %[[C]]
func.func @static_offset() -> !kiln.tensor<[2, 4], f32> {
  %d = "kiln.constant"() {value = dense<0.0> : tensor<2x4xf32>} : () -> !kiln.tensor<[2, 4], f32>
  %u = "kiln.constant"() {value = dense<1.0> : tensor<2x2xf32>} : () -> !kiln.tensor<[2, 2], f32>
  %r = "kiln.update_slice"(%d, %u) {axis = 1 : i64, offset = [1]} : (!kiln.tensor<[2, 4], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<[2, 4], f32>
  return %r : !kiln.tensor<[2, 4], f32>
}

// -----

// CHECK-LABEL: func.func @symbolic_offset
// CHECK: "kiln.update_slice"
"kiln.symbol"() {sym_name = "P", min = 0 : i64, max = 2 : i64} : () -> ()
func.func @symbolic_offset(%p: !kiln.tensor<["P"], f32>) -> !kiln.tensor<[2, 4], f32> {
  %d = "kiln.constant"() {value = dense<0.0> : tensor<2x4xf32>} : () -> !kiln.tensor<[2, 4], f32>
  %u = "kiln.constant"() {value = dense<1.0> : tensor<2x2xf32>} : () -> !kiln.tensor<[2, 2], f32>
  %r = "kiln.update_slice"(%d, %u) {axis = 1 : i64, offset = ["P"]} : (!kiln.tensor<[2, 4], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<[2, 4], f32>
  return %r : !kiln.tensor<[2, 4], f32>
}
