// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()

// A dim expression is arith on the symbols' values: B*L is one muli.
// CHECK-LABEL: func.func @reshape$expression(
// CHECK-DAG: %[[B:.*]] = tensor.dim %arg0, %c0
// CHECK-DAG: %[[L:.*]] = tensor.dim %arg0, %c1
// CHECK: %[[BL:.*]] = arith.muli %[[B]], %[[L]] : index
// CHECK: %[[I:.*]] = arith.index_cast %[[BL]] : index to i64
// CHECK: tensor.from_elements %[[I]], %{{.*}} : tensor<2xi64>
// CHECK: tensor.reshape %arg0(%{{.*}}) : (tensor<?x?x16xf32>, tensor<2xi64>) -> tensor<?x16xf32>
func.func @reshape$expression(%a: !kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B*L", 16], f32> {
  %0 = "kiln.reshape"(%a) {shape = ["B*L", 16]} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B*L", 16], f32>
  return %0 : !kiln.tensor<["B*L", 16], f32>
}

// Equal dims come from the same value: L is read from %a only.
// CHECK-LABEL: func.func @concat$axis1(
// CHECK-NOT: tensor.dim %arg1, %c1
// CHECK: %[[L1:.*]] = arith.addi %{{.*}}, %c1 : index
// CHECK: tensor.empty(%{{.*}}, %[[L1]]) : tensor<?x?xf32>
// CHECK: linalg.generic
// CHECK-DAG: tensor.extract %arg0
// CHECK-DAG: tensor.extract %arg1
// CHECK: arith.select
func.func @concat$axis1(%a: !kiln.tensor<["B", "L"], f32>, %b: !kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", "L+1"], f32> {
  %0 = "kiln.concat"(%a, %b) {axis = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (!kiln.tensor<["B", "L"], f32>, !kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", "L+1"], f32>
  return %0 : !kiln.tensor<["B", "L+1"], f32>
}

// CHECK-LABEL: func.func @slice$to_end(
// CHECK: %[[OFF:.*]] = arith.minsi
// CHECK: tensor.extract_slice %arg0[0, %[[OFF]]] [%{{.*}}, %{{.*}}] [1, 1] : tensor<?x?xf32> to tensor<?x?xf32>
func.func @slice$to_end(%a: !kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L-1"], f32> {
  %0 = "kiln.slice"(%a) {starts = array<i64: 1>, ends = array<i64: 4611686018427387904>, steps = array<i64: 1>, axes = array<i64: 1>} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L-1"], f32>
  return %0 : !kiln.tensor<["B", "L-1"], f32>
}

// CHECK-LABEL: func.func @gather$embedding(
// CHECK: linalg.generic {{.*}} ins(%arg1 : tensor<?x?xi64>) outs(%{{.*}} : tensor<?x?x16xf32>)
// CHECK: arith.index_cast
// CHECK: tensor.extract %arg0[%{{.*}}, %{{.*}}] : tensor<100x16xf32>
func.func @gather$embedding(%t: !kiln.tensor<[100, 16], f32>, %i: !kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L", 16], f32> {
  %0 = "kiln.gather"(%t, %i) {axis = 0 : i64} : (!kiln.tensor<[100, 16], f32>, !kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L", 16], f32>
  return %0 : !kiln.tensor<["B", "L", 16], f32>
}

// CHECK-LABEL: func.func @transpose$perm(
// CHECK: linalg.transpose ins(%arg0 : tensor<?x?x16xf32>) outs(%{{.*}} : tensor<16x?x?xf32>) permutation = [2, 0, 1]
func.func @transpose$perm(%a: !kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<[16, "B", "L"], f32> {
  %0 = "kiln.transpose"(%a) {perm = array<i64: 2, 0, 1>} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<[16, "B", "L"], f32>
  return %0 : !kiln.tensor<[16, "B", "L"], f32>
}
