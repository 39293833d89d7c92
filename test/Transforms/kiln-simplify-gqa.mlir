// RUN: kiln-opt %s --split-input-file --kiln-simplify | FileCheck %s

// kiln-simplify's `attention-gqa` pattern: attention over k / v whose heads
// were repeated in a row (transformers' repeat_kv, repeat_interleave on the
// heads: reshape / expand / reshape after import) reads the fewer heads as
// they are, with no repeated copy; a tiling repeat stays.

!q = !kiln.tensor<["B", 8, "L", 16], f32>
!kv = !kiln.tensor<["B", 2, "L", 16], f32>
!u = !kiln.tensor<["B", 2, 1, "L", 16], f32>
!e = !kiln.tensor<["B", 2, 4, "L", 16], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// An SDPA over repeat_kv'd k and v (causal, explicit scale kept).
// CHECK-LABEL: func.func @sdpa_repeat_kv
// CHECK-NEXT: %[[A:.*]] = "kiln.attention"(%arg0, %arg1, %arg2) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 1.250000e-01 : f64} : (!kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>) -> !kiln.tensor<["B", 8, "L", 16], f32>
// CHECK-NEXT: return %[[A]]
func.func @sdpa_repeat_kv(%q: !q, %k: !kv, %v: !kv) -> !q {
  %k1 = "kiln.reshape"(%k) {shape = ["B", 2, 1, "L", 16]} : (!kv) -> !u
  %k2 = "kiln.expand"(%k1) {shape = ["B", 2, 4, "L", 16]} : (!u) -> !e
  %k3 = "kiln.reshape"(%k2) {shape = ["B", 8, "L", 16]} : (!e) -> !q
  %v1 = "kiln.reshape"(%v) {shape = ["B", 2, 1, "L", 16]} : (!kv) -> !u
  %v2 = "kiln.expand"(%v1) {shape = ["B", 2, 4, "L", 16]} : (!u) -> !e
  %v3 = "kiln.reshape"(%v2) {shape = ["B", 8, "L", 16]} : (!e) -> !q
  %a = "kiln.attention"(%q, %k3, %v3) {causal = true, scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!q, !q, !q) -> !q
  return %a : !q
}

// -----

// Attention written out over repeat_kv'd k and v, with an additive mask
// (LLaMA's eager attention): one kiln.attention of the 2 k / v heads.
!q = !kiln.tensor<["B", 8, "L", 16], f32>
!kv = !kiln.tensor<["B", 2, "L", 16], f32>
!u = !kiln.tensor<["B", 2, 1, "L", 16], f32>
!e = !kiln.tensor<["B", 2, 4, "L", 16], f32>
!kt = !kiln.tensor<["B", 8, 16, "L"], f32>
!s = !kiln.tensor<["B", 8, "L", "L"], f32>
!m = !kiln.tensor<["B", 1, "L", "L"], f32>
!f = !kiln.tensor<[], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-LABEL: func.func @eager_repeat_kv
// CHECK: %[[A:.*]] = "kiln.attention"(%arg0, %arg1, %arg2, %arg3) {causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 1, "L", "L"], f32>)
// CHECK-NOT: kiln.expand
// CHECK: return %[[A]]
func.func @eager_repeat_kv(%q: !q, %k: !kv, %v: !kv, %mask: !m) -> !q {
  %c = "kiln.constant"() {value = dense<0.25> : tensor<f32>} : () -> !f
  %k1 = "kiln.reshape"(%k) {shape = ["B", 2, 1, "L", 16]} : (!kv) -> !u
  %k2 = "kiln.expand"(%k1) {shape = ["B", 2, 4, "L", 16]} : (!u) -> !e
  %k3 = "kiln.reshape"(%k2) {shape = ["B", 8, "L", 16]} : (!e) -> !q
  %v1 = "kiln.reshape"(%v) {shape = ["B", 2, 1, "L", 16]} : (!kv) -> !u
  %v2 = "kiln.expand"(%v1) {shape = ["B", 2, 4, "L", 16]} : (!u) -> !e
  %v3 = "kiln.reshape"(%v2) {shape = ["B", 8, "L", 16]} : (!e) -> !q
  %kt = "kiln.transpose"(%k3) {perm = array<i64: 0, 1, 3, 2>} : (!q) -> !kt
  %s0 = "kiln.matmul"(%q, %kt) : (!q, !kt) -> !s
  %s1 = "kiln.mul"(%s0, %c) : (!s, !f) -> !s
  %s2 = "kiln.add"(%s1, %mask) : (!s, !m) -> !s
  %p = "kiln.softmax"(%s2) {axis = -1 : i64} : (!s) -> !s
  %o = "kiln.matmul"(%p, %v3) : (!s, !q) -> !q
  return %o : !q
}

// -----

// Not a head-group repeat: k.repeat(1, 4, 1, 1) tiles the heads (head h is
// k's h % 2), an expand of an axis before them; and a repeat of k only.
!q = !kiln.tensor<["B", 8, "L", 16], f32>
!kv = !kiln.tensor<["B", 2, "L", 16], f32>
!u = !kiln.tensor<["B", 1, 2, "L", 16], f32>
!e = !kiln.tensor<["B", 4, 2, "L", 16], f32>
!u2 = !kiln.tensor<["B", 2, 1, "L", 16], f32>
!e2 = !kiln.tensor<["B", 2, 4, "L", 16], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-LABEL: func.func @not_head_groups
// CHECK: "kiln.attention"(%arg0, %{{.*}}, %{{.*}}) {{.*}} : (!kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 8, "L", 16], f32>)
// CHECK: "kiln.attention"(%arg0, %{{.*}}, %arg3) {{.*}} : (!kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 8, "L", 16], f32>)
func.func @not_head_groups(%q: !q, %k: !kv, %v: !kv, %v8: !q) -> (!q, !q) {
  %k1 = "kiln.reshape"(%k) {shape = ["B", 1, 2, "L", 16]} : (!kv) -> !u
  %k2 = "kiln.expand"(%k1) {shape = ["B", 4, 2, "L", 16]} : (!u) -> !e
  %k3 = "kiln.reshape"(%k2) {shape = ["B", 8, "L", 16]} : (!e) -> !q
  %v1 = "kiln.reshape"(%v) {shape = ["B", 1, 2, "L", 16]} : (!kv) -> !u
  %v2 = "kiln.expand"(%v1) {shape = ["B", 4, 2, "L", 16]} : (!u) -> !e
  %v3 = "kiln.reshape"(%v2) {shape = ["B", 8, "L", 16]} : (!e) -> !q
  %a = "kiln.attention"(%q, %k3, %v3) {operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!q, !q, !q) -> !q
  %g1 = "kiln.reshape"(%k) {shape = ["B", 2, 1, "L", 16]} : (!kv) -> !u2
  %g2 = "kiln.expand"(%g1) {shape = ["B", 2, 4, "L", 16]} : (!u2) -> !e2
  %g3 = "kiln.reshape"(%g2) {shape = ["B", 8, "L", 16]} : (!e2) -> !q
  %b = "kiln.attention"(%q, %g3, %v8) {operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!q, !q, !q) -> !q
  return %a, %b : !q, !q
}
