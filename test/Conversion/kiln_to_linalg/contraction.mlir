// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()

// CHECK-DAG: #[[LHS:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[RHS:.*]] = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
// CHECK-DAG: #[[OUT:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-DAG: #[[COL:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4 * 2 + d2, d5 * 2 + d3)>
// CHECK-DAG: #[[KEEP:.*]] = affine_map<(d0, d1, d2) -> (d0, 0, 0, d2)>
// CHECK-DAG: #[[T00:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2 * 2, d3 * 2)>
// CHECK-DAG: #[[T01:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2 * 2, d3 * 2 + 1)>
// CHECK-DAG: #[[T10:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2 * 2 + 1, d3 * 2)>
// CHECK-DAG: #[[T11:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2 * 2 + 1, d3 * 2 + 1)>
// CHECK-DAG: #[[TLHS:.*]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[TRHS:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[TOUT:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-DAG: #[[KMAP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>

// 2-D operands: linalg.matmul into a zero-filled init.
// CHECK-LABEL: func.func @matmul$2d(
// CHECK: %[[E:.*]] = tensor.empty(%{{.*}}) : tensor<?x8xf32>
// CHECK: %[[Z:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E]] : tensor<?x8xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<?x16xf32>, tensor<16x8xf32>) outs(%[[Z]] : tensor<?x8xf32>)
func.func @matmul$2d(%a: !kiln.tensor<["B", 16], f32>, %w: !kiln.tensor<[16, 8], f32>) -> !kiln.tensor<["B", 8], f32> {
  %0 = "kiln.matmul"(%a, %w) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 8], f32>) -> !kiln.tensor<["B", 8], f32>
  return %0 : !kiln.tensor<["B", 8], f32>
}

// Batch dims broadcast: a generic contraction with a reduction loop.
// CHECK-LABEL: func.func @matmul$dynamic_batch(
// CHECK: linalg.generic {indexing_maps = [#[[LHS]], #[[RHS]], #[[OUT]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK: arith.mulf
// CHECK: arith.addf
func.func @matmul$dynamic_batch(%a: !kiln.tensor<["B", "L", 16], f32>, %w: !kiln.tensor<[16, 8], f32>) -> !kiln.tensor<["B", "L", 8], f32> {
  %0 = "kiln.matmul"(%a, %w) : (!kiln.tensor<["B", "L", 16], f32>, !kiln.tensor<[16, 8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  return %0 : !kiln.tensor<["B", "L", 8], f32>
}

// Softmax: max, exp(x - max), sum, divide.
// CHECK-LABEL: func.func @softmax$last(
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<?x1xf32>)
// CHECK: iterator_types = ["parallel", "reduction"]
// CHECK: arith.maximumf
// CHECK: math.floor
// CHECK: iterator_types = ["parallel", "reduction"]
// CHECK: arith.addf
// CHECK: arith.divf
func.func @softmax$last(%a: !kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32> {
  %0 = "kiln.softmax"(%a) {axis = -1 : i64} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  return %0 : !kiln.tensor<["B", "L"], f32>
}

// The mean divides by the reduced extent, read at run time.
// CHECK-LABEL: func.func @reduce_mean$dynamic(
// CHECK: iterator_types = ["parallel", "reduction"]
// CHECK: %[[N:.*]] = tensor.dim %{{.*}}, %c1 : tensor<?x?xf32>
// CHECK: arith.index_cast %[[N]]
// CHECK: arith.sitofp
// CHECK: arith.divf
func.func @reduce_mean$dynamic(%a: !kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B"], f32> {
  %0 = "kiln.reduce_mean"(%a) {axes = array<i64: 1>} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B"], f32>
  return %0 : !kiln.tensor<["B"], f32>
}

// Adjacent reduced dims become one loop (a contiguous sum LLVM vectorizes):
// a global average pool collapses H x W; with keepdims the output keeps a 1
// per reduced dim; reduced dims that are not adjacent stay separate loops,
// and a run that holds a symbol collapses to a dynamic extent.
// CHECK-LABEL: func.func @reduce_mean$pool(
// CHECK: %[[C:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0], [1], [2, 3]] : tensor<?x64x16x16xf32> into tensor<?x64x256xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[C]] : tensor<?x64x256xf32>) outs(%{{.*}} : tensor<?x64xf32>)
// CHECK: arith.divf
func.func @reduce_mean$pool(%a: !kiln.tensor<["B", 64, 16, 16], f32>) -> !kiln.tensor<["B", 64], f32> {
  %0 = "kiln.reduce_mean"(%a) {axes = array<i64: 2, 3>} : (!kiln.tensor<["B", 64, 16, 16], f32>) -> !kiln.tensor<["B", 64], f32>
  return %0 : !kiln.tensor<["B", 64], f32>
}

// CHECK-LABEL: func.func @reduce_sum$keepdims(
// CHECK: tensor.collapse_shape %{{.*}} {{\[}}[0], [1, 2], [3]] : tensor<?x?x4x8xf32> into tensor<?x?x8xf32>
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[KEEP]]], iterator_types = ["parallel", "reduction", "parallel"]} {{.*}} outs(%{{.*}} : tensor<?x1x1x8xf32>)
func.func @reduce_sum$keepdims(%a: !kiln.tensor<["B", "L", 4, 8], f32>) -> !kiln.tensor<["B", 1, 1, 8], f32> {
  %0 = "kiln.reduce_sum"(%a) {axes = array<i64: 1, 2>, keepdims = true} : (!kiln.tensor<["B", "L", 4, 8], f32>) -> !kiln.tensor<["B", 1, 1, 8], f32>
  return %0 : !kiln.tensor<["B", 1, 1, 8], f32>
}

