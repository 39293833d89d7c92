// RUN: kiln-opt %s --convert-torch-to-kiln | FileCheck %s

// Symbols come from torch.symbolic_int (with their ranges), dims from
// torch.bind_symbolic_shape; torch scalar/list constants fold into attributes.

// CHECK: "kiln.symbol"() {max = 64 : i64, min = 1 : i64, sym_name = "B"}
// CHECK: "kiln.symbol"() {max = 512 : i64, min = 1 : i64, sym_name = "L"}

// CHECK-LABEL: func.func @linear$dynamic_batch
// CHECK-SAME: (%[[X:.*]]: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 3], f32>
// CHECK: %[[W:.*]] = "kiln.constant"() {value = dense<1.000000e+00> : tensor<3x4xf32>}
// CHECK: %[[B:.*]] = "kiln.constant"() {value = dense<5.000000e-01> : tensor<3xf32>}
// CHECK: %[[WT:.*]] = "kiln.transpose"(%[[W]]) {perm = array<i64: 1, 0>}
// CHECK: %[[MM:.*]] = "kiln.matmul"(%[[X]], %[[WT]]) : {{.*}} -> !kiln.tensor<["B", 3], f32>
// CHECK: %[[Y:.*]] = "kiln.add"(%[[MM]], %[[B]])
// CHECK: return %[[Y]] : !kiln.tensor<["B", 3], f32>
func.func @linear$dynamic_batch(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,3],f32> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %w = torch.vtensor.literal(dense<1.0> : tensor<3x4xf32>) : !torch.vtensor<[3,4],f32>
  %b = torch.vtensor.literal(dense<0.5> : tensor<3xf32>) : !torch.vtensor<[3],f32>
  %1 = torch.aten.linear %arg0, %w, %b : !torch.vtensor<[?,4],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[?,3],f32>
  torch.bind_symbolic_shape %1, [%0], affine_map<()[s0] -> (s0, 3)> : !torch.vtensor<[?,3],f32>
  return %1 : !torch.vtensor<[?,3],f32>
}

// CHECK-LABEL: func.func @view$folded_sizes
// CHECK: "kiln.reshape"(%{{.*}}) {shape = ["B*L", 8]} : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B*L", 8], f32>
func.func @view$folded_sizes(%arg0: !torch.vtensor<[?,?,8],f32>) -> !torch.vtensor<[?,8],f32> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  %1 = torch.symbolic_int "L" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %2 = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %3 = torch.aten.size.int %arg0, %int1 : !torch.vtensor<[?,?,8],f32>, !torch.int -> !torch.int
  %4 = torch.aten.mul.int %2, %3 : !torch.int, !torch.int -> !torch.int
  %int8 = torch.constant.int 8
  %5 = torch.prim.ListConstruct %4, %int8 : (!torch.int, !torch.int) -> !torch.list<int>
  %6 = torch.aten.view %arg0, %5 : !torch.vtensor<[?,?,8],f32>, !torch.list<int> -> !torch.vtensor<[?,8],f32>
  return %6 : !torch.vtensor<[?,8],f32>
}

// CHECK-LABEL: func.func @view$minus_one
// CHECK: "kiln.reshape"(%{{.*}}) {shape = ["2*L", 4]} : (!kiln.tensor<["L", 8], f32>) -> !kiln.tensor<["2*L", 4], f32>
func.func @view$minus_one(%arg0: !torch.vtensor<[?,8],f32>) -> !torch.vtensor<[?,4],f32> {
  %0 = torch.symbolic_int "L" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 8)> : !torch.vtensor<[?,8],f32>
  %int-1 = torch.constant.int -1
  %int4 = torch.constant.int 4
  %1 = torch.prim.ListConstruct %int-1, %int4 : (!torch.int, !torch.int) -> !torch.list<int>
  %2 = torch.aten.view %arg0, %1 : !torch.vtensor<[?,8],f32>, !torch.list<int> -> !torch.vtensor<[?,4],f32>
  return %2 : !torch.vtensor<[?,4],f32>
}

