// RUN: kiln-opt %s --convert-torch-to-kiln | FileCheck %s

// A size as the scalar of tensor arithmetic: a KV-cache decode step's mask
// code computes arange(L) + P (P the past length, a symbol). The size becomes
// a rank-0 tensor computed at run time (the last entry of range(P + 1)), not
// a fallback ("symbolic scalar operand").
// CHECK-LABEL: func.func @add_past_length
// CHECK-NOT: kiln.fallback
// CHECK: %[[R:.*]] = "kiln.range"() {shape = ["P+1"], start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : () -> !kiln.tensor<["P+1"], i64>
// CHECK: %[[LAST:.*]] = "kiln.slice"(%[[R]]) {{.*}}starts = array<i64: -1>{{.*}} -> !kiln.tensor<[1], i64>
// CHECK: %[[S:.*]] = "kiln.reshape"(%[[LAST]]) {shape = []} : (!kiln.tensor<[1], i64>) -> !kiln.tensor<[], i64>
// CHECK: "kiln.add"(%arg0, %[[S]]) : (!kiln.tensor<[4], i64>, !kiln.tensor<[], i64>) -> !kiln.tensor<[4], i64>
func.func @add_past_length(%arg0: !torch.vtensor<[4],si64>, %arg1: !torch.vtensor<[1,?,8],f32>) -> !torch.vtensor<[4],si64> {
  %0 = torch.symbolic_int "P" {min_val = 1, max_val = 63} : !torch.int
  torch.bind_symbolic_shape %arg1, [%0], affine_map<()[s0] -> (1, s0, 8)> : !torch.vtensor<[1,?,8],f32>
  %int1 = torch.constant.int 1
  %p = torch.aten.size.int %arg1, %int1 : !torch.vtensor<[1,?,8],f32>, !torch.int -> !torch.int
  %1 = torch.aten.add.Scalar %arg0, %p, %int1 : !torch.vtensor<[4],si64>, !torch.int, !torch.int -> !torch.vtensor<[4],si64>
  return %1 : !torch.vtensor<[4],si64>
}
