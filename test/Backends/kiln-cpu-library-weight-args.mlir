// RUN: kiln-opt %s --kiln-cpu-library | FileCheck %s

// A weight passed as an argument (kiln-partition's inline-limit: a constant
// of the schedule, listed in kiln.weights) gets a packing slot like an
// inlined one (a constant memref.global): as B, the small GEMM's; as A, the
// weight-A GEMM's.  The same product over arguments the function does not
// list gets none (their data may change from call to call).

#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>

// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK:   memref.get_global @kiln_pack_0 : memref<1xi64>
// CHECK:   func.call @kiln_sgemm_small(
// CHECK-LABEL: func.func private @kiln_gemm_1(
// CHECK:   memref.get_global @kiln_pack_1 : memref<1xi64>
// CHECK:   call @kiln_sgemm_wa(
// CHECK-LABEL: func.func private @kiln_gemm_2(
// CHECK-NOT: kiln_pack
// CHECK:   return
// CHECK: memref.global "private" @kiln_pack_0 : memref<1xi64> = dense<0>
// CHECK-NEXT: memref.global "private" @kiln_pack_1 : memref<1xi64> = dense<0>
// CHECK-NOT: memref.global "private" @kiln_pack_2
// CHECK-LABEL: func.func @weight_b(
// CHECK:   call @kiln_gemm_0(%arg0, %arg1, %arg2)
// CHECK-LABEL: func.func @weight_a(
// CHECK:   call @kiln_gemm_1(%arg0, %arg1, %arg2)
// CHECK-LABEL: func.func @no_weight(
// CHECK:   call @kiln_gemm_2(%arg0, %arg1, %arg2)

func.func @weight_b(%x: memref<?x8xf32>, %w: memref<8x4xf32>, %y: memref<?x4xf32>) attributes {kiln.weights = array<i64: 1>} {
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  return
}

func.func @weight_a(%x: memref<?x8xf32>, %w: memref<8x4xf32>, %y: memref<?x4xf32>) attributes {kiln.weights = array<i64: 0>} {
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  return
}

func.func @no_weight(%x: memref<?x8xf32>, %w: memref<8x4xf32>, %y: memref<?x4xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%x, %w : memref<?x8xf32>, memref<8x4xf32>) outs(%y : memref<?x4xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  return
}
