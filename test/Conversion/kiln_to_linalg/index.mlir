// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s

// Index-producing ops: kiln.range (a symbolic length) and kiln.gather_elements.

"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()

// The length L is read from the argument that names it; values are start + i*step.
// CHECK-LABEL: func.func @range$symbolic_length(
// CHECK: %[[L:.*]] = tensor.dim %arg0, %c0
// CHECK: tensor.empty(%[[L]]) : tensor<?xi64>
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]
// CHECK: %[[I:.*]] = linalg.index 0 : index
// CHECK: %[[I64:.*]] = arith.index_cast %[[I]] : index to i64
// CHECK: %[[M:.*]] = arith.muli %[[I64]], %c3_i64 : i64
// CHECK: arith.addi %[[M]], %c2_i64 : i64
func.func @range$symbolic_length(%x: !kiln.tensor<["L"], f32>) -> !kiln.tensor<["L"], i64> {
  %0 = "kiln.range"() {shape = ["L"], start = 2.0 : f64, step = 3.0 : f64} : () -> !kiln.tensor<["L"], i64>
  return %0 : !kiln.tensor<["L"], i64>
}

// Indices are wrapped (negative) and clamped to the axis, then read with tensor.extract.
// CHECK-LABEL: func.func @gather_elements$axis1(
// CHECK: ins(%arg1 : tensor<4x?xi64>) outs(%{{.*}} : tensor<4x?xf32>)
// CHECK: arith.minsi %{{.*}}, %c127 : index
// CHECK: %[[ROW:.*]] = linalg.index 0 : index
// CHECK: tensor.extract %arg0[%[[ROW]], %{{.*}}] : tensor<4x128xf32>
func.func @gather_elements$axis1(%d: !kiln.tensor<[4, 128], f32>, %i: !kiln.tensor<[4, "L"], i64>) -> !kiln.tensor<[4, "L"], f32> {
  %0 = "kiln.gather_elements"(%d, %i) {axis = 1 : i64} : (!kiln.tensor<[4, 128], f32>, !kiln.tensor<[4, "L"], i64>) -> !kiln.tensor<[4, "L"], f32>
  return %0 : !kiln.tensor<[4, "L"], f32>
}
