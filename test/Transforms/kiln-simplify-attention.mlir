// RUN: kiln-opt %s --split-input-file --kiln-simplify | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-simplify --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS

// kiln-simplify's `attention` pattern: attention written out as the torch
// importer produces it, rewritten into one kiln.attention; near-misses kept.

!q = !kiln.tensor<["B", 4, "L", 64], f32>
!kt = !kiln.tensor<["B", 4, 64, "L"], f32>
!s = !kiln.tensor<["B", 4, "L", "L"], f32>
!q3 = !kiln.tensor<["4*B", "L", 64], f32>
!kt3 = !kiln.tensor<["4*B", 64, "L"], f32>
!s3 = !kiln.tensor<["4*B", "L", "L"], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// GPT-2's eager attention as the importer writes it: the 4-D products as
// expand / reshape / 3-D matmul / reshape, `* d**-0.5` on the scores,
// masked_fill(arange(L)[None, :] > arange(L)[:, None], -inf), softmax.
// CHECK-LABEL: func.func @masked_fill_causal
// CHECK-NEXT: %[[A:.*]] = "kiln.attention"(%arg0, %arg1, %arg2) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>}
// CHECK-NEXT: return %[[A]]
// STATS: kiln-simplify
// STATS: (1) attention
func.func @masked_fill_causal(%q: !q, %k: !q, %v: !q) -> !q {
  %kt = "kiln.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %qe = "kiln.expand"(%q) {shape = ["B", 4, "L", 64]} : (!q) -> !q
  %q3 = "kiln.reshape"(%qe) {shape = ["4*B", "L", 64]} : (!q) -> !q3
  %ke = "kiln.expand"(%kt) {shape = ["B", 4, 64, "L"]} : (!kt) -> !kt
  %k3 = "kiln.reshape"(%ke) {shape = ["4*B", 64, "L"]} : (!kt) -> !kt3
  %s3 = "kiln.matmul"(%q3, %k3) : (!q3, !kt3) -> !s3
  %s = "kiln.reshape"(%s3) {shape = ["B", 4, "L", "L"]} : (!s3) -> !s
  %c = "kiln.constant"() {value = dense<1.250000e-01> : tensor<f32>} : () -> !f
  %ss = "kiln.mul"(%s, %c) : (!s, !f) -> !s
  %r = "kiln.range"() {shape = ["L"], start = 0.0 : f64, step = 1.0 : f64} : () -> !kiln.tensor<["L"], i64>
  %j = "kiln.reshape"(%r) {shape = [1, "L"]} : (!kiln.tensor<["L"], i64>) -> !kiln.tensor<[1, "L"], i64>
  %i = "kiln.reshape"(%r) {shape = ["L", 1]} : (!kiln.tensor<["L"], i64>) -> !kiln.tensor<["L", 1], i64>
  %m = "kiln.gt"(%j, %i) : (!kiln.tensor<[1, "L"], i64>, !kiln.tensor<["L", 1], i64>) -> !kiln.tensor<["L", "L"], i1>
  %inf = "kiln.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> !f
  %w = "kiln.where"(%m, %inf, %ss) : (!kiln.tensor<["L", "L"], i1>, !f, !s) -> !s
  %p = "kiln.softmax"(%w) {axis = -1 : i64} : (!s) -> !s
  %pe = "kiln.expand"(%p) {shape = ["B", 4, "L", "L"]} : (!s) -> !s
  %p3 = "kiln.reshape"(%pe) {shape = ["4*B", "L", "L"]} : (!s) -> !s3
  %ve = "kiln.expand"(%v) {shape = ["B", 4, "L", 64]} : (!q) -> !q
  %v3 = "kiln.reshape"(%ve) {shape = ["4*B", "L", 64]} : (!q) -> !q3
  %o3 = "kiln.matmul"(%p3, %v3) : (!s3, !q3) -> !q3
  %o = "kiln.reshape"(%o3) {shape = ["B", 4, "L", 64]} : (!q3) -> !q
  return %o : !q
}

// -----

