// RUN: kiln-opt %s --split-input-file --convert-torch-to-kiln | FileCheck %s

// ONNX ops whose shapes run-time values decide (issue 36): the shape
// contract checks those values per call.

// A constant -1 that divides only some sizes: the reshape is `checked`.
// CHECK-LABEL: func.func @reshape$minus_one_divides_some_sizes
// CHECK: "kiln.reshape"(%arg0) {checked = true, shape = [4, "B+(4*B)/8", 2]}
func.func @reshape$minus_one_divides_some_sizes(%x: !torch.vtensor<[?,12],f32>) -> !torch.vtensor<[4,?,2],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %b = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%b], affine_map<()[s0] -> (s0, 12)> : !torch.vtensor<[?,12],f32>
  %s = torch.operator "onnx.Constant"() {torch.onnx.value = dense<[4, -1, 2]> : tensor<3xsi64>} : () -> !torch.vtensor<[3],si64>
  %0 = torch.operator "onnx.Reshape"(%x, %s) : (!torch.vtensor<[?,12],f32>, !torch.vtensor<[3],si64>) -> !torch.vtensor<[4,?,2],f32>
  return %0 : !torch.vtensor<[4,?,2],f32>
}

// -----

// A target of a shape input's values (its carrier's Shape): `checked`; a
// target the input's dims decide is not.
// CHECK-LABEL: func.func @reshape$shape_input_target
// CHECK: "kiln.reshape"(%arg0) {checked = true, shape = ["n0", "n1"]} : (!kiln.tensor<["B", 12], f32>) -> !kiln.tensor<["n0", "n1"], f32>
// CHECK: "kiln.reshape"(%arg0) {shape = [12, "B"]}
func.func @reshape$shape_input_target(%x: !torch.vtensor<[?,12],f32>, %c: !torch.vtensor<[?,?],i1>) -> (!torch.vtensor<[?,?],f32>, !torch.vtensor<[12,?],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %b = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  %n0 = torch.symbolic_int "n0" {min_val = 1, max_val = 1024} : !torch.int
  %n1 = torch.symbolic_int "n1" {min_val = 1, max_val = 1024} : !torch.int
  torch.bind_symbolic_shape %x, [%b], affine_map<()[s0] -> (s0, 12)> : !torch.vtensor<[?,12],f32>
  torch.bind_symbolic_shape %c, [%n0, %n1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],i1>
  %s = torch.operator "onnx.Shape"(%c) : (!torch.vtensor<[?,?],i1>) -> !torch.vtensor<[2],si64>
  %0 = torch.operator "onnx.Reshape"(%x, %s) : (!torch.vtensor<[?,12],f32>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[?,?],f32>
  %t = torch.operator "onnx.Constant"() {torch.onnx.value = dense<[12, -1]> : tensor<2xsi64>} : () -> !torch.vtensor<[2],si64>
  %1 = torch.operator "onnx.Reshape"(%x, %t) : (!torch.vtensor<[?,12],f32>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[12,?],f32>
  return %0, %1 : !torch.vtensor<[?,?],f32>, !torch.vtensor<[12,?],f32>
}

// -----

// Slice bounds of run-time values: a gather of range(end - start) + start,
// and a module-level record that 0 <= start <= end <= 12 must hold.
// CHECK: module attributes {kiln.checks = ["bounds|onnx.Slice at {{.*}}onnx-runtime-values.mlir:{{[0-9]+}}:{{[0-9]+}}|s0|e0|12"]}
// CHECK-LABEL: func.func @slice$shape_input_bounds
// CHECK: %[[R:.*]] = "kiln.range"() {shape = ["e0-s0"], start = 0.{{.*}}, step = 1.{{.*}}}
// CHECK: %[[I:.*]] = "kiln.add"(%[[R]], %{{.*}})
// CHECK: "kiln.gather"(%arg0, %[[I]]) {axis = 1 : i64} : (!kiln.tensor<["B", 12], f32>, !kiln.tensor<["e0-s0"], i64>) -> !kiln.tensor<["B", "e0-s0"], f32>
func.func @slice$shape_input_bounds(%x: !torch.vtensor<[?,12],f32>, %st: !torch.vtensor<[?],i1>, %en: !torch.vtensor<[?],i1>) -> !torch.vtensor<[?,?],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %b = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  %s0 = torch.symbolic_int "s0" {min_val = 0, max_val = 1024} : !torch.int
  %e0 = torch.symbolic_int "e0" {min_val = 0, max_val = 1024} : !torch.int
  torch.bind_symbolic_shape %x, [%b], affine_map<()[s0] -> (s0, 12)> : !torch.vtensor<[?,12],f32>
  torch.bind_symbolic_shape %st, [%s0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],i1>
  torch.bind_symbolic_shape %en, [%e0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],i1>
  %a = torch.operator "onnx.Shape"(%st) : (!torch.vtensor<[?],i1>) -> !torch.vtensor<[1],si64>
  %e = torch.operator "onnx.Shape"(%en) : (!torch.vtensor<[?],i1>) -> !torch.vtensor<[1],si64>
  %axes = torch.operator "onnx.Constant"() {torch.onnx.value = dense<1> : tensor<1xsi64>} : () -> !torch.vtensor<[1],si64>
  %0 = torch.operator "onnx.Slice"(%x, %a, %e, %axes) : (!torch.vtensor<[?,12],f32>, !torch.vtensor<[1],si64>, !torch.vtensor<[1],si64>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[?,?],f32>
  return %0 : !torch.vtensor<[?,?],f32>
}
