// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s

// kiln.cumsum is a sequential scan: scf.for loops over the other dims, the
// innermost along the axis carrying the running sum and inserting each partial sum.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()

// CHECK-LABEL: func.func @cumsum$i64_axis1(
// CHECK-DAG: %[[Z:.*]] = arith.constant 0 : i64
// CHECK-DAG: %[[B:.*]] = tensor.dim %arg0, %c0 : tensor<?x?xi64>
// CHECK-DAG: %[[L:.*]] = tensor.dim %arg0, %c1 : tensor<?x?xi64>
// CHECK: %[[E:.*]] = tensor.empty(%[[B]], %[[L]]) : tensor<?x?xi64>
// CHECK: scf.for %[[I:.*]] = %c0 to %[[B]] step %c1 iter_args(%[[T:.*]] = %[[E]]) -> (tensor<?x?xi64>)
// CHECK: scf.for %[[J:.*]] = %c0 to %[[L]] step %c1 iter_args(%[[D:.*]] = %[[T]], %[[S:.*]] = %[[Z]]) -> (tensor<?x?xi64>, i64)
// CHECK: %[[X:.*]] = tensor.extract %arg0[%[[I]], %[[J]]] : tensor<?x?xi64>
// CHECK: %[[N:.*]] = arith.addi %[[S]], %[[X]] : i64
// CHECK: %[[W:.*]] = tensor.insert %[[N]] into %[[D]][%[[I]], %[[J]]] : tensor<?x?xi64>
// CHECK: scf.yield %[[W]], %[[N]] : tensor<?x?xi64>, i64
func.func @cumsum$i64_axis1(%m: !kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L"], i64> {
  %0 = "kiln.cumsum"(%m) {axis = 1 : i64} : (!kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L"], i64>
  return %0 : !kiln.tensor<["B", "L"], i64>
}

// The scanned axis is the innermost loop even when it is axis 0; floats add with addf.
// CHECK-LABEL: func.func @cumsum$f32_axis0(
// CHECK: scf.for %[[C:.*]] = %c0 to %c4 step %c1 iter_args
// CHECK: scf.for %[[R:.*]] = %c0 to %{{.*}} step %c1 iter_args(%{{.*}} = %{{.*}}, %[[S:.*]] = %cst) -> (tensor<?x4xf32>, f32)
// CHECK: %[[X:.*]] = tensor.extract %arg0[%[[R]], %[[C]]] : tensor<?x4xf32>
// CHECK: arith.addf %[[S]], %[[X]] : f32
func.func @cumsum$f32_axis0(%x: !kiln.tensor<["L", 4], f32>) -> !kiln.tensor<["L", 4], f32> {
  %0 = "kiln.cumsum"(%x) {axis = 0 : i64} : (!kiln.tensor<["L", 4], f32>) -> !kiln.tensor<["L", 4], f32>
  return %0 : !kiln.tensor<["L", 4], f32>
}
