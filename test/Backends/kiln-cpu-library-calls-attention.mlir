// RUN: kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library-calls --kiln-cpu-library | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library-calls --kiln-cpu-library | FileCheck %s --check-prefix=BLAS

// Attention chosen on kiln IR for the native flash attention
// (native.attention, native.attention_masked, native.packed_attention: the
// kiln.impl kiln-select-kernels sets) is one call of a helper generated from
// the entry's signature; no scores buffer, no chain.  Without the native
// runtime nothing is chosen: the generated chain, its two contractions
// sgemm calls (BLAS).
//
// An unmasked causal attention: kiln_attention_gqa with the heads flattened
// (B * 2), a k / v head per q head (group 1), L and S from q and k, the
// static head dims, the scale 1/sqrt(8) and causal = 1.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK: func.func private @kiln_attention_gqa(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i32, i32) -> i32
// CHECK-LABEL: func.func private @kiln_attention_gqa_0(
// CHECK-SAME: %[[Q:.*]]: memref<?x2x?x8xf32>, %[[K:.*]]: memref<?x2x?x8xf32>, %[[V:.*]]: memref<?x2x?x6xf32>, %[[O:.*]]: memref<?x2x?x6xf32>)
// CHECK: %[[B:.*]] = memref.dim %[[O]], %c0
// CHECK: %[[BH:.*]] = arith.muli %{{.*}}, %[[B]] : index
// CHECK: %[[HEADS:.*]] = arith.muli %[[BH]], %c2 : index
// CHECK: %[[L:.*]] = memref.dim %[[Q]], %c2
// CHECK: %[[S:.*]] = memref.dim %[[K]], %c2
// CHECK: %[[D:.*]] = arith.muli %{{.*}}, %c8 : index
// CHECK: %[[DV:.*]] = arith.muli %{{.*}}, %c6 : index
// CHECK: %[[SCALE:.*]] = arith.constant 0.353553385 : f32
// CHECK: %[[CAUSAL:.*]] = arith.constant 1 : i32
// CHECK: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK: call @kiln_attention_gqa(%{{.*}}, %c1_i64, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[SCALE]], %[[CAUSAL]], %[[THR]])
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.alloc
// CHECK: call @kiln_attention_gqa_0(%arg0, %arg1, %arg2, %arg3)
// CHECK-NEXT: return

// BLAS-NOT: kiln_attention
// BLAS-LABEL: func.func @main(
// BLAS-COUNT-2: call @kiln_gemm_
func.func @main(%q: !kiln.tensor<["B", 2, "L", 8], f32>, %k: !kiln.tensor<["B", 2, "L", 8], f32>, %v: !kiln.tensor<["B", 2, "L", 6], f32>) -> !kiln.tensor<["B", 2, "L", 6], f32> {
  %r = "kiln.attention"(%q, %k, %v) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 6], f32>) -> !kiln.tensor<["B", 2, "L", 6], f32>
  return %r : !kiln.tensor<["B", 2, "L", 6], f32>
}

// -----

// A bool padding mask [B, 1, 1, S] over 4 q heads grouped onto 2 k / v
// heads: one kiln_attention_masked call (group 2) with the mask's address
// (base plus offset, bytes: i1 is one) and kind 2, the innermost batch
// dim's size H = 4, and the mask's strides per loop read at run time: b0
// from the mask's dim 0, b1 and l 0 (broadcast), s from dim 3.  Without the
// native runtime the chain stays (k / v repeated to q's heads for sgemm).
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "S", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK: func.func private @kiln_attention_masked(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i32, i64, i32, i64, i64, i64, i64, i64, i32) -> i32
// CHECK-LABEL: func.func private @kiln_attention_masked_0(
// CHECK-SAME: %{{.*}}: memref<?x4x?x8xf32>, %{{.*}}: memref<?x2x?x8xf32>, %{{.*}}: memref<?x2x?x8xf32>, %[[M:[a-z0-9]+]]: memref<?x1x1x?xi1>, %{{.*}}: memref<?x4x?x8xf32>)
// CHECK: %[[GROUP:.*]] = arith.constant 2 : i64
// CHECK: %{{.*}}, %[[OFF:.*]], %{{.*}}:4, %[[STR:.*]]:4 = memref.extract_strided_metadata %[[M]]
// CHECK: %[[E:.*]] = arith.index_cast %[[OFF]] : index to i64
// CHECK: %[[ESZ:.*]] = arith.constant 1 : i64
// CHECK: %[[X:.*]] = arith.muli %[[E]], %[[ESZ]] : i64
// CHECK: %[[PM:.*]] = arith.addi %{{.*}}, %[[X]] : i64
// CHECK: %[[KIND:.*]] = arith.constant 2 : i32
// CHECK: %[[HM:.*]] = arith.muli %{{.*}}, %c4{{.*}} : index
// CHECK: %[[HIN:.*]] = arith.index_cast %[[HM]] : index to i64
// CHECK: %[[OUTER:.*]] = arith.index_cast %[[STR]]#0 : index to i64
// CHECK: %[[Z1:.*]] = arith.constant 0 : i64
// CHECK: %[[Z2:.*]] = arith.constant 0 : i64
// CHECK: %[[COL:.*]] = arith.index_cast %[[STR]]#3 : index to i64
// CHECK: call @kiln_attention_masked(%{{.*}}, %[[GROUP]], {{.*}}, %[[PM]], %[[KIND]], %[[HIN]], %[[OUTER]], %[[Z1]], %[[Z2]], %[[COL]], %{{.*}})
// CHECK-LABEL: func.func @padding(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_attention_masked_0(%arg0, %arg1, %arg2, %arg3, %arg4)
// CHECK-NEXT: return

