// RUN: kiln-opt %s | FileCheck %s
// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// Round trip of kiln.cumsum (issue 43: position ids, ALiBi), on int64 and f32.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()

// CHECK-LABEL: func.func @cumsum$i64_symbolic_axis
// CHECK: "kiln.cumsum"(%arg0) {axis = 1 : i64} : (!kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L"], i64>
func.func @cumsum$i64_symbolic_axis(%m: !kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L"], i64> {
  %0 = "kiln.cumsum"(%m) {axis = 1 : i64} : (!kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L"], i64>
  return %0 : !kiln.tensor<["B", "L"], i64>
}

// CHECK-LABEL: func.func @cumsum$f32_negative_axis
// CHECK: "kiln.cumsum"(%arg0) {axis = -1 : i64} : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
func.func @cumsum$f32_negative_axis(%x: !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32> {
  %0 = "kiln.cumsum"(%x) {axis = -1 : i64} : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  return %0 : !kiln.tensor<["B", 16], f32>
}
