// RUN: kiln-opt %s --convert-torch-to-kiln | FileCheck %s
// aten.var.correction (torch's var and, through its sqrt, std) imports as the
// mean of squared deviations (it fell back to PyTorch before), scaled by
// n / (n - correction) where there is a correction; a hand-written layer norm
// over var() then reads as kiln-simplify's layer-norm.

// CHECK-LABEL: func.func @var_population$dynamic
// CHECK: %[[M:.*]] = "kiln.reduce_mean"(%arg0) {axes = array<i64: -1>, keepdims = true}
// CHECK: %[[D:.*]] = "kiln.sub"(%arg0, %[[M]])
// CHECK: %[[S:.*]] = "kiln.mul"(%[[D]], %[[D]])
// CHECK: %[[V:.*]] = "kiln.reduce_mean"(%[[S]]) {axes = array<i64: -1>, keepdims = true} : {{.*}} -> !kiln.tensor<["L", 1], f32>
// CHECK-NOT: kiln.fallback
// CHECK: return %[[V]]
func.func @var_population$dynamic(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,1],f32> {
  %0 = torch.symbolic_int "L" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %int-1 = torch.constant.int -1
  %1 = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %int0 = torch.constant.int 0
  %true = torch.constant.bool true
  %2 = torch.aten.var.correction %arg0, %1, %int0, %true : !torch.vtensor<[?,4],f32>, !torch.list<int>, !torch.int, !torch.bool -> !torch.vtensor<[?,1],f32>
  torch.bind_symbolic_shape %2, [%0], affine_map<()[s0] -> (s0, 1)> : !torch.vtensor<[?,1],f32>
  return %2 : !torch.vtensor<[?,1],f32>
}

// The unbiased default (correction 1) over a static axis of 4: x 4/3.
// CHECK-LABEL: func.func @std_unbiased
// CHECK: %[[V:.*]] = "kiln.reduce_mean"(%{{.*}}) {axes = array<i64: 1>, keepdims = false} : {{.*}} -> !kiln.tensor<[3], f32>
// CHECK: %[[C:.*]] = "kiln.constant"() {value = dense<1.33333337> : tensor<f32>}
// CHECK: %[[U:.*]] = "kiln.mul"(%[[V]], %[[C]])
// CHECK: "kiln.sqrt"(%[[U]])
func.func @std_unbiased(%arg0: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[3],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %float1 = torch.constant.float 1.000000e+00
  %false = torch.constant.bool false
  %1 = torch.aten.var.correction %arg0, %0, %float1, %false : !torch.vtensor<[3,4],f32>, !torch.list<int>, !torch.float, !torch.bool -> !torch.vtensor<[3],f32>
  %2 = torch.aten.sqrt %1 : !torch.vtensor<[3],f32> -> !torch.vtensor<[3],f32>
  return %2 : !torch.vtensor<[3],f32>
}

// No dims (None): every axis; the correction left out defaults to 1 (x 12/11).
// CHECK-LABEL: func.func @var_all
// CHECK: "kiln.reduce_mean"(%arg0) {axes = array<i64: 0, 1>, keepdims = true}
// CHECK: "kiln.reduce_mean"(%{{.*}}) {axes = array<i64: 0, 1>, keepdims = false} : {{.*}} -> !kiln.tensor<[], f32>
// CHECK: "kiln.constant"() {value = dense<1.09090912> : tensor<f32>}
func.func @var_all(%arg0: !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[],f32> {
  %none = torch.constant.none
  %false = torch.constant.bool false
  %1 = torch.aten.var.correction %arg0, %none, %none, %false : !torch.vtensor<[3,4],f32>, !torch.none, !torch.none, !torch.bool -> !torch.vtensor<[],f32>
  return %1 : !torch.vtensor<[],f32>
}

// An unbiased variance over a symbolic axis: n / (n - 1) is not a constant,
// so it stays PyTorch's (a fallback).
// CHECK-LABEL: func.func @var_unbiased_symbolic
// CHECK: kiln.fallback
func.func @var_unbiased_symbolic(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.symbolic_int "L" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %int0 = torch.constant.int 0
  %1 = torch.prim.ListConstruct %int0 : (!torch.int) -> !torch.list<int>
  %float1 = torch.constant.float 1.000000e+00
  %false = torch.constant.bool false
  %2 = torch.aten.var.correction %arg0, %1, %float1, %false : !torch.vtensor<[?,4],f32>, !torch.list<int>, !torch.float, !torch.bool -> !torch.vtensor<[4],f32>
  return %2 : !torch.vtensor<[4],f32>
}
