// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s

// CHECK-DAG: #{{.*}} = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-DAG: #{{.*}} = affine_map<(d0, d1) -> (d0, 0)>

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()

// The signature becomes builtin tensors with `?` for symbolic dims; B and L
// are one tensor.dim each, read from the first argument that names them.
// CHECK-LABEL: func.func @add$broadcast(
// CHECK-SAME: %[[A:.*]]: tensor<?x?x16xf32>, %[[B:.*]]: tensor<16xf32>) -> tensor<?x?x16xf32>
// CHECK-DAG: %[[D0:.*]] = tensor.dim %[[A]], %c0
// CHECK-DAG: %[[D1:.*]] = tensor.dim %[[A]], %c1
// CHECK: %[[E:.*]] = tensor.empty(%[[D0]], %[[D1]]) : tensor<?x?x16xf32>
// CHECK: linalg.generic {indexing_maps = [#[[ID:.*]], #[[BC:.*]], #[[ID]]], iterator_types = ["parallel", "parallel", "parallel"]}
// CHECK-SAME: ins(%[[A]], %[[B]] : tensor<?x?x16xf32>, tensor<16xf32>) outs(%[[E]] : tensor<?x?x16xf32>)
// CHECK: arith.addf
// CHECK-NOT: kiln.add
func.func @add$broadcast(%a: !kiln.tensor<["B", "L", 16], f32>, %b: !kiln.tensor<[16], f32>) -> !kiln.tensor<["B", "L", 16], f32> {
  %0 = "kiln.add"(%a, %b) : (!kiln.tensor<["B", "L", 16], f32>, !kiln.tensor<[16], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  return %0 : !kiln.tensor<["B", "L", 16], f32>
}

// A static 1 broadcasts: its map reads index 0.
// CHECK-LABEL: func.func @mul$size_one(
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[ONE:map[0-9]*]], #{{.*}}]
// CHECK: arith.mulf
func.func @mul$size_one(%a: !kiln.tensor<["B", "L"], f32>, %b: !kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", "L"], f32> {
  %0 = "kiln.mul"(%a, %b) : (!kiln.tensor<["B", "L"], f32>, !kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", "L"], f32>
  return %0 : !kiln.tensor<["B", "L"], f32>
}

// CHECK-LABEL: func.func @compare_select(
// CHECK: arith.cmpf ogt
// CHECK: -> tensor<?xi1>
// CHECK: arith.select
func.func @compare_select(%a: !kiln.tensor<["B"], f32>, %b: !kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32> {
  %c = "kiln.gt"(%a, %b) : (!kiln.tensor<["B"], f32>, !kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], i1>
  %0 = "kiln.where"(%c, %a, %b) : (!kiln.tensor<["B"], i1>, !kiln.tensor<["B"], f32>, !kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32>
  return %0 : !kiln.tensor<["B"], f32>
}

// f32 exp is an arith polynomial scaled by 2**n from the exponent bits (a
// libm call would keep LLVM from vectorizing); tanh builds on it, erf (in
// gelu) is a rational function of x clamped to [-4, 4].  Their polynomials'
// steps may become FMAs (fastmath<contract>).
// CHECK-LABEL: func.func @unary_chain(
// CHECK-NOT: math.exp
// CHECK-NOT: math.erf
// CHECK: math.floor
// CHECK: arith.mulf %{{.*}}, %{{.*}} fastmath<contract> : f32
// CHECK: arith.addf %{{.*}}, %{{.*}} fastmath<contract> : f32
// CHECK: arith.shli
// CHECK: arith.bitcast %{{.*}} : i32 to f32
// CHECK: arith.maximumf
// CHECK: arith.minimumf
// CHECK: arith.mulf %{{.*}}, %{{.*}} fastmath<contract> : f32
// CHECK: arith.addf %{{.*}}, %{{.*}} fastmath<contract> : f32
// CHECK: arith.divf
// CHECK: math.copysign
// CHECK-NOT: math.copysign
// CHECK: arith.sitofp
func.func @unary_chain(%a: !kiln.tensor<["B"], f32>, %i: !kiln.tensor<["B"], i32>) -> (!kiln.tensor<["B"], f32>, !kiln.tensor<["B"], f32>) {
  %0 = "kiln.silu"(%a) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32>
  %1 = "kiln.gelu"(%0) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32>
  %2 = "kiln.tanh"(%1) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f32>
  %3 = "kiln.cast"(%i) : (!kiln.tensor<["B"], i32>) -> !kiln.tensor<["B"], f32>
  return %2, %3 : !kiln.tensor<["B"], f32>, !kiln.tensor<["B"], f32>
}
