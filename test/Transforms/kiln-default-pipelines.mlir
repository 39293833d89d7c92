// RUN: kiln-opt %s --pass-pipeline='builtin.module(kiln-default-cpu)' | FileCheck %s
// RUN: kiln-opt %s --pass-pipeline='builtin.module(kiln-default-cpu)' --mlir-print-ir-after-all 2>&1 >/dev/null | FileCheck %s --check-prefix=DUMP
// RUN: kiln-opt %s --kiln-default-triton | FileCheck %s --check-prefix=TRITON

// The named pipelines expand to their stages, in order.
// DUMP: IR Dump After kiln-infer-shapes
// DUMP: IR Dump After kiln-fold-qdq
// DUMP: IR Dump After kiln-fold-constants
// DUMP: IR Dump After kiln-simplify
// DUMP: IR Dump After cse
// DUMP: IR Dump After kiln-dce
// DUMP: IR Dump After kiln-fuse
// The result: 2*3 folded, x*1 gone, the duplicate bias add merged, the
// batch_norm kept (the CPU lowers it) and matmul + bias + relu one kernel.
// CHECK-LABEL: func.func @main
// CHECK: %[[F:.*]] = "kiln.fused"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: "kiln.constant"() {value = dense<6.000000e+00> : tensor<f32>}
// CHECK-NEXT: "kiln.matmul"
// CHECK-NEXT: "kiln.add"
// CHECK-NEXT: "kiln.mul"
// CHECK-NEXT: "kiln.relu"
// CHECK-NEXT: "kiln.yield"
// CHECK-NEXT: }) {kind = "matmul_epilogue"
// CHECK: "kiln.batch_norm"
// TRITON-LABEL: func.func @main
// TRITON: "kiln.fused"
// TRITON-NOT: "kiln.batch_norm"
// TRITON: "kiln.fused"
// TRITON-NEXT: ^bb0
// TRITON: "kiln.rsqrt"
// TRITON: "kiln.relu"
// TRITON: }) {kind = "elementwise"
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @main(%x: !kiln.tensor<["B", 4], f32>, %w: !kiln.tensor<[4, 3], f32>, %b: !kiln.tensor<[3], f32>, %img: !kiln.tensor<["B", 3, 2, 2], f32>, %p: !kiln.tensor<[3], f32>) -> (!kiln.tensor<["B", 3], f32>, !kiln.tensor<["B", 3, 2, 2], f32>) {
  %one = "kiln.constant"() {value = dense<1.0> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %two = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %three = "kiln.constant"() {value = dense<3.0> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %six = "kiln.mul"(%two, %three) : (!kiln.tensor<[], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<[], f32>
  %m = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4, 3], f32>) -> !kiln.tensor<["B", 3], f32>
  %m1 = "kiln.mul"(%m, %one) : (!kiln.tensor<["B", 3], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<["B", 3], f32>
  %a = "kiln.add"(%m1, %b) : (!kiln.tensor<["B", 3], f32>, !kiln.tensor<[3], f32>) -> !kiln.tensor<["B", 3], f32>
  %a2 = "kiln.add"(%m1, %b) : (!kiln.tensor<["B", 3], f32>, !kiln.tensor<[3], f32>) -> !kiln.tensor<["B", 3], f32>
  %s = "kiln.mul"(%a, %six) : (!kiln.tensor<["B", 3], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<["B", 3], f32>
  %r = "kiln.relu"(%s) : (!kiln.tensor<["B", 3], f32>) -> !kiln.tensor<["B", 3], f32>
  %bn = "kiln.batch_norm"(%img, %p, %p, %p, %p) : (!kiln.tensor<["B", 3, 2, 2], f32>, !kiln.tensor<[3], f32>, !kiln.tensor<[3], f32>, !kiln.tensor<[3], f32>, !kiln.tensor<[3], f32>) -> !kiln.tensor<["B", 3, 2, 2], f32>
  %br = "kiln.relu"(%bn) : (!kiln.tensor<["B", 3, 2, 2], f32>) -> !kiln.tensor<["B", 3, 2, 2], f32>
  return %r, %br : !kiln.tensor<["B", 3], f32>, !kiln.tensor<["B", 3, 2, 2], f32>
}

// The heads split out of one projection and merged back: packed for the
// CPU (kiln-simplify's packed-attention), kept as kiln.attention for Triton.
// CHECK-LABEL: func.func @heads
// CHECK: "kiln.packed_attention"
// CHECK-NOT: "kiln.attention"
// TRITON-LABEL: func.func @heads
// TRITON-NOT: "kiln.packed_attention"
// TRITON: "kiln.attention"
func.func @heads(%p: !kiln.tensor<["B", "L", 48], f32>) -> (!kiln.tensor<["B", "L", 16], f32>) {
  %r = "kiln.reshape"(%p) {shape = ["B", "L", 3, 2, 8]} : (!kiln.tensor<["B", "L", 48], f32>) -> !kiln.tensor<["B", "L", 3, 2, 8], f32>
  %t = "kiln.transpose"(%r) {perm = array<i64: 2, 0, 3, 1, 4>} : (!kiln.tensor<["B", "L", 3, 2, 8], f32>) -> !kiln.tensor<[3, "B", 2, "L", 8], f32>
  %sq = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 0>, ends = array<i64: 1>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %q = "kiln.reshape"(%sq) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %sk = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 1>, ends = array<i64: 2>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %k = "kiln.reshape"(%sk) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %sv = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 2>, ends = array<i64: 3>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %v = "kiln.reshape"(%sv) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %a = "kiln.attention"(%q, %k, %v) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %m = "kiln.transpose"(%a) {perm = array<i64: 0, 2, 1, 3>} : (!kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", "L", 2, 8], f32>
  %o = "kiln.reshape"(%m) {shape = ["B", "L", 16]} : (!kiln.tensor<["B", "L", 2, 8], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  return %o : !kiln.tensor<["B", "L", 16], f32>
}
