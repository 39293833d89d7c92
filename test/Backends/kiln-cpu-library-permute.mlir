// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library | FileCheck %s --check-prefix=GEN

// The stacked q/k/v transpose keeps its innermost dim: its copy becomes one
// kiln_permute call with rank 5, a stack buffer of the output's sizes and,
// per output dim, the input's stride along it (input dim 0, stride 3*4*64*L,
// is output dim 1: slot 6; input dim 2, stride 4*64, is output dim 0: slot
// 5), and 4-byte elements.  Without the native runtime the generic stays.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK: func.func private @kiln_permute(i64, i64, i64, i64, i64, i32)
// CHECK-LABEL: func.func private @kiln_permute_0(
// CHECK-SAME: %[[I:.*]]: memref<?x?x3x4x64xf32>, %[[O:.*]]: memref<3x?x4x?x64xf32>)
// CHECK: %[[META:.*]] = memref.alloca() : memref<10xi64>
// CHECK: memref.dim %[[O]], %c4
// CHECK: %[[L:.*]] = memref.dim %[[I]], %c1
// CHECK: %[[S0:.*]] = arith.muli %{{.*}}, %[[L]] : index
// CHECK: %[[S064:.*]] = arith.index_cast %[[S0]] : index to i64
// CHECK: memref.store %[[S064]], %[[META]][%c6]
// CHECK: memref.store %{{.*}}, %[[META]][%c5]
// CHECK: %[[RANK:.*]] = arith.constant 5 : i64
// CHECK: %[[ELEM:.*]] = arith.constant 4 : i64
// CHECK: %[[THR:.*]] = call @kiln_pool_threads() : () -> i32
// CHECK: call @kiln_permute(%[[RANK]], %{{.*}}, %{{.*}}, %{{.*}}, %[[ELEM]], %[[THR]])
// CHECK-LABEL: func.func @main(
// CHECK-NOT: linalg.generic
// CHECK: call @kiln_permute_0(%arg0, %arg1)
// CHECK-NEXT: return

// GEN-NOT: kiln_permute
// GEN-LABEL: func.func @main(
// GEN: linalg.generic
func.func @main(%x: !kiln.tensor<["B", "L", 3, 4, 64], f32>) -> !kiln.tensor<[3, "B", 4, "L", 64], f32> {
  %r = "kiln.transpose"(%x) {perm = array<i64: 2, 0, 3, 1, 4>} : (!kiln.tensor<["B", "L", 3, 4, 64], f32>) -> !kiln.tensor<[3, "B", 4, "L", 64], f32>
  return %r : !kiln.tensor<[3, "B", 4, "L", 64], f32>
}

// -----

// Not matched: a transpose that moves the innermost dim (no runs to copy).
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @innermost_moves(
// CHECK-NOT: kiln_permute
// CHECK: linalg.generic
// CHECK: return
func.func @innermost_moves(%x: !kiln.tensor<["L", 8], f32>) -> !kiln.tensor<[8, "L"], f32> {
  %r = "kiln.transpose"(%x) {perm = array<i64: 1, 0>} : (!kiln.tensor<["L", 8], f32>) -> !kiln.tensor<[8, "L"], f32>
  return %r : !kiln.tensor<[8, "L"], f32>
}
