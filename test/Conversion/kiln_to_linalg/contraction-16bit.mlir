// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s

// bf16 / f16 products and convolutions sum in an f32 accumulator (summing 768 products in
// bf16 itself loses several of its 8 bits), then one truncf rounds the sums
// to the result's type.  f32 products are unchanged (contraction.mlir).

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()

// 2-D: linalg.matmul with bf16 operands into an f32 init, then truncf.
// CHECK-LABEL: func.func @matmul$bf16(
// CHECK: %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[E:.*]] = tensor.empty(%{{.*}}) : tensor<?x8xf32>
// CHECK: %[[F:.*]] = linalg.fill ins(%[[Z]] : f32) outs(%[[E]] : tensor<?x8xf32>)
// CHECK: %[[P:.*]] = linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<?x16xbf16>, tensor<16x8xbf16>) outs(%[[F]] : tensor<?x8xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[P]] : tensor<?x8xf32>) outs(%{{.*}} : tensor<?x8xbf16>)
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @matmul$bf16(%a: !kiln.tensor<["B", 16], bf16>, %w: !kiln.tensor<[16, 8], bf16>) -> !kiln.tensor<["B", 8], bf16> {
  %0 = "kiln.matmul"(%a, %w) : (!kiln.tensor<["B", 16], bf16>, !kiln.tensor<[16, 8], bf16>) -> !kiln.tensor<["B", 8], bf16>
  return %0 : !kiln.tensor<["B", 8], bf16>
}

// Batched: the generic widens both operands, multiplies and adds in f32.
// CHECK-LABEL: func.func @matmul$f16_batch(
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<?x4x16xf16>, tensor<16x8xf16>) outs(%{{.*}} : tensor<?x4x8xf32>)
// CHECK-NEXT: ^bb0(%[[A:.*]]: f16, %[[W:.*]]: f16, %[[ACC:.*]]: f32):
// CHECK-NEXT: %[[EA:.*]] = arith.extf %[[A]] : f16 to f32
// CHECK-NEXT: %[[EW:.*]] = arith.extf %[[W]] : f16 to f32
// CHECK-NEXT: %[[M:.*]] = arith.mulf %[[EA]], %[[EW]] : f32
// CHECK-NEXT: %[[S:.*]] = arith.addf %[[ACC]], %[[M]] : f32
// CHECK-NEXT: linalg.yield %[[S]] : f32
// CHECK: arith.truncf %{{.*}} : f32 to f16
// CHECK: return %{{.*}} : tensor<?x4x8xf16>
func.func @matmul$f16_batch(%a: !kiln.tensor<["B", 4, 16], f16>, %w: !kiln.tensor<[16, 8], f16>) -> !kiln.tensor<["B", 4, 8], f16> {
  %0 = "kiln.matmul"(%a, %w) : (!kiln.tensor<["B", 4, 16], f16>, !kiln.tensor<[16, 8], f16>) -> !kiln.tensor<["B", 4, 8], f16>
  return %0 : !kiln.tensor<["B", 4, 8], f16>
}

// f32 keeps its f32 accumulator and no rounding step.
// CHECK-LABEL: func.func @matmul$f32(
// CHECK: linalg.matmul
// CHECK-NOT: arith.truncf
// CHECK: return
func.func @matmul$f32(%a: !kiln.tensor<["B", 16], f32>, %w: !kiln.tensor<[16, 8], f32>) -> !kiln.tensor<["B", 8], f32> {
  %0 = "kiln.matmul"(%a, %w) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 8], f32>) -> !kiln.tensor<["B", 8], f32>
  return %0 : !kiln.tensor<["B", 8], f32>
}

// A bf16 convolution: the bias extended into an f32 init, the im2col
// contraction widening both operands, one truncf of the sums after.
// CHECK-LABEL: func.func @conv$bf16(
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : tensor<4xbf16>) outs(%{{.*}} : tensor<?x4x6x6xf32>)
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<4x27xbf16>, tensor<?x27x36xbf16>) outs(%{{.*}} : tensor<?x4x36xf32>)
// CHECK: arith.extf
// CHECK: arith.extf
// CHECK: arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK: arith.addf %{{.*}}, %{{.*}} : f32
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: return %{{.*}} : tensor<?x4x6x6xbf16>
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
func.func @conv$bf16(%x: !kiln.tensor<["N", 3, 8, 8], bf16>, %w: !kiln.tensor<[4, 3, 3, 3], bf16>, %b: !kiln.tensor<[4], bf16>) -> !kiln.tensor<["N", 4, 6, 6], bf16> {
  %0 = "kiln.conv2d"(%x, %w, %b) {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 3, 8, 8], bf16>, !kiln.tensor<[4, 3, 3, 3], bf16>, !kiln.tensor<[4], bf16>) -> !kiln.tensor<["N", 4, 6, 6], bf16>
  return %0 : !kiln.tensor<["N", 4, 6, 6], bf16>
}

