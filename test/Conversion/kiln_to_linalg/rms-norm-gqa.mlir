// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg | FileCheck %s

// rms_norm: the sum of squares (x squared inside the reduction), 1 /
// sqrt(sum / n + eps) per row, and one output generic x * inv * weight
// (the generated code, where kiln-select-kernels chose no native call). No
// tensor of x's size but the result.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @rms_norm(
// CHECK-SAME: %[[X:.*]]: tensor<?x8xf32>, %[[G:.*]]: tensor<8xf32>)
// CHECK: %[[SQ:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[X]] : tensor<?x8xf32>)
// CHECK: arith.mulf
// CHECK: %[[INV:.*]] = linalg.generic {{.*}} ins(%[[SQ]] : tensor<?x1xf32>)
// CHECK: math.sqrt
// CHECK-NOT: -> tensor<?x8xf32>
// CHECK: linalg.generic {{.*}} ins(%[[X]], %[[INV]], %[[G]] : {{.*}}) outs(%{{.*}} : tensor<?x8xf32>)
// CHECK-NOT: linalg.generic
func.func @rms_norm(%x: !kiln.tensor<["B", 8], f32>, %g: !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", 8], f32> {
  %0 = "kiln.rms_norm"(%x, %g) {axis = -1 : i64, epsilon = 1.0e-06 : f64, operandSegmentSizes = array<i32: 1, 1>} : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", 8], f32>
  return %0 : !kiln.tensor<["B", 8], f32>
}

// -----

// bf16: squares summed in f32 (extf inside the reduction), the normalized
// value rounded to bf16 (truncf) before the weight multiplies it.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @rms_norm_bf16(
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : tensor<?x8xbf16>) outs(%{{.*}} : tensor<?x1xf32>)
// CHECK: arith.extf
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<?x8xbf16>)
// CHECK: arith.extf
// CHECK: arith.truncf
// CHECK: arith.mulf %{{.*}}, %{{.*}} : bf16
func.func @rms_norm_bf16(%x: !kiln.tensor<["B", 8], bf16>, %g: !kiln.tensor<[8], bf16>) -> !kiln.tensor<["B", 8], bf16> {
  %0 = "kiln.rms_norm"(%x, %g) {epsilon = 1.0e-06 : f64, operandSegmentSizes = array<i32: 1, 1>} : (!kiln.tensor<["B", 8], bf16>, !kiln.tensor<[8], bf16>) -> !kiln.tensor<["B", 8], bf16>
  return %0 : !kiln.tensor<["B", 8], bf16>
}

// -----

// Grouped-query attention: 8 q heads over 2 k / v heads. Both contractions
// read k and v's head through `h floordiv 4`: no repeated copy.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-DAG: #[[K:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 floordiv 4, d3, d4)>
// CHECK-DAG: #[[V:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 floordiv 4, d4, d3)>
// CHECK-LABEL: func.func @gqa(
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[K]], #{{.*}}], {{.*}} ins(%arg0, %arg1 : tensor<?x8x?x16xf32>, tensor<?x2x?x16xf32>)
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[V]], #{{.*}}], {{.*}} ins(%{{.*}}, %arg2 : tensor<?x8x?x?xf32>, tensor<?x2x?x16xf32>)
func.func @gqa(%q: !kiln.tensor<["B", 8, "L", 16], f32>, %k: !kiln.tensor<["B", 2, "L", 16], f32>, %v: !kiln.tensor<["B", 2, "L", 16], f32>) -> !kiln.tensor<["B", 8, "L", 16], f32> {
  %0 = "kiln.attention"(%q, %k, %v) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>) -> !kiln.tensor<["B", 8, "L", 16], f32>
  return %0 : !kiln.tensor<["B", 8, "L", 16], f32>
}

// -----

// A masked grouped-query attention with a bool mask: as unmasked, k and v
// are read through `h floordiv 4` (no repeated copy) and both contractions
// carry the tag, now `masked = true`; the scale-and-mask pass carries the
// chain's id as kiln.attention_mask (kiln-cpu-library reads the mask from it).
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-DAG: #[[K:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 floordiv 4, d3, d4)>
// CHECK-LABEL: func.func @gqa_masked(
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[K]], #{{.*}}], {{.*}} ins(%arg0, %arg1 : tensor<?x8x?x16xf32>, tensor<?x2x?x16xf32>) {{.*}} attrs =  {kiln.attention = {causal = false, id = [[ID:[0-9]+]] : i64, masked = true, scale = 2.500000e-01 : f64}}
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %arg3 : tensor<?x8x?x?xf32>, tensor<?x1x?x?xi1>) {{.*}} attrs =  {kiln.attention_mask = [[ID]] : i64}
// CHECK: kiln.attention = {causal = false, id = [[ID]] : i64, masked = true
func.func @gqa_masked(%q: !kiln.tensor<["B", 8, "L", 16], f32>, %k: !kiln.tensor<["B", 2, "L", 16], f32>, %v: !kiln.tensor<["B", 2, "L", 16], f32>, %m: !kiln.tensor<["B", 1, "L", "L"], i1>) -> !kiln.tensor<["B", 8, "L", 16], f32> {
  %0 = "kiln.attention"(%q, %k, %v, %m) {operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 1, "L", "L"], i1>) -> !kiln.tensor<["B", 8, "L", 16], f32>
  return %0 : !kiln.tensor<["B", 8, "L", 16], f32>
}

// -----

// A chain the native kernel cannot take (a bf16 additive mask; likewise a
// head dim past 256) stays generated code whose contractions go to sgemm:
// k and v are repeated to the 8 q heads once (a copy through `h floordiv
// 4`), the contractions read them with plain maps, and nothing is tagged.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-DAG: #[[REP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1 floordiv 4, d2, d3)>
// CHECK-LABEL: func.func @gqa_masked_bf16(
// CHECK: %[[K:.*]] = linalg.generic {indexing_maps = [#[[REP]], #{{.*}}], {{.*}} ins(%arg1 : tensor<?x2x?x16xf32>) outs(%{{.*}} : tensor<?x8x?x16xf32>)
// CHECK: %[[V:.*]] = linalg.generic {indexing_maps = [#[[REP]], #{{.*}}], {{.*}} ins(%arg2 : tensor<?x2x?x16xf32>) outs(%{{.*}} : tensor<?x8x?x16xf32>)
// CHECK-NOT: floordiv
// CHECK-NOT: kiln.attention
// CHECK: ins(%arg0, %[[K]] : tensor<?x8x?x16xf32>, tensor<?x8x?x16xf32>)
// CHECK-NOT: kiln.attention
// CHECK: return
func.func @gqa_masked_bf16(%q: !kiln.tensor<["B", 8, "L", 16], f32>, %k: !kiln.tensor<["B", 2, "L", 16], f32>, %v: !kiln.tensor<["B", 2, "L", 16], f32>, %m: !kiln.tensor<["B", 1, "L", "L"], bf16>) -> !kiln.tensor<["B", 8, "L", 16], f32> {
  %0 = "kiln.attention"(%q, %k, %v, %m) {operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 1, "L", "L"], bf16>) -> !kiln.tensor<["B", 8, "L", 16], f32>
  return %0 : !kiln.tensor<["B", 8, "L", 16], f32>
}
