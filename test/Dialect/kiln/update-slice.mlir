// RUN: kiln-opt %s | FileCheck %s
// kiln.update_slice verifies and round-trips; the result has dest's type.

"kiln.symbol"() {sym_name = "P", min = 0 : i64, max = 2040 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func @update
func.func @update(%c: !kiln.tensor<[2, 4, 2048, 16], f32>, %n: !kiln.tensor<[2, 4, "L", 16], f32>) -> !kiln.tensor<[2, 4, 2048, 16], f32> {
  // CHECK: "kiln.update_slice"(%{{.*}}, %{{.*}}) {axis = 2 : i64, offset = ["P"]} : (!kiln.tensor<[2, 4, 2048, 16], f32>, !kiln.tensor<[2, 4, "L", 16], f32>) -> !kiln.tensor<[2, 4, 2048, 16], f32>
  %0 = "kiln.update_slice"(%c, %n) {axis = 2 : i64, offset = ["P"]} : (!kiln.tensor<[2, 4, 2048, 16], f32>, !kiln.tensor<[2, 4, "L", 16], f32>) -> !kiln.tensor<[2, 4, 2048, 16], f32>
  return %0 : !kiln.tensor<[2, 4, 2048, 16], f32>
}
// CHECK-LABEL: func.func @static_offset_negative_axis
func.func @static_offset_negative_axis(%c: !kiln.tensor<[8, 6], f32>, %n: !kiln.tensor<[8, 2], f32>) -> !kiln.tensor<[8, 6], f32> {
  // CHECK: "kiln.update_slice"
  %0 = "kiln.update_slice"(%c, %n) {axis = -1 : i64, offset = [4]} : (!kiln.tensor<[8, 6], f32>, !kiln.tensor<[8, 2], f32>) -> !kiln.tensor<[8, 6], f32>
  return %0 : !kiln.tensor<[8, 6], f32>
}
