// RUN: kiln-opt %s --split-input-file --kiln-cpu-library | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --kiln-cpu-library | FileCheck %s --check-prefix=BLAS

// convert-kiln-to-linalg's lowering of a convolution chosen for
// native.conv2d: zero padding, a bias broadcast into the output and an
// im2col copy (each marked as a part of the call, kiln.call_part), then a
// contraction of the constant weight with it (the placeholder, carrying the
// op's attributes).  With the native runtime all of it becomes one
// kiln_conv2d call: pads 1/1, stride 2 (read from kiln.call_attrs, not from
// the maps), the bias passed in (beta 0), the weight's packing slot; the
// parts and their buffers are gone.  Without it, only the contraction
// becomes sgemm calls.

#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch = affine_map<(d0, d1, d2, d3) -> (d1)>
#win = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4 * 2 + d2, d5 * 2 + d3)>
#id6 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4, d5)>
#wm = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
#cm = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#om = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
memref.global "private" constant @w : memref<3x2x3x3xf32> = dense<1.0>
memref.global "private" constant @b : memref<3xf32> = dense<0.5>
memref.global "private" constant @wshape : memref<2xi64> = dense<[3, 18]>

// CHECK: func.func private @kiln_conv2d(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i32, i64, i32, i64)
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK-SAME: %[[W:.*]]: memref<3x18xf32>, %[[X:.*]]: memref<?x2x5x5xf32>, %[[Y:.*]]: memref<?x3x9xf32>, %[[OH:.*]]: index, %[[OW:.*]]: index, %[[BIAS:.*]]: memref<3xf32>)
// CHECK: %[[KH:.*]] = arith.constant 3 : i64
// CHECK-NEXT: %[[KW:.*]] = arith.constant 3 : i64
// CHECK-NEXT: %[[SH:.*]] = arith.constant 2 : i64
// CHECK-NEXT: %[[SW:.*]] = arith.constant 2 : i64
// CHECK-NEXT: %[[DH:.*]] = arith.constant 1 : i64
// CHECK-NEXT: %[[DW:.*]] = arith.constant 1 : i64
// CHECK-NEXT: %[[PT:.*]] = arith.constant 1 : i64
// CHECK-NEXT: %[[PL:.*]] = arith.constant 1 : i64
// CHECK: %[[BETA:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK: %[[BP:.*]] = memref.extract_aligned_pointer_as_index %[[BIAS]]
// CHECK: %[[BIASP:.*]] = arith.index_cast %[[BP]] : index to i64
// CHECK: memref.get_global @kiln_pack_0 : memref<1xi64>
// CHECK: call @kiln_conv2d(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[KH]], %[[KW]], %{{.*}}, %{{.*}}, %[[SH]], %[[SW]], %[[DH]], %[[DW]], %[[PT]], %[[PL]], %{{.*}}, %{{.*}}, %[[BIASP]], %{{.*}}, %[[BETA]],
// CHECK-SAME: %[[THR]], %{{.*}}) :
// CHECK-LABEL: func.func @kiln_release_packed()
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.alloc(%{{.*}}) {{.*}} : memref<?x2x7x7xf32>
// CHECK: call @kiln_gemm_0(%{{.*}}, %arg0, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (memref<3x18xf32>, memref<?x2x5x5xf32>, memref<?x3x9xf32>, index, index, memref<3xf32>) -> ()
// CHECK-NOT: linalg.generic
// CHECK: return

