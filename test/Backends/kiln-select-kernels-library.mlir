// RUN: kiln-opt %s --split-input-file --kiln-select-kernels | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-select-kernels=builtin=0 | FileCheck %s --check-prefix=NONE
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --kiln-select-kernels | FileCheck %s --check-prefix=BLAS
// RUN: kiln-opt %s --split-input-file --kiln-select-kernels --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS

// kiln's own CPU library kernels are registry entries
// (backends/cpu/library_kernels.py), chosen on kiln IR: an op they fit gets
// kiln.impl (the entry) and kiln.why (the reason); an op without kiln.impl
// is generated code.  builtin=0 chooses none (NONE); without the native
// runtime (KILN_NATIVE=0) only the library GEMM is chosen (BLAS).

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// Layer norm: f32 at any shape class (symbolic rows, static rows, two
// normalized dims); f16 has no native kernel.
// CHECK-LABEL: func.func @layer_norms
// CHECK: "kiln.layer_norm"(%arg0, %arg1, %arg2) {{{.*}}kiln.impl = "native.layer_norm", kiln.why = "f32 rows: statistics and normalization in one native call, rows over the pool"
// CHECK: "kiln.layer_norm"(%arg3) {{{.*}}kiln.impl = "native.layer_norm"
// CHECK: "kiln.layer_norm"(%arg4)
// CHECK-NOT: kiln.impl
// CHECK-SAME: -> !kiln.tensor<["B", 8], f16>
// NONE-LABEL: func.func @layer_norms
// NONE-NOT: kiln.impl
// BLAS-LABEL: func.func @layer_norms
// BLAS-NOT: kiln.impl
func.func @layer_norms(%x: !kiln.tensor<["B", "L", 256], f32>, %w: !kiln.tensor<[256], f32>, %b: !kiln.tensor<[256], f32>, %s: !kiln.tensor<[4, 6, 5], f32>, %h: !kiln.tensor<["B", 8], f16>) -> (!kiln.tensor<["B", "L", 256], f32>, !kiln.tensor<[4, 6, 5], f32>, !kiln.tensor<["B", 8], f16>) {
  %0 = "kiln.layer_norm"(%x, %w, %b) {axis = -1 : i64, epsilon = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["B", "L", 256], f32>, !kiln.tensor<[256], f32>, !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", "L", 256], f32>
  %1 = "kiln.layer_norm"(%s) {axis = 1 : i64, operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<[4, 6, 5], f32>) -> !kiln.tensor<[4, 6, 5], f32>
  %2 = "kiln.layer_norm"(%h) {operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<["B", 8], f16>) -> !kiln.tensor<["B", 8], f16>
  return %0, %1, %2 : !kiln.tensor<["B", "L", 256], f32>, !kiln.tensor<[4, 6, 5], f32>, !kiln.tensor<["B", 8], f16>
}

// -----

// RMS norm: f32 takes the native kernel, bf16 the generated code (which
// computes in f32 and rounds).
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @rms_norms
// CHECK: "kiln.rms_norm"(%arg0, %arg1) {{{.*}}kiln.impl = "native.rms_norm"
// CHECK: "kiln.rms_norm"(%arg2)
// CHECK-NOT: kiln.impl
// CHECK-SAME: bf16
func.func @rms_norms(%x: !kiln.tensor<["B", 64], f32>, %w: !kiln.tensor<[64], f32>, %h: !kiln.tensor<["B", 64], bf16>) -> (!kiln.tensor<["B", 64], f32>, !kiln.tensor<["B", 64], bf16>) {
  %0 = "kiln.rms_norm"(%x, %w) {axis = -1 : i64, epsilon = 1.000000e-06 : f64, operandSegmentSizes = array<i32: 1, 1>} : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64], f32>) -> !kiln.tensor<["B", 64], f32>
  %1 = "kiln.rms_norm"(%h) {axis = -1 : i64, epsilon = 1.000000e-06 : f64, operandSegmentSizes = array<i32: 1, 0>} : (!kiln.tensor<["B", 64], bf16>) -> !kiln.tensor<["B", 64], bf16>
  return %0, %1 : !kiln.tensor<["B", 64], f32>, !kiln.tensor<["B", 64], bf16>
}

// -----

