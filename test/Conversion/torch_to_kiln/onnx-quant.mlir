// RUN: kiln-opt %s --convert-torch-to-kiln | FileCheck %s

// ONNX quantization ops (torch.operator "onnx.*") -> kiln.quantize / dequantize
// around integer work.

// QuantizeLinear, per-axis: the zero point's dtype is the result's.
// CHECK-LABEL: func.func @quantize_axis
// CHECK: "kiln.quantize"(%arg0, %arg1, %arg2) {axis = 1 : i64} : {{.*}} -> !kiln.tensor<[2, 3], i8>
func.func @quantize_axis(%x: !torch.vtensor<[2,3],f32>, %s: !torch.vtensor<[3],f32>, %z: !torch.vtensor<[3],si8>) -> !torch.vtensor<[2,3],si8> attributes {torch.onnx_meta.opset_version = 21 : si64} {
  %0 = torch.operator "onnx.QuantizeLinear"(%x, %s, %z) {torch.onnx.axis = 1 : si64} : (!torch.vtensor<[2,3],f32>, !torch.vtensor<[3],f32>, !torch.vtensor<[3],si8>) -> !torch.vtensor<[2,3],si8>
  return %0 : !torch.vtensor<[2,3],si8>
}

// MatMulInteger with per-tensor zero points: one kiln.matmul_integer (the
// absent b zero point a 0 of b's dtype).
// CHECK-LABEL: func.func @matmul_integer
// CHECK: %[[ZB:.*]] = "kiln.constant"() {value = dense<0> : tensor<i8>} : () -> !kiln.tensor<[], i8>
// CHECK: %[[P:.*]] = "kiln.matmul_integer"(%arg0, %arg1, %arg2, %[[ZB]]) : (!kiln.tensor<[2, 3, 300], ui8>, !kiln.tensor<[300, 5], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<[2, 3, 5], i32>
// CHECK: return %[[P]]
func.func @matmul_integer(%a: !torch.vtensor<[2,3,300],ui8>, %b: !torch.vtensor<[300,5],si8>, %z: !torch.vtensor<[],ui8>) -> !torch.vtensor<[2,3,5],si32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.MatMulInteger"(%a, %b, %z) : (!torch.vtensor<[2,3,300],ui8>, !torch.vtensor<[300,5],si8>, !torch.vtensor<[],ui8>) -> !torch.vtensor<[2,3,5],si32>
  return %0 : !torch.vtensor<[2,3,5],si32>
}

// MatMulInteger with a zero point per column of b (not matmul_integer's
// form), K = 300: the centered operands in i32, then f32 GEMMs over K chunks
// of 256 and 44 (each exact below 2**24), summed in i32.
// CHECK-LABEL: func.func @matmul_integer_chunks
// CHECK: %[[A32:.*]] = "kiln.cast"(%arg0) : (!kiln.tensor<[2, 300], ui8>) -> !kiln.tensor<[2, 300], i32>
// CHECK: %[[Z32:.*]] = "kiln.cast"(%arg2) : (!kiln.tensor<[], ui8>) -> !kiln.tensor<[], i32>
// CHECK: %[[AC:.*]] = "kiln.sub"(%[[A32]], %[[Z32]])
// CHECK: %[[B32:.*]] = "kiln.cast"(%arg1) : (!kiln.tensor<[300, 5], i8>) -> !kiln.tensor<[300, 5], i32>
// CHECK: %[[ZB32:.*]] = "kiln.cast"(%arg3) : (!kiln.tensor<[5], i8>) -> !kiln.tensor<[5], i32>
// CHECK: %[[BC:.*]] = "kiln.sub"(%[[B32]], %[[ZB32]])
// CHECK: %[[AF:.*]] = "kiln.cast"(%[[AC]]) : {{.*}} -> !kiln.tensor<[2, 300], f32>
// CHECK: %[[BF:.*]] = "kiln.cast"(%[[BC]]) : {{.*}} -> !kiln.tensor<[300, 5], f32>
// CHECK: %[[A0:.*]] = "kiln.slice"(%[[AF]]) {axes = array<i64: 1>, ends = array<i64: 256>, starts = array<i64: 0>
// CHECK: %[[B0:.*]] = "kiln.slice"(%[[BF]]) {axes = array<i64: 0>, ends = array<i64: 256>, starts = array<i64: 0>
// CHECK: %[[M0:.*]] = "kiln.matmul"(%[[A0]], %[[B0]]) {kiln.exact_integer} : {{.*}} -> !kiln.tensor<[2, 5], f32>
// CHECK: %[[P0:.*]] = "kiln.cast"(%[[M0]]) : {{.*}} -> !kiln.tensor<[2, 5], i32>
// CHECK: "kiln.slice"(%[[AF]]) {axes = array<i64: 1>, ends = array<i64: 300>, starts = array<i64: 256>
// CHECK: %[[M1:.*]] = "kiln.matmul"
// CHECK: %[[P1:.*]] = "kiln.cast"(%[[M1]])
// CHECK: %[[SUM:.*]] = "kiln.add"(%[[P0]], %[[P1]]) : {{.*}} -> !kiln.tensor<[2, 5], i32>
// CHECK: return %[[SUM]]
func.func @matmul_integer_chunks(%a: !torch.vtensor<[2,300],ui8>, %b: !torch.vtensor<[300,5],si8>, %z: !torch.vtensor<[],ui8>, %zb: !torch.vtensor<[5],si8>) -> !torch.vtensor<[2,5],si32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.MatMulInteger"(%a, %b, %z, %zb) : (!torch.vtensor<[2,300],ui8>, !torch.vtensor<[300,5],si8>, !torch.vtensor<[],ui8>, !torch.vtensor<[5],si8>) -> !torch.vtensor<[2,5],si32>
  return %0 : !torch.vtensor<[2,5],si32>
}