!q = !kiln.tensor<["B", 4, "L", 64], f32>
!kt = !kiln.tensor<["B", 4, 64, "L"], f32>
!s = !kiln.tensor<["B", 4, "L", "L"], f32>
!f = !kiln.tensor<[], f32>
!pad = !kiln.tensor<["B", 1, 1, "L"], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// Direct 4-D products (ONNX's MatMul), the scale as a division by sqrt(64)
// (the default: no attribute), then BERT's additive padding mask.
// CHECK-LABEL: func.func @div_additive_padding
// CHECK-NEXT: %[[A:.*]] = "kiln.attention"(%arg0, %arg1, %arg2, %arg3) {causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>}
// CHECK-NEXT: return %[[A]]
func.func @div_additive_padding(%q: !q, %k: !q, %v: !q, %pad: !pad) -> !q {
  %kt = "kiln.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %s = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %c = "kiln.constant"() {value = dense<8.0> : tensor<f32>} : () -> !f
  %ss = "kiln.div"(%s, %c) : (!s, !f) -> !s
  %sm = "kiln.add"(%ss, %pad) : (!s, !pad) -> !s
  %p = "kiln.softmax"(%sm) {axis = 3 : i64} : (!s) -> !s
  %o = "kiln.matmul"(%p, %v) : (!s, !q) -> !q
  return %o : !q
}

// -----

!q = !kiln.tensor<["B", 4, "L", 64], f32>
!kt = !kiln.tensor<["B", 4, 64, "L"], f32>
!s = !kiln.tensor<["B", 4, "L", "L"], f32>
!f = !kiln.tensor<[], f32>
!bias = !kiln.tensor<[4, "L", "L"], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// The scale on q (x 0.5, not the default: an attribute), an ALiBi-style bias
// per head added to the scores, and the softmax written out (exp / sum after
// the max), which the `softmax` pattern recognizes first.  The k operand is
// k itself: the pattern's transpose of k^T folds into the one that made it.
// CHECK-LABEL: func.func @scaled_q_bias_written_softmax
// CHECK-NEXT: %[[A:.*]] = "kiln.attention"(%arg0, %arg1, %arg2, %arg3) {causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 5.000000e-01 : f64}
// CHECK-NEXT: return %[[A]]
// STATS: (1) softmax
// STATS: (1) attention
func.func @scaled_q_bias_written_softmax(%q: !q, %k: !q, %v: !q, %bias: !bias) -> !q {
  %c = "kiln.constant"() {value = dense<0.5> : tensor<f32>} : () -> !f
  %qs = "kiln.mul"(%c, %q) : (!f, !q) -> !q
  %kt = "kiln.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %s = "kiln.matmul"(%qs, %kt) : (!q, !kt) -> !s
  %sb = "kiln.add"(%bias, %s) : (!bias, !s) -> !s
  %mx = "kiln.reduce_max"(%sb) {axes = array<i64: -1>, keepdims = true} : (!s) -> !kiln.tensor<["B", 4, "L", 1], f32>
  %d = "kiln.sub"(%sb, %mx) : (!s, !kiln.tensor<["B", 4, "L", 1], f32>) -> !s
  %e = "kiln.exp"(%d) : (!s) -> !s
  %sum = "kiln.reduce_sum"(%e) {axes = array<i64: 3>, keepdims = true} : (!s) -> !kiln.tensor<["B", 4, "L", 1], f32>
  %p = "kiln.div"(%e, %sum) : (!s, !kiln.tensor<["B", 4, "L", 1], f32>) -> !s
  %o = "kiln.matmul"(%p, %v) : (!s, !q) -> !q
  return %o : !q
}

// -----

