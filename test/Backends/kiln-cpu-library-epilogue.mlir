// RUN: kiln-opt %s --split-input-file --kiln-cpu-library | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --kiln-cpu-library | FileCheck %s --check-prefix=BLAS

// A product's bias add (the bias indexed by the last dim) and tagged
// activation right after it, rewriting its output in place, become one
// kiln_bias_act call at the end of the product's helper (bias pointer,
// activation code 2 = GELU); the two generics go.  Without the native
// runtime they stay.

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(m, n) -> (m, n)>
#row = affine_map<(m, n) -> (n)>
memref.global "private" constant @w : memref<8x4xf32> = dense<1.0>
memref.global "private" constant @bias : memref<4xf32> = dense<0.5>

// CHECK: func.func private @kiln_bias_act(i64, i64, i64, i64, i64, i32, i32)
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK-SAME: %{{.*}}: memref<4xf32>)
// CHECK:   func.call @kiln_sgemm_par(
// CHECK:   %[[ACT:.*]] = arith.constant 2 : i32
// CHECK-NEXT: %[[THR:.*]] = arith.constant {{[0-9]+}} : i32
// CHECK-NEXT: call @kiln_bias_act(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ACT]], %[[THR]]) : (i64, i64, i64, i64, i64, i32, i32) -> ()
// CHECK-NEXT: call @kiln_blas_leave()
// CHECK-LABEL: func.func @main(
// CHECK:   %[[B:.*]] = memref.get_global @bias
// CHECK:   call @kiln_gemm_0(%arg0, %{{.*}}, %arg1, %[[B]])
// CHECK-NOT: linalg.generic
// CHECK:   return

// BLAS-LABEL: func.func @main(
// BLAS: call @kiln_gemm_0(%arg0, %{{.*}}, %arg1) :
// BLAS: linalg.generic
// BLAS: linalg.generic {{.*}} attrs = {kiln.act = "gelu"}
func.func @main(%x: memref<?x8xf32>, %y: memref<?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  %bias = memref.get_global @bias : memref<4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y, %bias : memref<?x4xf32>, memref<4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.addf %p, %q : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<?x4xf32>) outs(%y : memref<?x4xf32>) attrs = {kiln.act = "gelu"} {
  ^bb0(%p: f32, %r: f32):
    %0 = arith.mulf %p, %p : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

// A 3-D output whose batch dim folds into the rows, a ReLU alone: no bias
// argument (a null pointer), code 1.

#a = affine_map<(b, m, n, k) -> (b, m, k)>
#b = affine_map<(b, m, n, k) -> (k, n)>
#c = affine_map<(b, m, n, k) -> (b, m, n)>
#id = affine_map<(b, m, n) -> (b, m, n)>
memref.global "private" constant @w : memref<8x4xf32> = dense<1.0>

// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK-SAME: %{{.*}}: memref<?x?x4xf32>) {
// CHECK:   func.call @kiln_sgemm_par(
// CHECK:   %[[NULL:.*]] = arith.constant 0 : i64
// CHECK-NEXT: %[[ACT:.*]] = arith.constant 1 : i32
// CHECK-NEXT: %[[THR:.*]] = arith.constant {{[0-9]+}} : i32
// CHECK-NEXT: call @kiln_bias_act(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[NULL]], %[[ACT]], %[[THR]])
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK:   return
func.func @main(%x: memref<?x?x8xf32>, %y: memref<?x?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%y : memref<?x?x4xf32>) outs(%y : memref<?x?x4xf32>) attrs = {kiln.act = "relu"} {
  ^bb0(%p: f32, %r: f32):
    %0 = arith.maximumf %p, %p : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

// Left alone: an untagged generic after the product, a tagged one writing
// another buffer, and a "bias" of the product's full shape.

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(m, n) -> (m, n)>
memref.global "private" constant @w : memref<8x4xf32> = dense<1.0>

// CHECK-LABEL: func.func @untagged(
// CHECK-NOT: kiln_bias_act
// CHECK: linalg.generic
// CHECK-LABEL: func.func @elsewhere(
// CHECK-NOT: kiln_bias_act
// CHECK: linalg.generic {{.*}} attrs = {kiln.act = "gelu"}
// CHECK-LABEL: func.func @full_bias(
// CHECK-NOT: kiln_bias_act
// CHECK: linalg.generic
func.func @untagged(%x: memref<?x8xf32>, %y: memref<?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<?x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %r: f32):
    %0 = arith.mulf %p, %p : f32
    linalg.yield %0 : f32
  }
  return
}
func.func @elsewhere(%x: memref<?x8xf32>, %y: memref<?x4xf32>, %z: memref<?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<?x4xf32>) outs(%z : memref<?x4xf32>) attrs = {kiln.act = "gelu"} {
  ^bb0(%p: f32, %r: f32):
    %0 = arith.mulf %p, %p : f32
    linalg.yield %0 : f32
  }
  return
}
func.func @full_bias(%x: memref<?x8xf32>, %y: memref<?x4xf32>, %b: memref<?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y, %b : memref<?x4xf32>, memref<?x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.addf %p, %q : f32
    linalg.yield %0 : f32
  }
  return
}
