// RUN: kiln-opt %s --split-input-file --kiln-reduce-precision | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-reduce-precision='precision=fp32' | FileCheck %s --check-prefix=FP32
// RUN: kiln-opt %s --split-input-file --kiln-reduce-precision --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()

// A matmul reads bf16: the constant weight becomes a bf16 constant now, a
// dense_resource blob of its bits (the runtime reads it as a weight), here
// 1.0, 1.015625, -2.0, 3.0 as little-endian bf16 after the 4-byte alignment
// prefix (1.00390625 is halfway between two bf16 values: to nearest even,
// 1.0; 1.01171875 rounds up to 1.015625); the activation a kiln.cast; its
// bf16 result is cast back to f32 for the add.  Inputs and outputs stay f32.
// CHECK-LABEL: func.func @matmul
// CHECK-DAG: %[[W:.*]] = "kiln.constant"() {value = dense_resource<[[BLOB:kiln_constant.*]]> : tensor<2x2xbf16>} : () -> !kiln.tensor<[2, 2], bf16>
// CHECK-DAG: %[[X:.*]] = "kiln.cast"(%arg0) : (!kiln.tensor<["B", 2], f32>) -> !kiln.tensor<["B", 2], bf16>
// CHECK: %[[P:.*]] = "kiln.matmul"(%[[X]], %[[W]]) {kiln.precision = "bf16"} : (!kiln.tensor<["B", 2], bf16>, !kiln.tensor<[2, 2], bf16>) -> !kiln.tensor<["B", 2], bf16>
// CHECK: %[[F:.*]] = "kiln.cast"(%[[P]]) : (!kiln.tensor<["B", 2], bf16>) -> !kiln.tensor<["B", 2], f32>
// CHECK: "kiln.add"(%[[F]], %arg0)
// CHECK: [[BLOB]]: "0x02000000803F823F00C04040"
// FP32-LABEL: func.func @matmul
// FP32: "kiln.matmul"(%arg0, %{{.*}}) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<["B", 2], f32>
func.func @matmul(%x: !kiln.tensor<["B", 2], f32>) -> !kiln.tensor<["B", 2], f32> {
  %w = "kiln.constant"() {value = dense<[[1.00390625, 1.01171875], [-2.0, 3.0]]> : tensor<2x2xf32>} : () -> !kiln.tensor<[2, 2], f32>
  %0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  %1 = "kiln.add"(%0, %x) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], f32>) -> !kiln.tensor<["B", 2], f32>
  return %1 : !kiln.tensor<["B", 2], f32>
}

// -----

// nn.Linear's weight read transposed (a kiln.transpose of the constant, kept
// for the product to read through its map): the constant becomes bf16 and is
// transposed as before -- no cast of the weight on every call.
// CHECK-LABEL: func.func @linear
// CHECK-DAG: %[[W:.*]] = "kiln.constant"() {value = dense_resource<[[BLOB:kiln_constant.*]]> : tensor<2x2xbf16>}
// CHECK-DAG: %[[T:.*]] = "kiln.transpose"(%[[W]]) {perm = array<i64: 1, 0>} : (!kiln.tensor<[2, 2], bf16>) -> !kiln.tensor<[2, 2], bf16>
// CHECK-DAG: %[[X:.*]] = "kiln.cast"(%arg0) : (!kiln.tensor<["B", 2], f32>) -> !kiln.tensor<["B", 2], bf16>
// CHECK: "kiln.matmul"(%[[X]], %[[T]]) {kiln.precision = "bf16"}
// CHECK-NOT: "kiln.cast"({{.*}}) : (!kiln.tensor<[2, 2], f32>)
// CHECK: [[BLOB]]: "0x02000000803F823F00C04040"
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @linear(%x: !kiln.tensor<["B", 2], f32>) -> !kiln.tensor<["B", 2], f32> {
  %w = "kiln.constant"() {value = dense<[[1.00390625, 1.01171875], [-2.0, 3.0]]> : tensor<2x2xf32>} : () -> !kiln.tensor<[2, 2], f32>
  %t = "kiln.transpose"(%w) {perm = array<i64: 1, 0>} : (!kiln.tensor<[2, 2], f32>) -> !kiln.tensor<[2, 2], f32>
  %0 = "kiln.matmul"(%x, %t) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  return %0 : !kiln.tensor<["B", 2], f32>
}

// -----