!q = !kiln.tensor<["B", 4, "L", 64], f32>
!kt = !kiln.tensor<["B", 4, 64, "L"], f32>
!s = !kiln.tensor<["B", 4, "L", "L"], f32>
!f = !kiln.tensor<[], f32>
!ids = !kiln.tensor<["B", 1, 1, "L"], i64>
!m = !kiln.tensor<["B", 1, 1, "L"], i1>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// Boolean masks: masked_fill(ids == 0, finfo.min) becomes the i1 mask
// `ids != 0` (true: keep); a where keeping the scores where a mask input is
// true passes it as it is; masked_fill by a mask input that is not a
// comparison selects -inf / 0 into an additive mask.  No scale: 1.0.
// CHECK-LABEL: func.func @boolean_masks
// CHECK: %[[NE:.*]] = "kiln.ne"(%arg3, %{{.*}}) : (!kiln.tensor<["B", 1, 1, "L"], i64>, !kiln.tensor<[], i64>) -> !kiln.tensor<["B", 1, 1, "L"], i1>
// CHECK: %[[A:.*]] = "kiln.attention"(%arg0, %arg1, %arg2, %[[NE]]) {causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 1.000000e+00 : f64}
// CHECK: %[[B:.*]] = "kiln.attention"(%arg0, %arg1, %arg2, %arg4) {causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 1.000000e+00 : f64}
// CHECK: %[[W:.*]] = "kiln.where"(%arg4, %{{.*}}, %{{.*}}) : (!kiln.tensor<["B", 1, 1, "L"], i1>, !kiln.tensor<[], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<["B", 1, 1, "L"], f32>
// CHECK: %[[C:.*]] = "kiln.attention"(%arg0, %arg1, %arg2, %[[W]])
// CHECK: return %[[A]], %[[B]], %[[C]]
// STATS: (3) attention
func.func @boolean_masks(%q: !q, %k: !q, %v: !q, %ids: !ids, %keep: !m) -> (!q, !q, !q) {
  %kt = "kiln.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %s = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %zero = "kiln.constant"() {value = dense<0> : tensor<i64>} : () -> !kiln.tensor<[], i64>
  %pad = "kiln.eq"(%ids, %zero) : (!ids, !kiln.tensor<[], i64>) -> !m
  %low = "kiln.constant"() {value = dense<-3.40282347E+38> : tensor<f32>} : () -> !f
  %w1 = "kiln.where"(%pad, %low, %s) : (!m, !f, !s) -> !s
  %p1 = "kiln.softmax"(%w1) {axis = -1 : i64} : (!s) -> !s
  %o1 = "kiln.matmul"(%p1, %v) : (!s, !q) -> !q
  %s2 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %ninf = "kiln.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> !f
  %w2 = "kiln.where"(%keep, %s2, %ninf) : (!m, !s, !f) -> !s
  %p2 = "kiln.softmax"(%w2) {axis = -1 : i64} : (!s) -> !s
  %o2 = "kiln.matmul"(%p2, %v) : (!s, !q) -> !q
  %s3 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %w3 = "kiln.where"(%keep, %ninf, %s3) : (!m, !f, !s) -> !s
  %p3 = "kiln.softmax"(%w3) {axis = -1 : i64} : (!s) -> !s
  %o3 = "kiln.matmul"(%p3, %v) : (!s, !q) -> !q
  return %o1, %o2, %o3 : !q, !q, !q
}

// -----

