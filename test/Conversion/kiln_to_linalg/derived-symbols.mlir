// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s

"kiln.symbol"() {sym_name = "F", min = 16 : i64, max = 160 : i64} : () -> ()
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 2 : i64, max = 64 : i64} : () -> ()

// A symbol that is no argument's exact dim but a multiple of one (a derived
// torch.export Dim, 10*F) is that dim divided back.
// CHECK-LABEL: func.func @scaled(
// CHECK: %[[D:.*]] = tensor.dim %arg0, %c0 : tensor<?xf32>
// CHECK: %[[F:.*]] = arith.divsi %[[D]], %c10 : index
// CHECK: %[[FI:.*]] = arith.index_cast %[[F]] : index to i64
// CHECK: tensor.from_elements %[[FI]], %c10_i64
func.func @scaled(%a: !kiln.tensor<["10*F"], f32>) -> !kiln.tensor<["F", 10], f32> {
  %0 = "kiln.reshape"(%a) {shape = ["F", 10]} : (!kiln.tensor<["10*F"], f32>) -> !kiln.tensor<["F", 10], f32>
  return %0 : !kiln.tensor<["F", 10], f32>
}

// a*F + c: (d - c) / a.
// CHECK-LABEL: func.func @affine(
// CHECK: %[[D:.*]] = tensor.dim %arg0, %c0 : tensor<?xf32>
// CHECK: %[[S:.*]] = arith.subi %[[D]], %c1 : index
// CHECK: %[[F:.*]] = arith.divsi %[[S]], %c2 : index
// CHECK: tensor.empty(%[[F]]) : tensor<?xf32>
func.func @affine(%a: !kiln.tensor<["2*F+1"], f32>) -> !kiln.tensor<["F"], f32> {
  %0 = "kiln.range"() {shape = ["F"], start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : () -> !kiln.tensor<["F"], f32>
  return %0 : !kiln.tensor<["F"], f32>
}

// B*L with L an exact dim: B is the dim divided by L's value.
// CHECK-LABEL: func.func @product(
// CHECK: %[[L:.*]] = tensor.dim %arg0, %c0 : tensor<?xf32>
// CHECK: %[[BL:.*]] = tensor.dim %arg1, %c0 : tensor<?xf32>
// CHECK: %[[B:.*]] = arith.divsi %[[BL]], %[[L]] : index
// CHECK: tensor.empty(%[[B]], %[[L]]) : tensor<?x?xf32>
func.func @product(%x: !kiln.tensor<["L"], f32>, %y: !kiln.tensor<["B*L"], f32>) -> !kiln.tensor<["B", "L"], f32> {
  %0 = "kiln.reshape"(%y) {shape = ["B", "L"]} : (!kiln.tensor<["B*L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  %1 = "kiln.add"(%0, %x) : (!kiln.tensor<["B", "L"], f32>, !kiln.tensor<["L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  return %1 : !kiln.tensor<["B", "L"], f32>
}
