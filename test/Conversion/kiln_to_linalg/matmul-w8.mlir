// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg | FileCheck %s

// kiln.matmul_w8: one contraction of x's rows with the int8 weight rows
// (loops b, m, n, k; w read [n, k], its scales [n, k floordiv group_size]);
// each weight element is widened by sitofp and scaled inside the sum, so no
// f32 copy of the weight exists.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-DAG: #[[X:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[W:.*]] = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
// CHECK-DAG: #[[S:.*]] = affine_map<(d0, d1, d2, d3) -> (d2, d3 floordiv 32)>
// CHECK-LABEL: func.func @matmul_w8(
// CHECK-SAME: %[[A:.*]]: tensor<?x3x64xf32>, %[[WQ:.*]]: tensor<32x64xi8>, %[[SC:.*]]: tensor<32x2xf32>)
// CHECK-NOT: tensor<32x64xf32>
// CHECK: linalg.generic {indexing_maps = [#[[X]], #[[W]], #[[S]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[A]], %[[WQ]], %[[SC]] : tensor<?x3x64xf32>, tensor<32x64xi8>, tensor<32x2xf32>)
// CHECK: ^bb0(%[[IN:.*]]: f32, %[[IW:.*]]: i8, %[[IS:.*]]: f32, %[[ACC:.*]]: f32):
// CHECK: %[[WF:.*]] = arith.sitofp %[[IW]] : i8 to f32
// CHECK: %[[D:.*]] = arith.mulf %[[WF]], %[[IS]] : f32
// CHECK: %[[P:.*]] = arith.mulf %[[IN]], %[[D]] : f32
// CHECK: arith.addf %[[ACC]], %[[P]] : f32
// CHECK-NOT: linalg.generic
func.func @matmul_w8(%x: !kiln.tensor<["B", 3, 64], f32>, %w: !kiln.tensor<[32, 64], i8>, %s: !kiln.tensor<[32, 2], f32>) -> !kiln.tensor<["B", 3, 32], f32> {
  %r = "kiln.matmul_w8"(%x, %w, %s) {group_size = 32 : i64} : (!kiln.tensor<["B", 3, 64], f32>, !kiln.tensor<[32, 64], i8>, !kiln.tensor<[32, 2], f32>) -> !kiln.tensor<["B", 3, 32], f32>
  return %r : !kiln.tensor<["B", 3, 32], f32>
}

// -----

// bf16 x: x and the scales widened by extf, the sums in f32, one truncf to bf16 after.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func @matmul_w8_bf16(
// CHECK: linalg.generic
// CHECK-DAG: arith.extf %{{.*}} : bf16 to f32
// CHECK-DAG: arith.extf %{{.*}} : bf16 to f32
// CHECK: arith.sitofp %{{.*}} : i8 to f32
// CHECK: linalg.generic
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @matmul_w8_bf16(%x: !kiln.tensor<["B", 16], bf16>, %w: !kiln.tensor<[8, 16], i8>, %s: !kiln.tensor<[8, 1], bf16>) -> !kiln.tensor<["B", 8], bf16> {
  %r = "kiln.matmul_w8"(%x, %w, %s) {group_size = 16 : i64} : (!kiln.tensor<["B", 16], bf16>, !kiln.tensor<[8, 16], i8>, !kiln.tensor<[8, 1], bf16>) -> !kiln.tensor<["B", 8], bf16>
  return %r : !kiln.tensor<["B", 8], bf16>
}
