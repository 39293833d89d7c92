// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s
// RUN: kiln-opt %s --pass-pipeline='builtin.module(convert-kiln-to-linalg,kiln-cpu-lower)' | FileCheck %s --check-prefix=LLVM

// Integer pow is repeated squaring in an scf.while inside the generic
// (math.ipowi has no LLVM lowering here: it was a raw "failed to legalize
// operation 'math.ipowi'" PipelineError); a negative exponent is selected
// apart: 1 for base 1, +-1 for base -1, the minimum for base 0, else 0.
// CHECK-LABEL: func.func @ipow(
// CHECK: linalg.generic
// CHECK: ^bb0(%[[A:.*]]: i32, %[[B:.*]]: i32, %{{.*}}: i32):
// CHECK: %[[LOOP:.*]]:3 = scf.while (%[[ACC:.*]] = %{{.*}}, %[[BASE:.*]] = %[[A]], %[[E:.*]] = %[[B]]) : (i32, i32, i32) -> (i32, i32, i32)
// CHECK: arith.cmpi sgt
// CHECK: scf.condition
// CHECK: } do {
// CHECK: arith.muli
// CHECK: arith.shrui
// CHECK: scf.yield
// CHECK: arith.cmpi slt, %[[B]]
// CHECK: %[[R:.*]] = arith.select %{{.*}}, %{{.*}}, %[[LOOP]]#0 : i32
// CHECK: linalg.yield %[[R]] : i32
// CHECK-NOT: math.ipowi
// LLVM-LABEL: llvm.func @ipow(
// LLVM-NOT: math.ipowi
// LLVM-NOT: scf.while
func.func @ipow(%a: !kiln.tensor<[4], i32>, %b: !kiln.tensor<[4], i32>) -> !kiln.tensor<[4], i32> {
  %0 = "kiln.pow"(%a, %b) : (!kiln.tensor<[4], i32>, !kiln.tensor<[4], i32>) -> !kiln.tensor<[4], i32>
  return %0 : !kiln.tensor<[4], i32>
}

// i64 too.
// CHECK-LABEL: func.func @ipow64(
// CHECK: scf.while {{.*}} : (i64, i64, i64) -> (i64, i64, i64)
// LLVM-LABEL: llvm.func @ipow64(
func.func @ipow64(%a: !kiln.tensor<[4], i64>, %b: !kiln.tensor<[], i64>) -> !kiln.tensor<[4], i64> {
  %0 = "kiln.pow"(%a, %b) : (!kiln.tensor<[4], i64>, !kiln.tensor<[], i64>) -> !kiln.tensor<[4], i64>
  return %0 : !kiln.tensor<[4], i64>
}