!q = !kiln.tensor<["B", 8, "L", 32], f32>
!kv = !kiln.tensor<["B", 2, "L", 32], f32>
!kv5 = !kiln.tensor<["B", 2, 1, "L", 32], f32>
!kvx = !kiln.tensor<["B", 2, 4, "L", 32], f32>
!kt = !kiln.tensor<["B", 8, 32, "L"], f32>
!s = !kiln.tensor<["B", 8, "L", "L"], f32>
!q3 = !kiln.tensor<["8*B", "L", 32], f32>
!kt3 = !kiln.tensor<["8*B", 32, "L"], f32>
!s3 = !kiln.tensor<["8*B", "L", "L"], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// GQA as LLaMA's repeat_kv writes it (k[:, :, None].expand(.., 4, ..).reshape),
// then the batched products and a causal mask kept with `i >= j`: k and v are
// read with their 2 heads as they are (attention-gqa: no repeated copy); the
// scale 1/sqrt(32) is the default.
// CHECK-LABEL: func.func @gqa_repeat_kv_keep_causal
// CHECK-NOT: kiln.expand
// CHECK: %[[A:.*]] = "kiln.attention"(%arg0, %arg1, %arg2) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>}
// CHECK-NEXT: return %[[A]]
func.func @gqa_repeat_kv_keep_causal(%q: !q, %k: !kv, %v: !kv) -> !q {
  %k5 = "kiln.reshape"(%k) {shape = ["B", 2, 1, "L", 32]} : (!kv) -> !kv5
  %kx = "kiln.expand"(%k5) {shape = ["B", 2, 4, "L", 32]} : (!kv5) -> !kvx
  %kr = "kiln.reshape"(%kx) {shape = ["B", 8, "L", 32]} : (!kvx) -> !q
  %v5 = "kiln.reshape"(%v) {shape = ["B", 2, 1, "L", 32]} : (!kv) -> !kv5
  %vx = "kiln.expand"(%v5) {shape = ["B", 2, 4, "L", 32]} : (!kv5) -> !kvx
  %vr = "kiln.reshape"(%vx) {shape = ["B", 8, "L", 32]} : (!kvx) -> !q
  %kt = "kiln.transpose"(%kr) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %q3 = "kiln.reshape"(%q) {shape = ["8*B", "L", 32]} : (!q) -> !q3
  %k3 = "kiln.reshape"(%kt) {shape = ["8*B", 32, "L"]} : (!kt) -> !kt3
  %s3 = "kiln.matmul"(%q3, %k3) : (!q3, !kt3) -> !s3
  %s = "kiln.reshape"(%s3) {shape = ["B", 8, "L", "L"]} : (!s3) -> !s
  %c = "kiln.constant"() {value = dense<0.176776692> : tensor<f32>} : () -> !f
  %ss = "kiln.mul"(%s, %c) : (!s, !f) -> !s
  %r = "kiln.range"() {shape = ["L"], start = 0.0 : f64, step = 1.0 : f64} : () -> !kiln.tensor<["L"], i64>
  %j = "kiln.reshape"(%r) {shape = [1, "L"]} : (!kiln.tensor<["L"], i64>) -> !kiln.tensor<[1, "L"], i64>
  %i = "kiln.reshape"(%r) {shape = ["L", 1]} : (!kiln.tensor<["L"], i64>) -> !kiln.tensor<["L", 1], i64>
  %m = "kiln.ge"(%i, %j) : (!kiln.tensor<["L", 1], i64>, !kiln.tensor<[1, "L"], i64>) -> !kiln.tensor<["L", "L"], i1>
  %ninf = "kiln.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> !f
  %w = "kiln.where"(%m, %ss, %ninf) : (!kiln.tensor<["L", "L"], i1>, !s, !f) -> !s
  %p = "kiln.softmax"(%w) {axis = -1 : i64} : (!s) -> !s
  %p3 = "kiln.reshape"(%p) {shape = ["8*B", "L", "L"]} : (!s) -> !s3
  %v3 = "kiln.reshape"(%vr) {shape = ["8*B", "L", 32]} : (!q) -> !q3
  %o3 = "kiln.matmul"(%p3, %v3) : (!s3, !q3) -> !q3
  %o = "kiln.reshape"(%o3) {shape = ["B", 8, "L", 32]} : (!q3) -> !q
  return %o : !q
}

// -----

!q = !kiln.tensor<["B", 4, "L", 64], f32>
!kt = !kiln.tensor<["B", 4, 64, "L"], f32>
!s = !kiln.tensor<["B", 4, "L", "L"], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// Near-misses that stay attention, but not the causal one, or not with the
// scale: `j < i` drops the past (its inverse `j >= i` is an i1 mask, not
// causal); a scale on v is v's, not the scores' (scale 1.0, v * 0.125 kept).
// CHECK-LABEL: func.func @anti_causal_and_scaled_v
// CHECK: %[[GE:.*]] = "kiln.ge"
// CHECK: "kiln.attention"(%arg0, %arg1, %arg2, %[[GE]]) {causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 1.000000e+00 : f64}
// CHECK: %[[V:.*]] = "kiln.mul"(%arg2, %{{.*}})
// CHECK: "kiln.attention"(%arg0, %arg1, %[[V]]) {causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 1.000000e+00 : f64}
func.func @anti_causal_and_scaled_v(%q: !q, %k: !q, %v: !q) -> (!q, !q) {
  %kt = "kiln.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %s = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %r = "kiln.range"() {shape = ["L"], start = 0.0 : f64, step = 1.0 : f64} : () -> !kiln.tensor<["L"], i64>
  %j = "kiln.reshape"(%r) {shape = [1, "L"]} : (!kiln.tensor<["L"], i64>) -> !kiln.tensor<[1, "L"], i64>
  %i = "kiln.reshape"(%r) {shape = ["L", 1]} : (!kiln.tensor<["L"], i64>) -> !kiln.tensor<["L", 1], i64>
  %m = "kiln.lt"(%j, %i) : (!kiln.tensor<[1, "L"], i64>, !kiln.tensor<["L", 1], i64>) -> !kiln.tensor<["L", "L"], i1>
  %ninf = "kiln.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> !f
  %w = "kiln.where"(%m, %ninf, %s) : (!kiln.tensor<["L", "L"], i1>, !f, !s) -> !s
  %p = "kiln.softmax"(%w) {axis = -1 : i64} : (!s) -> !s
  %o = "kiln.matmul"(%p, %v) : (!s, !q) -> !q
  %s2 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %p2 = "kiln.softmax"(%s2) {axis = -1 : i64} : (!s) -> !s
  %c = "kiln.constant"() {value = dense<1.250000e-01> : tensor<f32>} : () -> !f
  %vs = "kiln.mul"(%v, %c) : (!q, !f) -> !q
  %o2 = "kiln.matmul"(%p2, %vs) : (!s, !q) -> !q
  return %o, %o2 : !q, !q
}

