// RUN: kiln-opt %s | FileCheck %s
// RUN: kiln-opt %s --cse --canonicalize | FileCheck %s --check-prefix=CANON

  "kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
  // CHECK-LABEL: func.func @f
  // CHECK: %[[R:.*]] = "kiln.fused"(%arg0, %arg1, %arg2) ({
  // CHECK-NEXT: ^bb0(%[[A:.*]]: !kiln.tensor<["B", 64], f32>, %[[W:.*]]: !kiln.tensor<[64, 256], f32>, %[[BB:.*]]: !kiln.tensor<[256], f32>):
  // CHECK-NEXT: %[[M:.*]] = "kiln.matmul"(%[[A]], %[[W]])
  // CHECK-NEXT: %[[S:.*]] = "kiln.add"(%[[M]], %[[BB]])
  // CHECK-NEXT: %[[G:.*]] = "kiln.gelu"(%[[S]])
  // CHECK-NEXT: "kiln.yield"(%[[G]])
  // CHECK-NEXT: }) {kind = "matmul_epilogue"
  // CHECK: "kiln.fused"(%arg0)
  // CHECK: return %[[R]]
  // The unused group is pure, so canonicalize removes it.
  // CANON-LABEL: func.func @f
  // CANON: "kiln.fused"(%arg0, %arg1, %arg2)
  // CANON-NOT: "kiln.fused"
  // CANON: return
  func.func @f(%x: !kiln.tensor<["B", 64], f32>, %w: !kiln.tensor<[64, 256], f32>, %b: !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", 256], f32> {
    %r = "kiln.fused"(%x, %w, %b) ({
    ^bb0(%a: !kiln.tensor<["B", 64], f32>, %bw: !kiln.tensor<[64, 256], f32>, %bb: !kiln.tensor<[256], f32>):
      %0 = "kiln.matmul"(%a, %bw) : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64, 256], f32>) -> !kiln.tensor<["B", 256], f32>
      %1 = "kiln.add"(%0, %bb) : (!kiln.tensor<["B", 256], f32>, !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", 256], f32>
      %2 = "kiln.gelu"(%1) : (!kiln.tensor<["B", 256], f32>) -> !kiln.tensor<["B", 256], f32>
      "kiln.yield"(%2) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 256], f32>) -> ()
    }) {kind = "matmul_epilogue", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64, 256], f32>, !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", 256], f32>
    %u = "kiln.fused"(%x) ({
    ^bb0(%a: !kiln.tensor<["B", 64], f32>):
      %0 = "kiln.relu"(%a) : (!kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32>
      "kiln.yield"(%0) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>) -> ()
    }) {kind = "elementwise", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32>
    return %r : !kiln.tensor<["B", 256], f32>
  }
