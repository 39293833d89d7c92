// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s

// Lowerings of the ops added for ONNX's ArgMax/ArgMin, ReduceProd, Floor/Ceil
// and ScatterND (issue 36).

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()

// argmax: one reduction generic with two outputs (best value from -inf, its
// index from 0); select_last_index compares with oge, a NaN always takes over.
// CHECK-LABEL: func.func @argmax$last(
// CHECK-DAG: %[[Z:.*]] = arith.constant 0 : i64
// CHECK-DAG: %[[NINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK: %[[V:.*]] = linalg.fill ins(%[[NINF]] : f32) outs(%{{.*}} : tensor<?xf32>)
// CHECK: %[[I:.*]] = linalg.fill ins(%[[Z]] : i64) outs(%{{.*}} : tensor<?xi64>)
// CHECK: %[[R:.*]]:2 = linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} ins(%arg0 : tensor<?x16xf32>) outs(%[[V]], %[[I]] : tensor<?xf32>, tensor<?xi64>)
// CHECK: %[[GE:.*]] = arith.cmpf oge, %[[IN:.*]], %[[OUT:.*]] : f32
// CHECK: %[[NAN:.*]] = arith.cmpf uno, %[[IN]], %[[IN]] : f32
// CHECK: %[[TAKE:.*]] = arith.ori %[[GE]], %[[NAN]] : i1
// CHECK: %[[K:.*]] = linalg.index 1 : index
// CHECK: %[[K64:.*]] = arith.index_cast %[[K]] : index to i64
// CHECK: arith.select %[[TAKE]], %[[IN]], %[[OUT]] : f32
// CHECK: arith.select %[[TAKE]], %[[K64]], %{{.*}} : i64
// CHECK: return %[[R]]#1 : tensor<?xi64>
func.func @argmax$last(%x: !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B"], i64> {
  %0 = "kiln.argmax"(%x) {axis = 1 : i64, keepdims = false, select_last_index = true} : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B"], i64>
  return %0 : !kiln.tensor<["B"], i64>
}

// argmin on integers starts from the type's maximum and keeps the first minimum (slt).
// CHECK-LABEL: func.func @argmin$i32(
// CHECK: %[[MAX:.*]] = arith.constant 2147483647 : i32
// CHECK: linalg.fill ins(%[[MAX]] : i32) outs(%{{.*}} : tensor<1x16xi32>)
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction", "parallel"]
// CHECK: %[[LT:.*]] = arith.cmpi slt, %{{.*}}, %{{.*}} : i32
// CHECK: linalg.index 0 : index
// CHECK: arith.select %[[LT]], %{{.*}}, %{{.*}} : i64
func.func @argmin$i32(%x: !kiln.tensor<["B", 16], i32>) -> !kiln.tensor<[1, 16], i64> {
  %0 = "kiln.argmin"(%x) {axis = 0 : i64} : (!kiln.tensor<["B", 16], i32>) -> !kiln.tensor<[1, 16], i64>
  return %0 : !kiln.tensor<[1, 16], i64>
}

// reduce_prod multiplies from 1 (an empty set gives 1).
// CHECK-LABEL: func.func @reduce_prod(
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: linalg.fill ins(%[[ONE]] : f32)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// CHECK: arith.mulf
func.func @reduce_prod(%x: !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 1], f32> {
  %0 = "kiln.reduce_prod"(%x) {axes = array<i64: 1>, keepdims = true} : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 1], f32>
  return %0 : !kiln.tensor<["B", 1], f32>
}

