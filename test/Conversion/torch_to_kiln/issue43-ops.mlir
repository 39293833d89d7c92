// RUN: kiln-opt %s --convert-torch-to-kiln | FileCheck %s

// Ops that used to fall back (issue 43): cumsum, full_like, repeat,
// index.Tensor and 1-D convolution import as kiln ops.

// CHECK-LABEL: func.func @cumsum$int_mask
// CHECK: "kiln.cumsum"(%arg0) {axis = 1 : i64} : (!kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L"], i64>
// CHECK-NOT: kiln.fallback
func.func @cumsum$int_mask(%arg0: !torch.vtensor<[?,?],si64>) -> !torch.vtensor<[?,?],si64> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  %1 = torch.symbolic_int "L" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %2 = torch.aten.cumsum %arg0, %int1, %none : !torch.vtensor<[?,?],si64>, !torch.int, !torch.none -> !torch.vtensor<[?,?],si64>
  torch.bind_symbolic_shape %2, [%0, %1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  return %2 : !torch.vtensor<[?,?],si64>
}

// A fill of a symbolic shape is a rank-0 constant broadcast to it.
// CHECK-LABEL: func.func @full_like$symbolic
// CHECK: %[[C:.*]] = "kiln.constant"() {value = dense<2.500000e+00> : tensor<f32>} : () -> !kiln.tensor<[], f32>
// CHECK: "kiln.expand"(%[[C]]) {shape = ["B", 4]} : (!kiln.tensor<[], f32>) -> !kiln.tensor<["B", 4], f32>
func.func @full_like$symbolic(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,4],f32> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %float = torch.constant.float 2.500000e+00
  %none = torch.constant.none
  %1 = torch.aten.full_like %arg0, %float, %none, %none, %none, %none, %none : !torch.vtensor<[?,4],f32>, !torch.float, !torch.none, !torch.none, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[?,4],f32>
  torch.bind_symbolic_shape %1, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  return %1 : !torch.vtensor<[?,4],f32>
}

// repeat(1, 3): the repeated axis is split to [1, d], broadcast to [r, d], merged.
// CHECK-LABEL: func.func @repeat$tile
// CHECK: %[[R:.*]] = "kiln.reshape"(%arg0) {shape = ["B", 1, 4]}
// CHECK: %[[E:.*]] = "kiln.expand"(%[[R]]) {shape = ["B", 3, 4]}
// CHECK: "kiln.reshape"(%[[E]]) {shape = ["B", 12]} : (!kiln.tensor<["B", 3, 4], f32>) -> !kiln.tensor<["B", 12], f32>
func.func @repeat$tile(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,12],f32> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %1 = torch.prim.ListConstruct %int1, %int3 : (!torch.int, !torch.int) -> !torch.list<int>
  %2 = torch.aten.repeat %arg0, %1 : !torch.vtensor<[?,4],f32>, !torch.list<int> -> !torch.vtensor<[?,12],f32>
  torch.bind_symbolic_shape %2, [%0], affine_map<()[s0] -> (s0, 12)> : !torch.vtensor<[?,12],f32>
  return %2 : !torch.vtensor<[?,12],f32>
}

// x[:, idx]: one index tensor is a gather along its axis.
// CHECK-LABEL: func.func @index$one_tensor
// CHECK: "kiln.gather"(%arg0, %arg1) {axis = 1 : i64} : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["L"], i64>) -> !kiln.tensor<["B", "L"], f32>
func.func @index$one_tensor(%arg0: !torch.vtensor<[?,8],f32>, %arg1: !torch.vtensor<[?],si64>) -> !torch.vtensor<[?,?],f32> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  %1 = torch.symbolic_int "L" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 8)> : !torch.vtensor<[?,8],f32>
  torch.bind_symbolic_shape %arg1, [%1], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],si64>
  %none = torch.constant.none
  %2 = torch.prim.ListConstruct %none, %arg1 : (!torch.none, !torch.vtensor<[?],si64>) -> !torch.list<optional<vtensor>>
  %3 = torch.aten.index.Tensor %arg0, %2 : !torch.vtensor<[?,8],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[?,?],f32>
  torch.bind_symbolic_shape %3, [%0, %1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],f32>
  return %3 : !torch.vtensor<[?,?],f32>
}

// t[i, j] with broadcasting index tensors: wrapped, linearized (i*6 + j), gathered from t merged to [30, 2].
// CHECK-LABEL: func.func @index$two_tensors
// CHECK: "kiln.mul"(%{{.*}}, %{{.*}}) : (!kiln.tensor<["L", 1], i64>, !kiln.tensor<[], i64>)
// CHECK: %[[F:.*]] = "kiln.add"(%{{.*}}, %{{.*}}) : (!kiln.tensor<["L", 1], i64>, !kiln.tensor<[1, "L"], i64>) -> !kiln.tensor<["L", "L"], i64>
// CHECK: %[[M:.*]] = "kiln.reshape"(%arg0) {shape = [30, 2]}
// CHECK: "kiln.gather"(%[[M]], %[[F]]) {axis = 0 : i64} : (!kiln.tensor<[30, 2], f32>, !kiln.tensor<["L", "L"], i64>) -> !kiln.tensor<["L", "L", 2], f32>
func.func @index$two_tensors(%arg0: !torch.vtensor<[5,6,2],f32>, %arg1: !torch.vtensor<[?,1],si64>, %arg2: !torch.vtensor<[1,?],si64>) -> !torch.vtensor<[?,?,2],f32> {
  %0 = torch.symbolic_int "L" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg1, [%0], affine_map<()[s0] -> (s0, 1)> : !torch.vtensor<[?,1],si64>
  torch.bind_symbolic_shape %arg2, [%0], affine_map<()[s0] -> (1, s0)> : !torch.vtensor<[1,?],si64>
  %1 = torch.prim.ListConstruct %arg1, %arg2 : (!torch.vtensor<[?,1],si64>, !torch.vtensor<[1,?],si64>) -> !torch.list<optional<vtensor>>
  %2 = torch.aten.index.Tensor %arg0, %1 : !torch.vtensor<[5,6,2],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[?,?,2],f32>
  torch.bind_symbolic_shape %2, [%0], affine_map<()[s0] -> (s0, s0, 2)> : !torch.vtensor<[?,?,2],f32>
  return %2 : !torch.vtensor<[?,?,2],f32>
}