// Chosen for native.conv2d_lowp (kiln-select-kernels): the im2col product is
// the placeholder (library_call, the op's attributes and dtypes) that
// kiln-cpu-lowp-gemm turns into kiln_lowp_gemm calls.
// CHECK-LABEL: func.func @conv$bf16_chosen(
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : tensor<?x3x8x8xbf16>) outs(%{{.*}} : tensor<?x3x3x3x6x6xbf16>) attrs =  {kiln.call_part = "im2col"}
// CHECK: linalg.generic {{.*}}library_call = "native.conv2d_lowp"} ins(%{{.*}}, %{{.*}} : tensor<4x27xbf16>, tensor<?x27x36xbf16>) outs(%{{.*}} : tensor<?x4x36xf32>) attrs =  {kiln.call_attrs = {{.*}}, kiln.call_dtypes = ["bf16", "bf16", "bf16"]}
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @conv$bf16_chosen(%x: !kiln.tensor<["N", 3, 8, 8], bf16>, %w: !kiln.tensor<[4, 3, 3, 3], bf16>) -> !kiln.tensor<["N", 4, 6, 6], bf16> {
  %0 = "kiln.conv2d"(%x, %w) {kiln.impl = "native.conv2d_lowp", strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 3, 8, 8], bf16>, !kiln.tensor<[4, 3, 3, 3], bf16>) -> !kiln.tensor<["N", 4, 6, 6], bf16>
  return %0 : !kiln.tensor<["N", 4, 6, 6], bf16>
}

// A pointwise convolution at stride 1 has no im2col copy: the product reads
// the input itself, reshaped to [N, C, H * W].
// CHECK-LABEL: func.func @conv$bf16_pointwise(
// CHECK-NOT: kiln.call_part = "im2col"
// CHECK: %[[X:.*]] = tensor.reshape %{{.*}}(%{{.*}}) : (tensor<?x3x8x8xbf16>, tensor<3xi64>) -> tensor<?x3x64xbf16>
// CHECK: linalg.generic {{.*}}library_call = "native.conv2d_lowp"} ins(%{{.*}}, %[[X]] : tensor<4x3xbf16>, tensor<?x3x64xbf16>) outs(%{{.*}} : tensor<?x4x64xf32>)
func.func @conv$bf16_pointwise(%x: !kiln.tensor<["N", 3, 8, 8], bf16>, %w: !kiln.tensor<[4, 3, 1, 1], bf16>) -> !kiln.tensor<["N", 4, 8, 8], bf16> {
  %0 = "kiln.conv2d"(%x, %w) {kiln.impl = "native.conv2d_lowp", operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 3, 8, 8], bf16>, !kiln.tensor<[4, 3, 1, 1], bf16>) -> !kiln.tensor<["N", 4, 8, 8], bf16>
  return %0 : !kiln.tensor<["N", 4, 8, 8], bf16>
}

// A depthwise f16 convolution (the grouped form) sums in f32 too.
// CHECK-LABEL: func.func @conv$f16_depthwise(
// CHECK: iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]
// CHECK-NEXT: ^bb0(%{{.*}}: f16, %{{.*}}: f16, %{{.*}}: f32):
// CHECK: arith.truncf %{{.*}} : f32 to f16
func.func @conv$f16_depthwise(%x: !kiln.tensor<["N", 4, 8, 8], f16>, %w: !kiln.tensor<[4, 1, 3, 3], f16>) -> !kiln.tensor<["N", 4, 6, 6], f16> {
  %0 = "kiln.conv2d"(%x, %w) {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 4 : i64, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 8, 8], f16>, !kiln.tensor<[4, 1, 3, 3], f16>) -> !kiln.tensor<["N", 4, 6, 6], f16>
  return %0 : !kiln.tensor<["N", 4, 6, 6], f16>
}

// bf16 attention: the scores sum in f32 (q and k widened), scale, mask and
// softmax run in f32, p v sums v widened into f32, one truncf at the end;
// no kiln.attention tag (the native attention kernel is f32 only).
// CHECK-LABEL: func.func @attention$bf16(
// CHECK-NOT: kiln.attention
// CHECK: ^bb0(%{{.*}}: bf16, %{{.*}}: bf16, %{{.*}}: f32):
// CHECK: ^bb0(%{{.*}}: f32, %{{.*}}: bf16, %{{.*}}: f32):
// CHECK-NEXT: arith.extf %{{.*}} : bf16 to f32
// CHECK: ^bb0(%{{.*}}: f32, %{{.*}}: bf16):
// CHECK-NEXT: arith.truncf %{{.*}} : f32 to bf16
// CHECK: return %{{.*}} : tensor<?x2x16x8xbf16>
func.func @attention$bf16(%q: !kiln.tensor<["B", 2, 16, 8], bf16>) -> !kiln.tensor<["B", 2, 16, 8], bf16> {
  %a = "kiln.attention"(%q, %q, %q) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, 16, 8], bf16>, !kiln.tensor<["B", 2, 16, 8], bf16>, !kiln.tensor<["B", 2, 16, 8], bf16>) -> !kiln.tensor<["B", 2, 16, 8], bf16>
  return %a : !kiln.tensor<["B", 2, 16, 8], bf16>
}
