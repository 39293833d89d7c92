// RUN: kiln-opt %s --split-input-file --kiln-simplify | FileCheck %s

// kiln-simplify's `rms-norm`, `rms-norm-weight` and `rms-norm-cast`
// patterns: the RMS norm written out (as the torch importer produces
// LLaMA's RMSNorm) becomes one kiln.rms_norm; near-misses stay.

!t = !kiln.tensor<["B", "L", 64], f32>
!r = !kiln.tensor<["B", "L", 1], f32>
!f = !kiln.tensor<[], f32>
!w = !kiln.tensor<[64], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// LLaMA's spelling: x * rsqrt(mean(pow(x, 2), -1, keepdim) + eps), then the
// weight in front: one rms_norm with the weight folded in.
// CHECK-LABEL: func.func @rms_pow_rsqrt_weight
// CHECK-NEXT: %[[R:.*]] = "kiln.rms_norm"(%arg0, %arg1) {axis = -1 : i64, epsilon = 9.9999999999999995E-7 : f64, operandSegmentSizes = array<i32: 1, 1>}
// CHECK-NEXT: return %[[R]]
func.func @rms_pow_rsqrt_weight(%x: !t, %w: !w) -> !t {
  %two = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !f
  %eps = "kiln.constant"() {value = dense<1.0e-6> : tensor<f32>} : () -> !f
  %sq = "kiln.pow"(%x, %two) : (!t, !f) -> !t
  %ms = "kiln.reduce_mean"(%sq) {axes = array<i64: -1>, keepdims = true} : (!t) -> !r
  %a = "kiln.add"(%ms, %eps) : (!r, !f) -> !r
  %i = "kiln.rsqrt"(%a) : (!r) -> !r
  %n = "kiln.mul"(%x, %i) : (!t, !r) -> !t
  %y = "kiln.mul"(%w, %n) : (!w, !t) -> !t
  return %y : !t
}

// -----

// x * x for the square, the rsqrt first in the product, eps first in the sum,
// and the weight after: the same op.
!t = !kiln.tensor<["B", "L", 64], f32>
!r = !kiln.tensor<["B", "L", 1], f32>
!f = !kiln.tensor<[1], f32>
!w = !kiln.tensor<[64], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-LABEL: func.func @rms_mul_square
// CHECK-NEXT: %[[R:.*]] = "kiln.rms_norm"(%arg0, %arg1) {axis = -1 : i64, epsilon = 1.000000e-05 : f64
// CHECK-NEXT: return %[[R]]
func.func @rms_mul_square(%x: !t, %w: !w) -> !t {
  %eps = "kiln.constant"() {value = dense<1.0e-5> : tensor<1xf32>} : () -> !f
  %sq = "kiln.mul"(%x, %x) : (!t, !t) -> !t
  %ms = "kiln.reduce_mean"(%sq) {axes = array<i64: 2>, keepdims = true} : (!t) -> !r
  %a = "kiln.add"(%eps, %ms) : (!f, !r) -> !r
  %i = "kiln.rsqrt"(%a) : (!r) -> !r
  %n = "kiln.mul"(%i, %x) : (!r, !t) -> !t
  %y = "kiln.mul"(%n, %w) : (!t, !w) -> !t
  return %y : !t
}

// -----

// x / sqrt(mean(x^2) + eps), no weight; over the last two axes.
!t = !kiln.tensor<["B", 4, 16], f32>
!r = !kiln.tensor<["B", 1, 1], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @rms_div_sqrt
// CHECK-NEXT: %[[R:.*]] = "kiln.rms_norm"(%arg0) {axis = -2 : i64, epsilon = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 0>}
// CHECK-NEXT: return %[[R]]
func.func @rms_div_sqrt(%x: !t) -> !t {
  %two = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !f
  %eps = "kiln.constant"() {value = dense<1.0e-5> : tensor<f32>} : () -> !f
  %sq = "kiln.pow"(%x, %two) : (!t, !f) -> !t
  %ms = "kiln.reduce_mean"(%sq) {axes = array<i64: 1, 2>, keepdims = true} : (!t) -> !r
  %a = "kiln.add"(%ms, %eps) : (!r, !f) -> !r
  %s = "kiln.sqrt"(%a) : (!r) -> !r
  %n = "kiln.div"(%x, %s) : (!t, !r) -> !t
  return %n : !t
}

// -----

