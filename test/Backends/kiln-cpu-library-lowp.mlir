// RUN: kiln-opt %s --split-input-file --kiln-cpu-library --kiln-cpu-lowp-gemm | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --kiln-cpu-library --kiln-cpu-lowp-gemm | FileCheck %s --check-prefix=GEN

// kiln-cpu-lowp-gemm, after kiln-cpu-library: the contraction placeholder of a
// kiln.matmul that kiln-select-kernels gave native.matmul_lowp (a bf16 product
// into an f32 accumulator, marked by convert-kiln-to-linalg: library_call, the
// op's attributes and dtypes) with a constant B becomes one kiln_lowp_gemm call: the
// batch dim folds into the rows, bf16 elements are 2 bytes, dtype 0 (bf16),
// B untransposed (tb = 0), beta 0 (the zero fill goes), and B's packing slot
// (kiln_release_packed frees it).  Without the native runtime the generic stays.

#a = affine_map<(b, m, n, k) -> (b, m, k)>
#b = affine_map<(b, m, n, k) -> (k, n)>
#c = affine_map<(b, m, n, k) -> (b, m, n)>
memref.global "private" constant @w : memref<8x4xbf16> = dense<1.0>

// CHECK: func.func private @kiln_lowp_gemm(i64, i64, i64, i64, i64, i64, i64, i32, f32, i64, i64, i32, i32, i64)
// CHECK-LABEL: func.func private @kiln_lowp_gemm_0(
// CHECK-SAME: %[[A:.*]]: memref<?x?x8xbf16>, %[[B:.*]]: memref<8x4xbf16>, %[[C:.*]]: memref<?x?x4xf32>)
// CHECK-DAG: %[[TB:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[DT:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[BETA:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK-DAG: memref.get_global @kiln_lowp_pack_0 : memref<1xi64>
// CHECK: %[[M:.*]] = arith.muli %{{.*}}, %{{.*}} : i64
// CHECK-NOT: scf.for
// CHECK: arith.constant 2 : i64
// CHECK: arith.constant 2 : i64
// CHECK: arith.constant 4 : i64
// CHECK: call @kiln_lowp_gemm(%[[M]], {{.*}}, %[[TB]], %[[BETA]], {{.*}}, %[[DT]], %[[THR]], %{{.*}})
// CHECK: memref.global "private" @kiln_lowp_pack_0 : memref<1xi64> = dense<0>
// CHECK-LABEL: func.func @kiln_release_packed()
// CHECK: call @kiln_free_packed(
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_lowp_gemm_0(%arg0, %{{.*}}, %arg1)
// CHECK-NOT: linalg.
// CHECK: return
// GEN-LABEL: func.func @main(
// GEN: linalg.generic
// GEN-NOT: kiln_lowp_gemm
func.func @main(%x: memref<?x?x8xbf16>, %y: memref<?x?x4xf32>) {
  %w = memref.get_global @w : memref<8x4xbf16>
  %z = arith.constant 0.0 : f32
  linalg.generic {indexing_maps = [affine_map<(b, m, n) -> ()>, affine_map<(b, m, n) -> (b, m, n)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z : f32) outs(%y : memref<?x?x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "parallel", "reduction"], library_call = "native.matmul_lowp", kiln.call_attrs = {}, kiln.call_dtypes = ["bf16", "bf16", "bf16"]}
      ins(%x, %w : memref<?x?x8xbf16>, memref<8x4xbf16>) outs(%y : memref<?x?x4xf32>) {
  ^bb0(%p: bf16, %q: bf16, %r: f32):
    %0 = arith.extf %p : bf16 to f32
    %1 = arith.extf %q : bf16 to f32
    %2 = arith.mulf %0, %1 : f32
    %3 = arith.addf %r, %2 : f32
    linalg.yield %3 : f32
  }
  return
}

// -----

