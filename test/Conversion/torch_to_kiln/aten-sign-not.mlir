// RUN: kiln-opt %s --convert-torch-to-kiln | FileCheck %s
// sign, floor / ceil, bitwise_not / logical_not import as kiln ops (issue 43: DeBERTa-v2 fell back on them).

// sign: two selects, for integers too (DeBERTa-v2's relative position buckets).
// CHECK-LABEL: func.func @sign$int
// CHECK: %[[Z:.*]] = "kiln.constant"() {value = dense<0> : tensor<i64>}
// CHECK: %[[LT:.*]] = "kiln.lt"(%arg0, %[[Z]])
// CHECK: %[[M:.*]] = "kiln.constant"() {value = dense<-1> : tensor<i64>}
// CHECK: %[[N:.*]] = "kiln.where"(%[[LT]], %[[M]], %[[Z]])
// CHECK: %[[GT:.*]] = "kiln.gt"(%arg0, %[[Z]])
// CHECK: %[[P:.*]] = "kiln.constant"() {value = dense<1> : tensor<i64>}
// CHECK: "kiln.where"(%[[GT]], %[[P]], %[[N]]) : {{.*}} -> !kiln.tensor<["L", 4], i64>
// CHECK-NOT: kiln.fallback
func.func @sign$int(%arg0: !torch.vtensor<[?,4],si64>) -> !torch.vtensor<[?,4],si64> {
  %0 = torch.symbolic_int "L" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],si64>
  %1 = torch.aten.sign %arg0 : !torch.vtensor<[?,4],si64> -> !torch.vtensor<[?,4],si64>
  torch.bind_symbolic_shape %1, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],si64>
  return %1 : !torch.vtensor<[?,4],si64>
}

// CHECK-LABEL: func.func @ceil$float
// CHECK: "kiln.ceil"(%arg0) : (!kiln.tensor<["L", 4], f32>) -> !kiln.tensor<["L", 4], f32>
func.func @ceil$float(%arg0: !torch.vtensor<[?,4],f32>) -> !torch.vtensor<[?,4],f32> {
  %0 = torch.symbolic_int "L" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  %1 = torch.aten.ceil %arg0 : !torch.vtensor<[?,4],f32> -> !torch.vtensor<[?,4],f32>
  torch.bind_symbolic_shape %1, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],f32>
  return %1 : !torch.vtensor<[?,4],f32>
}

// floor / ceil of an integer tensor is the tensor.
// CHECK-LABEL: func.func @floor$int
// CHECK-NEXT: return %arg0
func.func @floor$int(%arg0: !torch.vtensor<[3],si64>) -> !torch.vtensor<[3],si64> {
  %1 = torch.aten.floor %arg0 : !torch.vtensor<[3],si64> -> !torch.vtensor<[3],si64>
  return %1 : !torch.vtensor<[3],si64>
}

// ~mask on booleans: mask == false.
// CHECK-LABEL: func.func @bitwise_not$bool
// CHECK: %[[F:.*]] = "kiln.constant"() {value = dense<false> : tensor<i1>}
// CHECK: "kiln.eq"(%arg0, %[[F]]) : {{.*}} -> !kiln.tensor<["L", 4], i1>
func.func @bitwise_not$bool(%arg0: !torch.vtensor<[?,4],i1>) -> !torch.vtensor<[?,4],i1> {
  %0 = torch.symbolic_int "L" {min_val = 2, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],i1>
  %1 = torch.aten.bitwise_not %arg0 : !torch.vtensor<[?,4],i1> -> !torch.vtensor<[?,4],i1>
  torch.bind_symbolic_shape %1, [%0], affine_map<()[s0] -> (s0, 4)> : !torch.vtensor<[?,4],i1>
  return %1 : !torch.vtensor<[?,4],i1>
}

// CHECK-LABEL: func.func @logical_not$float
// CHECK: %[[Z:.*]] = "kiln.constant"() {value = dense<0.000000e+00> : tensor<f32>}
// CHECK: "kiln.eq"(%arg0, %[[Z]]) : {{.*}} -> !kiln.tensor<[3], i1>
func.func @logical_not$float(%arg0: !torch.vtensor<[3],f32>) -> !torch.vtensor<[3],i1> {
  %1 = torch.aten.logical_not %arg0 : !torch.vtensor<[3],f32> -> !torch.vtensor<[3],i1>
  return %1 : !torch.vtensor<[3],i1>
}

// Integer bitwise_not is not a boolean negation: it stays a fallback.
// CHECK-LABEL: func.func @bitwise_not$int
// CHECK: "kiln.fallback"(%arg0) {op_name = "aten.bitwise_not"
func.func @bitwise_not$int(%arg0: !torch.vtensor<[3],si64>) -> !torch.vtensor<[3],si64> {
  %1 = torch.aten.bitwise_not %arg0 : !torch.vtensor<[3],si64> -> !torch.vtensor<[3],si64>
  return %1 : !torch.vtensor<[3],si64>
}
