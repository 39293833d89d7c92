// RUN: kiln-opt %s --split-input-file --kiln-cpu-bufferize | FileCheck %s

// An elementwise generic that does not read its init writes into the
// product it reads (epilogues_in_place): the product, its zero fill and the
// bias add all write the output argument, and no temporary is allocated.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @bias_in_place(
// CHECK-SAME: %[[X:.*]]: memref<?x8xf32>, %[[W:.*]]: memref<8x4xf32>, %[[B:.*]]: memref<4xf32>, %[[OUT:.*]]: memref<?x4xf32>)
// CHECK-NOT: memref.alloc
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[OUT]] : memref<?x4xf32>)
// CHECK: linalg.matmul ins(%[[X]], %[[W]] : {{.*}}) outs(%[[OUT]] : memref<?x4xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[OUT]], %[[B]] : {{.*}}) outs(%[[OUT]] : memref<?x4xf32>)
// CHECK-NOT: memref.copy
// CHECK: return
func.func @bias_in_place(%x: tensor<?x8xf32>, %w: tensor<8x4xf32>, %bias: tensor<4xf32>, %out: memref<?x4xf32>) {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %n = tensor.dim %x, %c0 : tensor<?x8xf32>
  %e = tensor.empty(%n) : tensor<?x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<?x4xf32>) -> tensor<?x4xf32>
  %p = linalg.matmul ins(%x, %w : tensor<?x8xf32>, tensor<8x4xf32>) outs(%z : tensor<?x4xf32>) -> tensor<?x4xf32>
  %r = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p, %bias : tensor<?x4xf32>, tensor<4xf32>) outs(%e : tensor<?x4xf32>) {
  ^bb0(%in: f32, %bi: f32, %o: f32):
    %s = arith.addf %in, %bi : f32
    linalg.yield %s : f32
  } -> tensor<?x4xf32>
  bufferization.materialize_in_destination %r in restrict writable %out : (tensor<?x4xf32>, memref<?x4xf32>) -> ()
  return
}

// -----

// Not when the product has another reader (here it is also a result): the
// add writes the first output, reading the product from the second.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @product_also_returned(
// CHECK-SAME: %[[OUT0:[^:]*]]: memref<?x4xf32>, %[[OUT1:[^:]*]]: memref<?x4xf32>)
// CHECK: linalg.matmul {{.*}} outs(%[[OUT1]] : memref<?x4xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[OUT1]], %{{.*}} : {{.*}}) outs(%[[OUT0]] : memref<?x4xf32>)
func.func @product_also_returned(%x: tensor<?x8xf32>, %w: tensor<8x4xf32>, %bias: tensor<4xf32>, %out0: memref<?x4xf32>, %out1: memref<?x4xf32>) {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %n = tensor.dim %x, %c0 : tensor<?x8xf32>
  %e = tensor.empty(%n) : tensor<?x4xf32>
  %e1 = tensor.empty(%n) : tensor<?x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e1 : tensor<?x4xf32>) -> tensor<?x4xf32>
  %p = linalg.matmul ins(%x, %w : tensor<?x8xf32>, tensor<8x4xf32>) outs(%z : tensor<?x4xf32>) -> tensor<?x4xf32>
  %r = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p, %bias : tensor<?x4xf32>, tensor<4xf32>) outs(%e : tensor<?x4xf32>) {
  ^bb0(%in: f32, %bi: f32, %o: f32):
    %s = arith.addf %in, %bi : f32
    linalg.yield %s : f32
  } -> tensor<?x4xf32>
  bufferization.materialize_in_destination %r in restrict writable %out0 : (tensor<?x4xf32>, memref<?x4xf32>) -> ()
  bufferization.materialize_in_destination %p in restrict writable %out1 : (tensor<?x4xf32>, memref<?x4xf32>) -> ()
  return
}

// -----

// Not into a function argument (the caller's input is not written), and
// not when the body reads its init (that is not a fresh destination).

#id = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @argument_input(
// CHECK-SAME: %[[X:[^:]*]]: memref<?x4xf32>, %[[OUT:[^:]*]]: memref<?x4xf32>)
// CHECK-NOT: memref.alloc
// CHECK: linalg.generic {{.*}} ins(%[[X]] : memref<?x4xf32>) outs(%[[OUT]] : memref<?x4xf32>)
func.func @argument_input(%x: tensor<?x4xf32>, %out: memref<?x4xf32>) {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x4xf32>
  %e = tensor.empty(%n) : tensor<?x4xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<?x4xf32>) outs(%e : tensor<?x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    %s = arith.mulf %in, %in : f32
    linalg.yield %s : f32
  } -> tensor<?x4xf32>
  bufferization.materialize_in_destination %r in restrict writable %out : (tensor<?x4xf32>, memref<?x4xf32>) -> ()
  return
}

// CHECK-LABEL: func.func @body_reads_init(
// CHECK-SAME: %[[X:[^:]*]]: memref<?x4xf32>, %[[OUT:[^:]*]]: memref<?x4xf32>)
// CHECK: %[[T:.*]] = memref.alloc
// CHECK: linalg.generic {{.*}} ins(%[[X]] : memref<?x4xf32>) outs(%[[T]] : memref<?x4xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[T]] : memref<?x4xf32>) outs(%[[OUT]] : memref<?x4xf32>)
// CHECK: ^bb0(%{{.*}}: f32, %[[O:.*]]: f32):
// CHECK: arith.addf %{{.*}}, %[[O]]
func.func @body_reads_init(%x: tensor<?x4xf32>, %out: memref<?x4xf32>) {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  %n = tensor.dim %x, %c0 : tensor<?x4xf32>
  %e = tensor.empty(%n) : tensor<?x4xf32>
  %sq = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<?x4xf32>) outs(%e : tensor<?x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    %s = arith.mulf %in, %in : f32
    linalg.yield %s : f32
  } -> tensor<?x4xf32>
  %e2 = tensor.empty(%n) : tensor<?x4xf32>
  %init = linalg.fill ins(%one : f32) outs(%e2 : tensor<?x4xf32>) -> tensor<?x4xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%sq : tensor<?x4xf32>) outs(%init : tensor<?x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    %s = arith.addf %in, %o : f32
    linalg.yield %s : f32
  } -> tensor<?x4xf32>
  bufferization.materialize_in_destination %r in restrict writable %out : (tensor<?x4xf32>, memref<?x4xf32>) -> ()
  return
}
