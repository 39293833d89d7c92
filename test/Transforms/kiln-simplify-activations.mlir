// RUN: kiln-opt %s --split-input-file --kiln-simplify | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-simplify --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS

// kiln-simplify's `gelu` and `silu` patterns: activations written out (as the
// torch importer produces them) become their kiln ops; near-misses stay.

!t = !kiln.tensor<["B", 32], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// Exact GELU in three associations: (0.5 * x) * (1 + erf(x / sqrt 2)),
// x * (0.5 * (erf(x * 1/sqrt 2) + 1)), (x * (1 + erf(..))) / 2.
// CHECK-LABEL: func.func @gelu_erf
// CHECK-NEXT: %[[A:.*]] = "kiln.gelu"(%arg0) {approximate = "none"}
// CHECK-NEXT: %[[B:.*]] = "kiln.gelu"(%arg0) {approximate = "none"}
// CHECK-NEXT: %[[C:.*]] = "kiln.gelu"(%arg0) {approximate = "none"}
// CHECK-NEXT: return %[[A]], %[[B]], %[[C]]
// STATS: kiln-simplify
// STATS: (3) gelu
func.func @gelu_erf(%x: !t) -> (!t, !t, !t) {
  %half = "kiln.constant"() {value = dense<0.5> : tensor<f32>} : () -> !f
  %one = "kiln.constant"() {value = dense<1.0> : tensor<f32>} : () -> !f
  %two = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !f
  %sqrt2 = "kiln.constant"() {value = dense<1.41421354> : tensor<f32>} : () -> !f
  %isqrt2 = "kiln.constant"() {value = dense<0.707106769> : tensor<f32>} : () -> !f
  %hx = "kiln.mul"(%half, %x) : (!f, !t) -> !t
  %u = "kiln.div"(%x, %sqrt2) : (!t, !f) -> !t
  %e = "kiln.erf"(%u) : (!t) -> !t
  %p = "kiln.add"(%one, %e) : (!f, !t) -> !t
  %g1 = "kiln.mul"(%hx, %p) : (!t, !t) -> !t
  %u2 = "kiln.mul"(%x, %isqrt2) : (!t, !f) -> !t
  %e2 = "kiln.erf"(%u2) : (!t) -> !t
  %p2 = "kiln.add"(%e2, %one) : (!t, !f) -> !t
  %hp2 = "kiln.mul"(%half, %p2) : (!f, !t) -> !t
  %g2 = "kiln.mul"(%x, %hp2) : (!t, !t) -> !t
  %e3 = "kiln.erf"(%u2) : (!t) -> !t
  %p3 = "kiln.add"(%e3, %one) : (!t, !f) -> !t
  %xp3 = "kiln.mul"(%x, %p3) : (!t, !t) -> !t
  %g3 = "kiln.div"(%xp3, %two) : (!t, !f) -> !t
  return %g1, %g2, %g3 : !t, !t, !t
}

// -----

!t = !kiln.tensor<["B", 32], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// GPT-2's NewGELU: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))),
// the cube as pow(x, 3) and as x * x * x.
// CHECK-LABEL: func.func @gelu_tanh
// CHECK-NEXT: %[[A:.*]] = "kiln.gelu"(%arg0) {approximate = "tanh"}
// CHECK-NEXT: %[[B:.*]] = "kiln.gelu"(%arg0) {approximate = "tanh"}
// CHECK-NEXT: return %[[A]], %[[B]]
// STATS: (2) gelu
func.func @gelu_tanh(%x: !t) -> (!t, !t) {
  %half = "kiln.constant"() {value = dense<0.5> : tensor<f32>} : () -> !f
  %one = "kiln.constant"() {value = dense<1.0> : tensor<f32>} : () -> !f
  %three = "kiln.constant"() {value = dense<3.0> : tensor<f32>} : () -> !f
  %c = "kiln.constant"() {value = dense<0.044715> : tensor<f32>} : () -> !f
  %k = "kiln.constant"() {value = dense<0.797884583> : tensor<f32>} : () -> !f
  %hx = "kiln.mul"(%x, %half) : (!t, !f) -> !t
  %cube = "kiln.pow"(%x, %three) : (!t, !f) -> !t
  %cc = "kiln.mul"(%cube, %c) : (!t, !f) -> !t
  %in = "kiln.add"(%x, %cc) : (!t, !t) -> !t
  %arg = "kiln.mul"(%in, %k) : (!t, !f) -> !t
  %th = "kiln.tanh"(%arg) : (!t) -> !t
  %p = "kiln.add"(%th, %one) : (!t, !f) -> !t
  %g1 = "kiln.mul"(%hx, %p) : (!t, !t) -> !t
  %xx = "kiln.mul"(%x, %x) : (!t, !t) -> !t
  %xxx = "kiln.mul"(%xx, %x) : (!t, !t) -> !t
  %cc2 = "kiln.mul"(%c, %xxx) : (!f, !t) -> !t
  %in2 = "kiln.add"(%cc2, %x) : (!t, !t) -> !t
  %arg2 = "kiln.mul"(%k, %in2) : (!f, !t) -> !t
  %th2 = "kiln.tanh"(%arg2) : (!t) -> !t
  %p2 = "kiln.add"(%one, %th2) : (!f, !t) -> !t
  %hx2 = "kiln.mul"(%half, %x) : (!f, !t) -> !t
  %g2 = "kiln.mul"(%p2, %hx2) : (!t, !t) -> !t
  return %g1, %g2 : !t, !t
}

