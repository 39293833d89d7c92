// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library | FileCheck %s --check-prefix=BLAS

// An unmasked causal attention: its lowered chain (q k^T, scale and mask,
// softmax, p v) becomes one kiln_attention_gqa call with the heads flattened
// (B * 2), a k / v head per q head (group 1), L and S from q and k, the
// static head dims, the scale 1/sqrt(8)
// and causal = 1; the scores buffer, its passes and the zero fill of the
// output are gone.  Without the native runtime the chain stays and its two
// contractions become sgemm calls.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK: func.func private @kiln_attention_gqa(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i32, i32) -> i32
// CHECK-LABEL: func.func private @kiln_attention_0(
// CHECK-SAME: %[[Q:.*]]: memref<?x2x?x8xf32>, %[[K:.*]]: memref<?x2x?x8xf32>, %[[V:.*]]: memref<?x2x?x6xf32>, %[[O:.*]]: memref<?x2x?x6xf32>)
// CHECK: %[[B:.*]] = memref.dim %[[O]], %c0
// CHECK: %[[BH:.*]] = arith.muli %{{.*}}, %[[B]] : index
// CHECK: %[[H:.*]] = memref.dim %[[O]], %c1
// CHECK: %[[HEADS:.*]] = arith.muli %[[BH]], %[[H]] : index
// CHECK: %[[L:.*]] = memref.dim %[[Q]], %c2
// CHECK: %[[S:.*]] = memref.dim %[[K]], %c2
// CHECK: %[[D:.*]] = arith.constant 8 : i64
// CHECK: %[[DV:.*]] = arith.constant 6 : i64
// CHECK: %[[SCALE:.*]] = arith.constant 0.353553385 : f32
// CHECK: %[[CAUSAL:.*]] = arith.constant 1 : i32
// CHECK: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK: call @kiln_attention_gqa(%{{.*}}, %c1_i64, %{{.*}}, %{{.*}}, %[[D]], %[[DV]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[SCALE]], %[[CAUSAL]], %[[THR]])
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.alloc
// CHECK: call @kiln_attention_0(%arg0, %arg1, %arg2, %arg3)
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
// native runtime the chain stays (k / v read through `h floordiv 2`).
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "S", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK: func.func private @kiln_attention_masked(i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, f32, i32, i64, i32, i64, i64, i64, i64, i64, i32) -> i32
// CHECK-LABEL: func.func private @kiln_attention_0(
// CHECK-SAME: %{{.*}}: memref<?x4x?x8xf32>, %{{.*}}: memref<?x2x?x8xf32>, %{{.*}}: memref<?x2x?x8xf32>, %{{.*}}: memref<?x4x?x8xf32>, %[[M:[a-z0-9]+]]: memref<?x1x1x?xi1>)
// CHECK: %[[H:.*]] = memref.dim %{{.*}}, %c1
// CHECK: %[[GROUP:.*]] = arith.constant 2 : i64
// CHECK: %{{.*}}, %[[OFF:.*]], %{{.*}}:4, %[[STR:.*]]:4 = memref.extract_strided_metadata %[[M]]
// CHECK: %[[E:.*]] = arith.index_cast %[[OFF]] : index to i64
// CHECK: %[[ESZ:.*]] = arith.constant 1 : i64
// CHECK: %[[X:.*]] = arith.muli %[[E]], %[[ESZ]] : i64
// CHECK: %[[PM:.*]] = arith.addi %{{.*}}, %[[X]] : i64
// CHECK: %[[KIND:.*]] = arith.constant 2 : i32
// CHECK: %[[Z:.*]] = arith.constant 0 : i64
// CHECK: %[[OUTER:.*]] = arith.index_cast %[[STR]]#0 : index to i64
// CHECK: %[[COL:.*]] = arith.index_cast %[[STR]]#3 : index to i64
// CHECK: %[[HIN:.*]] = arith.index_cast %[[H]] : index to i64
// CHECK: call @kiln_attention_masked(%{{.*}}, %[[GROUP]], {{.*}}, %[[PM]], %[[KIND]], %[[HIN]], %[[OUTER]], %[[Z]], %[[Z]], %[[COL]], %{{.*}})
// CHECK-LABEL: func.func @padding(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_attention_0(%arg0, %arg1, %arg2, %{{.*}}, %arg3)
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
// CHECK-LABEL: func.func private @kiln_attention_0(
// CHECK-SAME: %[[M:[a-z0-9]+]]: memref<?x?xf32>)
// CHECK: %{{.*}}, %[[OFF:.*]], %{{.*}}:2, %[[STR:.*]]:2 = memref.extract_strided_metadata %[[M]]
// CHECK: %[[E:.*]] = arith.index_cast %[[OFF]] : index to i64
// CHECK: %[[ESZ:.*]] = arith.constant 4 : i64
// CHECK: arith.muli %[[E]], %[[ESZ]] : i64
// CHECK: %[[KIND:.*]] = arith.constant 1 : i32
// CHECK: %[[Z:.*]] = arith.constant 0 : i64
// CHECK: %[[ROW:.*]] = arith.index_cast %[[STR]]#0 : index to i64
// CHECK: %[[COL:.*]] = arith.index_cast %[[STR]]#1 : index to i64
// CHECK: call @kiln_attention_masked({{.*}}, %[[KIND]], %{{.*}}, %[[Z]], %[[Z]], %[[ROW]], %[[COL]], %{{.*}})
// CHECK-LABEL: func.func @additive(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_attention_0(%arg0, %arg1, %arg1, %{{.*}}, %arg2)
func.func @additive(%q: !kiln.tensor<[3, "L", 8], f32>, %k: !kiln.tensor<[3, "L", 8], f32>, %mask: !kiln.tensor<["L", "L"], f32>) -> !kiln.tensor<[3, "L", 8], f32> {
  %a = "kiln.attention"(%q, %k, %k, %mask) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<[3, "L", 8], f32>, !kiln.tensor<["L", "L"], f32>) -> !kiln.tensor<[3, "L", 8], f32>
  return %a : !kiln.tensor<[3, "L", 8], f32>
}