// CHECK-LABEL: func.func @reduce_sum$apart(
// CHECK-NOT: tensor.collapse_shape
// CHECK: iterator_types = ["parallel", "reduction", "parallel", "reduction"]
func.func @reduce_sum$apart(%a: !kiln.tensor<["B", 3, 4, 5], f32>) -> !kiln.tensor<["B", 4], f32> {
  %0 = "kiln.reduce_sum"(%a) {axes = array<i64: 1, 3>} : (!kiln.tensor<["B", 3, 4, 5], f32>) -> !kiln.tensor<["B", 4], f32>
  return %0 : !kiln.tensor<["B", 4], f32>
}

// Convolution: pad (a gather), im2col (a copy through an affine map with the
// strides), one contraction per image over k = C*KH*KW, reshape back.
// CHECK-LABEL: func.func @conv2d$padded(
// CHECK: tensor.extract
// CHECK: arith.select
// CHECK: linalg.generic {indexing_maps = [#[[COL]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]}
// CHECK: tensor.reshape %{{.*}} : (tensor<?x3x3x3x16x16xf32>, tensor<3xi64>) -> tensor<?x27x256xf32>
// CHECK: iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// CHECK: tensor.reshape %{{.*}} : (tensor<?x8x256xf32>, tensor<4xi64>) -> tensor<?x8x16x16xf32>
func.func @conv2d$padded(%x: !kiln.tensor<["B", 3, 32, 32], f32>, %w: !kiln.tensor<[8, 3, 3, 3], f32>) -> !kiln.tensor<["B", 8, 16, 16], f32> {
  %0 = "kiln.conv2d"(%x, %w) {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["B", 3, 32, 32], f32>, !kiln.tensor<[8, 3, 3, 3], f32>) -> !kiln.tensor<["B", 8, 16, 16], f32>
  return %0 : !kiln.tensor<["B", 8, 16, 16], f32>
}

// A small strided window is one parallel generic reading a strided, shifted
// map per tap (vectorizable over the output columns); a window above 64 taps,
// or a stride of 1, stays linalg.pooling_nchw_max.
// CHECK-LABEL: func.func @max_pool2d$basic(
// CHECK-NOT: linalg.pooling_nchw_max
// CHECK: linalg.generic {indexing_maps = [#[[T00]], #[[T01]], #[[T10]], #[[T11]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
// CHECK-COUNT-3: arith.maximumf
// CHECK-NOT: arith.maximumf
// CHECK: linalg.yield
func.func @max_pool2d$basic(%x: !kiln.tensor<["B", 8, 32, 32], f32>) -> !kiln.tensor<["B", 8, 16, 16], f32> {
  %0 = "kiln.max_pool2d"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (!kiln.tensor<["B", 8, 32, 32], f32>) -> !kiln.tensor<["B", 8, 16, 16], f32>
  return %0 : !kiln.tensor<["B", 8, 16, 16], f32>
}