// Max pool: strided windows of at most 64 taps whose pads stay within half
// the kernel take the native kernel, the reason naming stride and taps;
// stride 1, ceil_mode, 81 taps and pads past half the kernel do not.
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func @max_pools
// CHECK: "kiln.max_pool2d"(%arg0) {{{.*}}kiln.impl = "native.max_pool2d", kiln.why = "strided window (stride 2x2, 9 taps): taps outside the input skipped, planes over the pool"
// CHECK: "kiln.max_pool2d"(%arg0) {{{.*}}kiln.impl = "native.max_pool2d", kiln.why = "strided window (stride 3x2, 4 taps)
// CHECK-NOT: kiln.impl
// CHECK: return
func.func @max_pools(%x: !kiln.tensor<["N", 8, 32, 32], f32>) -> (!kiln.tensor<["N", 8, 16, 16], f32>, !kiln.tensor<["N", 8, 11, 16], f32>, !kiln.tensor<["N", 8, 32, 32], f32>, !kiln.tensor<["N", 8, 17, 17], f32>, !kiln.tensor<["N", 8, 12, 12], f32>, !kiln.tensor<["N", 8, 17, 17], f32>) {
  %0 = "kiln.max_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (!kiln.tensor<["N", 8, 32, 32], f32>) -> !kiln.tensor<["N", 8, 16, 16], f32>
  %1 = "kiln.max_pool2d"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 3, 2>} : (!kiln.tensor<["N", 8, 32, 32], f32>) -> !kiln.tensor<["N", 8, 11, 16], f32>
  %2 = "kiln.max_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>} : (!kiln.tensor<["N", 8, 32, 32], f32>) -> !kiln.tensor<["N", 8, 32, 32], f32>
  %3 = "kiln.max_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, ceil_mode = true} : (!kiln.tensor<["N", 8, 32, 32], f32>) -> !kiln.tensor<["N", 8, 17, 17], f32>
  %4 = "kiln.max_pool2d"(%x) {kernel = array<i64: 9, 9>, strides = array<i64: 2, 2>} : (!kiln.tensor<["N", 8, 32, 32], f32>) -> !kiln.tensor<["N", 8, 12, 12], f32>
  %5 = "kiln.max_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 2, 2, 2, 2>} : (!kiln.tensor<["N", 8, 32, 32], f32>) -> !kiln.tensor<["N", 8, 17, 17], f32>
  return %0, %1, %2, %3, %4, %5 : !kiln.tensor<["N", 8, 16, 16], f32>, !kiln.tensor<["N", 8, 11, 16], f32>, !kiln.tensor<["N", 8, 32, 32], f32>, !kiln.tensor<["N", 8, 17, 17], f32>, !kiln.tensor<["N", 8, 12, 12], f32>, !kiln.tensor<["N", 8, 17, 17], f32>
}

// -----

