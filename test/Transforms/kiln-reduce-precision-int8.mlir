// RUN: kiln-opt %s --split-input-file --kiln-reduce-precision='precision=int8-weights' | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-reduce-precision='precision=int8-weights group-size=2' | FileCheck %s --check-prefix=GROUPS
// RUN: kiln-opt %s --split-input-file --kiln-reduce-precision='precision=int8-weights' --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()

// A matmul by a constant [K, N] weight becomes kiln.matmul_w8 with the weight
// as int8 rows [N, K] and symmetric scales per output channel and group of
// 128 k, here fewer: one group of 2 (max |column| / 127; 63.5 and -63.5
// round to even, 64 and -64; a zero column gets scale 1).  The activation
// and the result stay f32.
// CHECK-LABEL: func.func @constant_weight
// CHECK-DAG: %[[W:.*]] = "kiln.constant"() {value = dense<{{\[}}[127, 64], [-64, 127], [0, 0]]> : tensor<3x2xi8>} : () -> !kiln.tensor<[3, 2], i8>
// CHECK-DAG: %[[S:.*]] = "kiln.constant"() {value = dense<{{\[}}[0.00787401571], [0.0314960629], [1.000000e+00]]> : tensor<3x1xf32>} : () -> !kiln.tensor<[3, 1], f32>
// CHECK: %[[P:.*]] = "kiln.matmul_w8"(%arg0, %[[W]], %[[S]]) {group_size = 2 : i64, kiln.precision = "int8-weights"} : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[3, 2], i8>, !kiln.tensor<[3, 1], f32>) -> !kiln.tensor<["B", 3], f32>
// CHECK: return %[[P]]
func.func @constant_weight(%x: !kiln.tensor<["B", 2], f32>) -> !kiln.tensor<["B", 3], f32> {
  %w = "kiln.constant"() {value = dense<[[1.0, -2.0, 0.0], [0.5, 4.0, 0.0]]> : tensor<2x3xf32>} : () -> !kiln.tensor<[2, 3], f32>
  %0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 3], f32>) -> !kiln.tensor<["B", 3], f32>
  return %0 : !kiln.tensor<["B", 3], f32>
}

// -----

// nn.Linear's spelling, a transposed [N, K] constant (a weight too large to
// fold): its rows are quantized as they are; one weight used by two matmuls
// is quantized once.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @linear
// CHECK: %[[W:.*]] = "kiln.constant"() {value = dense<{{\[}}[127, -127], [64, 127]]> : tensor<2x2xi8>}
// CHECK: %[[S:.*]] = "kiln.constant"() {value = dense<{{\[}}[0.0157480314], [0.0314960629]]> : tensor<2x1xf32>}
// CHECK: "kiln.matmul_w8"(%arg0, %[[W]], %[[S]])
// CHECK: "kiln.matmul_w8"(%{{.*}}, %[[W]], %[[S]])
// CHECK-NOT: kiln.matmul"
func.func @linear(%x: !kiln.tensor<["B", 2], f32>) -> !kiln.tensor<["B", 2], f32> {
  %w = "kiln.constant"() {value = dense<[[2.0, -2.0], [2.0, 4.0]]> : tensor<2x2xf32>} : () -> !kiln.tensor<[2, 2], f32>
  %t = "kiln.transpose"(%w) {perm = array<i64: 1, 0>} : (!kiln.tensor<[2, 2], f32>) -> !kiln.tensor<[2, 2], f32>
  %0 = "kiln.matmul"(%x, %t) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  %1 = "kiln.matmul"(%0, %t) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  return %1 : !kiln.tensor<["B", 2], f32>
}

// -----

// group-size=2 over K = 5: groups [0, 2), [2, 4), [4, 5) per output channel, each with its own scale.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// GROUPS-LABEL: func.func @groups
// GROUPS-DAG: "kiln.constant"() {value = dense<{{\[}}[127, 64, -127, 127, 127]]> : tensor<1x5xi8>}
// GROUPS-DAG: "kiln.constant"() {value = dense<{{\[}}[0.00787401571, 0.0314960629, 0.00393700786]]> : tensor<1x3xf32>}
// GROUPS: "kiln.matmul_w8"(%arg0, %{{.*}}, %{{.*}}) {group_size = 2 : i64, kiln.precision = "int8-weights"}
func.func @groups(%x: !kiln.tensor<["B", 5], f32>) -> !kiln.tensor<["B", 1], f32> {
  %w = "kiln.constant"() {value = dense<[[1.0], [0.5], [-4.0], [4.0], [0.5]]> : tensor<5x1xf32>} : () -> !kiln.tensor<[5, 1], f32>
  %0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 5], f32>, !kiln.tensor<[5, 1], f32>) -> !kiln.tensor<["B", 1], f32>
  return %0 : !kiln.tensor<["B", 1], f32>
}

// -----

// Left alone: a product of two activations, a batched (3-D) constant, an
// integer product's exact f32 chunk and an f16 matmul.
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: kiln.matmul_w8
// CHECK-COUNT-4: "kiln.matmul"
// CHECK-NOT: kiln.matmul_w8
func.func @left_alone(%x: !kiln.tensor<["B", 2], f32>, %y: !kiln.tensor<[2, 2], f32>, %h: !kiln.tensor<["B", 2], f16>) -> (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[3, "B", 2], f32>, !kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], f16>) {
  %0 = "kiln.matmul"(%x, %y) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  %w3 = "kiln.constant"() {value = dense<1.0> : tensor<3x2x2xf32>} : () -> !kiln.tensor<[3, 2, 2], f32>
  %1 = "kiln.matmul"(%x, %w3) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[3, 2, 2], f32>) -> !kiln.tensor<[3, "B", 2], f32>
  %w = "kiln.constant"() {value = dense<1.0> : tensor<2x2xf32>} : () -> !kiln.tensor<[2, 2], f32>
  %2 = "kiln.matmul"(%x, %w) {kiln.exact_integer} : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 2], f32>) -> !kiln.tensor<["B", 2], f32>
  %wh = "kiln.constant"() {value = dense<1.0> : tensor<2x2xf16>} : () -> !kiln.tensor<[2, 2], f16>
  %3 = "kiln.matmul"(%h, %wh) : (!kiln.tensor<["B", 2], f16>, !kiln.tensor<[2, 2], f16>) -> !kiln.tensor<["B", 2], f16>
  return %0, %1, %2, %3 : !kiln.tensor<["B", 2], f32>, !kiln.tensor<[3, "B", 2], f32>, !kiln.tensor<["B", 2], f32>, !kiln.tensor<["B", 2], f16>
}

// STATS: kiln-reduce-precision
// STATS-NEXT: (1) weights quantized to int8
// STATS-NEXT: (1) matmuls with int8 weights
// STATS: kiln-reduce-precision
// STATS-NEXT: (1) weights quantized to int8
// STATS-NEXT: (2) matmuls with int8 weights
// STATS: kiln-reduce-precision
// STATS-NEXT: (1) weights quantized to int8
// STATS-NEXT: (1) matmuls with int8 weights
