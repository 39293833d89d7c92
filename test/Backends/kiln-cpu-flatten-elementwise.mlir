// RUN: kiln-opt %s --split-input-file --kiln-cpu-flatten-elementwise | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-cpu-flatten-elementwise --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS

// An elementwise generic over contiguous buffers of one shape (a residual
// add and ReLU over [N, C, H, W], N dynamic) becomes one loop over rank-1
// views: LLVM then vectorizes one long loop, not a nest over a last dim of 7.
// A rank-0 operand is read at every point of the one loop.
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#sc = affine_map<(d0, d1, d2, d3) -> ()>
// CHECK-LABEL: func.func @add_relu(
// CHECK-DAG: %[[A:.*]] = memref.collapse_shape %arg0 {{\[}}[0, 1, 2, 3]] : memref<?x4x7x7xf32> into memref<?xf32>
// CHECK-DAG: %[[B:.*]] = memref.collapse_shape %arg1 {{\[}}[0, 1, 2, 3]] : memref<?x4x7x7xf32> into memref<?xf32>
// CHECK-DAG: %[[C:.*]] = memref.collapse_shape %arg3 {{\[}}[0, 1, 2, 3]] : memref<?x4x7x7xf32> into memref<?xf32>
// CHECK: linalg.generic {indexing_maps = [#[[ID:.*]], #[[ID]], #[[SC:.*]], #[[ID]]], iterator_types = ["parallel"]} ins(%[[A]], %[[B]], %arg2 : memref<?xf32>, memref<?xf32>, memref<f32>) outs(%[[C]] : memref<?xf32>)
// CHECK: arith.maximumf
func.func @add_relu(%x: memref<?x4x7x7xf32>, %r: memref<?x4x7x7xf32>, %s: memref<f32>, %y: memref<?x4x7x7xf32>) {
  linalg.generic {indexing_maps = [#id, #id, #sc, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %r, %s : memref<?x4x7x7xf32>, memref<?x4x7x7xf32>, memref<f32>) outs(%y : memref<?x4x7x7xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32, %o: f32):
    %0 = arith.addf %a, %b : f32
    %1 = arith.mulf %0, %c : f32
    %z = arith.constant 0.0 : f32
    %2 = arith.maximumf %1, %z : f32
    linalg.yield %2 : f32
  }
  return
}

// -----

// Static shapes collapse to their element count; a cast between element types too.
// CHECK-LABEL: func.func @cast(
// CHECK: memref.collapse_shape %arg0 {{\[}}[0, 1, 2]] : memref<2x3x5xf32> into memref<30xf32>
// CHECK: memref.collapse_shape %arg1 {{\[}}[0, 1, 2]] : memref<2x3x5xbf16> into memref<30xbf16>
// CHECK: iterator_types = ["parallel"]
func.func @cast(%x: memref<2x3x5xf32>, %y: memref<2x3x5xbf16>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : memref<2x3x5xf32>) outs(%y : memref<2x3x5xbf16>) {
  ^bb0(%a: f32, %o: bf16):
    %0 = arith.truncf %a : f32 to bf16
    linalg.yield %0 : bf16
  }
  return
}

// -----

// A per-channel bias broadcast over [N, C, H, W]: H and W merge (the bias
// reads neither), N and C stay; so do the loops of a reduction over a
// leading dim, whose trailing parallel loops every operand reads in order.
// CHECK-LABEL: func.func @partial(
// CHECK: %[[X:.*]] = memref.collapse_shape %arg0 {{\[}}[0], [1], [2, 3]] : memref<2x4x7x7xf32> into memref<2x4x49xf32>
// CHECK: %[[Y:.*]] = memref.collapse_shape %arg2 {{\[}}[0], [1], [2, 3]] : memref<2x4x7x7xf32> into memref<2x4x49xf32>
// CHECK: linalg.generic {indexing_maps = [#[[ID3:.*]], #[[CH:.*]], #[[ID3]]], iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[X]], %arg1 : memref<2x4x49xf32>, memref<4xf32>) outs(%[[Y]] : memref<2x4x49xf32>)
// CHECK: %[[R:.*]] = memref.collapse_shape %arg0 {{\[}}[0], [1, 2, 3]] : memref<2x4x7x7xf32> into memref<2x196xf32>
// CHECK: %[[S:.*]] = memref.collapse_shape %arg3 {{\[}}[0, 1, 2]] : memref<4x7x7xf32> into memref<196xf32>
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction", "parallel"]} ins(%[[R]] : memref<2x196xf32>) outs(%[[S]] : memref<196xf32>)
#p4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#pc = affine_map<(d0, d1, d2, d3) -> (d1)>
func.func @partial(%x: memref<2x4x7x7xf32>, %b: memref<4xf32>, %y: memref<2x4x7x7xf32>, %s: memref<4x7x7xf32>) {
  linalg.generic {indexing_maps = [#p4, #pc, #p4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x, %b : memref<2x4x7x7xf32>, memref<4xf32>) outs(%y : memref<2x4x7x7xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %0 = arith.addf %a, %c : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#p4, affine_map<(d0, d1, d2, d3) -> (d1, d2, d3)>], iterator_types = ["reduction", "parallel", "parallel", "parallel"]}
      ins(%x : memref<2x4x7x7xf32>) outs(%s : memref<4x7x7xf32>) {
  ^bb0(%a: f32, %o: f32):
    %0 = arith.addf %a, %o : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

// Left alone: a body reading its indices, a strided view, a reduction over
// the last dims, a transposing read, and a library call's placeholder.
// CHECK-LABEL: func.func @not_flat(
// CHECK-NOT: memref.collapse_shape
// CHECK: return
#m4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @not_flat(%x: memref<2x4x7x7xf32>, %y: memref<2x4x7x7xf32>, %v: memref<2x4x7x7xf32, strided<[392, 98, 7, 1], offset: 3>>, %s: memref<2x4xf32>, %w: memref<4x4xf32>, %z: memref<4x4xf32>) {
  linalg.generic {indexing_maps = [#m4, #m4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x : memref<2x4x7x7xf32>) outs(%y : memref<2x4x7x7xf32>) {
  ^bb0(%a: f32, %o: f32):
    %i = linalg.index 3 : index
    %n = arith.index_cast %i : index to i32
    %f = arith.sitofp %n : i32 to f32
    %0 = arith.addf %a, %f : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#m4, #m4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%v : memref<2x4x7x7xf32, strided<[392, 98, 7, 1], offset: 3>>) outs(%y : memref<2x4x7x7xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#m4, affine_map<(d0, d1, d2, d3) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%x : memref<2x4x7x7xf32>) outs(%s : memref<2x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %0 = arith.addf %a, %o : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%w : memref<4x4xf32>) outs(%z : memref<4x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"], library_call = "native.permute"}
      ins(%w : memref<4x4xf32>) outs(%z : memref<4x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  }
  return
}

// STATS: kiln-cpu-flatten-elementwise
// STATS-NEXT: (1) elementwise generics flattened
// STATS: kiln-cpu-flatten-elementwise
// STATS-NEXT: (1) elementwise generics flattened
// STATS: kiln-cpu-flatten-elementwise
// STATS-NEXT: (2) elementwise generics flattened
