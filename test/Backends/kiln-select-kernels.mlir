// RUN: python %S/Inputs/user_kernels_opt.py %s --split-input-file --kiln-select-kernels | FileCheck %s
// RUN: python %S/Inputs/user_kernels_opt.py %s --split-input-file --kiln-select-kernels --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS
// RUN: python %S/Inputs/user_kernels_opt.py %s --split-input-file --kiln-select-kernels --kiln-partition | FileCheck %s --check-prefix=PART
// RUN: kiln-opt %s --split-input-file --kiln-select-kernels | FileCheck %s --check-prefix=NONE

// Kernels registered from user code for kiln ops (Inputs/user_kernels_opt.py)
// are chosen over kiln's generated code: the op becomes kiln.custom naming
// the op and the registered kernel, its attributes (defaults filled in) in
// `attrs` (with the op's operandSegmentSizes, which says which optional
// operands it has).  Without registrations (NONE) the pass changes nothing.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @softmax_f32
// CHECK: %[[M:.*]] = "kiln.mul"(%arg0, %arg0)
// CHECK: %[[S:.*]] = "kiln.custom"(%[[M]]) {attrs = {axis = -1 : i64}, kernel = "my_softmax", op_name = "kiln.softmax"
// CHECK-SAME: -> !kiln.tensor<["B", 16], f32>
// CHECK: "kiln.add"(%[[S]], %arg0)
// PART-LABEL: func.func @softmax_f32
// PART: call @softmax_f32_k1
// PART: func.func private @softmax_f32_k1
// PART-SAME: kiln.group = "custom", kiln.kernel = "user", kiln.ops = ["kiln.custom"]
// NONE-LABEL: func.func @softmax_f32
// NONE: "kiln.softmax"
// NONE-NOT: kiln.custom
func.func @softmax_f32(%x: !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32> {
  %0 = "kiln.mul"(%x, %x) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  %1 = "kiln.softmax"(%0) {axis = -1 : i64} : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  %2 = "kiln.add"(%1, %x) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  return %2 : !kiln.tensor<["B", 16], f32>
}

// -----
// A dtype the kernel was not registered for keeps kiln's softmax.
// CHECK-LABEL: func.func @softmax_f16
// CHECK: "kiln.softmax"
// CHECK-NOT: kiln.custom
func.func @softmax_f16(%x: !kiln.tensor<[4, 16], f16>) -> !kiln.tensor<[4, 16], f16> {
  %0 = "kiln.softmax"(%x) {axis = -1 : i64} : (!kiln.tensor<[4, 16], f16>) -> !kiln.tensor<[4, 16], f16>
  return %0 : !kiln.tensor<[4, 16], f16>
}

// -----
// `applies` decides per op: the last axis of 8 takes the kernel, 16 does not
// (and gets kiln's own library kernel: the user's ranks above it).
// A kernel registered for CUDA is not chosen on the CPU.
// CHECK-LABEL: func.func @norms
// CHECK: "kiln.custom"(%arg0) {attrs = {axis = -1 : i64, epsilon = {{.*}}, operandSegmentSizes = array<i64: 1, 0, 0>}, kernel = "my_norm8", op_name = "kiln.layer_norm"
// CHECK: "kiln.layer_norm"(%arg1) {kiln.impl = "native.layer_norm"
// CHECK: "kiln.matmul"
// CHECK-NOT: kiln.custom
func.func @norms(%a: !kiln.tensor<[4, 8], f32>, %b: !kiln.tensor<[4, 16], f32>, %w: !kiln.tensor<[16, 8], f32>) -> (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[4, 16], f32>, !kiln.tensor<[4, 8], f32>) {
  %0 = "kiln.layer_norm"(%a) {operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  %1 = "kiln.layer_norm"(%b) {operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<[4, 16], f32>) -> !kiln.tensor<[4, 16], f32>
  %2 = "kiln.matmul"(%1, %w) : (!kiln.tensor<[4, 16], f32>, !kiln.tensor<[16, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  return %0, %1, %2 : !kiln.tensor<[4, 8], f32>, !kiln.tensor<[4, 16], f32>, !kiln.tensor<[4, 8], f32>
}

// -----
// A decomposition registered for a kiln op rewrites it into the ops it builds.
// CHECK-LABEL: func.func @silu
// CHECK: %[[S:.*]] = "kiln.sigmoid"(%arg0)
// CHECK: %[[M:.*]] = "kiln.mul"(%arg0, %[[S]])
// CHECK: return %[[M]]
// CHECK-NOT: kiln.silu
// NONE-LABEL: func.func @silu
// NONE: "kiln.silu"
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @silu(%x: !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32> {
  %0 = "kiln.silu"(%x) : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  return %0 : !kiln.tensor<["B", 16], f32>
}

// One op rewritten in the first and in the third chunk (none in the second), one decomposed in the fourth.
// STATS: kiln-select-kernels
// STATS-NEXT: (1) user kernels
// STATS: kiln-select-kernels
// STATS-NEXT: (1) user kernels
// STATS: kiln-select-kernels
// STATS-NEXT: (1) user decompositions