// CHECK-LABEL: func.func @add$alpha_scalar
// CHECK: %[[C:.*]] = "kiln.constant"() {value = dense<2.000000e+00> : tensor<f32>}
// CHECK: %[[S:.*]] = "kiln.mul"(%{{.*}}, %{{.*}})
// CHECK: "kiln.add"(%arg0, %[[S]])
func.func @add$alpha_scalar(%arg0: !torch.vtensor<[4],f32>, %arg1: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %float2 = torch.constant.float 2.0
  %0 = torch.aten.add.Tensor %arg0, %arg1, %float2 : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>, !torch.float -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}

// CHECK-LABEL: func.func @softmax$last_axis
// CHECK: "kiln.softmax"(%arg0) {axis = -1 : i64} : (!kiln.tensor<[2, 5], f32>) -> !kiln.tensor<[2, 5], f32>
func.func @softmax$last_axis(%arg0: !torch.vtensor<[2,5],f32>) -> !torch.vtensor<[2,5],f32> {
  %int-1 = torch.constant.int -1
  %false = torch.constant.bool false
  %0 = torch.aten._softmax %arg0, %int-1, %false : !torch.vtensor<[2,5],f32>, !torch.int, !torch.bool -> !torch.vtensor<[2,5],f32>
  return %0 : !torch.vtensor<[2,5],f32>
}

// CHECK-LABEL: func.func @sdpa$causal
// CHECK: "kiln.attention"(%arg0, %arg1, %arg2) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : {{.*}} -> !kiln.tensor<["B", 4, "L", 16], f32>
func.func @sdpa$causal(%q: !torch.vtensor<[?,4,?,16],f32>, %k: !torch.vtensor<[?,4,?,16],f32>, %v: !torch.vtensor<[?,4,?,16],f32>) -> !torch.vtensor<[?,4,?,16],f32> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  %1 = torch.symbolic_int "L" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %q, [%0, %1], affine_map<()[s0, s1] -> (s0, 4, s1, 16)> : !torch.vtensor<[?,4,?,16],f32>
  torch.bind_symbolic_shape %k, [%0, %1], affine_map<()[s0, s1] -> (s0, 4, s1, 16)> : !torch.vtensor<[?,4,?,16],f32>
  torch.bind_symbolic_shape %v, [%0, %1], affine_map<()[s0, s1] -> (s0, 4, s1, 16)> : !torch.vtensor<[?,4,?,16],f32>
  %none = torch.constant.none
  %float0 = torch.constant.float 0.0
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %2 = torch.aten.scaled_dot_product_attention %q, %k, %v, %none, %float0, %true, %none, %false : !torch.vtensor<[?,4,?,16],f32>, !torch.vtensor<[?,4,?,16],f32>, !torch.vtensor<[?,4,?,16],f32>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[?,4,?,16],f32>
  return %2 : !torch.vtensor<[?,4,?,16],f32>
}

// CHECK-LABEL: func.func @convolution$stride2
// CHECK: "kiln.conv2d"(%arg0, %arg1, %arg2) {dilations = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : {{.*}} -> !kiln.tensor<["B", 8, 16, 16], f32>
func.func @convolution$stride2(%x: !torch.vtensor<[?,3,32,32],f32>, %w: !torch.vtensor<[8,3,3,3],f32>, %b: !torch.vtensor<[8],f32>) -> !torch.vtensor<[?,8,16,16],f32> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%0], affine_map<()[s0] -> (s0, 3, 32, 32)> : !torch.vtensor<[?,3,32,32],f32>
  %int1 = torch.constant.int 1
  %int2 = torch.constant.int 2
  %int0 = torch.constant.int 0
  %s = torch.prim.ListConstruct %int2, %int2 : (!torch.int, !torch.int) -> !torch.list<int>
  %p = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %d = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %o = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %false = torch.constant.bool false
  %1 = torch.aten.convolution %x, %w, %b, %s, %p, %d, %false, %o, %int1 : !torch.vtensor<[?,3,32,32],f32>, !torch.vtensor<[8,3,3,3],f32>, !torch.vtensor<[8],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[?,8,16,16],f32>
  return %1 : !torch.vtensor<[?,8,16,16],f32>
}

