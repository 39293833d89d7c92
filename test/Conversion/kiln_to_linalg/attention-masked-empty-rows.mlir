// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg | FileCheck %s

// A masked attention: a query row every key is masked from gives zeros, as
// torch's scaled_dot_product_attention does (a left-padded prompt's padding
// rows; their NaN had reached every later token through the KV cache). The
// softmax's last pass selects 0 where the row's max is -inf.
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "S", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @masked(
// CHECK: %[[NINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK: arith.select %{{.*}}, %{{.*}}, %[[NINF]] : f32
// CHECK: arith.maximumf
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}}, %[[MAX:.*]] : tensor<2x4x?x?xf32>, tensor<2x4x?x1xf32>, tensor<2x4x?x1xf32>)
// CHECK: ^bb0(%[[E:.*]]: f32, %[[SUM:.*]]: f32, %[[TOP:.*]]: f32,
// CHECK: %[[EMPTY:.*]] = arith.cmpf oeq, %[[TOP]], %{{.*}} : f32
// CHECK: %[[P:.*]] = arith.divf %[[E]], %[[SUM]] : f32
// CHECK: arith.select %[[EMPTY]], %{{.*}}, %[[P]] : f32
func.func @masked(%q: !kiln.tensor<[2, 4, "L", 8], f32>, %k: !kiln.tensor<[2, 4, "S", 8], f32>, %v: !kiln.tensor<[2, 4, "S", 8], f32>, %m: !kiln.tensor<[2, 1, "L", "S"], i1>) -> !kiln.tensor<[2, 4, "L", 8], f32> {
  %0 = "kiln.attention"(%q, %k, %v, %m) {causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<[2, 4, "L", 8], f32>, !kiln.tensor<[2, 4, "S", 8], f32>, !kiln.tensor<[2, 4, "S", 8], f32>, !kiln.tensor<[2, 1, "L", "S"], i1>) -> !kiln.tensor<[2, 4, "L", 8], f32>
  return %0 : !kiln.tensor<[2, 4, "L", 8], f32>
}

// -----

// A plain softmax keeps torch.softmax's meaning (NaN on a row of -inf): no select.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @softmax(
// CHECK: arith.divf
// CHECK-NOT: arith.select
// CHECK: return
func.func @softmax(%x: !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32> {
  %0 = "kiln.softmax"(%x) {axis = -1 : i64} : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  return %0 : !kiln.tensor<["B", 16], f32>
}
