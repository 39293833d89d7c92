// RUN: kiln-opt %s --convert-torch-to-kiln | FileCheck %s
// aten.linalg_vector_norm imports as kiln reductions (issue 43: Wav2Vec2's weight norm fell back on it).

// The 2-norm over the given axes (weight norm's |v| in Wav2Vec2's positional conv).
// CHECK-LABEL: func.func @vector_norm$l2
// CHECK: %[[SQ:.*]] = "kiln.mul"(%arg0, %arg0)
// CHECK: %[[S:.*]] = "kiln.reduce_sum"(%[[SQ]]) {axes = array<i64: 0, 2>, keepdims = true}
// CHECK: "kiln.sqrt"(%[[S]]) : {{.*}} -> !kiln.tensor<[1, 16, 1], f32>
func.func @vector_norm$l2(%arg0: !torch.vtensor<[?,16,4],f32>) -> !torch.vtensor<[1,16,1],f32> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 8} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 16, 4)> : !torch.vtensor<[?,16,4],f32>
  %int2 = torch.constant.int 2
  %int0 = torch.constant.int 0
  %int2b = torch.constant.int 2
  %1 = torch.prim.ListConstruct %int0, %int2b : (!torch.int, !torch.int) -> !torch.list<int>
  %true = torch.constant.bool true
  %none = torch.constant.none
  %2 = torch.aten.linalg_vector_norm %arg0, %int2, %1, %true, %none : !torch.vtensor<[?,16,4],f32>, !torch.int, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[1,16,1],f32>
  return %2 : !torch.vtensor<[1,16,1],f32>
}

// CHECK-LABEL: func.func @vector_norm$inf
// CHECK: %[[A:.*]] = "kiln.abs"(%arg0)
// CHECK: "kiln.reduce_max"(%[[A]]) {axes = array<i64: 1>, keepdims = false}
func.func @vector_norm$inf(%arg0: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3],f32> {
  %float = torch.constant.float 0x7FF0000000000000
  %int1 = torch.constant.int 1
  %1 = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %false = torch.constant.bool false
  %none = torch.constant.none
  %2 = torch.aten.linalg_vector_norm %arg0, %float, %1, %false, %none : !torch.vtensor<[3,4],f32>, !torch.float, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[3],f32>
  return %2 : !torch.vtensor<[3],f32>
}

// Any other positive order: (sum |x|^p)^(1/p), over every axis when dim is None.
// CHECK-LABEL: func.func @vector_norm$p3
// CHECK: %[[A:.*]] = "kiln.abs"(%arg0)
// CHECK: %[[P:.*]] = "kiln.pow"(%[[A]], %{{.*}})
// CHECK: %[[S:.*]] = "kiln.reduce_sum"(%[[P]]) {axes = array<i64: 0, 1>, keepdims = false}
// CHECK: %[[R:.*]] = "kiln.constant"() {value = dense<0.333333343> : tensor<f32>}
// CHECK: "kiln.pow"(%[[S]], %[[R]])
func.func @vector_norm$p3(%arg0: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[],f32> {
  %float = torch.constant.float 3.000000e+00
  %none = torch.constant.none
  %false = torch.constant.bool false
  %2 = torch.aten.linalg_vector_norm %arg0, %float, %none, %false, %none : !torch.vtensor<[3,4],f32>, !torch.float, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[],f32>
  return %2 : !torch.vtensor<[],f32>
}

// Order 0 (a count of nonzeros) is not lowered: a fallback.
// CHECK-LABEL: func.func @vector_norm$zero
// CHECK: "kiln.fallback"(%arg0) {{.*}}op_name = "aten.linalg_vector_norm"
func.func @vector_norm$zero(%arg0: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[],f32> {
  %float = torch.constant.float 0.000000e+00
  %none = torch.constant.none
  %false = torch.constant.bool false
  %2 = torch.aten.linalg_vector_norm %arg0, %float, %none, %false, %none : !torch.vtensor<[3,4],f32>, !torch.float, !torch.none, !torch.bool, !torch.none -> !torch.vtensor<[],f32>
  return %2 : !torch.vtensor<[],f32>
}
