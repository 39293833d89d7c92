// RUN: kiln-opt %s --pass-pipeline='builtin.module(kiln-default-cpu)' | FileCheck %s
// RUN: kiln-opt %s --pass-pipeline='builtin.module(kiln-default-cpu)' --mlir-print-ir-after-all 2>&1 >/dev/null | FileCheck %s --check-prefix=DUMP
// RUN: kiln-opt %s --kiln-default-triton | FileCheck %s --check-prefix=TRITON

// The named pipelines expand to their stages, in order.
// DUMP: IR Dump After kiln-infer-shapes
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