// Inside a fused group (a residual add fused into the norm's kernel) the
// norm is chosen too: its group is lowered in place, the call beside the
// add's loops.  Ops with no library kernel (softmax) stay unmarked.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @fused
// CHECK: "kiln.fused"
// CHECK: "kiln.add"(%{{[a-z0-9]+}}, %{{[a-z0-9]+}}) : (
// CHECK: "kiln.layer_norm"{{.*}}kiln.impl = "native.layer_norm"
// CHECK: "kiln.softmax"(%{{[a-z0-9]+}}) {axis = -1 : i64} : (
// CHECK: return
func.func @fused(%x: !kiln.tensor<["B", 32], f32>, %y: !kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32> {
  %0 = "kiln.fused"(%x, %y) ({
  ^bb0(%a: !kiln.tensor<["B", 32], f32>, %b: !kiln.tensor<["B", 32], f32>):
    %1 = "kiln.add"(%a, %b) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
    %2 = "kiln.layer_norm"(%1) {operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
    "kiln.yield"(%2) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 32], f32>) -> ()
  }) {kind = "reduction", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %3 = "kiln.softmax"(%0) {axis = -1 : i64} : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  return %3 : !kiln.tensor<["B", 32], f32>
}

// STATS: kiln-select-kernels
// STATS-NEXT: (2) library kernels
// STATS: kiln-select-kernels
// STATS-NEXT: (1) library kernels
// STATS: kiln-select-kernels
// STATS-NEXT: (2) library kernels
// STATS: kiln-select-kernels
// STATS-NEXT: (1) library kernels

// -----

// Products: an f32 kiln.matmul of matrices takes the library GEMM
// (native.gemm), a bf16 / f16 one native.matmul_lowp (summed in f32), an f32
// kiln.matmul_w8 native.matmul_w8, a kiln.matmul_integer (i8 / ui8)
// native.matmul_integer; their contraction is the placeholder.  A matrix
// times a vector, and a bf16 matmul_w8, stay generated.  Without the native
// runtime (BLAS) only the library GEMM is chosen: it needs OpenBLAS alone.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @products
// CHECK: "kiln.matmul"(%arg0, %arg1) {kiln.impl = "native.matmul_lowp", kiln.why = "bf16 product summed in f32 ({{.*}}); a constant B is packed once"}
// CHECK: "kiln.matmul"(%arg2, %arg3) {kiln.impl = "native.matmul_lowp", kiln.why = "f16 product summed in f32 (widened to f32, FMAs); a constant B is packed once"}
// CHECK: "kiln.matmul"(%arg0, %arg4) :
// CHECK: "kiln.matmul"(%arg5, %arg6) {kiln.impl = "native.gemm", kiln.why = "f32 product: the native GEMM for few rows times a constant B, OpenBLAS sgemm otherwise (by M at run time)"}
// CHECK: "kiln.matmul_w8"(%arg5, %arg7, %arg8) {group_size = 32 : i64, kiln.impl = "native.matmul_w8", kiln.why = "f32 rows times int8 weight rows scaled per group: the weight read as it is, no f32 copy"}
// CHECK: "kiln.matmul_w8"(%arg9, %arg7, %arg10) {group_size = 32 : i64} :
// CHECK: "kiln.matmul_integer"(%arg11, %arg12, %arg13, %arg14) {kiln.impl = "native.matmul_integer", kiln.why = "8-bit product with zero points summed in i32 ({{.*}}); a constant B is packed once"}
// NONE-LABEL: func.func @products
// NONE-NOT: kiln.impl
// BLAS-LABEL: func.func @products
// BLAS: "kiln.matmul"(%arg0, %arg1) :
// BLAS: "kiln.matmul"(%arg2, %arg3) :
// BLAS: "kiln.matmul"(%arg0, %arg4) :
// BLAS: "kiln.matmul"(%arg5, %arg6) {kiln.impl = "native.gemm"
// BLAS: "kiln.matmul_w8"(%arg5, %arg7, %arg8) {group_size = 32 : i64} :
// BLAS: "kiln.matmul_w8"(%arg9, %arg7, %arg10) {group_size = 32 : i64} :
// BLAS: "kiln.matmul_integer"(%arg11, %arg12, %arg13, %arg14) :
func.func @products(%a: !kiln.tensor<["B", 16, 64], bf16>, %w: !kiln.tensor<[64, 32], bf16>, %h: !kiln.tensor<["B", 64], f16>, %hw: !kiln.tensor<[64, 32], f16>, %v: !kiln.tensor<[64], bf16>,
                    %x: !kiln.tensor<["B", 64], f32>, %xw: !kiln.tensor<[64, 32], f32>, %q: !kiln.tensor<[32, 64], i8>, %s: !kiln.tensor<[32, 2], f32>, %xb: !kiln.tensor<["B", 64], bf16>, %sb: !kiln.tensor<[32, 2], bf16>,
                    %ia: !kiln.tensor<["B", 3, 64], ui8>, %ib: !kiln.tensor<[64, 32], i8>, %za: !kiln.tensor<[], ui8>, %zb: !kiln.tensor<[], i8>)
    -> (!kiln.tensor<["B", 16, 32], bf16>, !kiln.tensor<["B", 32], f16>, !kiln.tensor<["B", 16], bf16>, !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], bf16>, !kiln.tensor<["B", 3, 32], i32>) {
  %0 = "kiln.matmul"(%a, %w) : (!kiln.tensor<["B", 16, 64], bf16>, !kiln.tensor<[64, 32], bf16>) -> !kiln.tensor<["B", 16, 32], bf16>
  %1 = "kiln.matmul"(%h, %hw) : (!kiln.tensor<["B", 64], f16>, !kiln.tensor<[64, 32], f16>) -> !kiln.tensor<["B", 32], f16>
  %2 = "kiln.matmul"(%a, %v) : (!kiln.tensor<["B", 16, 64], bf16>, !kiln.tensor<[64], bf16>) -> !kiln.tensor<["B", 16], bf16>
  %3 = "kiln.matmul"(%x, %xw) : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %4 = "kiln.matmul_w8"(%x, %q, %s) {group_size = 32 : i64} : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[32, 64], i8>, !kiln.tensor<[32, 2], f32>) -> !kiln.tensor<["B", 32], f32>
  %5 = "kiln.matmul_w8"(%xb, %q, %sb) {group_size = 32 : i64} : (!kiln.tensor<["B", 64], bf16>, !kiln.tensor<[32, 64], i8>, !kiln.tensor<[32, 2], bf16>) -> !kiln.tensor<["B", 32], bf16>
  %6 = "kiln.matmul_integer"(%ia, %ib, %za, %zb) : (!kiln.tensor<["B", 3, 64], ui8>, !kiln.tensor<[64, 32], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 3, 32], i32>
  return %0, %1, %2, %3, %4, %5, %6 : !kiln.tensor<["B", 16, 32], bf16>, !kiln.tensor<["B", 32], f16>, !kiln.tensor<["B", 16], bf16>, !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], bf16>, !kiln.tensor<["B", 3, 32], i32>
}
// STATS: kiln-select-kernels
// STATS-NEXT: (5) library kernels

