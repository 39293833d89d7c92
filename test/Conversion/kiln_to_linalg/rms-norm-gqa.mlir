// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg | FileCheck %s --check-prefix=SEL

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

// Grouped-query attention: 8 q heads over 2 k / v heads.  Generated, k and
// v are repeated to the 8 q heads once (a copy through `h floordiv 4`) so
// that both contractions have plain batch maps (sgemm); chosen for the
// native kernel (second run), the op is one placeholder of its call, which
// reads the k / v heads in place.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-DAG: #[[REP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1 floordiv 4, d2, d3)>
// CHECK-LABEL: func.func @gqa(
// CHECK: %[[K:.*]] = linalg.generic {indexing_maps = [#[[REP]], #{{.*}}], {{.*}} ins(%arg1 : tensor<?x2x?x16xf32>) outs(%{{.*}} : tensor<?x8x?x16xf32>)
// CHECK: ins(%arg0, %[[K]] : tensor<?x8x?x16xf32>, tensor<?x8x?x16xf32>)
// SEL-LABEL: func.func @gqa(
// SEL-NOT: floordiv
// SEL: linalg.generic {{.*}}library_call = "native.attention"} ins(%arg0, %arg1, %arg2 : tensor<?x8x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>) outs(%{{.*}} : tensor<?x8x?x16xf32>) attrs =  {kiln.call_args = ["q", "k", "v", "res"], kiln.call_attrs = {causal = true, operandSegmentSizes = array<i64: 1, 1, 1, 0>}}
// SEL-NEXT: ^bb0(%[[Q:.*]]: f32, %[[K:.*]]: f32, %[[V:.*]]: f32, %[[O:.*]]: f32):
// SEL-NEXT: arith.mulf %[[Q]]
// SEL-NEXT: arith.addf %[[O]]
// SEL-NEXT: arith.mulf %[[K]]
// SEL-NEXT: arith.addf
// SEL-NEXT: arith.mulf %[[V]]
// SEL-NEXT: arith.addf
// SEL-NEXT: linalg.yield
// SEL-NOT: linalg.generic
// SEL: return
func.func @gqa(%q: !kiln.tensor<["B", 8, "L", 16], f32>, %k: !kiln.tensor<["B", 2, "L", 16], f32>, %v: !kiln.tensor<["B", 2, "L", 16], f32>) -> !kiln.tensor<["B", 8, "L", 16], f32> {
  %0 = "kiln.attention"(%q, %k, %v) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>) -> !kiln.tensor<["B", 8, "L", 16], f32>
  return %0 : !kiln.tensor<["B", 8, "L", 16], f32>
}

// -----

// A masked grouped-query attention with a bool mask: chosen for the native
// masked kernel, the mask one more operand of the call.  Unselected (no
// kiln-select-kernels), it is generated loops throughout: no library call.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-LABEL: func.func @gqa_masked(
// CHECK-NOT: library_call
// CHECK: return
// SEL-LABEL: func.func @gqa_masked(
// SEL: linalg.generic {{.*}}library_call = "native.attention_masked"} ins(%arg0, %arg1, %arg2, %arg3 : {{.*}}, tensor<?x1x?x?xi1>) {{.*}} attrs =  {kiln.call_args = ["q", "k", "v", "mask", "res"]
func.func @gqa_masked(%q: !kiln.tensor<["B", 8, "L", 16], f32>, %k: !kiln.tensor<["B", 2, "L", 16], f32>, %v: !kiln.tensor<["B", 2, "L", 16], f32>, %m: !kiln.tensor<["B", 1, "L", "L"], i1>) -> !kiln.tensor<["B", 8, "L", 16], f32> {
  %0 = "kiln.attention"(%q, %k, %v, %m) {operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 1, "L", "L"], i1>) -> !kiln.tensor<["B", 8, "L", 16], f32>
  return %0 : !kiln.tensor<["B", 8, "L", 16], f32>
}

// -----

// An attention the native kernel cannot take (a bf16 additive mask; likewise
// a head dim past 256) is not chosen: generated code, k and v repeated, its
// f32 products placeholders of the library GEMM.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// CHECK-DAG: #[[REP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1 floordiv 4, d2, d3)>
// CHECK-LABEL: func.func @gqa_masked_bf16(
// CHECK: %[[K:.*]] = linalg.generic {indexing_maps = [#[[REP]], #{{.*}}], {{.*}} ins(%arg1 : tensor<?x2x?x16xf32>) outs(%{{.*}} : tensor<?x8x?x16xf32>)
// CHECK: %[[V:.*]] = linalg.generic {indexing_maps = [#[[REP]], #{{.*}}], {{.*}} ins(%arg2 : tensor<?x2x?x16xf32>) outs(%{{.*}} : tensor<?x8x?x16xf32>)
// CHECK-NOT: floordiv
// CHECK: ins(%arg0, %[[K]] : tensor<?x8x?x16xf32>, tensor<?x8x?x16xf32>)
// CHECK: return
// SEL-LABEL: func.func @gqa_masked_bf16(
// SEL-NOT: native.attention
// SEL: library_call = "native.gemm"
// SEL-NOT: native.attention
// SEL: return
func.func @gqa_masked_bf16(%q: !kiln.tensor<["B", 8, "L", 16], f32>, %k: !kiln.tensor<["B", 2, "L", 16], f32>, %v: !kiln.tensor<["B", 2, "L", 16], f32>, %m: !kiln.tensor<["B", 1, "L", "L"], bf16>) -> !kiln.tensor<["B", 8, "L", 16], f32> {
  %0 = "kiln.attention"(%q, %k, %v, %m) {operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<["B", 8, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 2, "L", 16], f32>, !kiln.tensor<["B", 1, "L", "L"], bf16>) -> !kiln.tensor<["B", 8, "L", 16], f32>
  return %0 : !kiln.tensor<["B", 8, "L", 16], f32>
}
