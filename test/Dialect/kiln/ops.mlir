// RUN: kiln-opt %s | FileCheck %s
// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// Round trip of every kiln op and type form.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64, opt = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
"kiln.symbol"() {sym_name = "H", min = 3 : i64, max = 1024 : i64, multiple_of = 1 : i64} : () -> ()
// CHECK: "kiln.symbol"() {max = 64 : i64, min = 1 : i64, opt = 8 : i64, sym_name = "B"} : () -> ()
// CHECK: "kiln.symbol"() {max = 512 : i64, min = 1 : i64, sym_name = "L"} : () -> ()
// CHECK: "kiln.symbol"() {max = 1024 : i64, min = 3 : i64, multiple_of = 1 : i64, sym_name = "H"} : () -> ()

// Type forms: static, symbol, product (canonical order), sum, floor division, rank 0.
// CHECK-LABEL: func.func @types$forms
// CHECK-SAME: !kiln.tensor<[4, 16], f32>
// CHECK-SAME: !kiln.tensor<["B", "L", 16], f16>
// CHECK-SAME: !kiln.tensor<["B*L", 16], bf16>
// CHECK-SAME: !kiln.tensor<["L+1"], i64>
// CHECK-SAME: !kiln.tensor<["(H-3)/2+1"], i1>
// CHECK-SAME: !kiln.tensor<[], f64>
func.func @types$forms(%a: !kiln.tensor<[4, 16], f32>, %b: !kiln.tensor<["B", "L", 16], f16>,
                       %c: !kiln.tensor<["L*B", 16], bf16>, %d: !kiln.tensor<["1+L"], i64>,
                       %e: !kiln.tensor<["(H-3)/2+1"], i1>, %f: !kiln.tensor<[], f64>) {
  return
}

// CHECK-LABEL: func.func @elementwise$binary
func.func @elementwise$binary(%x: !kiln.tensor<["B", 16], f32>, %y: !kiln.tensor<[16], f32>) {
  // CHECK: "kiln.add"(%arg0, %arg1) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16], f32>) -> !kiln.tensor<["B", 16], f32>
  %0 = "kiln.add"(%x, %y) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16], f32>) -> !kiln.tensor<["B", 16], f32>
  // CHECK: "kiln.sub"
  %1 = "kiln.sub"(%x, %y) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16], f32>) -> !kiln.tensor<["B", 16], f32>
  // CHECK: "kiln.mul"
  %2 = "kiln.mul"(%x, %x) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  // CHECK: "kiln.div"
  %3 = "kiln.div"(%x, %y) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16], f32>) -> !kiln.tensor<["B", 16], f32>
  // CHECK: "kiln.pow"
  %4 = "kiln.pow"(%x, %y) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16], f32>) -> !kiln.tensor<["B", 16], f32>
  // CHECK: "kiln.maximum"
  %5 = "kiln.maximum"(%x, %y) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16], f32>) -> !kiln.tensor<["B", 16], f32>
  // CHECK: "kiln.minimum"
  %6 = "kiln.minimum"(%x, %y) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16], f32>) -> !kiln.tensor<["B", 16], f32>
  return
}

