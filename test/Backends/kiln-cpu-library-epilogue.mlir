// RUN: kiln-opt %s --split-input-file --kiln-cpu-library | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --kiln-cpu-library | FileCheck %s --check-prefix=BLAS

// A product's bias add (the bias indexed by the last dim) and activation
// right after it, marked as its epilogue steps by their lowering (the
// roles kiln-select-kernels chose on kiln IR) and rewriting its output in
// place, become the
// native small GEMM's epilogue (kiln_sgemm_small_epi: bias pointer,
// activation code 2 = GELU, no residual) and, after sgemv / sgemm, one
// kiln_bias_act call with the same operands; the two generics go.
// Without the native runtime they stay.

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(m, n) -> (m, n)>
#row = affine_map<(m, n) -> (n)>
memref.global "private" constant @w : memref<8x4xf32> = dense<1.0>
memref.global "private" constant @bias : memref<4xf32> = dense<0.5>

// The thread counts are asked at run time (kiln_pool_threads, and
// kiln_blas_threads for sgemm's slabs), never constants of the code.
// CHECK: func.func private @kiln_pool_threads() -> i32
// CHECK: func.func private @kiln_blas_threads() -> i32
// CHECK: func.func private @kiln_sgemm_small_epi(i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i32, i64, i64, i32, i64, i64)
// CHECK: func.func private @kiln_bias_act(i64, i64, i64, i64, i64, i32, i64, i64, i32)
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK-SAME: %{{.*}}: memref<4xf32>)
// CHECK:      %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK:      %[[BIAS:.*]] = arith.addi
// CHECK-NEXT: %[[NOR:.*]] = arith.constant 0 : i64
// CHECK-NEXT: %[[NOLDR:.*]] = arith.constant 0 : i64
// CHECK-NEXT: %[[ACT:.*]] = arith.constant 2 : i32
// CHECK:      %[[MANY:.*]] = call @kiln_blas_threads() : () -> i32
// CHECK-NEXT: %[[NT:.*]] = arith.select %{{.*}}, %[[MANY]], %{{.*}} : i32
// CHECK:      scf.if
// CHECK-NEXT:   func.call @kiln_sgemm_small_epi({{.*}}, %[[THR]], %{{.*}}, %[[BIAS]], %[[ACT]], %[[NOR]], %[[NOLDR]])
// CHECK-NEXT: } else {
// CHECK:        func.call @kiln_sgemm_par({{.*}}, %[[NT]])
// CHECK:        func.call @kiln_bias_act(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[BIAS]], %[[ACT]], %[[NOR]], %[[NOLDR]], %[[THR]])
// CHECK-NEXT: }
// CHECK-NEXT: call @kiln_blas_leave()
// CHECK-LABEL: func.func @main(
// CHECK:   %[[B:.*]] = memref.get_global @bias
// CHECK:   call @kiln_gemm_0(%arg0, %{{.*}}, %arg1, %[[B]])
// CHECK-NOT: linalg.generic
// CHECK:   return