// -----

// Not matched: k and v broadcast over q's batch dim (with or without a
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

// kiln.packed_attention: the chain reads q, k and v from the projection
// viewed as [B, L, 3, 2, 8] (parts 0, 1, 2 of dim 2) and writes head h's
// output at column h * 8 + e; with the native runtime it is one
// kiln_attention_packed call on that view (batch B, H = 2, L, D = 8) and
// the output, nothing copied.  Without it the chain stays, reading the
// heads through its maps.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK: func.func private @kiln_attention_packed(i64, i64, i64, i64, i64, i64, f32, i32, i32) -> i32
// CHECK-LABEL: func.func private @kiln_attention_0(
// CHECK-SAME: %[[X:.*]]: memref<?x?x3x2x8xf32>, %[[O:.*]]: memref<?x?x16xf32>)
// CHECK: %[[B:.*]] = memref.dim %[[X]], %c0
// CHECK: %[[L:.*]] = memref.dim %[[X]], %c1
// CHECK: %[[H:.*]] = arith.constant 2 : i64
// CHECK: %[[D:.*]] = arith.constant 8 : i64
// CHECK: %[[SCALE:.*]] = arith.constant 0.353553385 : f32
// CHECK: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK: call @kiln_attention_packed(%{{.*}}, %[[H]], %{{.*}}, %[[D]], %{{.*}}, %{{.*}}, %[[SCALE]], %{{.*}}, %[[THR]])
// CHECK-LABEL: func.func @packed(
// CHECK-NOT: linalg.generic
// CHECK: %[[V:.*]] = memref.reshape %arg0
// CHECK: call @kiln_attention_0(%[[V]], %arg1)
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