// transformers' LlamaRMSNorm on bf16: x upcast to f32, normalized, cast back
// to bf16, times the bf16 weight: one bf16 rms_norm (it computes in f32 and
// rounds before the weight, as the source does).
!b = !kiln.tensor<["B", "L", 64], bf16>
!t = !kiln.tensor<["B", "L", 64], f32>
!r = !kiln.tensor<["B", "L", 1], f32>
!f = !kiln.tensor<[], f32>
!w = !kiln.tensor<[64], bf16>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-LABEL: func.func @rms_bf16_casts
// CHECK-NEXT: %[[R:.*]] = "kiln.rms_norm"(%arg0, %arg1) {axis = -1 : i64, epsilon = 9.9999999999999995E-7 : f64, operandSegmentSizes = array<i32: 1, 1>} : (!kiln.tensor<["B", "L", 64], bf16>, !kiln.tensor<[64], bf16>) -> !kiln.tensor<["B", "L", 64], bf16>
// CHECK-NEXT: return %[[R]]
func.func @rms_bf16_casts(%xb: !b, %w: !w) -> !b {
  %two = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !f
  %eps = "kiln.constant"() {value = dense<1.0e-6> : tensor<f32>} : () -> !f
  %x = "kiln.cast"(%xb) {dtype = f32} : (!b) -> !t
  %sq = "kiln.pow"(%x, %two) : (!t, !f) -> !t
  %ms = "kiln.reduce_mean"(%sq) {axes = array<i64: -1>, keepdims = true} : (!t) -> !r
  %a = "kiln.add"(%ms, %eps) : (!r, !f) -> !r
  %i = "kiln.rsqrt"(%a) : (!r) -> !r
  %n = "kiln.mul"(%x, %i) : (!t, !r) -> !t
  %nb = "kiln.cast"(%n) {dtype = bf16} : (!t) -> !b
  %y = "kiln.mul"(%w, %nb) : (!w, !b) -> !b
  return %y : !b
}

// -----

// Near-misses: the mean over a leading axis; eps added after the sqrt; the
// square of another value; a cube; a mean without keepdims (reshaped back
// to a row statistic: not read through the reshape); a layer norm stays one.
!t = !kiln.tensor<["B", "L", 64], f32>
!r = !kiln.tensor<["B", "L", 1], f32>
!l = !kiln.tensor<[1, "L", 64], f32>
!k = !kiln.tensor<["B", "L"], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-LABEL: func.func @near_misses
// CHECK-NOT: kiln.rms_norm
// CHECK: "kiln.layer_norm"
// CHECK-NOT: kiln.rms_norm
// CHECK: return
func.func @near_misses(%x: !t, %z: !t) -> (!t, !t, !t, !t, !t, !t) {
  %two = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !f
  %three = "kiln.constant"() {value = dense<3.0> : tensor<f32>} : () -> !f
  %eps = "kiln.constant"() {value = dense<1.0e-6> : tensor<f32>} : () -> !f
  %sq = "kiln.pow"(%x, %two) : (!t, !f) -> !t
  // mean over axis 0
  %m0 = "kiln.reduce_mean"(%sq) {axes = array<i64: 0>, keepdims = true} : (!t) -> !l
  %a0 = "kiln.add"(%m0, %eps) : (!l, !f) -> !l
  %i0 = "kiln.rsqrt"(%a0) : (!l) -> !l
  %y0 = "kiln.mul"(%x, %i0) : (!t, !l) -> !t
  // eps after the sqrt: x / (sqrt(mean) + eps)
  %ms = "kiln.reduce_mean"(%sq) {axes = array<i64: -1>, keepdims = true} : (!t) -> !r
  %s1 = "kiln.sqrt"(%ms) : (!r) -> !r
  %a1 = "kiln.add"(%s1, %eps) : (!r, !f) -> !r
  %y1 = "kiln.div"(%x, %a1) : (!t, !r) -> !t
  // normalizes z by x's statistics
  %a2 = "kiln.add"(%ms, %eps) : (!r, !f) -> !r
  %i2 = "kiln.rsqrt"(%a2) : (!r) -> !r
  %y2 = "kiln.mul"(%z, %i2) : (!t, !r) -> !t
  // a cube
  %cu = "kiln.pow"(%x, %three) : (!t, !f) -> !t
  %m3 = "kiln.reduce_mean"(%cu) {axes = array<i64: -1>, keepdims = true} : (!t) -> !r
  %a3 = "kiln.add"(%m3, %eps) : (!r, !f) -> !r
  %i3 = "kiln.rsqrt"(%a3) : (!r) -> !r
  %y3 = "kiln.mul"(%x, %i3) : (!t, !r) -> !t
  // no keepdims: [B, L] does not broadcast against [B, L, 64] as a row statistic
  %m4 = "kiln.reduce_mean"(%sq) {axes = array<i64: -1>} : (!t) -> !k
  %a4 = "kiln.add"(%m4, %eps) : (!k, !f) -> !k
  %i4 = "kiln.rsqrt"(%a4) : (!k) -> !k
  %r4 = "kiln.reshape"(%i4) {shape = ["B", "L", 1]} : (!k) -> !r
  %y4 = "kiln.mul"(%x, %r4) : (!t, !r) -> !t
  // a layer norm
  %mu = "kiln.reduce_mean"(%x) {axes = array<i64: -1>, keepdims = true} : (!t) -> !r
  %d = "kiln.sub"(%x, %mu) : (!t, !r) -> !t
  %d2 = "kiln.mul"(%d, %d) : (!t, !t) -> !t
  %v = "kiln.reduce_mean"(%d2) {axes = array<i64: -1>, keepdims = true} : (!t) -> !r
  %a5 = "kiln.add"(%v, %eps) : (!r, !f) -> !r
  %i5 = "kiln.rsqrt"(%a5) : (!r) -> !r
  %y5 = "kiln.mul"(%d, %i5) : (!t, !r) -> !t
  return %y0, %y1, %y2, %y3, %y4, %y5 : !t, !t, !t, !t, !t, !t
}