// CHECK-LABEL: func.func @slice$to_end
// CHECK: "kiln.slice"(%arg0) {axes = array<i64: 1>, ends = array<i64: 4611686018427387904>, starts = array<i64: 1>, steps = array<i64: 1>} : (!kiln.tensor<[2, 6], f32>) -> !kiln.tensor<[2, 5], f32>
func.func @slice$to_end(%arg0: !torch.vtensor<[2,6],f32>) -> !torch.vtensor<[2,5],f32> {
  %int1 = torch.constant.int 1
  %big = torch.constant.int 9223372036854775807
  %0 = torch.aten.slice.Tensor %arg0, %int1, %int1, %big, %int1 : !torch.vtensor<[2,6],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,5],f32>
  return %0 : !torch.vtensor<[2,5],f32>
}

// CHECK-LABEL: func.func @unknown_op$falls_back
// CHECK: "kiln.fallback"(%arg0) {op_name = "aten.special_bessel_j0.default"
// CHECK-SAME: -> !kiln.tensor<[4], f32>
func.func @unknown_op$falls_back(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.operator "torch.aten.special_bessel_j0.default"(%arg0) : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}

// arange with a symbolic bound becomes kiln.range of that length (no fallback).
// CHECK-LABEL: func.func @arange$symbolic_end
// CHECK: "kiln.range"() {shape = ["L"], start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : () -> !kiln.tensor<["L"], i64>
func.func @arange$symbolic_end(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[?],si64> {
  %0 = torch.symbolic_int "L" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],f32>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %false = torch.constant.bool false
  %cpu = torch.constant.device "cpu"
  %n = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?],f32>, !torch.int -> !torch.int
  %1 = torch.aten.arange.start_step %int0, %n, %int1, %none, %none, %cpu, %false : !torch.int, !torch.int, !torch.int, !torch.none, !torch.none, !torch.Device, !torch.bool -> !torch.vtensor<[?],si64>
  torch.bind_symbolic_shape %1, [%0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],si64>
  return %1 : !torch.vtensor<[?],si64>
}

// A slice whose end is a symbol is a gather of a range.
// CHECK-LABEL: func.func @slice$symbolic_end
// CHECK: %[[R:.*]] = "kiln.range"() {shape = ["L"], {{.*}}} : () -> !kiln.tensor<["L"], i64>
// CHECK: "kiln.gather"(%{{.*}}, %[[R]]) {axis = 1 : i64} : (!kiln.tensor<[1, 128], i64>, !kiln.tensor<["L"], i64>) -> !kiln.tensor<[1, "L"], i64>
func.func @slice$symbolic_end(%arg0: !torch.vtensor<[?],f32>) -> !torch.vtensor<[1,?],si64> {
  %0 = torch.symbolic_int "L" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],f32>
  %pos = torch.vtensor.literal(dense<3> : tensor<1x128xsi64>) : !torch.vtensor<[1,128],si64>
  %int0 = torch.constant.int 0
  %int1 = torch.constant.int 1
  %n = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?],f32>, !torch.int -> !torch.int
  %1 = torch.aten.slice.Tensor %pos, %int1, %int0, %n, %int1 : !torch.vtensor<[1,128],si64>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1,?],si64>
  torch.bind_symbolic_shape %1, [%0], affine_map<()[s0] -> (1, s0)> : !torch.vtensor<[1,?],si64>
  return %1 : !torch.vtensor<[1,?],si64>
}

