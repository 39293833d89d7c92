// RUN: kiln-opt %s --split-input-file --kiln-decompose | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-decompose='softmax=false gelu=false' | FileCheck %s --check-prefix=SOME
// RUN: kiln-opt %s --split-input-file --kiln-decompose --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-LABEL: func.func @ops$dynamic
// CHECK-NOT: "kiln.gelu"
// CHECK: %[[C:.*]] = "kiln.constant"() {value = dense<0.7071067{{[0-9]*}}> : tensor<f32>}
// CHECK-NEXT: %[[T:.*]] = "kiln.mul"(%arg0, %[[C]])
// CHECK-NEXT: %[[E:.*]] = "kiln.erf"(%[[T]])
// CHECK: "kiln.reduce_max"(%{{.*}}) {axes = array<i64: -1>, keepdims = true} : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 1], f32>
// CHECK: "kiln.exp"
// CHECK: "kiln.reduce_sum"
// CHECK: "kiln.div"
// CHECK: "kiln.reduce_mean"(%{{.*}}) {axes = array<i64: 2>, keepdims = true}
// CHECK: "kiln.rsqrt"
// CHECK: "kiln.mul"(%{{.*}}, %arg1) : (!kiln.tensor<["B", "L", 8], f32>, !kiln.tensor<[8], f32>)
// CHECK-NOT: "kiln.softmax"
// CHECK-NOT: "kiln.layer_norm"
// CHECK: return
// SOME-LABEL: func.func @ops$dynamic
// SOME: "kiln.gelu"
// SOME: "kiln.softmax"
// SOME-NOT: "kiln.layer_norm"
// SOME: return
// STATS: kiln-decompose
// STATS-NEXT: (1) gelu decomposed
// STATS-NEXT: (1) softmax decomposed
// STATS-NEXT: (1) layer_norm decomposed
func.func @ops$dynamic(%x: !kiln.tensor<["B", "L", 8], f32>, %g: !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", "L", 8], f32> {
  %a = "kiln.gelu"(%x) : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  %b = "kiln.softmax"(%a) : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  %c = "kiln.layer_norm"(%b, %g) {operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["B", "L", 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  return %c : !kiln.tensor<["B", "L", 8], f32>
}

// -----

"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 64 : i64} : () -> ()
// batch_norm: the [C] parameters are reshaped to [C, 1, 1].
// CHECK-LABEL: func.func @batch_norm
// CHECK: "kiln.reshape"(%arg1) {shape = [3, 1, 1]}
// CHECK: "kiln.rsqrt"
// CHECK: "kiln.sub"(%arg0,
// CHECK-NOT: "kiln.batch_norm"
func.func @batch_norm(%x: !kiln.tensor<["N", 3, 4, 4], f32>, %s: !kiln.tensor<[3], f32>, %b: !kiln.tensor<[3], f32>, %m: !kiln.tensor<[3], f32>, %v: !kiln.tensor<[3], f32>) -> !kiln.tensor<["N", 3, 4, 4], f32> {
  %y = "kiln.batch_norm"(%x, %s, %b, %m, %v) {epsilon = 1.0e-5 : f64} : (!kiln.tensor<["N", 3, 4, 4], f32>, !kiln.tensor<[3], f32>, !kiln.tensor<[3], f32>, !kiln.tensor<[3], f32>, !kiln.tensor<[3], f32>) -> !kiln.tensor<["N", 3, 4, 4], f32>
  return %y : !kiln.tensor<["N", 3, 4, 4], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// attention with static lengths and a causal mask: a constant triangle; with
// a dynamic length and no causal mask: decomposed too.
// CHECK-LABEL: func.func @attention
// CHECK: "kiln.transpose"(%arg1) {perm = array<i64: 0, 1, 3, 2>}
// CHECK: "kiln.matmul"
// CHECK: "kiln.constant"() {value = dense<0.3535{{[0-9]*}}> : tensor<f32>}
// CHECK: "kiln.constant"() {value = dense<{{\[}}[true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>}
// CHECK: "kiln.where"
// CHECK: "kiln.reduce_max"
// CHECK: "kiln.matmul"
// CHECK: "kiln.transpose"(%arg4)
// CHECK: "kiln.add"(%{{.*}}, %arg5)
// CHECK-NOT: "kiln.attention"
// CHECK: return
func.func @attention(%q: !kiln.tensor<["B", 2, 3, 8], f32>, %k: !kiln.tensor<["B", 2, 3, 8], f32>, %v: !kiln.tensor<["B", 2, 3, 8], f32>, %q2: !kiln.tensor<["B", 2, "L", 8], f32>, %k2: !kiln.tensor<["B", 2, "L", 8], f32>, %mask: !kiln.tensor<["L", "L"], f32>) -> (!kiln.tensor<["B", 2, 3, 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>) {
  %a = "kiln.attention"(%q, %k, %v) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, 3, 8], f32>, !kiln.tensor<["B", 2, 3, 8], f32>, !kiln.tensor<["B", 2, 3, 8], f32>) -> !kiln.tensor<["B", 2, 3, 8], f32>
  %b = "kiln.attention"(%q2, %k2, %k2, %mask) {operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["L", "L"], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  return %a, %b : !kiln.tensor<["B", 2, 3, 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// Negative: a causal mask over a dynamic length has no constant form, so the
// op is kept; ops not in the table are untouched.
// CHECK-LABEL: func.func @attention_kept$dynamic
// CHECK: "kiln.attention"
// CHECK: "kiln.silu"
// STATS: (1) attention kept
func.func @attention_kept$dynamic(%q: !kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32> {
  %a = "kiln.attention"(%q, %q, %q) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %s = "kiln.silu"(%a) : (!kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  return %s : !kiln.tensor<["B", 2, "L", 8], f32>
}