// A 1-D convolution is conv2d over a unit height: pads [0, p, 0, p], strides [1, s].
// CHECK-LABEL: func.func @convolution$1d
// CHECK: %[[X:.*]] = "kiln.reshape"(%arg0) {shape = ["B", 3, 1, 10]}
// CHECK: %[[W:.*]] = "kiln.reshape"(%{{.*}}) {shape = [4, 3, 1, 3]}
// CHECK: %[[Y:.*]] = "kiln.conv2d"(%[[X]], %[[W]]) {dilations = array<i64: 1, 1>, groups = 1 : i64, {{.*}}pads = array<i64: 0, 1, 0, 1>, strides = array<i64: 1, 2>}
// CHECK-SAME: -> !kiln.tensor<["B", 4, 1, 5], f32>
// CHECK: "kiln.reshape"(%[[Y]]) {shape = ["B", 4, 5]}
func.func @convolution$1d(%arg0: !torch.vtensor<[?,3,10],f32>) -> !torch.vtensor<[?,4,5],f32> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 3, 10)> : !torch.vtensor<[?,3,10],f32>
  %w = torch.vtensor.literal(dense<1.0> : tensor<4x3x3xf32>) : !torch.vtensor<[4,3,3],f32>
  %none = torch.constant.none
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int0 = torch.constant.int 0
  %false = torch.constant.bool false
  %s = torch.prim.ListConstruct %int2 : (!torch.int) -> !torch.list<int>
  %p = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %d = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %op = torch.prim.ListConstruct %int0 : (!torch.int) -> !torch.list<int>
  %1 = torch.aten.convolution %arg0, %w, %none, %s, %p, %d, %false, %op, %int1 : !torch.vtensor<[?,3,10],f32>, !torch.vtensor<[4,3,3],f32>, !torch.none, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[?,4,5],f32>
  torch.bind_symbolic_shape %1, [%0], affine_map<()[s0] -> (s0, 4, 5)> : !torch.vtensor<[?,4,5],f32>
  return %1 : !torch.vtensor<[?,4,5],f32>
}

// mask[batch_idx, kv_idx] over symbolic axes: linearized like static ones,
// the size L (each index's wrap and the first one's stride) a run-time value
// (the last entry of range(L + 1)); one gather of the result's size from the
// merged [B*L] mask.
// CHECK-LABEL: func.func @index$symbolic_axes
// CHECK: %[[R:.*]] = "kiln.range"() {shape = ["L+1"]
// CHECK: %[[LAST:.*]] = "kiln.slice"(%[[R]]) {axes = array<i64: 0>, ends = array<i64: 4611686018427387904>, starts = array<i64: -1>
// CHECK: %[[L:.*]] = "kiln.reshape"(%[[LAST]]) {shape = []}
// CHECK: %[[KV:.*]] = "kiln.where"({{.*}}) : {{.*}} -> !kiln.tensor<[1, "L"], i64>
// CHECK: %[[B:.*]] = "kiln.where"({{.*}}) : {{.*}} -> !kiln.tensor<["B", 1], i64>
// CHECK: %[[S:.*]] = "kiln.mul"(%[[B]], %{{.*}}) : (!kiln.tensor<["B", 1], i64>, !kiln.tensor<[], i64>)
// CHECK: %[[F:.*]] = "kiln.add"(%[[S]], %[[KV]]) : {{.*}} -> !kiln.tensor<["B", "L"], i64>
// CHECK: %[[M:.*]] = "kiln.reshape"(%arg0) {shape = ["B*L"]}
// CHECK: "kiln.gather"(%[[M]], %[[F]]) {axis = 0 : i64} : (!kiln.tensor<["B*L"], i64>, !kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L"], i64>
// CHECK-NOT: gather_elements
func.func @index$symbolic_axes(%arg0: !torch.vtensor<[?,?],si64>, %arg1: !torch.vtensor<[?,1],si64>, %arg2: !torch.vtensor<[1,?],si64>) -> !torch.vtensor<[?,?],si64> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  %1 = torch.symbolic_int "L" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  torch.bind_symbolic_shape %arg1, [%0], affine_map<()[s0] -> (s0, 1)> : !torch.vtensor<[?,1],si64>
  torch.bind_symbolic_shape %arg2, [%1], affine_map<()[s0] -> (1, s0)> : !torch.vtensor<[1,?],si64>
  %2 = torch.prim.ListConstruct %arg1, %arg2 : (!torch.vtensor<[?,1],si64>, !torch.vtensor<[1,?],si64>) -> !torch.list<optional<vtensor>>
  %3 = torch.aten.index.Tensor %arg0, %2 : !torch.vtensor<[?,?],si64>, !torch.list<optional<vtensor>> -> !torch.vtensor<[?,?],si64>
  torch.bind_symbolic_shape %3, [%0, %1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],si64>
  return %3 : !torch.vtensor<[?,?],si64>
}