// CHECK-LABEL: func.func @max_pool2d$wide(
// CHECK: linalg.pooling_nchw_max
// CHECK-LABEL: func.func @max_pool2d$stride1(
// CHECK: linalg.pooling_nchw_max
func.func @max_pool2d$wide(%x: !kiln.tensor<["B", 8, 32, 32], f32>) -> !kiln.tensor<["B", 8, 24, 24], f32> {
  %0 = "kiln.max_pool2d"(%x) {kernel = array<i64: 9, 9>, strides = array<i64: 1, 1>} : (!kiln.tensor<["B", 8, 32, 32], f32>) -> !kiln.tensor<["B", 8, 24, 24], f32>
  return %0 : !kiln.tensor<["B", 8, 24, 24], f32>
}

func.func @max_pool2d$stride1(%x: !kiln.tensor<["B", 8, 32, 32], f32>) -> !kiln.tensor<["B", 8, 31, 31], f32> {
  %0 = "kiln.max_pool2d"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 1, 1>} : (!kiln.tensor<["B", 8, 32, 32], f32>) -> !kiln.tensor<["B", 8, 31, 31], f32>
  return %0 : !kiln.tensor<["B", 8, 31, 31], f32>
}

// A product of a matrix transposed in the same function (a weight's
// kiln.transpose that kiln-partition copied into the product's kernel, or
// q @ k^T) reads the transpose's input through its map: no linalg.transpose
// is left (n before k in the right-hand map; batch dims kept).
// CHECK-LABEL: func.func @matmul$weight_transposed(
// CHECK-NOT: linalg.transpose
// CHECK: linalg.generic {indexing_maps = [#[[TLHS]], #[[TRHS]], #[[TOUT]]], iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg0, %{{.*}} : tensor<?x16xf32>, tensor<8x16xf32>)
// CHECK-NOT: linalg.transpose
// CHECK: return
func.func @matmul$weight_transposed(%a: !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 8], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<8x16xf32>} : () -> !kiln.tensor<[8, 16], f32>
  %t = "kiln.transpose"(%w) {perm = array<i64: 1, 0>} : (!kiln.tensor<[8, 16], f32>) -> !kiln.tensor<[16, 8], f32>
  %0 = "kiln.matmul"(%a, %t) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 8], f32>) -> !kiln.tensor<["B", 8], f32>
  return %0 : !kiln.tensor<["B", 8], f32>
}

// CHECK-LABEL: func.func @matmul$batched_transposed(
// CHECK-NOT: linalg.transpose
// CHECK: linalg.generic {indexing_maps = [#[[LHS]], #[[KMAP]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1 : tensor<?x?x16xf32>, tensor<?x?x16xf32>)
func.func @matmul$batched_transposed(%q: !kiln.tensor<["B", "L", 16], f32>, %k: !kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", "L", "L"], f32> {
  %t = "kiln.transpose"(%k) {perm = array<i64: 0, 2, 1>} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", 16, "L"], f32>
  %0 = "kiln.matmul"(%q, %t) : (!kiln.tensor<["B", "L", 16], f32>, !kiln.tensor<["B", 16, "L"], f32>) -> !kiln.tensor<["B", "L", "L"], f32>
  return %0 : !kiln.tensor<["B", "L", "L"], f32>
}

// A transpose of other dims is not a matrix transposed: it stays.
// CHECK-LABEL: func.func @matmul$other_transpose(
// CHECK: linalg.transpose
func.func @matmul$other_transpose(%a: !kiln.tensor<[4, 2, 8], f32>, %b: !kiln.tensor<[8, 4, 2], f32>) -> !kiln.tensor<[4, 2, 2], f32> {
  %t = "kiln.transpose"(%b) {perm = array<i64: 1, 0, 2>} : (!kiln.tensor<[8, 4, 2], f32>) -> !kiln.tensor<[4, 8, 2], f32>
  %0 = "kiln.matmul"(%a, %t) : (!kiln.tensor<[4, 2, 8], f32>, !kiln.tensor<[4, 8, 2], f32>) -> !kiln.tensor<[4, 2, 2], f32>
  return %0 : !kiln.tensor<[4, 2, 2], f32>
}