// -----

!q = !kiln.tensor<["B", 4, "L", 64], f32>
!kt = !kiln.tensor<["B", 4, 64, "L"], f32>
!s = !kiln.tensor<["B", 4, "L", "L"], f32>
!f = !kiln.tensor<[], f32>
!pad = !kiln.tensor<["B", 1, 1, "L"], f32>
!m = !kiln.tensor<["B", 1, 1, "L"], i1>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// Negatives: the softmax over the query axis; the mask added before the
// scale (the scale would scale the mask too); masked_fill with 0, not -inf;
// the probabilities also returned; a negative scale.
// CHECK-LABEL: func.func @negatives
// CHECK-NOT: kiln.attention
// CHECK: return
func.func @negatives(%q: !q, %k: !q, %v: !q, %pad: !pad, %mk: !m) -> (!q, !q, !q, !q, !s, !q) {
  %kt = "kiln.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %s1 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %p1 = "kiln.softmax"(%s1) {axis = -2 : i64} : (!s) -> !s
  %o1 = "kiln.matmul"(%p1, %v) : (!s, !q) -> !q
  %s2 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %a2 = "kiln.add"(%s2, %pad) : (!s, !pad) -> !s
  %c = "kiln.constant"() {value = dense<1.250000e-01> : tensor<f32>} : () -> !f
  %m2 = "kiln.mul"(%a2, %c) : (!s, !f) -> !s
  %p2 = "kiln.softmax"(%m2) {axis = -1 : i64} : (!s) -> !s
  %o2 = "kiln.matmul"(%p2, %v) : (!s, !q) -> !q
  %s3 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %zero = "kiln.constant"() {value = dense<0.0> : tensor<f32>} : () -> !f
  %w3 = "kiln.where"(%mk, %zero, %s3) : (!m, !f, !s) -> !s
  %p3 = "kiln.softmax"(%w3) {axis = -1 : i64} : (!s) -> !s
  %o3 = "kiln.matmul"(%p3, %v) : (!s, !q) -> !q
  %s4 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %p4 = "kiln.softmax"(%s4) {axis = -1 : i64} : (!s) -> !s
  %o4 = "kiln.matmul"(%p4, %v) : (!s, !q) -> !q
  %s6 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %neg = "kiln.constant"() {value = dense<-1.250000e-01> : tensor<f32>} : () -> !f
  %m6 = "kiln.mul"(%s6, %neg) : (!s, !f) -> !s
  %p6 = "kiln.softmax"(%m6) {axis = -1 : i64} : (!s) -> !s
  %o6 = "kiln.matmul"(%p6, %v) : (!s, !q) -> !q
  return %o1, %o2, %o3, %o4, %p4, %o6 : !q, !q, !q, !q, !s, !q
}

// -----

!q = !kiln.tensor<["B", 4, "L", 64], f32>
!q3 = !kiln.tensor<[4, "L", 64], f32>
!kt3 = !kiln.tensor<[4, 64, "L"], f32>
!s3 = !kiln.tensor<[4, "L", "L"], f32>
!s = !kiln.tensor<["B", 4, "L", "L"], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// Negative (conservative): a mask that widens the scores ([4, L, L] +
// [B, 4, L, L]) would decide the attention's batch; the pattern wants the
// softmax input in the product's shape.
// CHECK-LABEL: func.func @widening_mask
// CHECK-NOT: kiln.attention
// CHECK: return
func.func @widening_mask(%q: !q3, %kt: !kt3, %v: !q, %bias: !s) -> !q {
  %s = "kiln.matmul"(%q, %kt) : (!q3, !kt3) -> !s3
  %a = "kiln.add"(%s, %bias) : (!s3, !s) -> !s
  %p = "kiln.softmax"(%a) {axis = -1 : i64} : (!s) -> !s
  %o = "kiln.matmul"(%p, %v) : (!s, !q) -> !q
  return %o : !q
}

