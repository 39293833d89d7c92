// RUN: kiln-opt %s --kiln-cpu-library | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --kiln-cpu-library | FileCheck %s --check-prefix=BLAS

// A product with a constant B (a weight) gets a packing slot: few rows go
// to kiln's native GEMM with the slot's address, more rows to OpenBLAS
// (one thread of its own; kiln_sgemm_par splits it over the native pool),
// the thread count set and put back through kiln_blas_enter / leave;
// the module gains kiln_release_packed, which frees what the slots hold.
// One row goes to kiln_sgemm_par as well (its GEMV streams the weight on
// the pool), not to OpenBLAS's single-threaded sgemv.
// Without the native runtime, OpenBLAS runs on its own threads, and one
// row is its sgemv.

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
memref.global "private" constant @w : memref<8x4xf32> = dense<1.0>

// CHECK: func.func private @kiln_sgemm_small(i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i32, i64)
// CHECK: func.func private @kiln_free_packed(i64)
// CHECK: func.func private @kiln_blas_enter(i32) -> i32
// CHECK: func.func private @kiln_blas_leave()
// The thread counts are asked at run time (kiln_pool_threads: the native
// pool's size, kiln_blas_threads: sgemm's slabs; OpenBLAS's own count
// without the native runtime), so the code serves any KILN_THREADS.
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK:   %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK:   %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-NEXT: %[[MANY:.*]] = call @kiln_blas_threads() : () -> i32
// CHECK-NEXT: %[[NT:.*]] = arith.select %{{.*}}, %[[MANY]], %[[ONE]] : i32
// CHECK:   call @kiln_blas_enter(%[[ONE]])
// CHECK:   %[[SMALL:.*]] = arith.cmpi sle, %{{.*}}, %{{.*}} : i64
// CHECK:   memref.get_global @kiln_pack_0 : memref<1xi64>
// CHECK:   scf.if %[[SMALL]] {
// CHECK:     func.call @kiln_sgemm_small({{.*}}, %[[THR]], %{{.*}}) :
// CHECK:   } else {
// CHECK-NOT: scipy_cblas_sgemv64_
// CHECK:     func.call @kiln_sgemm_par({{.*}}, %[[NT]])
// CHECK:   call @kiln_blas_leave()
// CHECK-NEXT: return
// CHECK: memref.global "private" @kiln_pack_0 : memref<1xi64> = dense<0>
// CHECK-LABEL: func.func @kiln_release_packed()
// CHECK:   call @kiln_free_packed(
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK:   call @kiln_gemm_0(%arg0, %{{.*}}, %arg1)

// BLAS-NOT: kiln_sgemm_small
// BLAS-NOT: kiln_pack
// BLAS-NOT: kiln_blas
// BLAS: %[[MANY:.*]] = call @scipy_openblas_get_num_threads64_() : () -> i32
// BLAS-NEXT: %[[NT:.*]] = arith.select %{{.*}}, %[[MANY]], %{{.*}} : i32
// BLAS: %[[PREV:.*]] = call @openblas_set_num_threads_local(%[[NT]])
// BLAS-NOT: kiln_sgemm_par
// BLAS: func.call @scipy_cblas_sgemv64_(
// BLAS: func.call @scipy_cblas_sgemm64_(
// BLAS: call @openblas_set_num_threads_local(%[[PREV]])
// BLAS-NOT: kiln_blas
func.func @main(%x: memref<?x8xf32>, %y: memref<?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  return
}

// Nothing is recognised from loops: the same product without the library
// GEMM's mark (no kiln op was chosen for it) stays generated code, and so
// does a marked one whose A has an innermost stride other than 1 (the call
// cannot take it as it lies: its mark goes).
// CHECK-LABEL: func.func @unmarked(
// CHECK: linalg.generic
// CHECK-NOT: call @kiln_gemm
// CHECK: return
func.func @unmarked(%x: memref<?x8xf32>, %y: memref<?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  return
}

// CHECK-LABEL: func.func @strided(
// CHECK: linalg.generic
// CHECK-NOT: library_call
// CHECK-NOT: call @kiln_gemm
// CHECK: return
func.func @strided(%x: memref<?x8xf32, strided<[16, 2]>>, %y: memref<?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%x, %w : memref<?x8xf32, strided<[16, 2]>>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  return
}
