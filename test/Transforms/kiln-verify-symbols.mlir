// RUN: kiln-opt %s --split-input-file --kiln-verify-symbols --verify-diagnostics | FileCheck %s

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 2 : i64, max = 512 : i64} : () -> ()
// Consistent symbols pass unchanged: L-2 >= 0 over the whole range of L.
// CHECK-LABEL: func.func @slice$nonnegative_expression
// CHECK: -> !kiln.tensor<["B", "L-2"], f32>
func.func @slice$nonnegative_expression(%x: !kiln.tensor<["B", "L"], f32>) {
  %0 = "kiln.slice"(%x) {starts = array<i64: 2>, ends = array<i64: 4611686018427387904>, axes = array<i64: 1>} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L-2"], f32>
  return
}

// -----

"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// The same slice is wrong when L may be 1.
func.func @slice$negative_at_min(%x: !kiln.tensor<["L"], f32>) {
  // expected-error @below {{'kiln.slice' op result #0 dim 0 ('L-2') is -1 < 0 when L = 1}}
  %0 = "kiln.slice"(%x) {starts = array<i64: 2>, ends = array<i64: 4611686018427387904>, axes = array<i64: 0>} : (!kiln.tensor<["L"], f32>) -> !kiln.tensor<["L-2"], f32>
  return
}

// -----

// expected-error @below {{symbol 'N' has no value in [5, 7] that is a multiple of 8}}
"kiln.symbol"() {sym_name = "N", min = 5 : i64, max = 7 : i64, multiple_of = 8 : i64} : () -> ()
func.func @symbol$empty_divisible_range(%x: !kiln.tensor<["N"], f32>) {
  return
}

// -----

// expected-warning @below {{symbol 'U' is declared but no dim uses it}}
"kiln.symbol"() {sym_name = "U", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func @symbol$unused
func.func @symbol$unused(%x: !kiln.tensor<[4], f32>) {
  return
}
