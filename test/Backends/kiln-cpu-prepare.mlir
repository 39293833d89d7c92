// RUN: kiln-opt %s --kiln-cpu-prepare | FileCheck %s

// Results become output memref arguments (destination-passing style); the
// argument attributes grow with them, so named inputs keep their names.

// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %arg0: tensor<?x4xf32> {kiln.name = "x"}, %arg1: memref<?x4xf32>)
// CHECK-SAME:    attributes {llvm.emit_c_interface}
// CHECK:         bufferization.materialize_in_destination %{{.*}} in restrict writable %arg1
// CHECK:         return
// CHECK-NOT:     kiln.symbol
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
func.func @main(%x: tensor<?x4xf32> {kiln.name = "x"}) -> tensor<?x4xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x4xf32>
  %e = tensor.empty(%n) : tensor<?x4xf32>
  %y = linalg.copy ins(%x : tensor<?x4xf32>) outs(%e : tensor<?x4xf32>) -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}