// -----

!q = !kiln.tensor<["B", 4, "L", 64], f32>
!kt = !kiln.tensor<["B", 4, 64, "L"], f32>
!s = !kiln.tensor<["B", 4, "L", "L"], f32>
!f = !kiln.tensor<[], f32>
!pad = !kiln.tensor<["B", 1, 1, "L"], f32>
!m = !kiln.tensor<["B", 1, 1, "L"], i1>
!bias = !kiln.tensor<[4, "L", "L"], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// Several masks besides a causal one: one additive mask, their sum, the
// boolean ones selecting -inf / 0 (a dropping mask) or 0 / -inf (a keeping one).
// CHECK-LABEL: func.func @two_masks
// CHECK: %[[W:.*]] = "kiln.where"(%arg4, %[[NINF:.*]], %[[ZERO:.*]]) : (!kiln.tensor<["B", 1, 1, "L"], i1>, {{.*}}) -> !kiln.tensor<["B", 1, 1, "L"], f32>
// CHECK: %[[M:.*]] = "kiln.add"(%[[W]], %arg3)
// CHECK: "kiln.attention"(%arg0, %arg1, %arg2, %[[M]]) {causal = false
// CHECK: %[[K:.*]] = "kiln.where"(%arg4, %{{.*}}, %{{.*}}) : (!kiln.tensor<["B", 1, 1, "L"], i1>, {{.*}}) -> !kiln.tensor<["B", 1, 1, "L"], f32>
// CHECK: %[[M2:.*]] = "kiln.add"(%arg5, %[[K]]) : {{.*}} -> !kiln.tensor<["B", 4, "L", "L"], f32>
// CHECK: "kiln.attention"(%arg0, %arg1, %arg2, %[[M2]]) {causal = false
// STATS: (2) attention
func.func @two_masks(%q: !q, %k: !q, %v: !q, %pad: !pad, %mk: !m, %bias: !bias) -> (!q, !q) {
  %kt = "kiln.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %s5 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %a5 = "kiln.add"(%s5, %pad) : (!s, !pad) -> !s
  %ninf = "kiln.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> !f
  %w5 = "kiln.where"(%mk, %ninf, %a5) : (!m, !f, !s) -> !s
  %p5 = "kiln.softmax"(%w5) {axis = -1 : i64} : (!s) -> !s
  %o5 = "kiln.matmul"(%p5, %v) : (!s, !q) -> !q
  %s6 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %w6 = "kiln.where"(%mk, %s6, %ninf) : (!m, !s, !f) -> !s
  %a6 = "kiln.add"(%bias, %w6) : (!bias, !s) -> !s
  %p6 = "kiln.softmax"(%a6) {axis = -1 : i64} : (!s) -> !s
  %o6 = "kiln.matmul"(%p6, %v) : (!s, !q) -> !q
  return %o5, %o6 : !q, !q
}

// -----

!q = !kiln.tensor<["B", 4, "L", 64], f32>
!kt = !kiln.tensor<["B", 4, 64, "L"], f32>
!s = !kiln.tensor<["B", 4, "L", "L"], f32>
!f = !kiln.tensor<[], f32>
!pad = !kiln.tensor<["B", 1, 1, "L"], f32>
!m = !kiln.tensor<["B", 1, 1, "L"], i1>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// A finite fill (finfo.min, GPT-Neo's) beside another mask stays that value
// in the additive mask: finfo.min + finfo.min is -inf in the source, and a
// row dropping every score is uniform there; -inf would change both.
// CHECK-LABEL: func.func @finite_fill_beside_a_mask
// CHECK: %[[LOW:.*]] = "kiln.constant"() {value = dense<-3.40282347E+38> : tensor<f32>}
// CHECK: %[[W:.*]] = "kiln.where"(%arg4, %[[LOW]], %{{.*}}) : (!kiln.tensor<["B", 1, 1, "L"], i1>, {{.*}}) -> !kiln.tensor<["B", 1, 1, "L"], f32>
// CHECK: %[[M:.*]] = "kiln.add"(%[[W]], %arg3)
// CHECK: "kiln.attention"(%arg0, %arg1, %arg2, %[[M]]) {causal = false
// STATS: (1) attention
func.func @finite_fill_beside_a_mask(%q: !q, %k: !q, %v: !q, %pad: !pad, %mk: !m) -> !q {
  %kt = "kiln.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %s = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %a = "kiln.add"(%s, %pad) : (!s, !pad) -> !s
  %low = "kiln.constant"() {value = dense<-3.40282347E+38> : tensor<f32>} : () -> !f
  %w = "kiln.where"(%mk, %low, %a) : (!m, !f, !s) -> !s
  %p = "kiln.softmax"(%w) {axis = -1 : i64} : (!s) -> !s
  %o = "kiln.matmul"(%p, %v) : (!s, !q) -> !q
  return %o : !q
}