// CHECK-LABEL: func.func @elementwise$broadcast_symbol_against_one
func.func @elementwise$broadcast_symbol_against_one(%x: !kiln.tensor<["B", 1], f32>, %y: !kiln.tensor<[1, "L"], f32>) {
  // CHECK: -> !kiln.tensor<["B", "L"], f32>
  %0 = "kiln.add"(%x, %y) : (!kiln.tensor<["B", 1], f32>, !kiln.tensor<[1, "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  return
}

// CHECK-LABEL: func.func @elementwise$compare
func.func @elementwise$compare(%x: !kiln.tensor<["B"], f32>, %y: !kiln.tensor<[1], f32>) {
  // CHECK: "kiln.eq"{{.*}} -> !kiln.tensor<["B"], i1>
  %0 = "kiln.eq"(%x, %y) : (!kiln.tensor<["B"], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B"], i1>
  // CHECK: "kiln.ne"
  %1 = "kiln.ne"(%x, %y) : (!kiln.tensor<["B"], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B"], i1>
  // CHECK: "kiln.lt"
  %2 = "kiln.lt"(%x, %y) : (!kiln.tensor<["B"], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B"], i1>
  // CHECK: "kiln.le"
  %3 = "kiln.le"(%x, %y) : (!kiln.tensor<["B"], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B"], i1>
  // CHECK: "kiln.gt"
  %4 = "kiln.gt"(%x, %y) : (!kiln.tensor<["B"], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B"], i1>
  // CHECK: "kiln.ge"
  %5 = "kiln.ge"(%x, %y) : (!kiln.tensor<["B"], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B"], i1>
  // CHECK: "kiln.where"(%0, %arg0, %arg1) : (!kiln.tensor<["B"], i1>, !kiln.tensor<["B"], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B"], f32>
  %6 = "kiln.where"(%0, %x, %y) : (!kiln.tensor<["B"], i1>, !kiln.tensor<["B"], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B"], f32>
  // CHECK: "kiln.cast"(%arg0) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f16>
  %7 = "kiln.cast"(%x) : (!kiln.tensor<["B"], f32>) -> !kiln.tensor<["B"], f16>
  return
}

// CHECK-LABEL: func.func @elementwise$unary
func.func @elementwise$unary(%x: !kiln.tensor<["B", "L"], f32>) {
  // CHECK: "kiln.neg"
  %0 = "kiln.neg"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.exp"
  %1 = "kiln.exp"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.log"
  %2 = "kiln.log"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.sqrt"
  %3 = "kiln.sqrt"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.rsqrt"
  %4 = "kiln.rsqrt"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.tanh"
  %5 = "kiln.tanh"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.sigmoid"
  %6 = "kiln.sigmoid"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.relu"
  %7 = "kiln.relu"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.gelu"(%arg0) : (
  %8 = "kiln.gelu"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.gelu"(%arg0) {approximate = "tanh"}
  %9 = "kiln.gelu"(%x) {approximate = "tanh"} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.silu"
  %10 = "kiln.silu"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.erf"
  %11 = "kiln.erf"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  // CHECK: "kiln.abs"
  %12 = "kiln.abs"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  return
}

// CHECK-LABEL: func.func @matmul$batched_broadcast
func.func @matmul$batched_broadcast(%a: !kiln.tensor<["B", "L", 64], f32>, %w: !kiln.tensor<[64, 256], f32>, %v: !kiln.tensor<[64], f32>) {
  // CHECK: "kiln.matmul"(%arg0, %arg1) : (!kiln.tensor<["B", "L", 64], f32>, !kiln.tensor<[64, 256], f32>) -> !kiln.tensor<["B", "L", 256], f32>
  %0 = "kiln.matmul"(%a, %w) : (!kiln.tensor<["B", "L", 64], f32>, !kiln.tensor<[64, 256], f32>) -> !kiln.tensor<["B", "L", 256], f32>
  // CHECK: "kiln.matmul"(%arg0, %arg2) : (!kiln.tensor<["B", "L", 64], f32>, !kiln.tensor<[64], f32>) -> !kiln.tensor<["B", "L"], f32>
  %1 = "kiln.matmul"(%a, %v) : (!kiln.tensor<["B", "L", 64], f32>, !kiln.tensor<[64], f32>) -> !kiln.tensor<["B", "L"], f32>
  return
}

// CHECK-LABEL: func.func @conv_pool$nchw
func.func @conv_pool$nchw(%x: !kiln.tensor<["B", 3, "H", "H"], f32>, %w: !kiln.tensor<[8, 3, 3, 3], f32>, %b: !kiln.tensor<[8], f32>) {
  // CHECK: "kiln.conv2d"(%arg0, %arg1, %arg2) {operandSegmentSizes = array<i32: 1, 1, 1>, pads = array<i64: 1, 1, 1, 1>} : {{.*}} -> !kiln.tensor<["B", 8, "H", "H"], f32>
  %0 = "kiln.conv2d"(%x, %w, %b) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["B", 3, "H", "H"], f32>, !kiln.tensor<[8, 3, 3, 3], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", 8, "H", "H"], f32>
  // CHECK: "kiln.conv2d"(%arg0, %arg1) {{.*}}strides = array<i64: 2, 2>{{.*}} -> !kiln.tensor<["B", 8, "(H-3)/2+1", "(H-3)/2+1"], f32>
  %1 = "kiln.conv2d"(%x, %w) {strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["B", 3, "H", "H"], f32>, !kiln.tensor<[8, 3, 3, 3], f32>) -> !kiln.tensor<["B", 8, "(H-3)/2+1", "(H-3)/2+1"], f32>
  // CHECK: "kiln.max_pool2d"(%0) {kernel = array<i64: 2, 2>} : {{.*}} -> !kiln.tensor<["B", 8, "(H-2)/2+1", "(H-2)/2+1"], f32>
  %2 = "kiln.max_pool2d"(%0) {kernel = array<i64: 2, 2>} : (!kiln.tensor<["B", 8, "H", "H"], f32>) -> !kiln.tensor<["B", 8, "(H-2)/2+1", "(H-2)/2+1"], f32>
  // CHECK: "kiln.avg_pool2d"(%0) {{.*}} -> !kiln.tensor<["B", 8, "H", "H"], f32>
  %3 = "kiln.avg_pool2d"(%0) {kernel = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>} : (!kiln.tensor<["B", 8, "H", "H"], f32>) -> !kiln.tensor<["B", 8, "H", "H"], f32>
  return
}

// CHECK-LABEL: func.func @reduce_norm$forms
func.func @reduce_norm$forms(%x: !kiln.tensor<["B", "L", 16], f32>, %g: !kiln.tensor<[16], f32>,
                             %y: !kiln.tensor<["B", 4, 8, 8], f32>, %c: !kiln.tensor<[4], f32>) {
  // CHECK: "kiln.reduce_sum"(%arg0) {axes = array<i64: -1>, keepdims = true} : {{.*}} -> !kiln.tensor<["B", "L", 1], f32>
  %0 = "kiln.reduce_sum"(%x) {axes = array<i64: -1>, keepdims = true} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", "L", 1], f32>
  // CHECK: "kiln.reduce_mean"(%arg0) {axes = array<i64: 1>} : {{.*}} -> !kiln.tensor<["B", 16], f32>
  %1 = "kiln.reduce_mean"(%x) {axes = array<i64: 1>} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  // CHECK: "kiln.reduce_max"(%arg0) : {{.*}} -> !kiln.tensor<[], f32>
  %2 = "kiln.reduce_max"(%x) : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<[], f32>
  // CHECK: "kiln.softmax"(%arg0) {axis = -1 : i64}
  %3 = "kiln.softmax"(%x) {axis = -1 : i64} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  // CHECK: "kiln.layer_norm"(%arg0, %arg1, %arg1) {epsilon = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 1>}
  %4 = "kiln.layer_norm"(%x, %g, %g) {epsilon = 1.0e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["B", "L", 16], f32>, !kiln.tensor<[16], f32>, !kiln.tensor<[16], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  // CHECK: "kiln.layer_norm"(%arg0) {operandSegmentSizes = array<i32: 1, 0, 0>}
  %5 = "kiln.layer_norm"(%x) {operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  // CHECK: "kiln.batch_norm"(%arg2, %arg3, %arg3, %arg3, %arg3) {epsilon = 1.000000e-03 : f64}
  %6 = "kiln.batch_norm"(%y, %c, %c, %c, %c) {epsilon = 1.0e-03 : f64} : (!kiln.tensor<["B", 4, 8, 8], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["B", 4, 8, 8], f32>
  return
}

// CHECK-LABEL: func.func @attention$causal_and_masked
func.func @attention$causal_and_masked(%q: !kiln.tensor<["B", 4, "L", 32], f32>, %m: !kiln.tensor<["B", 1, "L", "L"], f32>) {
  // CHECK: "kiln.attention"(%arg0, %arg0, %arg0) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : {{.*}} -> !kiln.tensor<["B", 4, "L", 32], f32>
  %0 = "kiln.attention"(%q, %q, %q) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 4, "L", 32], f32>, !kiln.tensor<["B", 4, "L", 32], f32>, !kiln.tensor<["B", 4, "L", 32], f32>) -> !kiln.tensor<["B", 4, "L", 32], f32>
  // CHECK: "kiln.attention"(%arg0, %arg0, %arg0, %arg1) {operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 1.250000e-01 : f64}
  %1 = "kiln.attention"(%q, %q, %q, %m) {scale = 0.125 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1>} : (!kiln.tensor<["B", 4, "L", 32], f32>, !kiln.tensor<["B", 4, "L", 32], f32>, !kiln.tensor<["B", 4, "L", 32], f32>, !kiln.tensor<["B", 1, "L", "L"], f32>) -> !kiln.tensor<["B", 4, "L", 32], f32>
  return
}

// CHECK-LABEL: func.func @packed_attention
func.func @packed_attention(%x: !kiln.tensor<["B", "L", 48], f32>) {
  // CHECK: "kiln.packed_attention"(%arg0) {causal = true, heads = 2 : i64} : (!kiln.tensor<["B", "L", 48], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  %0 = "kiln.packed_attention"(%x) {causal = true, heads = 2 : i64} : (!kiln.tensor<["B", "L", 48], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  return
}

// CHECK-LABEL: func.func @data$movement
func.func @data$movement(%x: !kiln.tensor<["B", "L", 16], f32>, %t: !kiln.tensor<[100, 16], f32>, %i: !kiln.tensor<["B", "L"], i64>) {
  // CHECK: "kiln.reshape"(%arg0) {shape = ["B*L", 16]} : {{.*}} -> !kiln.tensor<["B*L", 16], f32>
  %0 = "kiln.reshape"(%x) {shape = ["L*B", 16]} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B*L", 16], f32>
  // CHECK: "kiln.reshape"(%0) {shape = ["B", "L", 16]} : (!kiln.tensor<["B*L", 16], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  %1 = "kiln.reshape"(%0) {shape = ["B", "L", 16]} : (!kiln.tensor<["B*L", 16], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  // CHECK: "kiln.transpose"(%arg0) {perm = array<i64: 0, 2, 1>} : {{.*}} -> !kiln.tensor<["B", 16, "L"], f32>
  %2 = "kiln.transpose"(%x) {perm = array<i64: 0, 2, 1>} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", 16, "L"], f32>
  // CHECK: "kiln.concat"(%arg0, %arg0) {axis = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : {{.*}} -> !kiln.tensor<["B", "2*L", 16], f32>
  %3 = "kiln.concat"(%x, %x) {axis = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (!kiln.tensor<["B", "L", 16], f32>, !kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", "2*L", 16], f32>
  // CHECK: "kiln.slice"(%arg0) {{.*}} -> !kiln.tensor<["B", "L-1", 8], f32>
  %4 = "kiln.slice"(%x) {starts = array<i64: 1, 0>, ends = array<i64: 4611686018427387904, 16>, axes = array<i64: 1, 2>, steps = array<i64: 1, 2>} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", "L-1", 8], f32>
  // CHECK: "kiln.gather"(%arg1, %arg2) {axis = 0 : i64} : {{.*}} -> !kiln.tensor<["B", "L", 16], f32>
  %5 = "kiln.gather"(%t, %i) {axis = 0 : i64} : (!kiln.tensor<[100, 16], f32>, !kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L", 16], f32>
  // CHECK: "kiln.expand"(%{{.*}}) {shape = ["B", "L", 16]} : (!kiln.tensor<[1, 1, 16], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  %c = "kiln.constant"() {value = dense<1.0> : tensor<1x1x16xf32>} : () -> !kiln.tensor<[1, 1, 16], f32>
  %6 = "kiln.expand"(%c) {shape = ["B", "L", 16]} : (!kiln.tensor<[1, 1, 16], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  // CHECK: "kiln.pad"(%arg0) {pads = array<i64: 0, 1, 0, 0, 2, 0>, value = 0.000000e+00 : f64} : {{.*}} -> !kiln.tensor<["B", "L+3", 16], f32>
  %7 = "kiln.pad"(%x) {pads = array<i64: 0, 1, 0, 0, 2, 0>, value = 0.0 : f64} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", "L+3", 16], f32>
  return
}

// CHECK-LABEL: func.func @index$range_gather_elements_trig
func.func @index$range_gather_elements_trig(%d: !kiln.tensor<["B", 128], i64>, %x: !kiln.tensor<["L", 16], f32>) {
  // CHECK: "kiln.range"() {shape = ["L"], start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : () -> !kiln.tensor<["L"], i64>
  %0 = "kiln.range"() {shape = ["L"], start = 0.0 : f64, step = 1.0 : f64} : () -> !kiln.tensor<["L"], i64>
  %1 = "kiln.reshape"(%0) {shape = [1, "L"]} : (!kiln.tensor<["L"], i64>) -> !kiln.tensor<[1, "L"], i64>
  %2 = "kiln.expand"(%1) {shape = ["B", "L"]} : (!kiln.tensor<[1, "L"], i64>) -> !kiln.tensor<["B", "L"], i64>
  // CHECK: "kiln.gather_elements"(%arg0, %{{.*}}) {axis = 1 : i64} : (!kiln.tensor<["B", 128], i64>, !kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L"], i64>
  %3 = "kiln.gather_elements"(%d, %2) {axis = 1 : i64} : (!kiln.tensor<["B", 128], i64>, !kiln.tensor<["B", "L"], i64>) -> !kiln.tensor<["B", "L"], i64>
  // CHECK: "kiln.cos"
  %4 = "kiln.cos"(%x) : (!kiln.tensor<["L", 16], f32>) -> !kiln.tensor<["L", 16], f32>
  // CHECK: "kiln.sin"
  %5 = "kiln.sin"(%x) : (!kiln.tensor<["L", 16], f32>) -> !kiln.tensor<["L", 16], f32>
  return
}

// CHECK-LABEL: func.func @constant$dense_and_resource
func.func @constant$dense_and_resource() {
  // CHECK: "kiln.constant"() {value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  %0 = "kiln.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  // CHECK: "kiln.constant"() {value = dense_resource<w0> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  %1 = "kiln.constant"() {value = dense_resource<w0> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  return
}

// CHECK-LABEL: func.func @fallback$two_results
func.func @fallback$two_results(%x: !kiln.tensor<["B", 16], f32>) {
  // CHECK: "kiln.fallback"(%arg0) {attrs = {dim = 1 : i64}, op_name = "aten.max.dim", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0>} : (!kiln.tensor<["B", 16], f32>) -> (!kiln.tensor<["B"], f32>, !kiln.tensor<["B"], i64>)
  %0:2 = "kiln.fallback"(%x) {op_name = "aten.max.dim", attrs = {dim = 1 : i64}, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0>} : (!kiln.tensor<["B", 16], f32>) -> (!kiln.tensor<["B"], f32>, !kiln.tensor<["B"], i64>)
  return
}

{-#
  dialect_resources: {
    builtin: {
      w0: "0x040000000000803F00000040"
    }
  }
#-}