// A convolution of one group is a bf16 product like a matmul: its weight and
// bias become bf16 constants (the bias summed into the f32 accumulator), the
// activation a kiln.cast, its bf16 result cast back to f32.  A grouped
// (depthwise) one has no bf16 kernel: it reads bf16-rounded inputs in f32
// (the weight rounded now, the activation cast to bf16 and back; the bias stays).
// CHECK-LABEL: func.func @conv
// CHECK-DAG: %[[W:.*]] = "kiln.constant"() {value = dense<1.000000e+00> : tensor<2x1x1x1xbf16>}
// CHECK-DAG: %[[B:.*]] = "kiln.constant"() {value = dense<1.000000e+00> : tensor<2xbf16>}
// CHECK-DAG: %[[DW:.*]] = "kiln.constant"() {value = dense<1.000000e+00> : tensor<2x1x1x1xf32>}
// CHECK-DAG: %[[L:.*]] = "kiln.cast"(%arg0) : (!kiln.tensor<["N", 1, 4, 4], f32>) -> !kiln.tensor<["N", 1, 4, 4], bf16>
// CHECK: %[[C:.*]] = "kiln.conv2d"(%[[L]], %[[W]], %[[B]]) {{{.*}}kiln.precision = "bf16"{{.*}}} : (!kiln.tensor<["N", 1, 4, 4], bf16>, !kiln.tensor<[2, 1, 1, 1], bf16>, !kiln.tensor<[2], bf16>) -> !kiln.tensor<["N", 2, 4, 4], bf16>
// CHECK: %[[F:.*]] = "kiln.cast"(%[[C]]) : (!kiln.tensor<["N", 2, 4, 4], bf16>) -> !kiln.tensor<["N", 2, 4, 4], f32>
// CHECK: %[[L2:.*]] = "kiln.cast"(%[[F]]) : (!kiln.tensor<["N", 2, 4, 4], f32>) -> !kiln.tensor<["N", 2, 4, 4], bf16>
// CHECK: %[[R:.*]] = "kiln.cast"(%[[L2]]) : (!kiln.tensor<["N", 2, 4, 4], bf16>) -> !kiln.tensor<["N", 2, 4, 4], f32>
// CHECK: "kiln.conv2d"(%[[R]], %[[DW]], %{{.*}}) {{{.*}}groups = 2 : i64, kiln.precision = "bf16"{{.*}}} : (!kiln.tensor<["N", 2, 4, 4], f32>, !kiln.tensor<[2, 1, 1, 1], f32>, !kiln.tensor<[2], f32>)
"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
func.func @conv(%x: !kiln.tensor<["N", 1, 4, 4], f32>) -> !kiln.tensor<["N", 2, 4, 4], f32> {
  %w = "kiln.constant"() {value = dense<1.00390625> : tensor<2x1x1x1xf32>} : () -> !kiln.tensor<[2, 1, 1, 1], f32>
  %b = "kiln.constant"() {value = dense<1.00390625> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  %dw = "kiln.constant"() {value = dense<1.00390625> : tensor<2x1x1x1xf32>} : () -> !kiln.tensor<[2, 1, 1, 1], f32>
  %0 = "kiln.conv2d"(%x, %w, %b) {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 1, 4, 4], f32>, !kiln.tensor<[2, 1, 1, 1], f32>, !kiln.tensor<[2], f32>) -> !kiln.tensor<["N", 2, 4, 4], f32>
  %1 = "kiln.conv2d"(%0, %dw, %b) {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, groups = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 2, 4, 4], f32>, !kiln.tensor<[2, 1, 1, 1], f32>, !kiln.tensor<[2], f32>) -> !kiln.tensor<["N", 2, 4, 4], f32>
  return %1 : !kiln.tensor<["N", 2, 4, 4], f32>
}

// -----

