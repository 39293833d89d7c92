// RUN: kiln-opt %s --convert-torch-to-kiln | FileCheck %s

// PT2E's quantized_decomposed ops (as the FX importer emits them) become
// kiln.quantize / kiln.dequantize.  quantize_per_tensor multiplies by the f32
// inverse of the scale, as torch does, and quantizes with scale 1; a range
// narrower than the dtype's clamps first.

// CHECK-LABEL: func.func @per_tensor
// CHECK: %[[INV:.*]] = "kiln.constant"() {value = dense<4.000000e+01> : tensor<f32>}
// CHECK: %[[V:.*]] = "kiln.mul"(%arg0, %[[INV]])
// CHECK: %[[ONE:.*]] = "kiln.constant"() {value = dense<1.000000e+00> : tensor<f32>}
// CHECK: %[[ZP:.*]] = "kiln.constant"() {value = dense<123> : tensor<ui8>}
// CHECK: %[[Q:.*]] = "kiln.quantize"(%[[V]], %[[ONE]], %[[ZP]]) : {{.*}} -> !kiln.tensor<[2, 4], ui8>
// CHECK: %[[S:.*]] = "kiln.constant"() {value = dense<2.500000e-02> : tensor<f32>}
// CHECK: "kiln.dequantize"(%[[Q]], %[[S]], %{{.*}}) : {{.*}} -> !kiln.tensor<[2, 4], f32>
func.func @per_tensor(%arg0: !torch.vtensor<[2,4],f32>) -> !torch.vtensor<[2,4],f32> {
  %float = torch.constant.float 0.025
  %int123 = torch.constant.int 123
  %int0 = torch.constant.int 0
  %int255 = torch.constant.int 255
  %none = torch.constant.none
  %0 = torch.quantized_decomposed.quantize_per_tensor %arg0, %float, %int123, %int0, %int255, %int0 : !torch.vtensor<[2,4],f32>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,4],ui8>
  %1 = torch.quantized_decomposed.dequantize_per_tensor %0, %float, %int123, %int0, %int255, %int0, %none : !torch.vtensor<[2,4],ui8>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[2,4],f32>
  return %1 : !torch.vtensor<[2,4],f32>
}

// int8 in [-127, 127]: clamp to [-127 - zp, 127 - zp] before quantizing.
// CHECK-LABEL: func.func @narrow
// CHECK: "kiln.maximum"
// CHECK: "kiln.minimum"
// CHECK: "kiln.quantize"{{.*}} -> !kiln.tensor<[4], i8>
func.func @narrow(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],si8> {
  %float = torch.constant.float 0.5
  %int0 = torch.constant.int 0
  %intm127 = torch.constant.int -127
  %int127 = torch.constant.int 127
  %int1 = torch.constant.int 1
  %0 = torch.quantized_decomposed.quantize_per_tensor %arg0, %float, %int0, %intm127, %int127, %int1 : !torch.vtensor<[4],f32>, !torch.float, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[4],si8>
  return %0 : !torch.vtensor<[4],si8>
}

// Per-channel int8 weights: scales in f32, int64 zero points cast to i8, axis kept.
// CHECK-LABEL: func.func @per_channel
// CHECK: %[[ZP:.*]] = "kiln.cast"(%arg2) : (!kiln.tensor<[8], i64>) -> !kiln.tensor<[8], i8>
// CHECK: "kiln.dequantize"(%arg0, %arg1, %[[ZP]]) {axis = 0 : i64} : {{.*}} -> !kiln.tensor<[8, 3], f32>
func.func @per_channel(%w: !torch.vtensor<[8,3],si8>, %s: !torch.vtensor<[8],f32>, %z: !torch.vtensor<[8],si64>) -> !torch.vtensor<[8,3],f32> {
  %int0 = torch.constant.int 0
  %intm128 = torch.constant.int -128
  %int127 = torch.constant.int 127
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %0 = torch.quantized_decomposed.dequantize_per_channel %w, %s, %z, %int0, %intm128, %int127, %int1, %none : !torch.vtensor<[8,3],si8>, !torch.vtensor<[8],f32>, !torch.vtensor<[8],si64>, !torch.int, !torch.int, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[8,3],f32>
  return %0 : !torch.vtensor<[8,3],f32>
}