// BLAS: floordiv 2
// BLAS-LABEL: func.func @padding(
// BLAS-NOT: call @kiln_attention
// BLAS: return
func.func @padding(%q: !kiln.tensor<["B", 4, "L", 8], f32>, %k: !kiln.tensor<["B", 2, "S", 8], f32>, %v: !kiln.tensor<["B", 2, "S", 8], f32>, %m: !kiln.tensor<["B", 1, 1, "S"], i1>) -> !kiln.tensor<["B", 4, "L", 8], f32> {
  %r = "kiln.attention"(%q, %k, %v, %m) {operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<["B", 4, "L", 8], f32>, !kiln.tensor<["B", 2, "S", 8], f32>, !kiln.tensor<["B", 2, "S", 8], f32>, !kiln.tensor<["B", 1, 1, "S"], i1>) -> !kiln.tensor<["B", 4, "L", 8], f32>
  return %r : !kiln.tensor<["B", 4, "L", 8], f32>
}

// -----

// An additive f32 mask [L, L] (right-aligned: no batch dims) on a causal
// attention with one batch dim: kind 1, the offset in bytes of 4, H the
// batch dim's size, outer and inner 0 (the mask broadcasts over both), rows
// and keys from the mask's dims 0 and 1.
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func private @kiln_attention_masked_0(
// CHECK-SAME: %[[M:[a-z0-9]+]]: memref<?x?xf32>, %{{.*}}: memref<3x?x8xf32>)
// CHECK: %{{.*}}, %[[OFF:.*]], %{{.*}}:2, %[[STR:.*]]:2 = memref.extract_strided_metadata %[[M]]
// CHECK: %[[E:.*]] = arith.index_cast %[[OFF]] : index to i64
// CHECK: %[[ESZ:.*]] = arith.constant 4 : i64
// CHECK: arith.muli %[[E]], %[[ESZ]] : i64
// CHECK: %[[KIND:.*]] = arith.constant 1 : i32
// CHECK: %[[Z1:.*]] = arith.constant 0 : i64
// CHECK: %[[Z2:.*]] = arith.constant 0 : i64
// CHECK: %[[ROW:.*]] = arith.index_cast %[[STR]]#0 : index to i64
// CHECK: %[[COL:.*]] = arith.index_cast %[[STR]]#1 : index to i64
// CHECK: call @kiln_attention_masked({{.*}}, %[[KIND]], %{{.*}}, %[[Z1]], %[[Z2]], %[[ROW]], %[[COL]], %{{.*}})
// CHECK-LABEL: func.func @additive(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_attention_masked_0(%arg0, %arg1, %arg1, %arg2, %{{.*}})
func.func @additive(%q: !kiln.tensor<[3, "L", 8], f32>, %k: !kiln.tensor<[3, "L", 8], f32>, %mask: !kiln.tensor<["L", "L"], f32>) -> !kiln.tensor<[3, "L", 8], f32> {
  %a = "kiln.attention"(%q, %k, %k, %mask) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<["L", "L"], f32>) -> !kiln.tensor<[3, "L", 8], f32>
  return %a : !kiln.tensor<[3, "L", 8], f32>
}