// CHECK-LABEL: func.func @floor_ceil(
// CHECK: math.floor %{{.*}} : f32
// CHECK: math.ceil %{{.*}} : f32
func.func @floor_ceil(%x: !kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32> {
  %0 = "kiln.floor"(%x) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32>
  %1 = "kiln.ceil"(%0) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32>
  return %1 : !kiln.tensor<["B"], f32>
}

// scatter_nd: a copy of data (a generic reading it with tensor.extract), then
// scf.for over the rows of indices (the row's position read once, negative
// wrapped, clamped) and over the slice, combining and inserting in order.
// CHECK-LABEL: func.func @scatter_nd$add(
// CHECK: %[[ROWS:.*]] = tensor.dim %arg2, %c0 : tensor<?x?xf32>
// CHECK: %[[COLS:.*]] = tensor.dim %arg2, %c1 : tensor<?x?xf32>
// CHECK: %[[COPY:.*]] = linalg.generic
// CHECK: tensor.extract %arg0
// CHECK: scf.for %[[R:.*]] = %c0 to %[[ROWS]] step %c1 iter_args(%[[A:.*]] = %[[COPY]]) -> (tensor<4x?xf32>)
// CHECK: %[[P:.*]] = tensor.extract %arg1[%[[R]], %c0] : tensor<?x1xi64>
// CHECK: %[[PI:.*]] = arith.index_cast %[[P]] : i64 to index
// CHECK: arith.cmpi slt, %[[PI]], %c0 : index
// CHECK: arith.addi %[[PI]], %c4 : index
// CHECK: %[[POS:.*]] = arith.minsi %{{.*}}, %c3 : index
// CHECK: scf.for %[[C:.*]] = %c0 to %[[COLS]] step %c1 iter_args(%[[D:.*]] = %[[A]]) -> (tensor<4x?xf32>)
// CHECK: %[[U:.*]] = tensor.extract %arg2[%[[R]], %[[C]]] : tensor<?x?xf32>
// CHECK: %[[OLD:.*]] = tensor.extract %[[D]][%[[POS]], %[[C]]] : tensor<4x?xf32>
// CHECK: %[[NEW:.*]] = arith.addf %[[OLD]], %[[U]] : f32
// CHECK: tensor.insert %[[NEW]] into %[[D]][%[[POS]], %[[C]]] : tensor<4x?xf32>
func.func @scatter_nd$add(%d: !kiln.tensor<[4, "L"], f32>, %i: !kiln.tensor<["B", 1], i64>, %u: !kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<[4, "L"], f32> {
  %0 = "kiln.scatter_nd"(%d, %i, %u) {reduction = "add"} : (!kiln.tensor<[4, "L"], f32>, !kiln.tensor<["B", 1], i64>, !kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<[4, "L"], f32>
  return %0 : !kiln.tensor<[4, "L"], f32>
}

// Without a reduction the update replaces the value (no read of the old one);
// element indices (k = rank) leave no inner loop.
// CHECK-LABEL: func.func @scatter_nd$elements(
// CHECK: scf.for %[[R:.*]] = %c0 to %{{.*}} step %c1 iter_args(%[[A:.*]] = %{{.*}}) -> (tensor<2x2xi64>)
// CHECK: tensor.extract %arg1[%[[R]], %c0] : tensor<?x2xi64>
// CHECK: tensor.extract %arg1[%[[R]], %c1] : tensor<?x2xi64>
// CHECK: %[[U:.*]] = tensor.extract %arg2[%[[R]]] : tensor<?xi64>
// CHECK-NOT: tensor.extract %[[A]]
// CHECK: tensor.insert %[[U]] into %[[A]]
func.func @scatter_nd$elements(%d: !kiln.tensor<[2, 2], i64>, %i: !kiln.tensor<["B", 2], i64>, %u: !kiln.tensor<["B"], i64>) -> !kiln.tensor<[2, 2], i64> {
  %0 = "kiln.scatter_nd"(%d, %i, %u) : (!kiln.tensor<[2, 2], i64>, !kiln.tensor<["B", 2], i64>, !kiln.tensor<["B"], i64>) -> !kiln.tensor<[2, 2], i64>
  return %0 : !kiln.tensor<[2, 2], i64>
}

// reduce_min starts from the type's maximum (+inf for floats) and takes minsi / minimumf.
// CHECK-LABEL: func.func @reduce_min$i64(
// CHECK: %[[MAX:.*]] = arith.constant 9223372036854775807 : i64
// CHECK: linalg.fill ins(%[[MAX]] : i64)
// CHECK: arith.minsi
func.func @reduce_min$i64(%x: !kiln.tensor<["B", 2], i64>) -> !kiln.tensor<[2], i64> {
  %0 = "kiln.reduce_min"(%x) {axes = array<i64: 0>} : (!kiln.tensor<["B", 2], i64>) -> !kiln.tensor<[2], i64>
  return %0 : !kiln.tensor<[2], i64>
}

// Booleans: a min is an and from true, a max an or from false (signed i1 orders true below false).
// CHECK-LABEL: func.func @reduce_min_max$i1(
// CHECK-DAG: %[[F:.*]] = arith.constant false
// CHECK-DAG: %[[T:.*]] = arith.constant true
// CHECK: linalg.fill ins(%[[T]] : i1)
// CHECK: arith.andi
// CHECK: linalg.fill ins(%[[F]] : i1)
// CHECK: arith.ori
func.func @reduce_min_max$i1(%x: !kiln.tensor<["B", 3], i1>) -> !kiln.tensor<["B"], i1> {
  %0 = "kiln.reduce_min"(%x) {axes = array<i64: 1>} : (!kiln.tensor<["B", 3], i1>) -> !kiln.tensor<["B"], i1>
  %1 = "kiln.reduce_max"(%0) {axes = array<i64: 0>, keepdims = true} : (!kiln.tensor<["B"], i1>) -> !kiln.tensor<[1], i1>
  %2 = "kiln.expand"(%1) {shape = ["B"]} : (!kiln.tensor<[1], i1>) -> !kiln.tensor<["B"], i1>
  return %2 : !kiln.tensor<["B"], i1>
}
