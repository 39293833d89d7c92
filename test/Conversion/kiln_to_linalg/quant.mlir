// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s
// RUN: kiln-opt %s --pass-pipeline='builtin.module(convert-kiln-to-linalg,kiln-cpu-lower)' | FileCheck %s --check-prefix=LLVM

// Quantize: x / scale rounded half to even, plus the zero point (ui8: uitofp
// of its i8 storage), saturated to [0, 255] in float, then to the i8 storage.
// The per-tensor scale is read with a rank-0 map.
// CHECK-DAG: #[[AXIS:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-DAG: #[[BLOCK:.*]] = affine_map<(d0, d1) -> (d0, d1 floordiv 3)>
// CHECK-LABEL: func.func @quantize_u8(
// CHECK-SAME: tensor<4x8xf32>
// CHECK-SAME: -> tensor<4x8xi8>
// CHECK-DAG: %[[HI:.*]] = arith.constant 2.550000e+02 : f32
// CHECK-DAG: %[[LO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[SCALAR:.*]], #[[SCALAR]], #{{.*}}]
// CHECK: ^bb0(%[[X:.*]]: f32, %[[S:.*]]: f32, %[[Z:.*]]: i8, %{{.*}}: i8):
// CHECK: %[[D:.*]] = arith.divf %[[X]], %[[S]] : f32
// CHECK: %[[R:.*]] = math.roundeven %[[D]] : f32
// CHECK: %[[ZF:.*]] = arith.uitofp %[[Z]] : i8 to f32
// CHECK: %[[SUM:.*]] = arith.addf %[[R]], %[[ZF]]
// CHECK: %[[M:.*]] = arith.maximumf %[[SUM]], %[[LO]]
// CHECK: arith.minimumf %[[M]], %[[HI]]
// CHECK: arith.fptosi %{{.*}} : f32 to i32
// CHECK: arith.trunci %{{.*}} : i32 to i8
// LLVM-LABEL: llvm.func @quantize_u8(
// LLVM-NOT: math.roundeven
func.func @quantize_u8(%x: !kiln.tensor<[4, 8], f32>, %s: !kiln.tensor<[], f32>, %z: !kiln.tensor<[], ui8>) -> !kiln.tensor<[4, 8], ui8> {
  %q = "kiln.quantize"(%x, %s, %z) : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<[4, 8], ui8>
  return %q : !kiln.tensor<[4, 8], ui8>
}

// Per-axis int8: scale and zero point read at the axis's index; saturation to [-128, 127].
// CHECK-LABEL: func.func @quantize_i8_axis(
// CHECK-DAG: arith.constant 1.270000e+02 : f32
// CHECK-DAG: arith.constant -1.280000e+02 : f32
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[AXIS]], #[[AXIS]], #{{.*}}]
// CHECK: arith.sitofp %{{.*}} : i8 to f32
func.func @quantize_i8_axis(%x: !kiln.tensor<[4, 8], f32>, %s: !kiln.tensor<[8], f32>, %z: !kiln.tensor<[8], i8>) -> !kiln.tensor<[4, 8], i8> {
  %q = "kiln.quantize"(%x, %s, %z) {axis = 1 : i64} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[8], f32>, !kiln.tensor<[8], i8>) -> !kiln.tensor<[4, 8], i8>
  return %q : !kiln.tensor<[4, 8], i8>
}

// Dequantize of ui8: unsigned conversions of x and the zero point, then * scale.
// CHECK-LABEL: func.func @dequantize_u8(
// CHECK: ^bb0(%[[X:.*]]: i8, %[[S:.*]]: f32, %[[Z:.*]]: i8, %{{.*}}: f32):
// CHECK: %[[XF:.*]] = arith.uitofp %[[X]] : i8 to f32
// CHECK: %[[ZF:.*]] = arith.uitofp %[[Z]] : i8 to f32
// CHECK: %[[C:.*]] = arith.subf %[[XF]], %[[ZF]] : f32
// CHECK: arith.mulf %[[C]], %[[S]] : f32
func.func @dequantize_u8(%x: !kiln.tensor<[4, 8], ui8>, %s: !kiln.tensor<[], f32>, %z: !kiln.tensor<[], ui8>) -> !kiln.tensor<[4, 8], f32> {
  %y = "kiln.dequantize"(%x, %s, %z) : (!kiln.tensor<[4, 8], ui8>, !kiln.tensor<[], f32>, !kiln.tensor<[], ui8>) -> !kiln.tensor<[4, 8], f32>
  return %y : !kiln.tensor<[4, 8], f32>
}

// Casts from ui8 zero-extend; a ui8 constant is held as i8 with the same bits (200 -> -56).
// CHECK-LABEL: func.func @cast_u8(
// CHECK: arith.constant dense<-56> : tensor<4xi8>
// CHECK: arith.extui %{{.*}} : i8 to i32
func.func @cast_u8() -> !kiln.tensor<[4], i32> {
  %c = "kiln.constant"() {value = dense<200> : tensor<4xui8>} : () -> !kiln.tensor<[4], ui8>
  %y = "kiln.cast"(%c) : (!kiln.tensor<[4], ui8>) -> !kiln.tensor<[4], i32>
  return %y : !kiln.tensor<[4], i32>
}

// Signed integer ops on ui8 run in i16 (zero-extended operands, truncated
// result): on the i8 storage, divsi would divide 200 as -56.
// CHECK-LABEL: func.func @div_u8(
// CHECK: arith.extui %{{.*}} : i8 to i16
// CHECK: arith.extui %{{.*}} : i8 to i16
// CHECK: arith.divsi %{{.*}}, %{{.*}} : i16
// CHECK: arith.trunci %{{.*}} : i16 to i8
// CHECK-NOT: arith.divsi %{{.*}} : i8
func.func @div_u8(%a: !kiln.tensor<[4], ui8>, %b: !kiln.tensor<[4], ui8>) -> !kiln.tensor<[4], ui8> {
  %y = "kiln.div"(%a, %b) : (!kiln.tensor<[4], ui8>, !kiln.tensor<[4], ui8>) -> !kiln.tensor<[4], ui8>
  return %y : !kiln.tensor<[4], ui8>
}

// A comparison keeps its i1 result; only the operands widen.
// CHECK-LABEL: func.func @gt_u8(
// CHECK: arith.cmpi sgt, %{{.*}}, %{{.*}} : i16
func.func @gt_u8(%a: !kiln.tensor<[4], ui8>, %b: !kiln.tensor<[4], ui8>) -> !kiln.tensor<[4], i1> {
  %y = "kiln.gt"(%a, %b) : (!kiln.tensor<[4], ui8>, !kiln.tensor<[4], ui8>) -> !kiln.tensor<[4], i1>
  return %y : !kiln.tensor<[4], i1>
}

// Blocked: the scale and zero point are read at (row, column floordiv 3) (#BLOCK above).
// CHECK-LABEL: func.func @dequantize_blocked(
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[BLOCK]], #[[BLOCK]], #{{.*}}]
func.func @dequantize_blocked(%x: !kiln.tensor<[2, 4], i8>, %s: !kiln.tensor<[2, 2], f32>, %z: !kiln.tensor<[2, 2], i8>) -> !kiln.tensor<[2, 4], f32> {
  %y = "kiln.dequantize"(%x, %s, %z) {axis = 1 : i64, block_size = 3 : i64} : (!kiln.tensor<[2, 4], i8>, !kiln.tensor<[2, 2], f32>, !kiln.tensor<[2, 2], i8>) -> !kiln.tensor<[2, 4], f32>
  return %y : !kiln.tensor<[2, 4], f32>
}