// Boolean AND is the product of i1 tensors.
// CHECK-LABEL: func.func @bitwise_and$bool
// CHECK: "kiln.mul"(%arg0, %arg1) : (!kiln.tensor<[4], i1>, !kiln.tensor<[4], i1>) -> !kiln.tensor<[4], i1>
func.func @bitwise_and$bool(%a: !torch.vtensor<[4],i1>, %b: !torch.vtensor<[4],i1>) -> !torch.vtensor<[4],i1> {
  %0 = torch.aten.bitwise_and.Tensor %a, %b : !torch.vtensor<[4],i1>, !torch.vtensor<[4],i1> -> !torch.vtensor<[4],i1>
  return %0 : !torch.vtensor<[4],i1>
}

// An op whose operand is a list of tensors falls back with each tensor as an
// operand and "%operand<k>" markers in the list (boolean index tensors: masks are not lowered).
// CHECK-LABEL: func.func @index$tensor_list_falls_back
// CHECK: "kiln.fallback"(%arg0, %arg1, %arg2) {attrs = {operand1 = ["%operand1", "%operand2"]}, op_name = "aten.index.Tensor"
func.func @index$tensor_list_falls_back(%x: !torch.vtensor<[4,5],f32>, %i: !torch.vtensor<[4,1],i1>, %j: !torch.vtensor<[1,5],i1>) -> !torch.vtensor<[4,5],f32> {
  %l = torch.prim.ListConstruct %i, %j : (!torch.vtensor<[4,1],i1>, !torch.vtensor<[1,5],i1>) -> !torch.list<optional<vtensor>>
  %0 = torch.aten.index.Tensor %x, %l : !torch.vtensor<[4,5],f32>, !torch.list<optional<vtensor>> -> !torch.vtensor<[4,5],f32>
  return %0 : !torch.vtensor<[4,5],f32>
}

// unbind of a static axis: one slice + reshape per item, taken apart by prim.ListUnpack.
// CHECK-LABEL: func.func @unbind$static_axis
// CHECK-SAME: (%[[X:.*]]: !kiln.tensor<["B", 2, 3], f32>)
// CHECK: %[[S0:.*]] = "kiln.slice"(%[[X]]) {axes = array<i64: 1>, ends = array<i64: 1>, starts = array<i64: 0>, steps = array<i64: 1>}
// CHECK: %[[A:.*]] = "kiln.reshape"(%[[S0]]) {shape = ["B", 3]}
// CHECK: %[[S1:.*]] = "kiln.slice"(%[[X]]) {axes = array<i64: 1>, ends = array<i64: 2>, starts = array<i64: 1>, steps = array<i64: 1>}
// CHECK: %[[B:.*]] = "kiln.reshape"(%[[S1]]) {shape = ["B", 3]}
// CHECK: return %[[A]], %[[B]] : !kiln.tensor<["B", 3], f32>, !kiln.tensor<["B", 3], f32>
func.func @unbind$static_axis(%arg0: !torch.vtensor<[?,2,3],f32>) -> (!torch.vtensor<[?,3],f32>, !torch.vtensor<[?,3],f32>) {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 2, 3)> : !torch.vtensor<[?,2,3],f32>
  %int1 = torch.constant.int 1
  %1 = torch.aten.unbind.int %arg0, %int1 : !torch.vtensor<[?,2,3],f32>, !torch.int -> !torch.list<vtensor>
  %2:2 = torch.prim.ListUnpack %1 : !torch.list<vtensor> -> !torch.vtensor<[?,3],f32>, !torch.vtensor<[?,3],f32>
  torch.bind_symbolic_shape %2#0, [%0], affine_map<()[s0] -> (s0, 3)> : !torch.vtensor<[?,3],f32>
  torch.bind_symbolic_shape %2#1, [%0], affine_map<()[s0] -> (s0, 3)> : !torch.vtensor<[?,3],f32>
  return %2#0, %2#1 : !torch.vtensor<[?,3],f32>, !torch.vtensor<[?,3],f32>
}