// A bf16 convolution chosen for native.conv2d_lowp: its im2col product
// (out[n, o, p] += w[o, k] * col[n, k, p]; dtypes x, w, bias, result) is one
// kiln_lowp_gemm call per image -- A the weight read in place (lda = K), B the
// image's im2col (packed per call: no slot), beta 1 (the bias init stays).
// CHECK-LABEL: func.func private @kiln_lowp_gemm_0(
// CHECK-SAME: %{{.*}}: memref<4x27xbf16>, %{{.*}}: memref<?x27x36xbf16>, %{{.*}}: memref<?x4x36xf32>)
// CHECK-DAG: %[[BETA:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-DAG: %[[NOSLOT:.*]] = arith.constant 0 : i64
// CHECK: scf.for
// CHECK: call @kiln_lowp_gemm({{.*}}, %[[BETA]], {{.*}}, %[[NOSLOT]])
// CHECK-LABEL: func.func @conv(
// CHECK: call @kiln_lowp_gemm_0(%arg1, %arg0, %arg2)
// GEN-LABEL: func.func @conv(
// GEN: linalg.generic
func.func @conv(%col: memref<?x27x36xbf16>, %w: memref<4x27xbf16>, %y: memref<?x4x36xf32>) {
  linalg.generic {indexing_maps = [affine_map<(n, o, p, k) -> (o, k)>, affine_map<(n, o, p, k) -> (n, k, p)>, affine_map<(n, o, p, k) -> (n, o, p)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"], library_call = "native.conv2d_lowp", kiln.call_attrs = {groups = 1 : i64}, kiln.call_dtypes = ["bf16", "bf16", "bf16", "bf16"]}
      ins(%w, %col : memref<4x27xbf16>, memref<?x27x36xbf16>) outs(%y : memref<?x4x36xf32>) {
  ^bb0(%p: bf16, %q: bf16, %r: f32):
    %0 = arith.extf %p : bf16 to f32
    %1 = arith.extf %q : bf16 to f32
    %2 = arith.mulf %0, %1 : f32
    %3 = arith.addf %r, %2 : f32
    linalg.yield %3 : f32
  }
  return
}

// -----

// A bf16 convolution chosen for native.conv2d_lowp, lowered with its parts
// (zero padding, bias init, im2col copy: kiln.call_part) and the im2col
// product as the placeholder: one kiln_lowp_conv2d call that gathers the
// im2col itself (pads 1/1, stride 2 from kiln.call_attrs, dtype 0, beta 1
// since the bias init stays), the input read unpadded; the pad and im2col
// copies and their buffers are gone.  Without the native runtime all stays.
// CHECK: func.func private @kiln_lowp_conv2d(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i64, i32, i32)
// CHECK-LABEL: func.func private @kiln_lowp_gemm_0(
// CHECK-SAME: %{{.*}}: memref<3x18xbf16>, %{{.*}}: memref<?x2x5x5xbf16>, %{{.*}}: memref<?x3x9xf32>, %{{.*}}: index, %{{.*}}: index)
// CHECK: %[[KH:.*]] = arith.constant 3 : i64
// CHECK-NEXT: %[[KW:.*]] = arith.constant 3 : i64
// CHECK-NEXT: %[[SH:.*]] = arith.constant 2 : i64
// CHECK-NEXT: %[[SW:.*]] = arith.constant 2 : i64
// CHECK-NEXT: %[[DH:.*]] = arith.constant 1 : i64
// CHECK-NEXT: %[[DW:.*]] = arith.constant 1 : i64
// CHECK-NEXT: %[[PT:.*]] = arith.constant 1 : i64
// CHECK-NEXT: %[[PL:.*]] = arith.constant 1 : i64
// CHECK: %[[BETA:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[DT:.*]] = arith.constant 0 : i32
// CHECK: call @kiln_lowp_conv2d(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[KH]], %[[KW]], %{{.*}}, %{{.*}}, %[[SH]], %[[SW]], %[[DH]], %[[DW]], %[[PT]], %[[PL]], %{{.*}}, %{{.*}}, %[[BETA]], %{{.*}}, %[[DT]], %{{.*}})
// CHECK-LABEL: func.func @conv_im2col(
// CHECK-NOT: kiln.call_part = "pad"
// CHECK-NOT: kiln.call_part = "im2col"
// CHECK: call @kiln_lowp_gemm_0(%{{.*}}, %arg0, %{{.*}}, %{{.*}}, %{{.*}}) : (memref<3x18xbf16>, memref<?x2x5x5xbf16>, memref<?x3x9xf32>, index, index) -> ()
// CHECK-NOT: linalg.generic
// CHECK: return
// GEN-LABEL: func.func @conv_im2col(
// GEN: kiln.call_part = "pad"
// GEN: kiln.call_part = "im2col"
// GEN-NOT: call @kiln_lowp_conv2d
// GEN: linalg.generic
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch = affine_map<(d0, d1, d2, d3) -> (d1)>
#win = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4 * 2 + d2, d5 * 2 + d3)>
#id6 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4, d5)>
#wm = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
#cm = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#om = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
memref.global "private" constant @w : memref<3x2x3x3xbf16> = dense<1.0>
memref.global "private" constant @b : memref<3xf32> = dense<0.5>
memref.global "private" constant @wshape : memref<2xi64> = dense<[3, 18]>


func.func @conv_im2col(%x: memref<?x2x5x5xbf16>, %y: memref<?x3x3x3xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : bf16
  %n = memref.dim %x, %c0 : memref<?x2x5x5xbf16>
  %n64 = arith.index_cast %n : index to i64
  %padded = memref.alloc(%n) : memref<?x2x7x7xbf16>
  linalg.generic {indexing_maps = [#id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      outs(%padded : memref<?x2x7x7xbf16>) attrs = {kiln.call_part = "pad"} {
  ^bb0(%o: bf16):
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
    %v = memref.load %x[%i0, %i1, %h1, %w1] : memref<?x2x5x5xbf16>
    %in = arith.cmpi eq, %h, %h1 : index
    %r = arith.select %in, %v, %zero : bf16
    linalg.yield %r : bf16
  }
  %bias = memref.get_global @b : memref<3xf32>
  linalg.generic {indexing_maps = [#ch, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%bias : memref<3xf32>) outs(%y : memref<?x3x3x3xf32>) attrs = {kiln.call_part = "init"} {
  ^bb0(%i: f32, %o: f32):
    linalg.yield %i : f32
  }
  %col = memref.alloc(%n) : memref<?x2x3x3x3x3xbf16>
  linalg.generic {indexing_maps = [#win, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]}
      ins(%padded : memref<?x2x7x7xbf16>) outs(%col : memref<?x2x3x3x3x3xbf16>) attrs = {kiln.call_part = "im2col"} {
  ^bb0(%i: bf16, %o: bf16):
    linalg.yield %i : bf16
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
  %col3 = memref.reshape %col(%cshape) : (memref<?x2x3x3x3x3xbf16>, memref<3xi64>) -> memref<?x18x9xbf16>
  %wg = memref.get_global @w : memref<3x2x3x3xbf16>
  %ws = memref.get_global @wshape : memref<2xi64>
  %w2 = memref.reshape %wg(%ws) : (memref<3x2x3x3xbf16>, memref<2xi64>) -> memref<3x18xbf16>
  %yshape = memref.alloc() : memref<3xi64>
  memref.store %n64, %yshape[%c0] : memref<3xi64>
  memref.store %c3, %yshape[%c1i] : memref<3xi64>
  memref.store %c9, %yshape[%c2i] : memref<3xi64>
  %y3 = memref.reshape %y(%yshape) : (memref<?x3x3x3xf32>, memref<3xi64>) -> memref<?x3x9xf32>
  linalg.generic {indexing_maps = [#wm, #cm, #om], iterator_types = ["parallel", "parallel", "parallel", "reduction"], library_call = "native.conv2d_lowp",
                  kiln.call_dtypes = ["bf16", "bf16", "f32", "bf16"], kiln.call_attrs = {dilations = array<i64: 1, 1>, groups = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>}}
      ins(%w2, %col3 : memref<3x18xbf16>, memref<?x18x9xbf16>) outs(%y3 : memref<?x3x9xf32>) {
  ^bb0(%a: bf16, %b2: bf16, %acc: f32):
    %ea = arith.extf %a : bf16 to f32
    %eb = arith.extf %b2 : bf16 to f32
    %0 = arith.mulf %ea, %eb : f32
    %1 = arith.addf %acc, %0 : f32
    linalg.yield %1 : f32
  }
  memref.dealloc %col : memref<?x2x3x3x3x3xbf16>
  memref.dealloc %padded : memref<?x2x7x7xbf16>
  return
}

// -----

// Batched activations in f16 (attention scores: q [b, m, k] times k [b, n, k]):
// a loop over the batch, B transposed (tb = 1), dtype 1 (f16), no slot (B
// is no constant), beta 1 (no zero fill before: the product accumulates).
#qa = affine_map<(b, m, n, k) -> (b, m, k)>
#qb = affine_map<(b, m, n, k) -> (b, n, k)>
#qc = affine_map<(b, m, n, k) -> (b, m, n)>
// CHECK-LABEL: func.func private @kiln_lowp_gemm_0(
// CHECK-DAG: %[[TB:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[DT:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[BETA:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-DAG: %[[NOSLOT:.*]] = arith.constant 0 : i64
// CHECK: scf.for
// CHECK: call @kiln_lowp_gemm({{.*}}, %[[TB]], %[[BETA]], {{.*}}, %[[DT]], %{{.*}}, %{{.*}})
// CHECK-NOT: kiln_release_packed
// CHECK-LABEL: func.func @scores(
// CHECK: call @kiln_lowp_gemm_0(%arg0, %arg1, %arg2)
func.func @scores(%q: memref<?x16x8xf16>, %k: memref<?x16x8xf16>, %s: memref<?x16x16xf32>) {
  linalg.generic {indexing_maps = [#qa, #qb, #qc], iterator_types = ["parallel", "parallel", "parallel", "reduction"], library_call = "native.matmul_lowp", kiln.call_attrs = {}, kiln.call_dtypes = ["f16", "f16", "f16"]}
      ins(%q, %k : memref<?x16x8xf16>, memref<?x16x8xf16>) outs(%s : memref<?x16x16xf32>) {
  ^bb0(%p: f16, %r: f16, %o: f32):
    %0 = arith.extf %p : f16 to f32
    %1 = arith.extf %r : f16 to f32
    %2 = arith.mulf %0, %1 : f32
    %3 = arith.addf %o, %2 : f32
    linalg.yield %3 : f32
  }
  return
}

// -----

// kiln.matmul_w8's placeholder (native.matmul_w8: the int8 weight rows [n, k]
// and their scales read at [n, k floordiv 4], group_size 4 from the op's
// attributes) becomes one kiln_w8_gemm call: the batch dim folds into the
// rows, the weight's elements are 1 byte, the scales' row stride and the group size are passed, no
// packing slot (the int8 rows are read as they are), beta 0 (the zero fill
// goes).
#a8 = affine_map<(b, m, n, k) -> (b, m, k)>
#w8 = affine_map<(b, m, n, k) -> (n, k)>
#s8 = affine_map<(b, m, n, k) -> (n, k floordiv 4)>
#c8 = affine_map<(b, m, n, k) -> (b, m, n)>
memref.global "private" constant @w8 : memref<4x8xi8> = dense<3>
memref.global "private" constant @s8 : memref<4x2xf32> = dense<0.5>

// CHECK: func.func private @kiln_w8_gemm(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i32)
// CHECK-LABEL: func.func private @kiln_lowp_gemm_0(
// CHECK-SAME: %{{.*}}: memref<?x?x8xf32>, %{{.*}}: memref<4x8xi8>, %{{.*}}: memref<4x2xf32>, %{{.*}}: memref<?x?x4xf32>)
// CHECK-DAG: %[[BETA:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK-NOT: kiln_lowp_pack
// CHECK: %[[M:.*]] = arith.muli %{{.*}}, %{{.*}} : i64
// CHECK-NOT: scf.for
// CHECK: arith.constant 4 : i64
// CHECK: arith.constant 1 : i64
// CHECK: arith.constant 4 : i64
// CHECK: arith.constant 4 : i64
// CHECK: %[[GRP:.*]] = arith.constant 4 : i64
// CHECK: call @kiln_w8_gemm(%[[M]], {{.*}}, %[[GRP]], %[[BETA]], {{.*}}, %[[THR]])
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_lowp_gemm_0(%arg0, %{{.*}}, %{{.*}}, %arg1)
// CHECK-NOT: linalg.
// CHECK: return
// GEN-LABEL: func.func @main(
// GEN: linalg.generic
// GEN-NOT: kiln_w8_gemm
func.func @main(%x: memref<?x?x8xf32>, %y: memref<?x?x4xf32>) {
  %w = memref.get_global @w8 : memref<4x8xi8>
  %s = memref.get_global @s8 : memref<4x2xf32>
  %z = arith.constant 0.0 : f32
  linalg.generic {indexing_maps = [affine_map<(b, m, n) -> ()>, affine_map<(b, m, n) -> (b, m, n)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z : f32) outs(%y : memref<?x?x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  linalg.generic {indexing_maps = [#a8, #w8, #s8, #c8], iterator_types = ["parallel", "parallel", "parallel", "reduction"], library_call = "native.matmul_w8", kiln.call_attrs = {group_size = 4 : i64}, kiln.call_dtypes = ["f32", "i8", "f32", "f32"]}
      ins(%x, %w, %s : memref<?x?x8xf32>, memref<4x8xi8>, memref<4x2xf32>) outs(%y : memref<?x?x4xf32>) {
  ^bb0(%p: f32, %q: i8, %r: f32, %acc: f32):
    %0 = arith.sitofp %q : i8 to f32
    %1 = arith.mulf %0, %r : f32
    %2 = arith.mulf %p, %1 : f32
    %3 = arith.addf %acc, %2 : f32
    linalg.yield %3 : f32
  }
  return
}

// -----

// kiln.matmul_integer's placeholder (native.matmul_integer; the op's dtypes
// say a is ui8, b i8) with a constant B becomes one kiln_i8_gemm call: the
// batch dim folds into the rows, the zero points are loaded and widened as
// their operands are (flags 1: a unsigned), B is packed
// once into a slot, beta 0 (the i32 zero fill goes).
#ai = affine_map<(b, m, n, k) -> (b, m, k)>
#bi = affine_map<(b, m, n, k) -> (k, n)>
#zi = affine_map<(b, m, n, k) -> ()>
#ci = affine_map<(b, m, n, k) -> (b, m, n)>
memref.global "private" constant @bi : memref<8x4xi8> = dense<3>

// CHECK: func.func private @kiln_i8_gemm(i64, i64, i64, i64, i64, i32, i64, i64, i32, i32, i32, i64, i64, i32, i64)
// CHECK-LABEL: func.func private @kiln_lowp_gemm_0(
// CHECK-SAME: %{{.*}}: memref<?x?x8xi8>, %{{.*}}: memref<8x4xi8>, %[[ZA:.*]]: memref<i8>, %[[ZB:.*]]: memref<i8>, %{{.*}}: memref<?x?x4xi32>)
// CHECK: %[[ZA8:.*]] = memref.load %[[ZA]][] : memref<i8>
// CHECK: %[[ZA32:.*]] = arith.extui %[[ZA8]] : i8 to i32
// CHECK: %[[ZB8:.*]] = memref.load %[[ZB]][] : memref<i8>
// CHECK: %[[ZB32:.*]] = arith.extsi %[[ZB8]] : i8 to i32
// CHECK: %[[FLAGS:.*]] = arith.constant 1 : i32
// CHECK: %[[BETA:.*]] = arith.constant 0 : i32
// CHECK: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK: memref.get_global @kiln_lowp_pack_0
// CHECK: %[[M:.*]] = arith.muli %{{.*}}, %{{.*}} : i64
// CHECK-NOT: scf.for
// CHECK: call @kiln_i8_gemm(%[[M]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ZA32]], %{{.*}}, %{{.*}}, %[[ZB32]], %[[FLAGS]], %[[BETA]], %{{.*}}, %{{.*}}, %[[THR]], %{{.*}})
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_lowp_gemm_0(%arg0, %{{.*}}, %arg1, %arg2, %arg3)
// CHECK-NOT: linalg.
// CHECK: return
// GEN-LABEL: func.func @main(
// GEN: linalg.generic
// GEN-NOT: kiln_i8_gemm
func.func @main(%x: memref<?x?x8xi8>, %za: memref<i8>, %zb: memref<i8>, %y: memref<?x?x4xi32>) {
  %b = memref.get_global @bi : memref<8x4xi8>
  %z = arith.constant 0 : i32
  linalg.generic {indexing_maps = [affine_map<(b, m, n) -> ()>, affine_map<(b, m, n) -> (b, m, n)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%z : i32) outs(%y : memref<?x?x4xi32>) {
  ^bb0(%in: i32, %out: i32):
    linalg.yield %in : i32
  }
  linalg.generic {indexing_maps = [#ai, #bi, #zi, #zi, #ci], iterator_types = ["parallel", "parallel", "parallel", "reduction"], library_call = "native.matmul_integer", kiln.call_attrs = {}, kiln.call_dtypes = ["ui8", "i8", "ui8", "i8", "i32"]}
      ins(%x, %b, %za, %zb : memref<?x?x8xi8>, memref<8x4xi8>, memref<i8>, memref<i8>) outs(%y : memref<?x?x4xi32>) {
  ^bb0(%p: i8, %q: i8, %r: i8, %s: i8, %acc: i32):
    %0 = arith.extui %p : i8 to i32
    %1 = arith.extui %r : i8 to i32
    %2 = arith.subi %0, %1 : i32
    %3 = arith.extsi %q : i8 to i32
    %4 = arith.extsi %s : i8 to i32
    %5 = arith.subi %3, %4 : i32
    %6 = arith.muli %2, %5 : i32
    %7 = arith.addi %acc, %6 : i32
    linalg.yield %7 : i32
  }
  return
}

// -----

// A placeholder the kernel cannot take as it lies (an integer product whose B
// has a batch dim) stays generated code, its marks dropped.
// CHECK-LABEL: func.func @batched_b(
// CHECK-NOT: kiln_i8_gemm
// CHECK: linalg.generic
// CHECK-NOT: library_call
// CHECK-NOT: kiln.call_
// CHECK: return
func.func @batched_b(%x: memref<2x3x8xi8>, %b: memref<2x8x4xi8>, %za: memref<i8>, %zb: memref<i8>, %y: memref<2x3x4xi32>) {
  linalg.generic {indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, k, n)>, affine_map<(b, m, n, k) -> ()>, affine_map<(b, m, n, k) -> ()>, affine_map<(b, m, n, k) -> (b, m, n)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"], library_call = "native.matmul_integer", kiln.call_attrs = {}, kiln.call_dtypes = ["i8", "i8", "i8", "i8", "i32"]}
      ins(%x, %b, %za, %zb : memref<2x3x8xi8>, memref<2x8x4xi8>, memref<i8>, memref<i8>) outs(%y : memref<2x3x4xi32>) {
  ^bb0(%p: i8, %q: i8, %r: i8, %s: i8, %acc: i32):
    %0 = arith.extsi %p : i8 to i32
    %1 = arith.extsi %r : i8 to i32
    %2 = arith.subi %0, %1 : i32
    %3 = arith.extsi %q : i8 to i32
    %4 = arith.extsi %s : i8 to i32
    %5 = arith.subi %3, %4 : i32
    %6 = arith.muli %2, %5 : i32
    %7 = arith.addi %acc, %6 : i32
    linalg.yield %7 : i32
  }
  return
}

// -----

// Nothing is recognised from loops: a bf16 contraction no kiln op was chosen
// for (no library_call) stays generated code.
// CHECK-LABEL: func.func @unmarked(
// CHECK-NOT: kiln_lowp_gemm
// CHECK: linalg.generic
func.func @unmarked(%x: memref<4x8xbf16>, %w: memref<8x4xbf16>, %y: memref<4x4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xbf16>, memref<8x4xbf16>) outs(%y : memref<4x4xf32>) {
  ^bb0(%p: bf16, %q: bf16, %r: f32):
    %0 = arith.extf %p : bf16 to f32
    %1 = arith.extf %q : bf16 to f32
    %2 = arith.mulf %0, %1 : f32
    %3 = arith.addf %r, %2 : f32
    linalg.yield %3 : f32
  }
  return
}

// -----

// Hand-written placeholders with marks that do not describe the op (no
// group_size, a group of 0, dtypes of the wrong length) are not called: they
// stay generated code, without an error or a crash.
// CHECK-LABEL: func.func @bad_marks(
// CHECK-NOT: call @kiln_
// CHECK: linalg.generic
// CHECK: linalg.generic
// CHECK: linalg.generic
// CHECK-NOT: call @kiln_
// CHECK: return
#ba = affine_map<(m, n, k) -> (m, k)>
#bw = affine_map<(m, n, k) -> (n, k)>
#bs = affine_map<(m, n, k) -> (n, k floordiv 4)>
#bc = affine_map<(m, n, k) -> (m, n)>
func.func @bad_marks(%x: memref<2x8xf32>, %w: memref<4x8xi8>, %s: memref<4x2xf32>, %y: memref<2x4xf32>) {
  linalg.generic {indexing_maps = [#ba, #bw, #bs, #bc], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.matmul_w8", kiln.call_attrs = {}, kiln.call_dtypes = ["f32", "i8", "f32", "f32"]}
      ins(%x, %w, %s : memref<2x8xf32>, memref<4x8xi8>, memref<4x2xf32>) outs(%y : memref<2x4xf32>) {
  ^bb0(%p: f32, %q: i8, %r: f32, %acc: f32):
    %0 = arith.sitofp %q : i8 to f32
    %1 = arith.mulf %0, %r : f32
    %2 = arith.mulf %p, %1 : f32
    %3 = arith.addf %acc, %2 : f32
    linalg.yield %3 : f32
  }
  linalg.generic {indexing_maps = [#ba, #bw, #bs, #bc], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.matmul_w8", kiln.call_attrs = {group_size = 0 : i64}, kiln.call_dtypes = ["f32", "i8", "f32", "f32"]}
      ins(%x, %w, %s : memref<2x8xf32>, memref<4x8xi8>, memref<4x2xf32>) outs(%y : memref<2x4xf32>) {
  ^bb0(%p: f32, %q: i8, %r: f32, %acc: f32):
    %0 = arith.sitofp %q : i8 to f32
    %1 = arith.mulf %0, %r : f32
    %2 = arith.mulf %p, %1 : f32
    %3 = arith.addf %acc, %2 : f32
    linalg.yield %3 : f32
  }
  linalg.generic {indexing_maps = [#ba, #bw, #bs, #bc], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.matmul_w8", kiln.call_attrs = {group_size = 4 : i64}, kiln.call_dtypes = ["f32"]}
      ins(%x, %w, %s : memref<2x8xf32>, memref<4x8xi8>, memref<4x2xf32>) outs(%y : memref<2x4xf32>) {
  ^bb0(%p: f32, %q: i8, %r: f32, %acc: f32):
    %0 = arith.sitofp %q : i8 to f32
    %1 = arith.mulf %0, %r : f32
    %2 = arith.mulf %p, %1 : f32
    %3 = arith.addf %acc, %2 : f32
    linalg.yield %3 : f32
  }
  return
}

// -----

// An integer placeholder whose zero points are not scalars is not called either.
// CHECK-LABEL: func.func @vector_zero_points(
// CHECK-NOT: call @kiln_
// CHECK: linalg.generic
// CHECK-NOT: call @kiln_
// CHECK: return
func.func @vector_zero_points(%x: memref<2x8xi8>, %b: memref<8x4xi8>, %za: memref<2xi8>, %zb: memref<4xi8>, %y: memref<2x4xi32>) {
  linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m)>, affine_map<(m, n, k) -> (n)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.matmul_integer", kiln.call_attrs = {}, kiln.call_dtypes = ["i8", "i8", "i8", "i8", "i32"]}
      ins(%x, %b, %za, %zb : memref<2x8xi8>, memref<8x4xi8>, memref<2xi8>, memref<4xi8>) outs(%y : memref<2x4xi32>) {
  ^bb0(%p: i8, %q: i8, %r: i8, %s: i8, %acc: i32):
    %0 = arith.extsi %p : i8 to i32
    %1 = arith.extsi %r : i8 to i32
    %2 = arith.subi %0, %1 : i32
    %3 = arith.extsi %q : i8 to i32
    %4 = arith.extsi %s : i8 to i32
    %5 = arith.subi %3, %4 : i32
    %6 = arith.muli %2, %5 : i32
    %7 = arith.addi %acc, %6 : i32
    linalg.yield %7 : i32
  }
  return
}
