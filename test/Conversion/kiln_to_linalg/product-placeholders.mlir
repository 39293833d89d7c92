// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg | FileCheck %s

// A product kiln-select-kernels chose a library kernel for keeps its own
// lowering, and its contraction becomes the placeholder: library_call names
// the entry, kiln.call_attrs holds the op's attributes, kiln.call_dtypes the
// kiln dtypes of its operands and result (ui8 stays ui8 there).  A 2-D bf16
// matmul is the generic contraction (not linalg.matmul), summed in f32 and
// rounded after.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func @lowp(
// CHECK: linalg.fill
// CHECK: linalg.generic {{{.*}}iterator_types = ["parallel", "parallel", "reduction"], library_call = "native.matmul_lowp"} ins(%{{.*}}, %{{.*}} : tensor<?x64xbf16>, tensor<64x32xbf16>) outs(%{{.*}} : tensor<?x32xf32>) attrs = {kiln.call_attrs = {}, kiln.call_dtypes = ["bf16", "bf16", "bf16"]}
// CHECK: arith.extf
// CHECK: } -> tensor<?x32xf32>
// CHECK-NOT: linalg.matmul
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @lowp(%x: !kiln.tensor<["B", 64], bf16>, %w: !kiln.tensor<[64, 32], bf16>) -> !kiln.tensor<["B", 32], bf16> {
  %r = "kiln.matmul"(%x, %w) {kiln.impl = "native.matmul_lowp", kiln.why = "test"} : (!kiln.tensor<["B", 64], bf16>, !kiln.tensor<[64, 32], bf16>) -> !kiln.tensor<["B", 32], bf16>
  return %r : !kiln.tensor<["B", 32], bf16>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func @w8(
// CHECK: linalg.generic
// CHECK-SAME: library_call = "native.matmul_w8"
// CHECK-SAME: kiln.call_attrs = {group_size = 32 : i64}, kiln.call_dtypes = ["f32", "i8", "f32", "f32"]
// CHECK: arith.sitofp
func.func @w8(%x: !kiln.tensor<["B", 64], f32>, %w: !kiln.tensor<[32, 64], i8>, %s: !kiln.tensor<[32, 2], f32>) -> !kiln.tensor<["B", 32], f32> {
  %r = "kiln.matmul_w8"(%x, %w, %s) {group_size = 32 : i64, kiln.impl = "native.matmul_w8"} : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[32, 64], i8>, !kiln.tensor<[32, 2], f32>) -> !kiln.tensor<["B", 32], f32>
  return %r : !kiln.tensor<["B", 32], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
// CHECK-LABEL: func.func @integer(
// CHECK: linalg.generic
// CHECK-SAME: library_call = "native.matmul_integer"
// CHECK-SAME: kiln.call_attrs = {}, kiln.call_dtypes = ["ui8", "i8", "ui8", "i8", "i32"]
// CHECK: arith.extui
func.func @integer(%a: !kiln.tensor<["B", 64], ui8>, %b: !kiln.tensor<[64, 32], i8>, %za: !kiln.tensor<[], ui8>, %zb: !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 32], i32> {
  %r = "kiln.matmul_integer"(%a, %b, %za, %zb) {kiln.impl = "native.matmul_integer"} : (!kiln.tensor<["B", 64], ui8>, !kiln.tensor<[64, 32], i8>, !kiln.tensor<[], ui8>, !kiln.tensor<[], i8>) -> !kiln.tensor<["B", 32], i32>
  return %r : !kiln.tensor<["B", 32], i32>
}
