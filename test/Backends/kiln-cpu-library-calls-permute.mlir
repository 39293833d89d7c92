// RUN: kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library-calls | FileCheck %s
// RUN: env KILN_NATIVE=0 kiln-opt %s --split-input-file --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-prepare --kiln-cpu-vectorize --kiln-cpu-bufferize --kiln-cpu-library-calls | FileCheck %s --check-prefix=GEN

// The stacked q/k/v transpose keeps its innermost dim: kiln-select-kernels
// chooses native.permute, one kiln_permute call with rank 5, a stack array
// of the output's sizes (slots 0-4) and, per output dim, the input's stride
// along it (output dim 0 is input dim 2, stride 4*64: slot 5; output dim 1
// is input dim 0, stride L*3*4*64: slot 6), and 4-byte elements.  Without the
// native runtime the generic copy stays.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK: func.func private @kiln_permute(i64, i64, i64, i64, i64, i32)
// CHECK-LABEL: func.func private @kiln_permute_0(
// CHECK-SAME: %[[I:.*]]: memref<?x?x3x4x64xf32>, %[[O:.*]]: memref<3x?x4x?x64xf32>)
// CHECK: %[[RANK:.*]] = arith.constant 5 : i64
// CHECK: %[[META:.*]] = memref.alloca() : memref<10xi64>
// CHECK: memref.store %{{.*}}, %[[META]][%c0]
// CHECK: %[[B:.*]] = memref.dim %[[O]], %c1
// CHECK: memref.store %{{.*}}, %[[META]][%c1
// CHECK: %[[L:.*]] = memref.dim %[[O]], %c3
// CHECK: memref.store %{{.*}}, %[[META]][%c4
// CHECK: %[[S5:.*]] = arith.muli %{{.*}}, %c64{{.*}} : index
// CHECK: %[[S564:.*]] = arith.index_cast %[[S5]] : index to i64
// CHECK: memref.store %[[S564]], %[[META]][%c5]
// CHECK: %[[LI:.*]] = memref.dim %[[I]], %c1
// CHECK: %[[S6:.*]] = arith.muli %{{.*}}, %[[LI]] : index
// CHECK: memref.store %{{.*}}, %[[META]][%c6]
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

// Not chosen: a transpose that moves the innermost dim (no runs to copy).
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @innermost_moves(
// CHECK-NOT: kiln_permute
// CHECK: linalg.generic
// CHECK: return
func.func @innermost_moves(%x: !kiln.tensor<["L", 8], f32>) -> !kiln.tensor<[8, "L"], f32> {
  %r = "kiln.transpose"(%x) {perm = array<i64: 1, 0>} : (!kiln.tensor<["L", 8], f32>) -> !kiln.tensor<[8, "L"], f32>
  return %r : !kiln.tensor<[8, "L"], f32>
}
