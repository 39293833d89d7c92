// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg | FileCheck %s

// layer_norm: the mean, the variance read from x and the mean (x - mean
// inside the reduction), 1 / sqrt(var + eps), and one output generic that
// recomputes x - mean. No tensor of x's size but the result: x - mean and
// its square are not materialized.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @layer_norm(
// CHECK-SAME: %[[X:.*]]: tensor<?x8xf32>, %[[G:.*]]: tensor<8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[X]] : tensor<?x8xf32>)
// CHECK: %[[MEAN:.*]] = linalg.generic {{.*}} ins(%[[SUM]] : tensor<?x1xf32>)
// CHECK: arith.divf
// CHECK: %[[VAR:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[X]], %[[MEAN]] : tensor<?x8xf32>, tensor<?x1xf32>)
// CHECK-NEXT: ^bb0(%[[V:.*]]: f32, %[[M:.*]]: f32, %[[ACC:.*]]: f32):
// CHECK-NEXT: %[[D:.*]] = arith.subf %[[V]], %[[M]] : f32
// CHECK-NEXT: %[[D2:.*]] = arith.mulf %[[D]], %[[D]] : f32
// CHECK-NEXT: arith.addf %[[ACC]], %[[D2]] : f32
// CHECK: %[[INV:.*]] = linalg.generic {{.*}} ins(%[[VAR]] : tensor<?x1xf32>)
// CHECK: math.sqrt
// CHECK-NOT: -> tensor<?x8xf32>
// CHECK: linalg.generic {{.*}} ins(%[[X]], %[[MEAN]], %[[INV]], %[[G]], %[[B]] : {{.*}}) outs(%{{.*}} : tensor<?x8xf32>)
// CHECK: arith.subf
// CHECK: -> tensor<?x8xf32>
// CHECK-NOT: linalg.generic
func.func @layer_norm(%x: !kiln.tensor<["B", 8], f32>, %g: !kiln.tensor<[8], f32>, %b: !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", 8], f32> {
  %0 = "kiln.layer_norm"(%x, %g, %b) {axis = -1 : i64, epsilon = 1.0e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", 8], f32>
  return %0 : !kiln.tensor<["B", 8], f32>
}

// -----

// Over the last two dims of a rank-3 x: the reduction loops over them as one
// (collapsed) dim, while the mean keeps both, read through the result's map.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @layer_norm_two_axes(
// CHECK: tensor.collapse_shape %{{.*}} {{\[}}[0], [1, 2]] : tensor<?x3x5xf32> into tensor<?x15xf32>
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[KEPT:.*]], #[[KEPT]]], iterator_types = ["parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<?x15xf32>, tensor<?x1x1xf32>) outs(%{{.*}} : tensor<?x1x1xf32>)
func.func @layer_norm_two_axes(%x: !kiln.tensor<["B", 3, 5], f32>) -> !kiln.tensor<["B", 3, 5], f32> {
  %0 = "kiln.layer_norm"(%x) {axis = 1 : i64, epsilon = 1.0e-05 : f64, operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<["B", 3, 5], f32>) -> !kiln.tensor<["B", 3, 5], f32>
  return %0 : !kiln.tensor<["B", 3, 5], f32>
}