// BLAS-LABEL: func.func @main(
// BLAS: call @kiln_gemm_0(%arg0, %{{.*}}, %arg1) :
// BLAS: linalg.generic
// BLAS: linalg.generic {{.*}} attrs = {kiln.call_part = "gelu"}
func.func @main(%x: memref<?x8xf32>, %y: memref<?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  %bias = memref.get_global @bias : memref<4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y, %bias : memref<?x4xf32>, memref<4xf32>) outs(%y : memref<?x4xf32>) attrs = {kiln.call_part = "bias"} {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.addf %p, %q : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<?x4xf32>) outs(%y : memref<?x4xf32>) attrs = {kiln.call_part = "gelu"} {
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
// CHECK:      %[[ACT:.*]] = arith.constant 1 : i32
// CHECK:      func.call @kiln_sgemm_small_epi({{.*}}, %c0_i64{{[_0-9]*}}, %[[ACT]], %c0_i64{{[_0-9]*}}, %c0_i64{{[_0-9]*}})
// CHECK:      func.call @kiln_sgemm_par(
// CHECK:      func.call @kiln_bias_act({{.*}}, %c0_i64{{[_0-9]*}}, %[[ACT]], %c0_i64{{[_0-9]*}}, %c0_i64{{[_0-9]*}}, %{{[a-z0-9_]+}})
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK:   return
func.func @main(%x: memref<?x?x8xf32>, %y: memref<?x?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%x, %w : memref<?x?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%y : memref<?x?x4xf32>) outs(%y : memref<?x?x4xf32>) attrs = {kiln.call_part = "relu"} {
  ^bb0(%p: f32, %r: f32):
    %0 = arith.maximumf %p, %p : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

// Left alone: an unmarked generic after the product (an add of its full
// shape too: nothing is taken by its body), a marked one writing another
// buffer, and a "bias" step adding a row broadcast over the product's rows
// (the call takes an [N] bias only).  A residual step, the epilogue's last,
// passes its pointer and row stride.

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(m, n) -> (m, n)>
#first = affine_map<(m, n) -> (0, n)>
memref.global "private" constant @w : memref<8x4xf32> = dense<1.0>

// CHECK-LABEL: func.func private @kiln_gemm_2(
// CHECK-SAME: %[[RES:arg[0-9]+]]: memref<?x4xf32>) {
// CHECK:      %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}:2, %[[RSTRIDES:[a-z0-9_]+]]:2 = memref.extract_strided_metadata %[[RES]]
// CHECK:      %[[RPTR:.*]] = arith.addi
// CHECK-NEXT: %[[LDR:.*]] = arith.index_cast %[[RSTRIDES]]#0 : index to i64
// CHECK:      func.call @kiln_sgemm_small_epi({{.*}}, %[[RPTR]], %[[LDR]])
// CHECK:      func.call @kiln_bias_act({{.*}}, %[[RPTR]], %[[LDR]], %{{[a-z0-9_]+}})
// CHECK-LABEL: func.func @unmarked(
// CHECK-NOT: kiln_bias_act
// CHECK: linalg.generic
// CHECK-LABEL: func.func @elsewhere(
// CHECK-NOT: kiln_bias_act
// CHECK: linalg.generic {{.*}} attrs = {kiln.call_part = "gelu"}
// CHECK-LABEL: func.func @residual(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_gemm_{{[0-9]+}}(%arg0, %{{.*}}, %arg1, %arg2)
// CHECK-LABEL: func.func @unmarked_add(
// CHECK-NOT: kiln_bias_act
// CHECK: call @kiln_gemm_{{[0-9]+}}(%arg0, %{{.*}}, %arg1) :
// CHECK: linalg.generic
// CHECK-LABEL: func.func @row_broadcast(
// CHECK-NOT: kiln_bias_act
// CHECK: linalg.generic
func.func @unmarked(%x: memref<?x8xf32>, %y: memref<?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
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
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<?x4xf32>) outs(%z : memref<?x4xf32>) attrs = {kiln.call_part = "gelu"} {
  ^bb0(%p: f32, %r: f32):
    %0 = arith.mulf %p, %p : f32
    linalg.yield %0 : f32
  }
  return
}
func.func @residual(%x: memref<?x8xf32>, %y: memref<?x4xf32>, %b: memref<?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y, %b : memref<?x4xf32>, memref<?x4xf32>) outs(%y : memref<?x4xf32>) attrs = {kiln.call_part = "residual"} {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.addf %p, %q : f32
    linalg.yield %0 : f32
  }
  return
}
func.func @unmarked_add(%x: memref<?x8xf32>, %y: memref<?x4xf32>, %b: memref<?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
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
func.func @row_broadcast(%x: memref<?x8xf32>, %y: memref<?x4xf32>, %b: memref<1x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id, #first, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y, %b : memref<?x4xf32>, memref<1x4xf32>) outs(%y : memref<?x4xf32>) attrs = {kiln.call_part = "bias"} {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.addf %p, %q : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

// A constant weight read transposed ([N, K]: nn.Linear's, too large to
// transpose at compile time) goes to kiln_sgemm_small_bt with the packing
// slot and the epilogue's operands; without the runtime, sgemm with transB = 112.
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK:      %[[TB:.*]] = arith.constant 112 : i32
// CHECK:      memref.get_global @kiln_pack_0
// CHECK:      %[[SLOT:.*]] = arith.index_cast %{{.*}} : index to i64
// CHECK-NEXT: scf.if
// CHECK-NEXT:   func.call @kiln_sgemm_small_bt({{.*}}, %[[SLOT]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i32, i64, i64, i32, i64, i64) -> ()
// CHECK-NEXT: } else {
// CHECK:        func.call @kiln_sgemm_par(%{{.*}}, %{{.*}}, %[[TB]],
// CHECK:        func.call @kiln_bias_act(
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// BLAS-LABEL: func.func private @kiln_gemm_0(
// BLAS: arith.constant 112 : i32
// BLAS-NOT: kiln_sgemm_small_bt
#a = affine_map<(m, n, k) -> (m, k)>
#bt = affine_map<(m, n, k) -> (n, k)>
#c = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(m, n) -> (m, n)>
memref.global "private" constant @wt : memref<4x8xf32> = dense<1.0>

func.func @main(%x: memref<?x8xf32>, %y: memref<?x4xf32>) {
  %w = memref.get_global @wt : memref<4x8xf32>
  linalg.generic {indexing_maps = [#a, #bt, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%x, %w : memref<?x8xf32>, memref<4x8xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<?x4xf32>) outs(%y : memref<?x4xf32>) attrs = {kiln.call_part = "relu"} {
  ^bb0(%p: f32, %r: f32):
    %0 = arith.mulf %p, %p : f32
    linalg.yield %0 : f32
  }
  return
}