// -----

!t = !kiln.tensor<["B", 32], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// SiLU both ways round.
// CHECK-LABEL: func.func @silu
// CHECK-NEXT: %[[S:.*]] = "kiln.silu"(%arg0)
// CHECK-NEXT: %[[T:.*]] = "kiln.silu"(%arg0)
// CHECK-NEXT: return %[[S]], %[[T]]
// STATS: (2) silu
func.func @silu(%x: !t) -> (!t, !t) {
  %s = "kiln.sigmoid"(%x) : (!t) -> !t
  %a = "kiln.mul"(%x, %s) : (!t, !t) -> !t
  %s2 = "kiln.sigmoid"(%x) : (!t) -> !t
  %b = "kiln.mul"(%s2, %x) : (!t, !t) -> !t
  return %a, %b : !t, !t
}

// -----

!t = !kiln.tensor<["B", 32], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// Negatives: quick GELU x * sigmoid(1.702 x); sigmoid of another tensor; erf
// of x / 2 (not sqrt 2); no 0.5; the tanh form with 0.05 for 0.044715; a
// GELU whose x differs inside and out.
// CHECK-LABEL: func.func @activation_negatives
// CHECK-NOT: kiln.gelu
// CHECK-NOT: kiln.silu
// CHECK: return
func.func @activation_negatives(%x: !t, %y: !t) -> (!t, !t, !t, !t, !t, !t) {
  %half = "kiln.constant"() {value = dense<0.5> : tensor<f32>} : () -> !f
  %one = "kiln.constant"() {value = dense<1.0> : tensor<f32>} : () -> !f
  %two = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !f
  %sqrt2 = "kiln.constant"() {value = dense<1.41421354> : tensor<f32>} : () -> !f
  %q = "kiln.constant"() {value = dense<1.702> : tensor<f32>} : () -> !f
  %qx = "kiln.mul"(%x, %q) : (!t, !f) -> !t
  %s = "kiln.sigmoid"(%qx) : (!t) -> !t
  %n1 = "kiln.mul"(%x, %s) : (!t, !t) -> !t
  %sy = "kiln.sigmoid"(%y) : (!t) -> !t
  %n2 = "kiln.mul"(%x, %sy) : (!t, !t) -> !t
  %hx = "kiln.mul"(%half, %x) : (!f, !t) -> !t
  %u = "kiln.div"(%x, %two) : (!t, !f) -> !t
  %e = "kiln.erf"(%u) : (!t) -> !t
  %p = "kiln.add"(%one, %e) : (!f, !t) -> !t
  %n3 = "kiln.mul"(%hx, %p) : (!t, !t) -> !t
  %u4 = "kiln.div"(%x, %sqrt2) : (!t, !f) -> !t
  %e4 = "kiln.erf"(%u4) : (!t) -> !t
  %p4 = "kiln.add"(%one, %e4) : (!f, !t) -> !t
  %n4 = "kiln.mul"(%x, %p4) : (!t, !t) -> !t
  %c = "kiln.constant"() {value = dense<0.05> : tensor<f32>} : () -> !f
  %k = "kiln.constant"() {value = dense<0.797884583> : tensor<f32>} : () -> !f
  %three = "kiln.constant"() {value = dense<3.0> : tensor<f32>} : () -> !f
  %cube = "kiln.pow"(%x, %three) : (!t, !f) -> !t
  %cc = "kiln.mul"(%cube, %c) : (!t, !f) -> !t
  %in = "kiln.add"(%x, %cc) : (!t, !t) -> !t
  %arg = "kiln.mul"(%in, %k) : (!t, !f) -> !t
  %th = "kiln.tanh"(%arg) : (!t) -> !t
  %pt = "kiln.add"(%th, %one) : (!t, !f) -> !t
  %hx5 = "kiln.mul"(%half, %x) : (!f, !t) -> !t
  %n5 = "kiln.mul"(%hx5, %pt) : (!t, !t) -> !t
  %u6 = "kiln.div"(%y, %sqrt2) : (!t, !f) -> !t
  %e6 = "kiln.erf"(%u6) : (!t) -> !t
  %p6 = "kiln.add"(%one, %e6) : (!f, !t) -> !t
  %hx6 = "kiln.mul"(%half, %x) : (!f, !t) -> !t
  %n6 = "kiln.mul"(%hx6, %p6) : (!t, !t) -> !t
  return %n1, %n2, %n3, %n4, %n5, %n6 : !t, !t, !t, !t, !t, !t
}