// QLinearMatMul: the integer product (kiln.matmul_integer: per-tensor zero
// points), requantized in f64 with a_scale * b_scale / y_scale, then
// quantize with scale 1 and y's zero point.
// CHECK-LABEL: func.func @qlinear_matmul
// CHECK: %[[ACC:.*]] = "kiln.matmul_integer"(%arg0, %arg3, %arg2, %arg5) : {{.*}} -> !kiln.tensor<[2, 5], i32>
// CHECK: %[[M:.*]] = "kiln.div"
// CHECK: %[[ACC64:.*]] = "kiln.cast"(%[[ACC]]) : {{.*}} -> !kiln.tensor<[2, 5], f64>
// CHECK: %[[M64:.*]] = "kiln.cast"(%[[M]]) : {{.*}} -> !kiln.tensor<[], f64>
// CHECK: %[[Y:.*]] = "kiln.mul"(%[[ACC64]], %[[M64]])
// CHECK: "kiln.quantize"(%[[Y]], %{{.*}}, %arg7) : (!kiln.tensor<[2, 5], f64>, !kiln.tensor<[], f64>, !kiln.tensor<[], ui8>) -> !kiln.tensor<[2, 5], ui8>
func.func @qlinear_matmul(%a: !torch.vtensor<[2,4],ui8>, %as: !torch.vtensor<[],f32>, %az: !torch.vtensor<[],ui8>, %b: !torch.vtensor<[4,5],ui8>, %bs: !torch.vtensor<[],f32>, %bz: !torch.vtensor<[],ui8>, %ys: !torch.vtensor<[],f32>, %yz: !torch.vtensor<[],ui8>) -> !torch.vtensor<[2,5],ui8> attributes {torch.onnx_meta.opset_version = 21 : si64} {
  %0 = torch.operator "onnx.QLinearMatMul"(%a, %as, %az, %b, %bs, %bz, %ys, %yz) : (!torch.vtensor<[2,4],ui8>, !torch.vtensor<[],f32>, !torch.vtensor<[],ui8>, !torch.vtensor<[4,5],ui8>, !torch.vtensor<[],f32>, !torch.vtensor<[],ui8>, !torch.vtensor<[],f32>, !torch.vtensor<[],ui8>) -> !torch.vtensor<[2,5],ui8>
  return %0 : !torch.vtensor<[2,5],ui8>
}

