// RUN: kiln-opt %s --split-input-file --verify-diagnostics --kiln-partition

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @unknown_dim$partition(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", "?"], f32> {
  // expected-error @below {{'kiln.relu' op result has a '?' dim: run kiln-infer-shapes before kiln-partition}}
  %0 = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", "?"], f32>
  return %0 : !kiln.tensor<["B", "?"], f32>
}
