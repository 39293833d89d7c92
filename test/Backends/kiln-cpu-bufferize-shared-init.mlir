// RUN: kiln-opt %s --split-input-file --kiln-cpu-bufferize | FileCheck %s

// Two results whose reductions share one (CSE'd) zero fill, in the generic
// form kiln-cpu-vectorize gives fills: each result gets a fill of its own,
// so each reduction computes straight into its own output argument.  (The
// shared fill used to be eliminated into %OUT0 and the second reduction
// computed in %OUT0 too: both results came back equal.)

#scalar = affine_map<(d0) -> ()>
#id = affine_map<(d0) -> (d0)>
#first = affine_map<(d0) -> (0)>
// CHECK-LABEL: func.func @shared_fill(
// CHECK-SAME: %[[A:.*]]: memref<?xf64>, %[[B:.*]]: memref<?xf64>, %[[OUT0:.*]]: memref<1xf64>, %[[OUT1:.*]]: memref<1xf64>)
// CHECK-NOT: memref.alloc
// CHECK-DAG: linalg.generic {{.*}} ins(%{{.*}} : f64) outs(%[[OUT0]] : memref<1xf64>)
// CHECK-DAG: linalg.generic {{.*}} ins(%{{.*}} : f64) outs(%[[OUT1]] : memref<1xf64>)
// CHECK: linalg.generic {{.*}} ins(%[[A]] : memref<?xf64>) outs(%[[OUT0]] : memref<1xf64>)
// CHECK: linalg.generic {{.*}} ins(%[[B]] : memref<?xf64>) outs(%[[OUT1]] : memref<1xf64>)
// CHECK-NOT: memref.copy
// CHECK: return
func.func @shared_fill(%a: tensor<?xf64>, %b: tensor<?xf64>, %out0: memref<1xf64>, %out1: memref<1xf64>) {
  %zero = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<1xf64>
  %z = linalg.generic {indexing_maps = [#scalar, #id], iterator_types = ["parallel"]} ins(%zero : f64) outs(%e : tensor<1xf64>) {
  ^bb0(%in: f64, %o: f64):
    linalg.yield %in : f64
  } -> tensor<1xf64>
  %s0 = linalg.generic {indexing_maps = [#id, #first], iterator_types = ["reduction"]} ins(%a : tensor<?xf64>) outs(%z : tensor<1xf64>) {
  ^bb0(%in: f64, %o: f64):
    %t = arith.addf %o, %in : f64
    linalg.yield %t : f64
  } -> tensor<1xf64>
  %s1 = linalg.generic {indexing_maps = [#id, #first], iterator_types = ["reduction"]} ins(%b : tensor<?xf64>) outs(%z : tensor<1xf64>) {
  ^bb0(%in: f64, %o: f64):
    %t = arith.addf %o, %in : f64
    linalg.yield %t : f64
  } -> tensor<1xf64>
  bufferization.materialize_in_destination %s0 in restrict writable %out0 : (tensor<1xf64>, memref<1xf64>) -> ()
  bufferization.materialize_in_destination %s1 in restrict writable %out1 : (tensor<1xf64>, memref<1xf64>) -> ()
  return
}

// -----

// A shared init that is dear to recompute (a product both results
// accumulate onto): the first result's init is a copy of it (no temporary
// buffer), and each result is computed in its own output argument.

#id2 = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @shared_product(
// CHECK-SAME: %[[X:.*]]: memref<4x8xf32>, %[[W:.*]]: memref<8x4xf32>, %[[C:.*]]: memref<4x4xf32>, %[[D:.*]]: memref<4x4xf32>, %[[OUT0:.*]]: memref<4x4xf32>, %[[OUT1:.*]]: memref<4x4xf32>)
// CHECK-NOT: memref.alloc
// CHECK: linalg.matmul ins(%[[X]], %[[W]] : {{.*}}) outs(%[[OUT1]] : memref<4x4xf32>)
// CHECK: linalg.generic {{.*}} outs(%[[OUT0]] : memref<4x4xf32>)
// CHECK: memref.load %[[OUT1]]
// CHECK: linalg.generic {{.*}} ins(%[[C]] : memref<4x4xf32>) outs(%[[OUT0]] : memref<4x4xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[D]] : memref<4x4xf32>) outs(%[[OUT1]] : memref<4x4xf32>)
// CHECK-NOT: memref.copy
// CHECK: return
func.func @shared_product(%x: tensor<4x8xf32>, %w: tensor<8x4xf32>, %c: tensor<4x4xf32>, %d: tensor<4x4xf32>,
                          %out0: memref<4x4xf32>, %out1: memref<4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  %p = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x4xf32>) outs(%z : tensor<4x4xf32>) -> tensor<4x4xf32>
  %r0 = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%c : tensor<4x4xf32>) outs(%p : tensor<4x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    %t = arith.addf %o, %in : f32
    linalg.yield %t : f32
  } -> tensor<4x4xf32>
  %r1 = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%d : tensor<4x4xf32>) outs(%p : tensor<4x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    %t = arith.mulf %o, %in : f32
    linalg.yield %t : f32
  } -> tensor<4x4xf32>
  bufferization.materialize_in_destination %r0 in restrict writable %out0 : (tensor<4x4xf32>, memref<4x4xf32>) -> ()
  bufferization.materialize_in_destination %r1 in restrict writable %out1 : (tensor<4x4xf32>, memref<4x4xf32>) -> ()
  return
}
