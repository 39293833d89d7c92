// RUN: kiln-opt %s --split-input-file --kiln-infer-shapes --verify-diagnostics | FileCheck %s

// Pool output sizes (issue 36).  With ceil_mode a last window counts only
// when it starts inside the input or the low padding, for static and
// symbolic sizes alike; pads may exceed half the kernel; average pooling
// takes dilations.

"kiln.symbol"() {sym_name = "H", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @pool$ceil_mode
// A 1x1 window with stride 2 over 2 cells: ceil would start a second window
// at 2, past the input, so there is one.
// CHECK: "kiln.max_pool2d"{{.*}} -> !kiln.tensor<[1, 1, 1, 1], f32>
// CHECK: "kiln.max_pool2d"{{.*}} -> !kiln.tensor<[1, 1, "(H-1)/2+1", 1], f32>
// CHECK: "kiln.avg_pool2d"{{.*}} -> !kiln.tensor<[1, 1, "(H+1)/3+1", 2], f32>
// CHECK: "kiln.max_pool2d"{{.*}} -> !kiln.tensor<[1, 1, "H/2+1", 2], f32>
func.func @pool$ceil_mode(%x: !kiln.tensor<[1, 1, 2, 2], f32>, %y: !kiln.tensor<[1, 1, "H", 2], f32>) {
  %0 = "kiln.max_pool2d"(%x) {kernel = array<i64: 1, 1>, strides = array<i64: 2, 2>, ceil_mode = true} : (!kiln.tensor<[1, 1, 2, 2], f32>) -> !kiln.tensor<["?", "?", "?", "?"], f32>
  %1 = "kiln.max_pool2d"(%y) {kernel = array<i64: 1, 1>, strides = array<i64: 2, 2>, ceil_mode = true} : (!kiln.tensor<[1, 1, "H", 2], f32>) -> !kiln.tensor<["?", "?", "?", "?"], f32>
  // pads past half the kernel (2 > 3/2), ceil: windows start at -2, 1, 4, ... up to H + 1.
  %2 = "kiln.avg_pool2d"(%y) {kernel = array<i64: 3, 2>, strides = array<i64: 3, 2>, pads = array<i64: 2, 1, 2, 1>, ceil_mode = true} : (!kiln.tensor<[1, 1, "H", 2], f32>) -> !kiln.tensor<["?", "?", "?", "?"], f32>
  // The ceil round-up is kept where the window still starts in the input.
  %3 = "kiln.max_pool2d"(%y) {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, ceil_mode = true} : (!kiln.tensor<[1, 1, "H", 2], f32>) -> !kiln.tensor<["?", "?", "?", "?"], f32>
  return
}

// -----

// CHECK-LABEL: func.func @avg_pool$dilations
// CHECK: "kiln.avg_pool2d"{{.*}} -> !kiln.tensor<[1, 2, 2, 3], f32>
func.func @avg_pool$dilations(%x: !kiln.tensor<[1, 2, 5, 7], f32>) {
  %0 = "kiln.avg_pool2d"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, dilations = array<i64: 2, 3>, pads = array<i64: 1, 1, 0, 1>} : (!kiln.tensor<[1, 2, 5, 7], f32>) -> !kiln.tensor<["?", "?", "?", "?"], f32>
  return
}

// -----

// The size the old round-up gave is an error now.
func.func @max_pool$ceil_mode_wrong_result(%x: !kiln.tensor<[1, 1, 2, 2], f32>) {
  // expected-error @below {{'kiln.max_pool2d' op result #0 dim 2 is 2, but its shape function gives 1 (result [1, 1, 2, 2] vs inferred [1, 1, 1, 1])}}
  %0 = "kiln.max_pool2d"(%x) {kernel = array<i64: 1, 1>, strides = array<i64: 2, 2>, ceil_mode = true} : (!kiln.tensor<[1, 1, 2, 2], f32>) -> !kiln.tensor<[1, 1, 2, 2], f32>
  return
}