// ConvInteger 2x2, pads 1: im2col (a pad, one window slice pair per tap,
// stacked on a new axis) and one exact f32 matmul (K = 3 * 4 = 12), no conv2d.
// CHECK-LABEL: func.func @conv_integer_im2col
// CHECK: "kiln.pad"(%{{.*}}) {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>
// CHECK-COUNT-4: "kiln.reshape"(%{{.*}}) {shape = [1, 3, 1, 25]}
// CHECK: %[[COL:.*]] = "kiln.concat"({{.*}}) {axis = 2 : i64
// CHECK-SAME: -> !kiln.tensor<[1, 3, 4, 25], i32>
// CHECK: "kiln.reshape"(%[[COL]]) {shape = [1, 12, 25]}
// CHECK: "kiln.matmul"({{.*}}) {kiln.exact_integer} : (!kiln.tensor<[2, 12], f32>, !kiln.tensor<[1, 12, 25], f32>) -> !kiln.tensor<[1, 2, 25], f32>
// CHECK: "kiln.reshape"(%{{.*}}) {shape = [1, 2, 5, 5]}
// CHECK-NOT: kiln.conv2d
func.func @conv_integer_im2col(%x: !torch.vtensor<[1,3,4,4],ui8>, %w: !torch.vtensor<[2,3,2,2],ui8>) -> !torch.vtensor<[1,2,5,5],si32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.ConvInteger"(%x, %w) {torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64]} : (!torch.vtensor<[1,3,4,4],ui8>, !torch.vtensor<[2,3,2,2],ui8>) -> !torch.vtensor<[1,2,5,5],si32>
  return %0 : !torch.vtensor<[1,2,5,5],si32>
}

// DynamicQuantizeLinear: scale (max(0, max x) - min(0, min x)) / 255, 1 where
// that is 0 (an all-zero x, as ONNX Runtime does); the zero point is -min
// quantized with that scale (ui8 saturation); y quantized with both.
// CHECK-LABEL: func.func @dynamic_quantize
// CHECK: %[[LO:.*]] = "kiln.minimum"
// CHECK: %[[HI:.*]] = "kiln.maximum"
// CHECK: %[[S0:.*]] = "kiln.div"
// CHECK: %[[IS0:.*]] = "kiln.eq"(%[[S0]]
// CHECK: %[[S:.*]] = "kiln.where"(%[[IS0]], %{{.*}}, %[[S0]])
// CHECK: %[[NEG:.*]] = "kiln.neg"(%[[LO]])
// CHECK: %[[ZP:.*]] = "kiln.quantize"(%[[NEG]], %[[S]], %{{.*}}) : {{.*}} -> !kiln.tensor<[], ui8>
// CHECK: %[[Y:.*]] = "kiln.quantize"(%arg0, %[[S]], %[[ZP]]) : {{.*}} -> !kiln.tensor<[2, 4], ui8>
// CHECK: return %[[Y]], %[[S]], %[[ZP]]
func.func @dynamic_quantize(%x: !torch.vtensor<[2,4],f32>) -> (!torch.vtensor<[2,4],ui8>, !torch.vtensor<[],f32>, !torch.vtensor<[],ui8>) attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0:3 = torch.operator "onnx.DynamicQuantizeLinear"(%x) : (!torch.vtensor<[2,4],f32>) -> (!torch.vtensor<[2,4],ui8>, !torch.vtensor<[],f32>, !torch.vtensor<[],ui8>)
  return %0#0, %0#1, %0#2 : !torch.vtensor<[2,4],ui8>, !torch.vtensor<[],f32>, !torch.vtensor<[],ui8>
}

// A per-tensor int32 bias as quantize_static writes it: a [1] scale beside a
// scalar zero point, the default axis 1 past the rank-1 input (ONNX ignores
// the axis for per-tensor parameters): both parameters rank 0, no axis.
// CHECK-LABEL: func.func @dequantize_bias_one_element_scale
// CHECK: %[[S:.*]] = "kiln.reshape"(%arg1) {shape = []} : (!kiln.tensor<[1], f32>) -> !kiln.tensor<[], f32>
// CHECK: "kiln.dequantize"(%arg0, %[[S]], %arg2) : (!kiln.tensor<[768], i32>, !kiln.tensor<[], f32>, !kiln.tensor<[], i32>) -> !kiln.tensor<[768], f32>
func.func @dequantize_bias_one_element_scale(%x: !torch.vtensor<[768],si32>, %s: !torch.vtensor<[1],f32>, %z: !torch.vtensor<[],si32>) -> !torch.vtensor<[768],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.DequantizeLinear"(%x, %s, %z) : (!torch.vtensor<[768],si32>, !torch.vtensor<[1],f32>, !torch.vtensor<[],si32>) -> !torch.vtensor<[768],f32>
  return %0 : !torch.vtensor<[768],f32>
}
