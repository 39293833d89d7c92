// RUN: kiln-opt %s --pass-pipeline='builtin.module(kiln-fuse,convert-kiln-to-linalg)' | FileCheck %s

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()

// kiln.fused groups are inlined (their bodies are ordinary kiln ops) and lowered.
// CHECK-LABEL: func.func @matmul_epilogue(
// CHECK-NOT: kiln.
// CHECK: linalg.matmul
// CHECK: arith.addf
// CHECK: arith.divf
// CHECK-NOT: kiln.
func.func @matmul_epilogue(%x: !kiln.tensor<["B", 64], f32>, %w: !kiln.tensor<[64, 32], f32>, %b: !kiln.tensor<[32], f32>) -> !kiln.tensor<["B", 32], f32> {
  %0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %1 = "kiln.add"(%0, %b) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<["B", 32], f32>
  %2 = "kiln.gelu"(%1) : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  return %2 : !kiln.tensor<["B", 32], f32>
}