// -----

!t = !kiln.tensor<["B", 32], f32>
!r = !kiln.tensor<["B", 1], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// Norm near-misses: eps added after the square root (sqrt(var) + eps is not
// layer_norm's sqrt(var + eps)); RMS norm x * rsqrt(mean(x**2) + eps) (kiln
// has no RMS op: it stays, one reduction group for kiln-fuse).
// CHECK-LABEL: func.func @norm_negatives
// CHECK-NOT: kiln.layer_norm
// CHECK: return
func.func @norm_negatives(%x: !t) -> (!t, !t) {
  %eps = "kiln.constant"() {value = dense<1.0e-5> : tensor<f32>} : () -> !f
  %two = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !f
  %mean = "kiln.reduce_mean"(%x) {axes = array<i64: 1>, keepdims = true} : (!t) -> !r
  %d = "kiln.sub"(%x, %mean) : (!t, !r) -> !t
  %sq = "kiln.mul"(%d, %d) : (!t, !t) -> !t
  %var = "kiln.reduce_mean"(%sq) {axes = array<i64: 1>, keepdims = true} : (!t) -> !r
  %sd = "kiln.sqrt"(%var) : (!r) -> !r
  %den = "kiln.add"(%sd, %eps) : (!r, !f) -> !r
  %n1 = "kiln.div"(%d, %den) : (!t, !r) -> !t
  %x2 = "kiln.pow"(%x, %two) : (!t, !f) -> !t
  %ms = "kiln.reduce_mean"(%x2) {axes = array<i64: 1>, keepdims = true} : (!t) -> !r
  %mse = "kiln.add"(%ms, %eps) : (!r, !f) -> !r
  %rs = "kiln.rsqrt"(%mse) : (!r) -> !r
  %n2 = "kiln.mul"(%x, %rs) : (!t, !r) -> !t
  return %n1, %n2 : !t, !t
}

// -----

!t = !kiln.tensor<["B", 32], f32>
!r = !kiln.tensor<["B", 1], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// A hand-written layer norm as torch.export writes it: `x - mean` twice (no
// CSE yet), one for the numerator and one squared in the variance.  Two
// different subtractions (x - mean and x - 0.5 * mean) stay apart.
// CHECK-LABEL: func.func @layer_norm_twice_centered
// CHECK: "kiln.layer_norm"(%arg0) {axis = -1 : i64, epsilon = 1.000000e-05 : f64
// CHECK-NOT: "kiln.layer_norm"
// CHECK: return
// STATS: (1) layer-norm
func.func @layer_norm_twice_centered(%x: !t) -> (!t, !t) {
  %eps = "kiln.constant"() {value = dense<1.0e-5> : tensor<f32>} : () -> !f
  %two = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !f
  %half = "kiln.constant"() {value = dense<0.5> : tensor<f32>} : () -> !f
  %mean = "kiln.reduce_mean"(%x) {axes = array<i64: 1>, keepdims = true} : (!t) -> !r
  %d = "kiln.sub"(%x, %mean) : (!t, !r) -> !t
  %d2 = "kiln.sub"(%x, %mean) : (!t, !r) -> !t
  %sq = "kiln.pow"(%d2, %two) : (!t, !f) -> !t
  %var = "kiln.reduce_mean"(%sq) {axes = array<i64: 1>, keepdims = true} : (!t) -> !r
  %ve = "kiln.add"(%var, %eps) : (!r, !f) -> !r
  %sd = "kiln.sqrt"(%ve) : (!r) -> !r
  %n1 = "kiln.div"(%d, %sd) : (!t, !r) -> !t
  %hm = "kiln.mul"(%mean, %half) : (!r, !f) -> !r
  %e = "kiln.sub"(%x, %hm) : (!t, !r) -> !t
  %sq3 = "kiln.pow"(%e, %two) : (!t, !f) -> !t
  %var3 = "kiln.reduce_mean"(%sq3) {axes = array<i64: 1>, keepdims = true} : (!t) -> !r
  %ve3 = "kiln.add"(%var3, %eps) : (!r, !f) -> !r
  %sd3 = "kiln.sqrt"(%ve3) : (!r) -> !r
  %n2 = "kiln.div"(%d, %sd3) : (!t, !r) -> !t
  return %n1, %n2 : !t, !t
}