// -----

!q = !kiln.tensor<["B", 4, "L", 16], f32>
!kt = !kiln.tensor<["B", 4, 16, "L"], f32>
!s = !kiln.tensor<["B", 4, "L", "L"], f32>
!b = !kiln.tensor<["B", 4, "L", "L"], i1>
!f = !kiln.tensor<[], f32>
!pad = !kiln.tensor<["B", 1, "L", "L"], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// torch.onnx's SDPA (transformers' BERT exported with dynamo=True): q and kT
// each scaled by sqrt(scale), an additive mask, softmax, then the NaN guard
// where(p != p, 0, p) before the product with v; the guard goes with the
// rest (kiln.attention gives 0 where every score is masked).
// CHECK-LABEL: func.func @nan_guard
// CHECK-NEXT: %[[A:.*]] = "kiln.attention"(%arg0, %arg1, %arg2, %arg3) {causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>}
// CHECK-NEXT: return %[[A]]
// STATS: (1) attention
func.func @nan_guard(%q: !q, %k: !q, %v: !q, %pad: !pad) -> !q {
  %kt = "kiln.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %half = "kiln.constant"() {value = dense<5.000000e-01> : tensor<f32>} : () -> !f
  %qs = "kiln.mul"(%q, %half) : (!q, !f) -> !q
  %ks = "kiln.mul"(%kt, %half) : (!kt, !f) -> !kt
  %s = "kiln.matmul"(%qs, %ks) : (!q, !kt) -> !s
  %a = "kiln.add"(%s, %pad) : (!s, !pad) -> !s
  %p = "kiln.softmax"(%a) {axis = 3 : i64} : (!s) -> !s
  %nan = "kiln.ne"(%p, %p) : (!s, !s) -> !b
  %zero = "kiln.constant"() {value = dense<0.000000e+00> : tensor<f32>} : () -> !f
  %g = "kiln.where"(%nan, %zero, %p) : (!b, !f, !s) -> !s
  %o = "kiln.matmul"(%g, %v) : (!s, !q) -> !q
  return %o : !q
}

// -----

!q = !kiln.tensor<["B", 4, "L", 16], f32>
!kt = !kiln.tensor<["B", 4, 16, "L"], f32>
!s = !kiln.tensor<["B", 4, "L", "L"], f32>
!b = !kiln.tensor<["B", 4, "L", "L"], i1>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// Near-misses of the guard: it fills 1, not 0; the softmax is returned as
// well (another reader).  Neither is rewritten.
// CHECK-LABEL: func.func @not_a_nan_guard
// CHECK-NOT: kiln.attention
// CHECK-COUNT-2: kiln.softmax
// STATS-NOT: attention
func.func @not_a_nan_guard(%q: !q, %k: !q, %v: !q) -> (!q, !q, !s) {
  %kt = "kiln.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %s = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %p = "kiln.softmax"(%s) {axis = 3 : i64} : (!s) -> !s
  %nan = "kiln.ne"(%p, %p) : (!s, !s) -> !b
  %one = "kiln.constant"() {value = dense<1.000000e+00> : tensor<f32>} : () -> !f
  %g = "kiln.where"(%nan, %one, %p) : (!b, !f, !s) -> !s
  %o = "kiln.matmul"(%g, %v) : (!s, !q) -> !q
  %s2 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %p2 = "kiln.softmax"(%s2) {axis = 3 : i64} : (!s) -> !s
  %nan2 = "kiln.ne"(%p2, %p2) : (!s, !s) -> !b
  %zero = "kiln.constant"() {value = dense<0.000000e+00> : tensor<f32>} : () -> !f
  %g2 = "kiln.where"(%nan2, %zero, %p2) : (!b, !f, !s) -> !s
  %o2 = "kiln.matmul"(%g2, %v) : (!s, !q) -> !q
  return %o, %o2, %p2 : !q, !q, !s
}
