// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// kiln.custom round-trips: two results, recorded arguments in attrs.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @custom
// CHECK: %[[R:.*]]:2 = "kiln.custom"(%arg0, %arg1) {attrs = {operand2 = 5.000000e-01 : f64}, kernel = "topk_np", op_name = "mylib::topk2"
// CHECK-SAME: -> (!kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], i64>)
func.func @custom(%x: !kiln.tensor<["B", 8], f32>, %y: !kiln.tensor<["B", 8], f32>) -> (!kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], i64>) {
  %0:2 = "kiln.custom"(%x, %y) {op_name = "mylib::topk2", kernel = "topk_np", attrs = {operand2 = 0.5 : f64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0>} : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>) -> (!kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], i64>)
  return %0#0, %0#1 : !kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], i64>
}