// -----

// Not chosen: k and v broadcast over q's batch dim (with or without a
// mask), and a mask over three batch dims; all keep the generated chain
// (its contractions go to the library).
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @not_matched(
// CHECK-NOT: kiln_attention
// CHECK: linalg.generic
// CHECK: return
func.func @not_matched(%q: !kiln.tensor<[3, "L", 8], f32>, %k: !kiln.tensor<[1, "L", 8], f32>, %mask: !kiln.tensor<["L", "L"], f32>, %q5: !kiln.tensor<[2, 3, 2, "L", 8], f32>, %m5: !kiln.tensor<[2, 3, 2, "L", "L"], i1>) -> (!kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<[2, 3, 2, "L", 8], f32>) {
  %a = "kiln.attention"(%q, %k, %k, %mask) {operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<[1, "L", 8], f32>, !kiln.tensor<[1, "L", 8], f32>, !kiln.tensor<["L", "L"], f32>) -> !kiln.tensor<[3, "L", 8], f32>
  %b = "kiln.attention"(%q, %k, %k) {scale = 0.5 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<[1, "L", 8], f32>, !kiln.tensor<[1, "L", 8], f32>) -> !kiln.tensor<[3, "L", 8], f32>
  %c = "kiln.attention"(%q5, %q5, %q5, %m5) {operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<[2, 3, 2, "L", 8], f32>, !kiln.tensor<[2, 3, 2, "L", 8], f32>, !kiln.tensor<[2, 3, 2, "L", 8], f32>, !kiln.tensor<[2, 3, 2, "L", "L"], i1>) -> !kiln.tensor<[2, 3, 2, "L", 8], f32>
  return %a, %b, %c : !kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<[2, 3, 2, "L", 8], f32>
}

// -----

// kiln.packed_attention: one kiln_attention_packed call on the projection
// [B, L, 48] itself (batch B, H = 2, L, D = 8) and the output, which reads
// and writes the heads where they lie.  Without the native runtime the
// generated chain reads q, k and v from the projection viewed as [B, L, 3,
// 2, 8] and writes head h's output at column h * 8 + e, through its maps.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK: func.func private @kiln_attention_packed(i64, i64, i64, i64, i64, i64, f32, i32, i32) -> i32
// CHECK-LABEL: func.func private @kiln_attention_packed_0(
// CHECK-SAME: %[[X:.*]]: memref<?x?x48xf32>, %[[O:.*]]: memref<?x?x16xf32>)
// CHECK: %[[B:.*]] = memref.dim %[[O]], %c0
// CHECK: %[[H:.*]] = arith.constant 2 : i64
// CHECK: %[[L:.*]] = memref.dim %[[O]], %c1
// CHECK: %[[D:.*]] = arith.constant 8 : i64
// CHECK: %[[SCALE:.*]] = arith.constant 0.353553385 : f32
// CHECK: %[[CAUSAL:.*]] = arith.constant 1 : i32
// CHECK: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK: call @kiln_attention_packed(%{{.*}}, %[[H]], %{{.*}}, %[[D]], %{{.*}}, %{{.*}}, %[[SCALE]], %[[CAUSAL]], %[[THR]])
// CHECK-LABEL: func.func @packed(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_attention_packed_0(%arg0, %arg1)
// CHECK-NOT: linalg.generic

// BLAS-DAG: #[[Q:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d2, 0, d1, d4)>
// BLAS-DAG: #[[K:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, 1, d1, d4)>
// BLAS-DAG: #[[V:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, 2, d1, d3)>
// BLAS-DAG: #[[OUT:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d2, d1 * 8 + d3)>
// BLAS-LABEL: func.func @packed(
// BLAS: linalg.generic {indexing_maps = [#[[Q]], #[[K]],
// BLAS: linalg.generic {indexing_maps = [#{{.*}}, #[[V]], #[[OUT]]]
func.func @packed(%p: !kiln.tensor<["B", "L", 48], f32>) -> !kiln.tensor<["B", "L", 16], f32> {
  %r = "kiln.packed_attention"(%p) {causal = true, heads = 2 : i64} : (!kiln.tensor<["B", "L", 48], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  return %r : !kiln.tensor<["B", "L", 16], f32>
}
