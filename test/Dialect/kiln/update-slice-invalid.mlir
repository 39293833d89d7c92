// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// kiln.update_slice's verifier messages.

func.func @rank(%c: !kiln.tensor<[4, 8], f32>, %n: !kiln.tensor<[8], f32>) {
  // expected-error @below {{'kiln.update_slice' op update has rank 1, dest has rank 2}}
  %0 = "kiln.update_slice"(%c, %n) {axis = 0 : i64, offset = [0]} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @dtype(%c: !kiln.tensor<[4, 8], f32>, %n: !kiln.tensor<[1, 8], f16>) {
  // expected-error @below {{'kiln.update_slice' op dest and update}}
  %0 = "kiln.update_slice"(%c, %n) {axis = 0 : i64, offset = [0]} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[1, 8], f16>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @other_dim(%c: !kiln.tensor<[4, 8], f32>, %n: !kiln.tensor<[1, 7], f32>) {
  // expected-error @below {{'kiln.update_slice' op update dim 1 is 7, dest has 8}}
  %0 = "kiln.update_slice"(%c, %n) {axis = 0 : i64, offset = [0]} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[1, 7], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @does_not_fit(%c: !kiln.tensor<[4, 8], f32>, %n: !kiln.tensor<[2, 8], f32>) {
  // expected-error @below {{'kiln.update_slice' op update [3, 5) on axis 0 does not fit in dest dim 4}}
  %0 = "kiln.update_slice"(%c, %n) {axis = 0 : i64, offset = [3]} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[2, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
"kiln.symbol"() {sym_name = "P", min = 0 : i64, max = 8 : i64} : () -> ()
func.func @symbolic_over(%c: !kiln.tensor<["P", 8], f32>, %n: !kiln.tensor<[2, 8], f32>) {
  // expected-error @below {{'kiln.update_slice' op update [P, P+2) on axis 0 does not fit in dest dim P}}
  %0 = "kiln.update_slice"(%c, %n) {axis = 0 : i64, offset = ["P"]} : (!kiln.tensor<["P", 8], f32>, !kiln.tensor<[2, 8], f32>) -> !kiln.tensor<["P", 8], f32>
  return
}
// -----
func.func @negative_offset(%c: !kiln.tensor<[4, 8], f32>, %n: !kiln.tensor<[1, 8], f32>) {
  // expected-error @below {{'kiln.update_slice' op attribute 'offset': dim -1 is negative}}
  %0 = "kiln.update_slice"(%c, %n) {axis = 0 : i64, offset = [-1]} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[1, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @two_offsets(%c: !kiln.tensor<[4, 8], f32>, %n: !kiln.tensor<[1, 8], f32>) {
  // expected-error @below {{'kiln.update_slice' op attribute 'offset' must hold one known dim, got [0, 1]}}
  %0 = "kiln.update_slice"(%c, %n) {axis = 0 : i64, offset = [0, 1]} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[1, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @axis(%c: !kiln.tensor<[4, 8], f32>, %n: !kiln.tensor<[1, 8], f32>) {
  // expected-error @below {{'kiln.update_slice' op axis 2 is out of range for rank 2}}
  %0 = "kiln.update_slice"(%c, %n) {axis = 2 : i64, offset = [0]} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[1, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @result(%c: !kiln.tensor<[4, 8], f32>, %n: !kiln.tensor<[1, 8], f32>) {
  // expected-error @below {{'kiln.update_slice' op result #0 dim 0 is 5, but its shape function gives 4}}
  %0 = "kiln.update_slice"(%c, %n) {axis = 0 : i64, offset = [0]} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[1, 8], f32>) -> !kiln.tensor<[5, 8], f32>
  return
}
