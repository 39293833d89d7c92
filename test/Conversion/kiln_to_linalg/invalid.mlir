// RUN: not kiln-opt %s --convert-kiln-to-linalg 2>&1 | FileCheck %s

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()

// B appears only inside an expression of the arguments: it has no value.
// CHECK: symbol 'B' is not the exact dim of any function argument
func.func @expression_only(%a: !kiln.tensor<["B+1"], f32>) -> !kiln.tensor<["B+1"], f32> {
  %0 = "kiln.exp"(%a) : (!kiln.tensor<["B+1"], f32>) -> !kiln.tensor<["B+1"], f32>
  return %0 : !kiln.tensor<["B+1"], f32>
}
