// RUN: kiln-opt %s --split-input-file --kiln-fold-constants | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-fold-constants='max-bytes=16' | FileCheck %s --check-prefix=SMALL
// RUN: kiln-opt %s --split-input-file --kiln-fold-constants --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS
// RUN: kiln-opt %s --split-input-file --kiln-fold-constants='keep-transposed=16' | FileCheck %s --check-prefix=KEEP

// Shape arithmetic next to a dynamic dim: x * (2*3) becomes x * 6.
// CHECK-LABEL: func.func @mul$dynamic_batch
// CHECK-NEXT: %[[C:.*]] = "kiln.constant"() {value = dense<6.000000e+00> : tensor<f32>} : () -> !kiln.tensor<[], f32>
// CHECK-NEXT: %[[R:.*]] = "kiln.mul"(%arg0, %[[C]])
// CHECK-NEXT: return %[[R]]
// STATS: kiln-fold-constants
// STATS-NEXT: (1) ops folded
// STATS-NEXT: (2) constants erased
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @mul$dynamic_batch(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32> {
  %a = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %b = "kiln.constant"() {value = dense<3.0> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %c = "kiln.mul"(%a, %b) : (!kiln.tensor<[], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<[], f32>
  %r = "kiln.mul"(%x, %c) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<["B", 4], f32>
  return %r : !kiln.tensor<["B", 4], f32>
}

// -----

// A chain over constants folds completely: reshape, transpose, add.
// CHECK-LABEL: func.func @chain
// CHECK-NEXT: %[[C:.*]] = "kiln.constant"() {value = dense<{{\[}}[1.000000e+00, 4.000000e+00], [2.000000e+00, 5.000000e+00], [3.000000e+00, 6.000000e+00]]> : tensor<3x2xf32>}
// CHECK-NEXT: return %[[C]]
func.func @chain() -> !kiln.tensor<[3, 2], f32> {
  %a = "kiln.constant"() {value = dense<[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<6xf32>} : () -> !kiln.tensor<[6], f32>
  %one = "kiln.constant"() {value = dense<1.0> : tensor<1xf32>} : () -> !kiln.tensor<[1], f32>
  %r = "kiln.reshape"(%a) {shape = [2, 3]} : (!kiln.tensor<[6], f32>) -> !kiln.tensor<[2, 3], f32>
  %t = "kiln.transpose"(%r) {perm = array<i64: 1, 0>} : (!kiln.tensor<[2, 3], f32>) -> !kiln.tensor<[3, 2], f32>
  %s = "kiln.add"(%t, %one) : (!kiln.tensor<[3, 2], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<[3, 2], f32>
  return %s : !kiln.tensor<[3, 2], f32>
}

// -----

// Integer division truncates toward zero; comparisons give i1.
// CHECK-LABEL: func.func @int_div
// CHECK: dense<[-3, 3, 0]> : tensor<3xi64>
// CHECK: dense<[false, true, false]> : tensor<3xi1>
func.func @int_div() -> (!kiln.tensor<[3], i64>, !kiln.tensor<[3], i1>) {
  %a = "kiln.constant"() {value = dense<[-7, 7, 1]> : tensor<3xi64>} : () -> !kiln.tensor<[3], i64>
  %b = "kiln.constant"() {value = dense<[2, 2, 2]> : tensor<3xi64>} : () -> !kiln.tensor<[3], i64>
  %q = "kiln.div"(%a, %b) : (!kiln.tensor<[3], i64>, !kiln.tensor<[3], i64>) -> !kiln.tensor<[3], i64>
  %l = "kiln.lt"(%q, %b) : (!kiln.tensor<[3], i64>, !kiln.tensor<[3], i64>) -> !kiln.tensor<[3], i1>
  %z = "kiln.constant"() {value = dense<[-3, 3, 0]> : tensor<3xi64>} : () -> !kiln.tensor<[3], i64>
  %n = "kiln.ne"(%q, %z) : (!kiln.tensor<[3], i64>, !kiln.tensor<[3], i64>) -> !kiln.tensor<[3], i1>
  %o = "kiln.eq"(%n, %l) : (!kiln.tensor<[3], i1>, !kiln.tensor<[3], i1>) -> !kiln.tensor<[3], i1>
  return %q, %o : !kiln.tensor<[3], i64>, !kiln.tensor<[3], i1>
}

// -----

// Negative: an operand that is not a constant.
// CHECK-LABEL: func.func @not_constant
// CHECK: "kiln.constant"
// CHECK-NEXT: "kiln.add"(%arg0,
func.func @not_constant(%x: !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32> {
  %a = "kiln.constant"() {value = dense<2.0> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %r = "kiln.add"(%x, %a) : (!kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  return %r : !kiln.tensor<[4], f32>
}

// -----

// Negative: integer division by zero is left to run (and fail) at run time.
// CHECK-LABEL: func.func @div_by_zero
// CHECK: "kiln.div"
func.func @div_by_zero() -> !kiln.tensor<[2], i32> {
  %a = "kiln.constant"() {value = dense<[1, 2]> : tensor<2xi32>} : () -> !kiln.tensor<[2], i32>
  %b = "kiln.constant"() {value = dense<[1, 0]> : tensor<2xi32>} : () -> !kiln.tensor<[2], i32>
  %q = "kiln.div"(%a, %b) : (!kiln.tensor<[2], i32>, !kiln.tensor<[2], i32>) -> !kiln.tensor<[2], i32>
  return %q : !kiln.tensor<[2], i32>
}

// -----

// max-bytes: expanding a scalar to 64 floats (256 bytes) inflates the model,
// so with max-bytes=16 it stays; a transpose frees its operand's bytes and
// folds whatever the cap.
// CHECK-LABEL: func.func @cap
// CHECK-NOT: "kiln.expand"
// CHECK-NOT: "kiln.transpose"
// SMALL-LABEL: func.func @cap
// SMALL: "kiln.expand"
// SMALL-NOT: "kiln.transpose"
// SMALL: return
func.func @cap() -> (!kiln.tensor<[8, 8], f32>, !kiln.tensor<[4, 2], f32>) {
  %a = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %e = "kiln.expand"(%a) {shape = [8, 8]} : (!kiln.tensor<[], f32>) -> !kiln.tensor<[8, 8], f32>
  %w = "kiln.constant"() {value = dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]> : tensor<2x4xf32>} : () -> !kiln.tensor<[2, 4], f32>
  %t = "kiln.transpose"(%w) {perm = array<i64: 1, 0>} : (!kiln.tensor<[2, 4], f32>) -> !kiln.tensor<[4, 2], f32>
  return %e, %t : !kiln.tensor<[8, 8], f32>, !kiln.tensor<[4, 2], f32>
}

// -----

// keep-transposed: a weight's transpose that only products read (here a
// matmul and a fused group's matmul) stays, for the products to read the
// weight through their maps, when the weight is past the size (32 bytes >
// 16); the default (1 MiB) folds it.  A transpose something else reads
// folds either way.
// CHECK-LABEL: func.func @keep$weight_transpose
// CHECK-NOT: "kiln.transpose"
// KEEP-LABEL: func.func @keep$weight_transpose
// KEEP-NEXT: %[[W:.*]] = "kiln.constant"() {value = dense<{{\[}}[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]
// KEEP-NEXT: %[[T:.*]] = "kiln.transpose"(%[[W]]) {perm = array<i64: 1, 0>}
// KEEP-NEXT: %[[M:.*]] = "kiln.matmul"(%arg0, %[[T]])
// KEEP: "kiln.fused"(%arg0, %[[T]])
// KEEP-LABEL: func.func @fold$transpose_read_by_add
// KEEP-NOT: "kiln.transpose"
func.func @keep$weight_transpose(%x: !kiln.tensor<[3, 4], f32>) -> (!kiln.tensor<[3, 2], f32>, !kiln.tensor<[3, 2], f32>) {
  %w = "kiln.constant"() {value = dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]> : tensor<2x4xf32>} : () -> !kiln.tensor<[2, 4], f32>
  %t = "kiln.transpose"(%w) {perm = array<i64: 1, 0>} : (!kiln.tensor<[2, 4], f32>) -> !kiln.tensor<[4, 2], f32>
  %m = "kiln.matmul"(%x, %t) : (!kiln.tensor<[3, 4], f32>, !kiln.tensor<[4, 2], f32>) -> !kiln.tensor<[3, 2], f32>
  %0 = "kiln.fused"(%x, %t) ({
  ^bb0(%a: !kiln.tensor<[3, 4], f32>, %b: !kiln.tensor<[4, 2], f32>):
    %p = "kiln.matmul"(%a, %b) : (!kiln.tensor<[3, 4], f32>, !kiln.tensor<[4, 2], f32>) -> !kiln.tensor<[3, 2], f32>
    %q = "kiln.relu"(%p) : (!kiln.tensor<[3, 2], f32>) -> !kiln.tensor<[3, 2], f32>
    "kiln.yield"(%q) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[3, 2], f32>) -> ()
  }) {kind = "matmul_epilogue", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[3, 4], f32>, !kiln.tensor<[4, 2], f32>) -> !kiln.tensor<[3, 2], f32>
  return %m, %0 : !kiln.tensor<[3, 2], f32>, !kiln.tensor<[3, 2], f32>
}

func.func @fold$transpose_read_by_add(%x: !kiln.tensor<[4, 2], f32>) -> !kiln.tensor<[4, 2], f32> {
  %w = "kiln.constant"() {value = dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]> : tensor<2x4xf32>} : () -> !kiln.tensor<[2, 4], f32>
  %t = "kiln.transpose"(%w) {perm = array<i64: 1, 0>} : (!kiln.tensor<[2, 4], f32>) -> !kiln.tensor<[4, 2], f32>
  %0 = "kiln.add"(%x, %t) : (!kiln.tensor<[4, 2], f32>, !kiln.tensor<[4, 2], f32>) -> !kiln.tensor<[4, 2], f32>
  return %0 : !kiln.tensor<[4, 2], f32>
}