// A ReLU between two bf16 products runs in bf16 (ReLU commutes with the
// rounding; the widening is exact): no cast pair around it.  A ReLU whose
// f32 result is also returned stays in f32.
// CHECK-LABEL: func.func @relu_between
// CHECK: %[[A:.*]] = "kiln.matmul"({{.*}}) {kiln.precision = "bf16"} : ({{.*}}) -> !kiln.tensor<["B", 2], bf16>
// CHECK: %[[R:.*]] = "kiln.relu"(%[[A]]) : (!kiln.tensor<["B", 2], bf16>) -> !kiln.tensor<["B", 2], bf16>
// CHECK-NOT: "kiln.cast"(%[[R]])
// CHECK: "kiln.matmul"(%[[R]], %{{.*}}) {kiln.precision = "bf16"}
// CHECK-LABEL: func.func @relu_returned
// CHECK: %[[A:.*]] = "kiln.matmul"({{.*}}) -> !kiln.tensor<["B", 2], bf16>
// CHECK-NEXT: %[[F:.*]] = "kiln.cast"(%[[A]]) : (!kiln.tensor<["B", 2], bf16>) -> !kiln.tensor<["B", 2], f32>
// CHECK-NEXT: "kiln.relu"(%[[F]]) : (!kiln.tensor<["B", 2], f32>) -> !kiln.tensor<["B", 2], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @relu_between(%x: !kiln.tensor<["B", 2], f32>) -> !kiln.tensor<["B", 2], f32> {
  %w = "kiln.constant"() {value = dense<[[1.0, 2.0], [-2.0, 3.0]]> : tensor<2x2xf32>} : () -> !kiln.tensor<[2, 2], f32>
  %0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  %1 = "kiln.relu"(%0) : (!kiln.tensor<["B", 2], f32>) -> !kiln.tensor<["B", 2], f32>
  %2 = "kiln.matmul"(%1, %w) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  return %2 : !kiln.tensor<["B", 2], f32>
}
func.func @relu_returned(%x: !kiln.tensor<["B", 2], f32>) -> (!kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], f32>) {
  %w = "kiln.constant"() {value = dense<[[1.0, 2.0], [-2.0, 3.0]]> : tensor<2x2xf32>} : () -> !kiln.tensor<[2, 2], f32>
  %0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  %1 = "kiln.relu"(%0) : (!kiln.tensor<["B", 2], f32>) -> !kiln.tensor<["B", 2], f32>
  %2 = "kiln.matmul"(%1, %w) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  return %1, %2 : !kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], f32>
}

// -----

// Attention reads bf16-rounded q, k, v; a matmul already in bf16 is left alone.
// CHECK-LABEL: func.func @attention
// CHECK-COUNT-3: "kiln.cast"({{.*}}) : (!kiln.tensor<["B", 2, 16, 8], bf16>) -> !kiln.tensor<["B", 2, 16, 8], f32>
// CHECK: "kiln.attention"({{.*}}) {{{.*}}kiln.precision = "bf16"
// CHECK: "kiln.matmul"(%arg1, %arg1) : (!kiln.tensor<[8, 8], bf16>, !kiln.tensor<[8, 8], bf16>) -> !kiln.tensor<[8, 8], bf16>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @attention(%q: !kiln.tensor<["B", 2, 16, 8], f32>, %h: !kiln.tensor<[8, 8], bf16>) -> (!kiln.tensor<["B", 2, 16, 8], f32>, !kiln.tensor<[8, 8], bf16>) {
  %a = "kiln.attention"(%q, %q, %q) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, 16, 8], f32>, !kiln.tensor<["B", 2, 16, 8], f32>, !kiln.tensor<["B", 2, 16, 8], f32>) -> !kiln.tensor<["B", 2, 16, 8], f32>
  %m = "kiln.matmul"(%h, %h) : (!kiln.tensor<[8, 8], bf16>, !kiln.tensor<[8, 8], bf16>) -> !kiln.tensor<[8, 8], bf16>
  return %a, %m : !kiln.tensor<["B", 2, 16, 8], f32>, !kiln.tensor<[8, 8], bf16>
}

// Per split: the matmul and its weight, the transposed weight's, the convolutions and their weights / bias, the attention.
// STATS: kiln-reduce-precision
// STATS-NEXT: (1) weights converted
// STATS-NEXT: (1) contractions in bf16
// STATS: kiln-reduce-precision
// STATS-NEXT: (1) weights converted
// STATS-NEXT: (1) contractions in bf16
// STATS: kiln-reduce-precision
// STATS-NEXT: (3) weights converted
// STATS-NEXT: (1) contractions in bf16
// STATS-NEXT: (1) ops on bf16-rounded inputs
// STATS: kiln-reduce-precision
// STATS-NEXT: (2) weights converted
// STATS-NEXT: (4) contractions in bf16
// STATS-NEXT: (1) ReLUs in bf16
// STATS: kiln-reduce-precision
// STATS-NEXT: (1) ops on bf16-rounded inputs
