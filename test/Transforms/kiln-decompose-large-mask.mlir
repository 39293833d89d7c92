// RUN: kiln-opt %s --kiln-decompose | FileCheck %s
// RUN: kiln-opt %s --kiln-decompose --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS
// Found by the lit-input fuzzer (test/python/tools/test_fuzz_lit_inputs.py):
// a causal attention over static lengths whose mask would be a constant of
// 2**62 elements made kiln-decompose allocate it (MemoryError, exit 70).
// Past 2**24 elements the op is kept; a small one is still decomposed.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @huge_causal_mask
// CHECK: "kiln.attention"(%arg0, %arg0, %arg0) {causal = true
// CHECK-LABEL: func.func @largest_folded_mask
// CHECK-NOT: "kiln.attention"
// CHECK: "kiln.constant"() {value = dense<{{.*}}> : tensor<16x16xi1>}
// STATS: (1) attention kept
// STATS: (1) attention decomposed
func.func @huge_causal_mask(%q: !kiln.tensor<["B", 2, 2147483648, 8], f32>) -> !kiln.tensor<["B", 2, 2147483648, 8], f32> {
  %a = "kiln.attention"(%q, %q, %q) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, 2147483648, 8], f32>, !kiln.tensor<["B", 2, 2147483648, 8], f32>, !kiln.tensor<["B", 2, 2147483648, 8], f32>) -> !kiln.tensor<["B", 2, 2147483648, 8], f32>
  return %a : !kiln.tensor<["B", 2, 2147483648, 8], f32>
}
func.func @largest_folded_mask(%q: !kiln.tensor<["B", 2, 16, 8], f32>) -> !kiln.tensor<["B", 2, 16, 8], f32> {
  %a = "kiln.attention"(%q, %q, %q) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, 16, 8], f32>, !kiln.tensor<["B", 2, 16, 8], f32>, !kiln.tensor<["B", 2, 16, 8], f32>) -> !kiln.tensor<["B", 2, 16, 8], f32>
  return %a : !kiln.tensor<["B", 2, 16, 8], f32>
}
