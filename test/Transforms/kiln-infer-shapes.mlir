// RUN: kiln-opt %s --split-input-file --kiln-infer-shapes --verify-diagnostics | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-infer-shapes --verify-diagnostics --mlir-pass-statistics 2>&1 | FileCheck %s --check-prefix=STATS

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// '?' dims are filled in op by op, and the function's result type follows.
// CHECK-LABEL: func.func @mlp$dynamic_batch
// CHECK-SAME: -> !kiln.tensor<["B", "L", 32], f32>
// CHECK: "kiln.matmul"{{.*}} -> !kiln.tensor<["B", "L", 32], f32>
// CHECK: "kiln.add"{{.*}} -> !kiln.tensor<["B", "L", 32], f32>
// CHECK: "kiln.gelu"{{.*}} -> !kiln.tensor<["B", "L", 32], f32>
// CHECK: "kiln.reshape"{{.*}} -> !kiln.tensor<["B*L", 32], f32>
// CHECK: "kiln.reshape"{{.*}} -> !kiln.tensor<["B", "L", 32], f32>
// CHECK: return {{.*}} : !kiln.tensor<["B", "L", 32], f32>
func.func @mlp$dynamic_batch(%x: !kiln.tensor<["B", "L", 16], f32>, %w: !kiln.tensor<[16, 32], f32>, %b: !kiln.tensor<[32], f32>) -> !kiln.tensor<["?", "?", "?"], f32> {
  %0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", "L", 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["?", "?", "?"], f32>
  %1 = "kiln.add"(%0, %b) : (!kiln.tensor<["?", "?", "?"], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<["?", "?", "?"], f32>
  %2 = "kiln.gelu"(%1) : (!kiln.tensor<["?", "?", "?"], f32>) -> !kiln.tensor<["?", "?", "?"], f32>
  %3 = "kiln.reshape"(%2) {shape = ["L*B", 32]} : (!kiln.tensor<["?", "?", "?"], f32>) -> !kiln.tensor<["?", "?"], f32>
  %4 = "kiln.reshape"(%3) {shape = ["B", "L", 32]} : (!kiln.tensor<["?", "?"], f32>) -> !kiln.tensor<["?", "?", "?"], f32>
  return %4 : !kiln.tensor<["?", "?", "?"], f32>
}

// -----

"kiln.symbol"() {sym_name = "H", min = 3 : i64, max = 1024 : i64} : () -> ()
// Expressions: convolution output sizes are floor divisions of the input symbol.
// CHECK-LABEL: func.func @conv$strided_dynamic_height
// CHECK: "kiln.conv2d"{{.*}} -> !kiln.tensor<[1, 8, "(H-3)/2+1", 4], f32>
// CHECK: "kiln.concat"{{.*}} -> !kiln.tensor<[1, 8, "(H-3)/2+1", 8], f32>
func.func @conv$strided_dynamic_height(%x: !kiln.tensor<[1, 3, "H", 9], f32>, %w: !kiln.tensor<[8, 3, 3, 3], f32>) {
  %0 = "kiln.conv2d"(%x, %w) {strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<[1, 3, "H", 9], f32>, !kiln.tensor<[8, 3, 3, 3], f32>) -> !kiln.tensor<[1, 8, "?", "?"], f32>
  %1 = "kiln.concat"(%0, %0) {axis = 3 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (!kiln.tensor<[1, 8, "?", "?"], f32>, !kiln.tensor<[1, 8, "?", "?"], f32>) -> !kiln.tensor<[1, 8, "?", "?"], f32>
  return
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// Already-complete types are left alone (negative case).
// CHECK-LABEL: func.func @softmax$already_inferred
// CHECK: "kiln.softmax"(%arg0) {axis = -1 : i64} : (!kiln.tensor<["B", 10], f32>) -> !kiln.tensor<["B", 10], f32>
func.func @softmax$already_inferred(%x: !kiln.tensor<["B", 10], f32>) -> !kiln.tensor<["B", 10], f32> {
  %0 = "kiln.softmax"(%x) {axis = -1 : i64} : (!kiln.tensor<["B", 10], f32>) -> !kiln.tensor<["B", 10], f32>
  return %0 : !kiln.tensor<["B", 10], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// A conflict that only shows once '?' is refined: the declared dim L of %1
// contradicts B, which inference finds for %0.
func.func @add$conflict_after_refinement(%x: !kiln.tensor<["B", 4], f32>) {
  %0 = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["?", 4], f32>
  // expected-error @below {{'kiln.neg' op result #0 dim 0 is L, but its shape function gives B (result [L, 4] vs inferred [B, 4])}}
  %1 = "kiln.neg"(%0) : (!kiln.tensor<["?", 4], f32>) -> !kiln.tensor<["L", 4], f32>
  return
}

// STATS: kiln-infer-shapes
// STATS: results refined
