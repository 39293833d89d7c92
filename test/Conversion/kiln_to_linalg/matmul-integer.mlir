// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg | FileCheck %s

// kiln.matmul_integer: one contraction of a's rows with b [k, n] (loops b, m,
// n, k), the zero points read as scalars (rank-0 maps); each operand and its
// zero point widened to i32 as its kiln dtype says (extui for ui8, extsi for
// i8), subtracted, multiplied and summed in i32 from a zero fill.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-DAG: #[[A:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[B:.*]] = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
// CHECK-DAG: #[[Z:.*]] = affine_map<(d0, d1, d2, d3) -> ()>
// CHECK-LABEL: func.func @matmul_integer(
// CHECK-SAME: %[[X:.*]]: tensor<?x3x64xi8>, %[[W:.*]]: tensor<64x32xi8>, %[[ZA:.*]]: tensor<i8>, %[[ZB:.*]]: tensor<i8>)
// CHECK: %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK: %[[INIT:.*]] = linalg.fill ins(%[[ZERO]] : i32) outs(%{{.*}} : tensor<?x3x32xi32>)
// CHECK: linalg.generic {indexing_maps = [#[[A]], #[[B]], #[[Z]], #[[Z]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[X]], %[[W]], %[[ZA]], %[[ZB]] : tensor<?x3x64xi8>, tensor<64x32xi8>, tensor<i8>, tensor<i8>) outs(%[[INIT]] : tensor<?x3x32xi32>)
// CHECK: ^bb0(%[[IA:.*]]: i8, %[[IB:.*]]: i8, %[[IZA:.*]]: i8, %[[IZB:.*]]: i8, %[[ACC:.*]]: i32):
// CHECK: %[[WA:.*]] = arith.extui %[[IA]] : i8 to i32
// CHECK: %[[WZA:.*]] = arith.extui %[[IZA]] : i8 to i32
// CHECK: %[[CA:.*]] = arith.subi %[[WA]], %[[WZA]] : i32
// CHECK: %[[WB:.*]] = arith.extsi %[[IB]] : i8 to i32
// CHECK: %[[WZB:.*]] = arith.extsi %[[IZB]] : i8 to i32
// CHECK: %[[CB:.*]] = arith.subi %[[WB]], %[[WZB]] : i32
// CHECK: %[[P:.*]] = arith.muli %[[CA]], %[[CB]] : i32
// CHECK: arith.addi %[[ACC]], %[[P]] : i32
func.func @matmul_integer(%a: !kiln.tensor<["B", 3, 64], ui8>, %b: !kiln.tensor<[64, 32], i8>, %za: !kiln.tensor<[], ui8>, %zb: !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 3, 32], i32> {
  %0 = "kiln.matmul_integer"(%a, %b, %za, %zb) : (!kiln.tensor<["B", 3, 64], ui8>, !kiln.tensor<[64, 32], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 3, 32], i32>
  return %0 : !kiln.tensor<["B", 3, 32], i32>
}

// -----

// i8 a and ui8 b: the widenings swap (extsi for a, extui for b).
// CHECK-LABEL: func.func @signed_a(
// CHECK: arith.extsi %{{.*}} : i8 to i32
// CHECK: arith.extsi %{{.*}} : i8 to i32
// CHECK: arith.subi
// CHECK: arith.extui %{{.*}} : i8 to i32
// CHECK: arith.extui %{{.*}} : i8 to i32
func.func @signed_a(%a: !kiln.tensor<[2, 8], i8>, %b: !kiln.tensor<[8, 4], ui8>, %za: !kiln.tensor<[], i8>, %zb: !kiln.tensor<[], ui8>) -> !kiln.tensor<[2, 4], i32> {
  %0 = "kiln.matmul_integer"(%a, %b, %za, %zb) : (!kiln.tensor<[2, 8], i8>, !kiln.tensor<[8, 4], ui8>, !kiln.tensor<[], i8>, !kiln.tensor<[], ui8>) -> !kiln.tensor<[2, 4], i32>
  return %0 : !kiln.tensor<[2, 4], i32>
}
