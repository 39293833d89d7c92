// RUN: kiln-opt %s --split-input-file --kiln-dce | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-dce --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS
// Upstream cse and canonicalize work on kiln IR too (the ops are Pure).
// RUN: kiln-opt %s --split-input-file --cse --canonicalize | FileCheck %s --check-prefix=UPSTREAM

// A dead chain over a dynamic dim goes, including the fallback op and the
// constant feeding it; the live chain stays.
// CHECK-LABEL: func.func @chain$dynamic
// CHECK-NEXT: %[[R:.*]] = "kiln.relu"(%arg0)
// CHECK-NEXT: return %[[R]]
// STATS: kiln-dce
// STATS-NEXT: (4) ops removed
// canonicalize keeps the fallback op (it is not Pure), and so its operands.
// UPSTREAM-LABEL: func.func @chain$dynamic
// UPSTREAM: "kiln.exp"
// UPSTREAM-NEXT: "kiln.fallback"
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @chain$dynamic(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32> {
  %c = "kiln.constant"() {value = dense<2.0> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %a = "kiln.add"(%x, %c) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["B", 4], f32>
  %e = "kiln.exp"(%a) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  %f = "kiln.fallback"(%e) {op_name = "aten.special_bessel_j0.default", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<[2, 4], f32>
  %r = "kiln.relu"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  return %r : !kiln.tensor<["B", 4], f32>
}

// -----

// Negative: every op reaches the output.
// CHECK-LABEL: func.func @live
// CHECK: "kiln.constant"
// CHECK: "kiln.mul"
// CHECK: "kiln.neg"
// UPSTREAM-LABEL: func.func @live
// UPSTREAM: "kiln.mul"
// UPSTREAM: "kiln.neg"
func.func @live(%x: !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32> {
  %c = "kiln.constant"() {value = dense<2.0> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %m = "kiln.mul"(%x, %c) : (!kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  %n = "kiln.neg"(%m) : (!kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  return %n : !kiln.tensor<[4], f32>
}

// -----

// A dead kiln.fused goes whole; inside a live one, dead ops go.
// CHECK-LABEL: func.func @fused
// CHECK: "kiln.fused"(%arg0)
// CHECK-NEXT: ^bb0(%[[A:.*]]: !kiln.tensor<[4], f32>):
// CHECK-NEXT: %[[N:.*]] = "kiln.neg"(%[[A]])
// CHECK-NEXT: "kiln.yield"(%[[N]])
// CHECK-NOT: "kiln.fused"
// CHECK: return
func.func @fused(%x: !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32> {
  %u = "kiln.fused"(%x) ({
  ^bb0(%a: !kiln.tensor<[4], f32>):
    %d = "kiln.exp"(%a) : (!kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
    %n = "kiln.neg"(%a) : (!kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
    "kiln.yield"(%n) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[4], f32>) -> ()
  }) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  %v = "kiln.fused"(%x) ({
  ^bb0(%a: !kiln.tensor<[4], f32>):
    %n = "kiln.neg"(%a) : (!kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
    "kiln.yield"(%n) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[4], f32>) -> ()
  }) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  return %u : !kiln.tensor<[4], f32>
}

// -----

// cse merges identical kiln ops (constants included).
// UPSTREAM-LABEL: func.func @cse
// UPSTREAM-COUNT-1: "kiln.constant"
// UPSTREAM-NEXT: %[[M:.*]] = "kiln.mul"(%arg0, %{{.*}})
// UPSTREAM-NEXT: %[[S:.*]] = "kiln.add"(%[[M]], %[[M]])
// UPSTREAM-NEXT: return %[[S]]
// CHECK-LABEL: func.func @cse
func.func @cse(%x: !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32> {
  %c1 = "kiln.constant"() {value = dense<2.0> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %c2 = "kiln.constant"() {value = dense<2.0> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %m1 = "kiln.mul"(%x, %c1) : (!kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  %m2 = "kiln.mul"(%x, %c2) : (!kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  %s = "kiln.add"(%m1, %m2) : (!kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  return %s : !kiln.tensor<[4], f32>
}
