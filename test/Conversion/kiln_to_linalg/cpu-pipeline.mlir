// RUN: kiln-opt %s --pass-pipeline='builtin.module(convert-kiln-to-linalg,kiln-cpu-prepare)' | FileCheck %s --check-prefix=DPS
// RUN: kiln-opt %s --pass-pipeline='builtin.module(convert-kiln-to-linalg,kiln-cpu-lower)' | FileCheck %s --check-prefix=LLVM

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()

// kiln-cpu-prepare: one memref argument per result, written in place; no
// kiln declarations left; the C interface requested.
// DPS-NOT: kiln.symbol
// DPS-LABEL: func.func @relu(
// DPS-SAME: %{{.*}}: tensor<?x16xf32>, %[[OUT:.*]]: memref<?x16xf32>) attributes {llvm.emit_c_interface}
// DPS: bufferization.materialize_in_destination %{{.*}} in restrict writable %[[OUT]]
// DPS-NEXT: return{{$}}

// kiln-cpu-lower: LLVM dialect, with the C-interface wrapper and freed buffers.
// LLVM: llvm.func @relu(
// LLVM: llvm.func @_mlir_ciface_relu(
// LLVM-NOT: memref.
// LLVM-NOT: linalg.
func.func @relu(%a: !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32> {
  %0 = "kiln.relu"(%a) : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  %1 = "kiln.exp"(%0) : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  return %1 : !kiln.tensor<["B", 16], f32>
}
