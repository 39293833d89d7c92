// An MLP block with a dynamic batch B and sequence L, result types left as '?'.
// kiln-opt --kiln-infer-shapes --kiln-verify-symbols fills them in:
//   matmul -> ["B", "L", 64], reshape -> ["B*L", 64], ...
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64, opt = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64, opt = 128 : i64} : () -> ()
func.func @mlp(%x: !kiln.tensor<["B", "L", 32], f32>, %w1: !kiln.tensor<[32, 64], f32>, %b1: !kiln.tensor<[64], f32>,
               %w2: !kiln.tensor<[64, 32], f32>) -> !kiln.tensor<["?", "?"], f32> {
  %0 = "kiln.matmul"(%x, %w1) : (!kiln.tensor<["B", "L", 32], f32>, !kiln.tensor<[32, 64], f32>) -> !kiln.tensor<["?", "?", "?"], f32>
  %1 = "kiln.add"(%0, %b1) : (!kiln.tensor<["?", "?", "?"], f32>, !kiln.tensor<[64], f32>) -> !kiln.tensor<["?", "?", "?"], f32>
  %2 = "kiln.gelu"(%1) : (!kiln.tensor<["?", "?", "?"], f32>) -> !kiln.tensor<["?", "?", "?"], f32>
  %3 = "kiln.reshape"(%2) {shape = ["B*L", 64]} : (!kiln.tensor<["?", "?", "?"], f32>) -> !kiln.tensor<["?", "?"], f32>
  %4 = "kiln.matmul"(%3, %w2) : (!kiln.tensor<["?", "?"], f32>, !kiln.tensor<[64, 32], f32>) -> !kiln.tensor<["?", "?"], f32>
  return %4 : !kiln.tensor<["?", "?"], f32>
}
