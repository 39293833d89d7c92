// RUN: kiln-opt %s --split-input-file --verify-diagnostics --kiln-plan-memory
// Found by the lit-input fuzzer (test/python/tools/test_fuzz_lit_inputs.py).

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @unknown_dim$plan_memory(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", "?"], f32> {
  // expected-error @below {{'kiln.relu' op result #0 has a '?' dim: run kiln-infer-shapes before kiln-plan-memory}}
  %0 = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", "?"], f32>
  %1 = "kiln.relu"(%0) : (!kiln.tensor<["B", "?"], f32>) -> !kiln.tensor<["B", "?"], f32>
  return %1 : !kiln.tensor<["B", "?"], f32>
}