// -----

// Convolutions: an f32 kiln.conv2d of one group takes native.conv2d (its
// im2col product the placeholder), at a symbolic batch and at static
// shapes, with or without a bias; a depthwise one (a channel a group)
// takes native.conv2d_depthwise; a bf16 one native.conv2d_lowp (the 16-bit
// GEMM on its im2col); one of two channels a group stays generated.  Without
// the native runtime the first is still chosen (with BLAS alone its product
// becomes sgemm over the im2col copy), the depthwise and bf16 ones not.
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func @convs
// CHECK: "kiln.conv2d"(%arg0, %arg1, %arg2) {{{.*}}kiln.impl = "native.conv2d", kiln.why = "f32 convolution: the native convolution gathers its im2col (padding and bias folded in) for a constant weight; sgemm over an im2col copy otherwise"
// CHECK: "kiln.conv2d"(%arg3, %arg1) {{{.*}}kiln.impl = "native.conv2d"
// CHECK: "kiln.conv2d"(%arg0, %arg4) {groups = 3 : i64, kiln.impl = "native.conv2d_depthwise", kiln.why = "f32 depthwise 3x3: each plane's window sums in vector registers, taps outside the input skipped (no padded copy), planes over the pool"
// CHECK: "kiln.conv2d"(%arg5, %arg6) {kiln.impl = "native.conv2d_lowp", kiln.why = "bf16 convolution: the weight times each image's im2col summed in f32 ({{.*}})", operandSegmentSizes = array<i32: 1, 1, 0>} :
// CHECK: "kiln.conv2d"(%arg7, %arg8) {groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} :
// BLAS-LABEL: func.func @convs
// BLAS: "kiln.conv2d"(%arg0, %arg1, %arg2) {{{.*}}kiln.impl = "native.conv2d"
// BLAS: "kiln.conv2d"(%arg0, %arg4) {groups = 3 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} :
// BLAS: "kiln.conv2d"(%arg5, %arg6) {operandSegmentSizes = array<i32: 1, 1, 0>} :
// NONE-LABEL: func.func @convs
// NONE-NOT: kiln.impl
func.func @convs(%x: !kiln.tensor<["N", 3, 8, 8], f32>, %w: !kiln.tensor<[4, 3, 3, 3], f32>, %b: !kiln.tensor<[4], f32>, %s: !kiln.tensor<[2, 3, 8, 8], f32>, %dw: !kiln.tensor<[3, 1, 3, 3], f32>, %h: !kiln.tensor<["N", 3, 8, 8], bf16>, %hw: !kiln.tensor<[4, 3, 3, 3], bf16>, %g: !kiln.tensor<["N", 4, 8, 8], f32>, %gw: !kiln.tensor<[4, 2, 3, 3], f32>)
    -> (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[2, 4, 6, 6], f32>, !kiln.tensor<["N", 3, 6, 6], f32>, !kiln.tensor<["N", 4, 6, 6], bf16>, !kiln.tensor<["N", 4, 6, 6], f32>) {
  %0 = "kiln.conv2d"(%x, %w, %b) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 3, 8, 8], f32>, !kiln.tensor<[4, 3, 3, 3], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %1 = "kiln.conv2d"(%s, %w) {operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<[2, 3, 8, 8], f32>, !kiln.tensor<[4, 3, 3, 3], f32>) -> !kiln.tensor<[2, 4, 6, 6], f32>
  %2 = "kiln.conv2d"(%x, %dw) {groups = 3 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 3, 8, 8], f32>, !kiln.tensor<[3, 1, 3, 3], f32>) -> !kiln.tensor<["N", 3, 6, 6], f32>
  %3 = "kiln.conv2d"(%h, %hw) {operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 3, 8, 8], bf16>, !kiln.tensor<[4, 3, 3, 3], bf16>) -> !kiln.tensor<["N", 4, 6, 6], bf16>
  %4 = "kiln.conv2d"(%g, %gw) {groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[4, 2, 3, 3], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  return %0, %1, %2, %3, %4 : !kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[2, 4, 6, 6], f32>, !kiln.tensor<["N", 3, 6, 6], f32>, !kiln.tensor<["N", 4, 6, 6], bf16>, !kiln.tensor<["N", 4, 6, 6], f32>
}
// STATS: kiln-select-kernels
// STATS-NEXT: (4) library kernels

