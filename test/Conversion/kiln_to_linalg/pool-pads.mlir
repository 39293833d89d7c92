// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s
// RUN: kiln-opt %s --kiln-select-kernels --convert-kiln-to-linalg | FileCheck %s --check-prefix=SEL

// Pools with pads past half the kernel, dilated average pooling and
// ceil_mode (issue 36).

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()

// A strided max pool with padding up to half its kernel: kiln-select-kernels
// chooses the native kernel (second run: one placeholder of the call, the op's
// attributes on it, a payload that is never run but uses every operand, so
// that bufferization sees them read); with more padding (windows that may lie wholly in it)
// it keeps its generics, reading an explicitly padded input.  Unselected
// (CHECK), both are generated.
// CHECK-LABEL: func.func @max_pool2d$half_kernel_pads(
// CHECK: tensor.empty(%{{.*}}) : tensor<?x8x34x34xf32>
// CHECK-COUNT-8: arith.maximumf
// SEL-LABEL: func.func @max_pool2d$half_kernel_pads(
// SEL-NOT: 34x34
// SEL: linalg.generic {{.*}}library_call = "native.max_pool2d"} ins(%arg0 : tensor<?x8x32x32xf32>) outs(%{{.*}} : tensor<?x8x16x16xf32>) attrs =  {kiln.call_args = ["x", "res"], kiln.call_attrs = {ceil_mode = false, dilations = array<i64: 1, 1>, kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>}}
// SEL-NEXT: ^bb0(%[[IN:.*]]: f32, %[[OUT:.*]]: f32):
// SEL-NEXT: %[[Z:.*]] = arith.mulf %[[IN]], %{{.*}} : f32
// SEL-NEXT: %[[R:.*]] = arith.addf %[[OUT]], %[[Z]] : f32
// SEL-NEXT: linalg.yield %[[R]] : f32
// SEL-LABEL: func.func @max_pool2d$large_pads(
// SEL-NOT: library_call
// SEL: return
func.func @max_pool2d$half_kernel_pads(%x: !kiln.tensor<["B", 8, 32, 32], f32>) -> !kiln.tensor<["B", 8, 16, 16], f32> {
  %0 = "kiln.max_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>} : (!kiln.tensor<["B", 8, 32, 32], f32>) -> !kiln.tensor<["B", 8, 16, 16], f32>
  return %0 : !kiln.tensor<["B", 8, 16, 16], f32>
}

// CHECK-LABEL: func.func @max_pool2d$large_pads(
// CHECK: linalg.generic
// CHECK-COUNT-8: arith.maximumf
// CHECK: return
func.func @max_pool2d$large_pads(%x: !kiln.tensor<["B", 8, 5, 5], f32>) -> !kiln.tensor<["B", 8, 4, 4], f32> {
  %0 = "kiln.max_pool2d"(%x) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 2, 2, 2, 2>} : (!kiln.tensor<["B", 8, 5, 5], f32>) -> !kiln.tensor<["B", 8, 4, 4], f32>
  return %0 : !kiln.tensor<["B", 8, 4, 4], f32>
}

// Sums and divisors pool with the dilations; a window with no cell counted
// (all padding) averages to 0: the divisor is at least 1.
// CHECK-LABEL: func.func @avg_pool2d$dilations(
// CHECK: linalg.pooling_nchw_sum {dilations = dense<[2, 3]> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
// CHECK: linalg.pooling_nchw_sum {dilations = dense<[2, 3]> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
// CHECK: arith.maximumf
// CHECK: arith.divf
func.func @avg_pool2d$dilations(%x: !kiln.tensor<["B", 2, 5, 7], f32>) -> !kiln.tensor<["B", 2, 4, 6], f32> {
  %0 = "kiln.avg_pool2d"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 1, 1>, dilations = array<i64: 2, 3>, pads = array<i64: 1, 1, 0, 1>} : (!kiln.tensor<["B", 2, 5, 7], f32>) -> !kiln.tensor<["B", 2, 4, 6], f32>
  return %0 : !kiln.tensor<["B", 2, 4, 6], f32>
}
