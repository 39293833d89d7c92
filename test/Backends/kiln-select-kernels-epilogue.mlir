// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-select-kernels | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --kiln-fuse --kiln-select-kernels | FileCheck %s --check-prefix=BLAS
// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-select-kernels --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS

// In a fused group, the ops after a product or convolution that its
// library call applies are chosen on kiln IR too: each gets the call's
// entry (kiln.impl) and its role (kiln.epilogue), in the order the call
// applies them -- after an f32 matmul a bias add ([N]), an activation (ReLU
// or exact GELU), a residual add; after an f32 convolution a residual add,
// a ReLU, a sum or mean over the pixels.  Only the native runtime's calls
// apply epilogues: with KILN_NATIVE=0 there are none.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @gemm_all
// CHECK: "kiln.matmul"{{.*}}kiln.impl = "native.gemm"
// CHECK-NEXT: "kiln.add"{{.*}}{kiln.epilogue = "bias", kiln.impl = "native.gemm", kiln.why = "bias: applied in native.gemm's call"}
// CHECK-NEXT: "kiln.gelu"{{.*}}{kiln.epilogue = "gelu", kiln.impl = "native.gemm"
// CHECK-NEXT: "kiln.add"{{.*}}{kiln.epilogue = "residual", kiln.impl = "native.gemm"
// CHECK-NEXT: "kiln.yield"
// BLAS-LABEL: func.func @gemm_all
// BLAS: "kiln.matmul"{{.*}}kiln.impl = "native.gemm"
// BLAS-NOT: kiln.epilogue
// BLAS: return
// STATS: kiln-select-kernels
// STATS-NEXT: (1) library kernels
// STATS-NEXT: (3) epilogue steps
func.func @gemm_all(%x: !kiln.tensor<["B", 16], f32>, %r: !kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<16x32xf32>} : () -> !kiln.tensor<[16, 32], f32>
  %b = "kiln.constant"() {value = dense<0.25> : tensor<32xf32>} : () -> !kiln.tensor<[32], f32>
  %m = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %s = "kiln.add"(%m, %b) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<["B", 32], f32>
  %g = "kiln.gelu"(%s) : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %o = "kiln.add"(%r, %g) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  return %o : !kiln.tensor<["B", 32], f32>
}

// -----

// Near-misses: the chain stops at the first op the call cannot apply.  The
// tanh GELU is generated code (the bias before it is taken); a bias of
// [1, N] is not an [N] bias (nothing taken); a value the group also returns
// ends the chain (its own step is taken); a bias after the activation is
// out of order (the ReLU is taken).
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @gemm_near_misses
// CHECK: "kiln.add"{{.*}}kiln.epilogue = "bias"
// CHECK-NEXT: "kiln.gelu"{{.*}}approximate = "tanh"}
// CHECK: "kiln.matmul"
// CHECK-NEXT: "kiln.add"(%{{[a-z0-9]+}}, %{{[a-z0-9]+}}) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[1, 32], f32>)
// CHECK: "kiln.matmul"
// CHECK-NEXT: "kiln.add"{{.*}}kiln.epilogue = "bias"
// CHECK-NEXT: "kiln.relu"(%{{[a-z0-9]+}}) :
// CHECK: "kiln.matmul"
// CHECK-NEXT: "kiln.relu"{{.*}}kiln.epilogue = "relu"
// CHECK-NEXT: "kiln.add"(%{{[a-z0-9]+}}, %{{[a-z0-9]+}}) :
// STATS: kiln-select-kernels
// STATS-NEXT: (4) library kernels
// STATS-NEXT: (3) epilogue steps
func.func @gemm_near_misses(%x: !kiln.tensor<["B", 16], f32>) -> (!kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>) {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<16x32xf32>} : () -> !kiln.tensor<[16, 32], f32>
  %b = "kiln.constant"() {value = dense<0.25> : tensor<32xf32>} : () -> !kiln.tensor<[32], f32>
  %b2 = "kiln.constant"() {value = dense<0.25> : tensor<1x32xf32>} : () -> !kiln.tensor<[1, 32], f32>
  %m1 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %s1 = "kiln.add"(%m1, %b) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<["B", 32], f32>
  %g1 = "kiln.gelu"(%s1) {approximate = "tanh"} : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %m2 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %s2 = "kiln.add"(%m2, %b2) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[1, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %m3 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %s3 = "kiln.add"(%m3, %b) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<["B", 32], f32>
  %r3 = "kiln.relu"(%s3) : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %m4 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %r4 = "kiln.relu"(%m4) : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %s4 = "kiln.add"(%r4, %b) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<["B", 32], f32>
  return %g1, %s2, %s3, %r3, %s4 : !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>
}

// -----

// A ResNet block's tail and a classifier head: residual add, ReLU, then a
// mean over the pixels.  A mean over symbolic pixels is not taken (the
// call divides by a count it knows), the ReLU before it is.
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "H", min = 1 : i64, max = 32 : i64} : () -> ()
// CHECK-LABEL: func.func @conv_steps
// CHECK: "kiln.conv2d"{{.*}}kiln.impl = "native.conv2d"
// CHECK-NEXT: "kiln.add"{{.*}}kiln.epilogue = "residual", kiln.impl = "native.conv2d"
// CHECK-NEXT: "kiln.relu"{{.*}}kiln.epilogue = "relu", kiln.impl = "native.conv2d"
// CHECK-NEXT: "kiln.reduce_mean"{{.*}}kiln.epilogue = "mean", kiln.impl = "native.conv2d"
// CHECK: "kiln.conv2d"{{.*}}kiln.impl = "native.conv2d"
// CHECK-NEXT: "kiln.relu"{{.*}}kiln.epilogue = "relu"
// CHECK-NEXT: "kiln.reduce_mean"(%{{[a-z0-9]+}}) {axes = array<i64: 2, 3>, keepdims = true} :
// BLAS-LABEL: func.func @conv_steps
// BLAS-NOT: kiln.epilogue
// BLAS: return
// STATS: kiln-select-kernels
// STATS-NEXT: (2) library kernels
// STATS-NEXT: (4) epilogue steps
func.func @conv_steps(%x: !kiln.tensor<["N", 4, 6, 6], f32>, %y: !kiln.tensor<["N", 4, "H", "H"], f32>) -> (!kiln.tensor<["N", 4, 1, 1], f32>, !kiln.tensor<["N", 4, 1, 1], f32>) {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> !kiln.tensor<[4, 4, 3, 3], f32>
  %c = "kiln.conv2d"(%x, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 6, 6], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %a = "kiln.add"(%c, %x) : (!kiln.tensor<["N", 4, 6, 6], f32>, !kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%a) : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %m = "kiln.reduce_mean"(%r) {axes = array<i64: 2, 3>, keepdims = true} : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32>
  %c2 = "kiln.conv2d"(%y, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, "H", "H"], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, "H", "H"], f32>
  %r2 = "kiln.relu"(%c2) : (!kiln.tensor<["N", 4, "H", "H"], f32>) -> !kiln.tensor<["N", 4, "H", "H"], f32>
  %m2 = "kiln.reduce_mean"(%r2) {axes = array<i64: 2, 3>, keepdims = true} : (!kiln.tensor<["N", 4, "H", "H"], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32>
  return %m, %m2 : !kiln.tensor<["N", 4, 1, 1], f32>, !kiln.tensor<["N", 4, 1, 1], f32>
}