// -----

// Attention: an f32 one takes the native flash attention; one it cannot
// take (a head dim past 256) stays generated code whose q k^T and p v
// products are the library GEMM's (kiln.parts, its lowering's placeholders);
// a bf16 one is generated loops throughout.  Without the native runtime the
// library GEMM still runs the products (BLAS).
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-LABEL: func.func @attentions
// CHECK: "kiln.attention"(%arg0, %arg0, %arg0) {{{.*}}kiln.impl = "native.attention"
// CHECK: "kiln.attention"(%arg1, %arg1, %arg1) {{{.*}}kiln.parts = "native.gemm", kiln.why = "generated attention chain: its q k^T and p v products on the library GEMM"
// CHECK: "kiln.attention"(%arg2, %arg2, %arg2) {operandSegmentSizes = array<i32: 1, 1, 1, 0>} :
// BLAS-LABEL: func.func @attentions
// BLAS: "kiln.attention"(%arg0, %arg0, %arg0) {{{.*}}kiln.parts = "native.gemm"
// BLAS: "kiln.attention"(%arg1, %arg1, %arg1) {{{.*}}kiln.parts = "native.gemm"
// BLAS-NOT: kiln.parts
// NONE-LABEL: func.func @attentions
// NONE-NOT: kiln.impl
// NONE-NOT: kiln.parts
func.func @attentions(%x: !kiln.tensor<["B", 4, "L", 64], f32>, %y: !kiln.tensor<["B", 2, "L", 320], f32>, %h: !kiln.tensor<["B", 2, "L", 64], bf16>)
    -> (!kiln.tensor<["B", 4, "L", 64], f32>, !kiln.tensor<["B", 2, "L", 320], f32>, !kiln.tensor<["B", 2, "L", 64], bf16>) {
  %0 = "kiln.attention"(%x, %x, %x) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 4, "L", 64], f32>, !kiln.tensor<["B", 4, "L", 64], f32>, !kiln.tensor<["B", 4, "L", 64], f32>) -> !kiln.tensor<["B", 4, "L", 64], f32>
  %1 = "kiln.attention"(%y, %y, %y) {operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, "L", 320], f32>, !kiln.tensor<["B", 2, "L", 320], f32>, !kiln.tensor<["B", 2, "L", 320], f32>) -> !kiln.tensor<["B", 2, "L", 320], f32>
  %2 = "kiln.attention"(%h, %h, %h) {operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, "L", 64], bf16>, !kiln.tensor<["B", 2, "L", 64], bf16>, !kiln.tensor<["B", 2, "L", 64], bf16>) -> !kiln.tensor<["B", 2, "L", 64], bf16>
  return %0, %1, %2 : !kiln.tensor<["B", 4, "L", 64], f32>, !kiln.tensor<["B", 2, "L", 320], f32>, !kiln.tensor<["B", 2, "L", 64], bf16>
}
// STATS: kiln-select-kernels
// STATS-NEXT: (1) library kernels
// STATS-NEXT: (1) generated ops with library parts