// BLAS-NOT: kiln_conv2d
// BLAS: %[[MANY:.*]] = call @scipy_openblas_get_num_threads64_() : () -> i32
// BLAS-NEXT: %[[NT:.*]] = arith.select %{{.*}}, %[[MANY]], %{{.*}} : i32
// BLAS-NEXT: call @openblas_set_num_threads_local(%[[NT]])
// BLAS: func.call @scipy_cblas_sgemm64_(
// BLAS-LABEL: func.func @main(
// BLAS: linalg.generic {{.*}}kiln.call_part = "pad"
func.func @main(%x: memref<?x2x5x5xf32>, %y: memref<?x3x3x3xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  %n = memref.dim %x, %c0 : memref<?x2x5x5xf32>
  %n64 = arith.index_cast %n : index to i64
  %padded = memref.alloc(%n) : memref<?x2x7x7xf32>
  linalg.generic {indexing_maps = [#id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      outs(%padded : memref<?x2x7x7xf32>) attrs = {kiln.call_part = "pad"} {
  ^bb0(%o: f32):
    %i0 = linalg.index 0 : index
    %i1 = linalg.index 1 : index
    %i2 = linalg.index 2 : index
    %i3 = linalg.index 3 : index
    %h = arith.subi %i2, %c1 : index
    %w = arith.subi %i3, %c1 : index
    %h0 = arith.maxsi %h, %c0 : index
    %w0 = arith.maxsi %w, %c0 : index
    %h1 = arith.minsi %h0, %c4 : index
    %w1 = arith.minsi %w0, %c4 : index
    %v = memref.load %x[%i0, %i1, %h1, %w1] : memref<?x2x5x5xf32>
    %in = arith.cmpi eq, %h, %h1 : index
    %r = arith.select %in, %v, %zero : f32
    linalg.yield %r : f32
  }
  %bias = memref.get_global @b : memref<3xf32>
  linalg.generic {indexing_maps = [#ch, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%bias : memref<3xf32>) outs(%y : memref<?x3x3x3xf32>) attrs = {kiln.call_part = "init"} {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  %col = memref.alloc(%n) : memref<?x2x3x3x3x3xf32>
  linalg.generic {indexing_maps = [#win, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%padded : memref<?x2x7x7xf32>) outs(%col : memref<?x2x3x3x3x3xf32>) attrs = {kiln.call_part = "im2col"} {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  %cshape = memref.alloc() : memref<3xi64>
  %c18 = arith.constant 18 : i64
  %c9 = arith.constant 9 : i64
  %c3 = arith.constant 3 : i64
  memref.store %n64, %cshape[%c0] : memref<3xi64>
  %c1i = arith.constant 1 : index
  %c2i = arith.constant 2 : index
  memref.store %c18, %cshape[%c1i] : memref<3xi64>
  memref.store %c9, %cshape[%c2i] : memref<3xi64>
  %col3 = memref.reshape %col(%cshape) : (memref<?x2x3x3x3x3xf32>, memref<3xi64>) -> memref<?x18x9xf32>
  %wg = memref.get_global @w : memref<3x2x3x3xf32>
  %ws = memref.get_global @wshape : memref<2xi64>
  %w2 = memref.reshape %wg(%ws) : (memref<3x2x3x3xf32>, memref<2xi64>) -> memref<3x18xf32>
  %yshape = memref.alloc() : memref<3xi64>
  memref.store %n64, %yshape[%c0] : memref<3xi64>
  memref.store %c3, %yshape[%c1i] : memref<3xi64>
  memref.store %c9, %yshape[%c2i] : memref<3xi64>
  %y3 = memref.reshape %y(%yshape) : (memref<?x3x3x3xf32>, memref<3xi64>) -> memref<?x3x9xf32>
  linalg.generic {indexing_maps = [#wm, #cm, #om], iterator_types = ["parallel", "parallel", "parallel", "reduction"], library_call = "native.conv2d",
                  kiln.call_attrs = {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>}}
      ins(%w2, %col3 : memref<3x18xf32>, memref<?x18x9xf32>) outs(%y3 : memref<?x3x9xf32>) {
  ^bb0(%a: f32, %b2: f32, %acc: f32):
    %0 = arith.mulf %a, %b2 : f32
    %1 = arith.addf %acc, %0 : f32
    linalg.yield %1 : f32
  }
  memref.dealloc %col : memref<?x2x3x3x3x3xf32>
  memref.dealloc %padded : memref<?x2x7x7xf32>
  return
}


// -----

// Not taken as a convolution: an im2col copy its lowering did not mark (the
// same IR by hand, unpadded) is a generic like any other; the weight-A
// product after it becomes the native weight-A GEMM, and the copy stays.

#win = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4 + d2, d5 + d3)>
#id6 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4, d5)>
#wm = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
#cm = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#om = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
memref.global "private" constant @w : memref<3x18xf32> = dense<1.0>

// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK-NOT: kiln_conv2d
// CHECK: call @kiln_sgemm_wa(
// CHECK-LABEL: func.func @main(
// CHECK: linalg.generic
// CHECK: call @kiln_gemm_0(
func.func @main(%x: memref<?x2x3x3xf32>, %y: memref<?x3x1xf32>) {
  %c0 = arith.constant 0 : index
  %n = memref.dim %x, %c0 : memref<?x2x3x3xf32>
  %n64 = arith.index_cast %n : index to i64
  %col = memref.alloc(%n) : memref<?x2x3x3x1x1xf32>
  linalg.generic {indexing_maps = [#win, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%x : memref<?x2x3x3xf32>) outs(%col : memref<?x2x3x3x1x1xf32>) {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  %cshape = memref.alloc() : memref<3xi64>
  %c18 = arith.constant 18 : i64
  %c1 = arith.constant 1 : i64
  %c1i = arith.constant 1 : index
  %c2i = arith.constant 2 : index
  memref.store %n64, %cshape[%c0] : memref<3xi64>
  memref.store %c18, %cshape[%c1i] : memref<3xi64>
  memref.store %c1, %cshape[%c2i] : memref<3xi64>
  %col3 = memref.reshape %col(%cshape) : (memref<?x2x3x3x1x1xf32>, memref<3xi64>) -> memref<?x18x1xf32>
  %w2 = memref.get_global @w : memref<3x18xf32>
  linalg.generic {indexing_maps = [#wm, #cm, #om], iterator_types = ["parallel", "parallel", "parallel", "reduction"], library_call = "native.conv2d",
                  kiln.call_attrs = {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>}}
      ins(%w2, %col3 : memref<3x18xf32>, memref<?x18x1xf32>) outs(%y : memref<?x3x1xf32>) {
  ^bb0(%a: f32, %b2: f32, %acc: f32):
    %0 = arith.mulf %a, %b2 : f32
    %1 = arith.addf %acc, %0 : f32
    linalg.yield %1 : f32
  }
  memref.dealloc %col : memref<?x2x3x3x1x1xf32>
  return
}
// -----

// A product whose A is a constant and whose B is not an im2col: the native
// weight-A GEMM, once for the whole batch (batch strides passed).

#a = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
#b = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#c = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
memref.global "private" constant @w : memref<4x8xf32> = dense<1.0>

// CHECK: func.func private @kiln_sgemm_wa(i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i64, i32, i64)
// CHECK-LABEL: func.func private @kiln_gemm_0(
// CHECK: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK: memref.get_global @kiln_pack_0
// CHECK: call @kiln_sgemm_wa({{.*}}, %[[THR]], %{{.*}}) :
// CHECK-NOT: scf.for
// CHECK: return
// CHECK-LABEL: func.func @main(
// CHECK: call @kiln_gemm_0(%{{.*}}, %arg0, %arg1)

// BLAS-NOT: kiln_sgemm_wa
// BLAS: scf.for
// BLAS: func.call @scipy_cblas_sgemm64_(
func.func @main(%x: memref<?x8x5xf32>, %y: memref<?x4x5xf32>) {
  %w = memref.get_global @w : memref<4x8xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "parallel", "reduction"], library_call = "native.gemm"}
      ins(%w, %x : memref<4x8xf32>, memref<?x8x5xf32>) outs(%y : memref<?x4x5xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  return
}

// -----

// A direct convolution generic (linalg.conv_2d_nchw_fchw generalized, as
// hand-written linalg input may hold) is not recognised: no kiln op was
// chosen for it, so it stays generated code.

#x = affine_map<(n, f, oh, ow, c, kh, kw) -> (n, c, oh + kh, ow + kw * 2)>
#w = affine_map<(n, f, oh, ow, c, kh, kw) -> (f, c, kh, kw)>
#y = affine_map<(n, f, oh, ow, c, kh, kw) -> (n, f, oh, ow)>

// CHECK-LABEL: func.func @main(
// CHECK-NOT: call
// CHECK: linalg.generic
// CHECK-NOT: call
// CHECK: return

// BLAS-LABEL: func.func @main(
// BLAS-NOT: sgemm
// BLAS: linalg.generic
func.func @main(%x: memref<?x3x9x9xf32>, %w: memref<4x3x2x2xf32>, %y: memref<?x4x8x7xf32>) {
  linalg.generic {indexing_maps = [#x, #w, #y],
                  iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x, %w : memref<?x3x9x9xf32>, memref<4x3x2x2xf32>) outs(%y : memref<?x4x8x7xf32>) {
  ^bb0(%p: f32, %q: f32, %r: f32):
    %0 = arith.mulf %p, %q : f32
    %1 = arith.addf %r, %0 : f32
    linalg.yield %1 : f32
  }
  return
}
