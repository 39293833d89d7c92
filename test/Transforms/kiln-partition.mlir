// RUN: kiln-opt %s --split-input-file --kiln-partition | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-partition='fuse=false' | FileCheck %s --check-prefix=NOFUSE
// RUN: kiln-opt %s --split-input-file --kiln-partition='inline-constants=false' | FileCheck %s --check-prefix=ARGS
// RUN: kiln-opt %s --split-input-file --kiln-partition='inline-limit=16' | FileCheck %s --check-prefix=LIMIT
// RUN: kiln-opt %s --split-input-file --kiln-partition --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS
// RUN: kiln-opt %s --split-input-file --kiln-partition --kiln-partition | FileCheck %s --check-prefix=TWICE

// matmul + bias + relu is one kernel; the fallback op is a kernel of its own;
// softmax takes the mul that follows it.  The constant is copied into the
// kernel using it (and leaves the schedule).
// CHECK-LABEL: func.func @mlp$epilogue
// CHECK-SAME: kiln.schedule = ["mlp$epilogue_k0", "mlp$epilogue_k1", "mlp$epilogue_k2"]
// CHECK-NEXT: %[[K0:.*]] = call @mlp$epilogue_k0(%arg0, %arg1)
// CHECK-NEXT: %[[K1:.*]] = call @mlp$epilogue_k1(%[[K0]])
// CHECK-NEXT: %[[K2:.*]] = call @mlp$epilogue_k2(%[[K1]], %[[K0]])
// CHECK-NEXT: return %[[K2]]
// CHECK: func.func private @mlp$epilogue_k0(%arg0: !kiln.tensor<["B", 16], f32>, %arg1: !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
// CHECK-SAME: kiln.group = "matmul", kiln.kernel = "generated", kiln.ops = ["kiln.matmul", "kiln.add", "kiln.relu"]
// CHECK-NEXT: %[[C:.*]] = "kiln.constant"()
// CHECK-NEXT: %[[M:.*]] = "kiln.matmul"(%arg0, %arg1)
// CHECK-NEXT: %[[A:.*]] = "kiln.add"(%[[M]], %[[C]])
// CHECK-NEXT: %[[R:.*]] = "kiln.relu"(%[[A]])
// CHECK-NEXT: return %[[R]]
// CHECK: func.func private @mlp$epilogue_k1
// CHECK-SAME: kiln.group = "fallback", kiln.kernel = "fallback", kiln.ops = ["kiln.fallback"]
// CHECK-NEXT: "kiln.fallback"(%arg0) {op_name = "aten.special_bessel_j0.default"
// CHECK: func.func private @mlp$epilogue_k2
// CHECK-SAME: kiln.group = "softmax", kiln.kernel = "generated", kiln.ops = ["kiln.softmax", "kiln.mul"]
// Without inline-constants the constant stays in the schedule and is an argument.
// ARGS-LABEL: func.func @mlp$epilogue
// ARGS-NEXT: %[[C:.*]] = "kiln.constant"()
// ARGS-NEXT: call @mlp$epilogue_k0(%arg0, %arg1, %[[C]])
// ARGS: func.func private @mlp$epilogue_k0(%arg0: !kiln.tensor<["B", 16], f32>, %arg1: !kiln.tensor<[16, 32], f32>, %arg2: !kiln.tensor<[32], f32>)
// ARGS-NEXT: "kiln.matmul"(%arg0, %arg1)
// NOFUSE-LABEL: func.func @mlp$epilogue
// NOFUSE-SAME: kiln.schedule = ["mlp$epilogue_k0", "mlp$epilogue_k1", "mlp$epilogue_k2", "mlp$epilogue_k3", "mlp$epilogue_k4", "mlp$epilogue_k5"]
// NOFUSE-COUNT-6: func.func private
// STATS: kiln-partition
// STATS-NEXT: (3) kernels
// STATS-NEXT: (1) fallback kernels
// A partitioned function is a schedule already: a second run leaves it alone.
// TWICE-LABEL: func.func @mlp$epilogue
// TWICE-COUNT-3: func.func private
// TWICE-NOT: func.func private
// TWICE: {{^// -----}}
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64, opt = 8 : i64} : () -> ()
func.func @mlp$epilogue(%x: !kiln.tensor<["B", 16], f32>, %w: !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32> {
  %b = "kiln.constant"() {value = dense<1.0> : tensor<32xf32>} : () -> !kiln.tensor<[32], f32>
  %0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %1 = "kiln.add"(%0, %b) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<["B", 32], f32>
  %2 = "kiln.relu"(%1) : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %3 = "kiln.fallback"(%2) {op_name = "aten.special_bessel_j0.default", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %4 = "kiln.softmax"(%3) {axis = -1 : i64} : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %5 = "kiln.mul"(%4, %2) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  return %5 : !kiln.tensor<["B", 32], f32>
}

// -----

// A kiln.fused group (from kiln-fuse) is one kernel: its body is inlined
// into the kernel function and its kind becomes kiln.group.  A value used
// both inside a group and later is an output of the group's kernel.
// CHECK-LABEL: func.func @fused$matmul_epilogue
// CHECK-NEXT: %[[F:.*]] = call @fused$matmul_epilogue_k0(%arg0, %arg1, %arg2)
// CHECK-NEXT: %[[E:.*]]:2 = call @fused$matmul_epilogue_k1(%[[F]])
// CHECK-NEXT: %[[D:.*]] = call @fused$matmul_epilogue_k2(%[[E]]#1, %[[E]]#0)
// CHECK-NEXT: return %[[D]]
// CHECK: func.func private @fused$matmul_epilogue_k0(%arg0: !kiln.tensor<["B", 64], f32>, %arg1: !kiln.tensor<[64, 256], f32>, %arg2: !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", 256], f32>
// CHECK-SAME: kiln.group = "matmul_epilogue", kiln.kernel = "generated", kiln.ops = ["kiln.matmul", "kiln.add", "kiln.gelu"]
// CHECK-NEXT: "kiln.matmul"(%arg0, %arg1)
// CHECK-NOT: kiln.fused
// CHECK: func.func private @fused$matmul_epilogue_k1(%arg0: !kiln.tensor<["B", 256], f32>) -> (!kiln.tensor<["B", 256], f32>, !kiln.tensor<["B", 256], f32>)
// CHECK-SAME: kiln.group = "elementwise", kiln.kernel = "generated", kiln.ops = ["kiln.exp", "kiln.neg"]
// CHECK: func.func private @fused$matmul_epilogue_k2
// CHECK-SAME: kiln.group = "reduce_sum"
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @fused$matmul_epilogue(%x: !kiln.tensor<["B", 64], f32>, %w: !kiln.tensor<[64, 256], f32>, %b: !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", 256], f32> {
  %r = "kiln.fused"(%x, %w, %b) ({
  ^bb0(%a: !kiln.tensor<["B", 64], f32>, %bw: !kiln.tensor<[64, 256], f32>, %bb: !kiln.tensor<[256], f32>):
    %0 = "kiln.matmul"(%a, %bw) : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64, 256], f32>) -> !kiln.tensor<["B", 256], f32>
    %1 = "kiln.add"(%0, %bb) : (!kiln.tensor<["B", 256], f32>, !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", 256], f32>
    %2 = "kiln.gelu"(%1) : (!kiln.tensor<["B", 256], f32>) -> !kiln.tensor<["B", 256], f32>
    "kiln.yield"(%2) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 256], f32>) -> ()
  }) {kind = "matmul_epilogue", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64, 256], f32>, !kiln.tensor<[256], f32>) -> !kiln.tensor<["B", 256], f32>
  %e = "kiln.exp"(%r) : (!kiln.tensor<["B", 256], f32>) -> !kiln.tensor<["B", 256], f32>
  %n = "kiln.neg"(%e) : (!kiln.tensor<["B", 256], f32>) -> !kiln.tensor<["B", 256], f32>
  %s = "kiln.reduce_sum"(%n) {axes = array<i64: 1>, keepdims = true} : (!kiln.tensor<["B", 256], f32>) -> !kiln.tensor<["B", 1], f32>
  %d = "kiln.add"(%s, %e) : (!kiln.tensor<["B", 1], f32>, !kiln.tensor<["B", 256], f32>) -> !kiln.tensor<["B", 256], f32>
  return %d : !kiln.tensor<["B", 256], f32>
}

// -----

// A kernel reading only [B*L, 16] cannot recover B and L for its result
// [B, L, 4, 4]: it is merged with the kernel before it.
// CHECK-LABEL: func.func @reshape$symbols
// CHECK-SAME: kiln.schedule = ["reshape$symbols_k0"]
// CHECK: func.func private @reshape$symbols_k0
// CHECK-SAME: kiln.group = "reshape+reshape", kiln.kernel = "generated", kiln.ops = ["kiln.reshape", "kiln.reshape"]
// STATS: kiln-partition
// STATS: (1) kernels merged for symbols
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
func.func @reshape$symbols(%x: !kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", "L", 4, 4], f32> {
  %0 = "kiln.reshape"(%x) {shape = ["B*L", 16]} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B*L", 16], f32>
  %1 = "kiln.reshape"(%0) {shape = ["B", "L", 4, 4]} : (!kiln.tensor<["B*L", 16], f32>) -> !kiln.tensor<["B", "L", 4, 4], f32>
  return %1 : !kiln.tensor<["B", "L", 4, 4], f32>
}

// -----

// A kernel over a symbol that none of its inputs carries, with only fallback
// kernels beside it to merge with (a position range over B in a decoder's
// mask): the function argument that carries B becomes one more input.
// CHECK-LABEL: func.func @range$symbol_argument
// CHECK-NEXT: %[[F:.*]] = call @range$symbol_argument_k0(%arg0)
// CHECK-NEXT: %[[R:.*]] = call @range$symbol_argument_k1(%arg0)
// CHECK-NEXT: call @range$symbol_argument_k2(%[[R]], %[[F]])
// CHECK: func.func private @range$symbol_argument_k1(%arg0: !kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B"], f32>
// CHECK-SAME: kiln.group = "range", kiln.kernel = "generated"
// CHECK-NEXT: "kiln.range"()
// STATS: kiln-partition
// STATS: (1) symbol arguments added
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
func.func @range$symbol_argument(%x: !kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B"], f32> {
  %f = "kiln.fallback"(%x) {op_name = "aten.special_bessel_j0.default", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  %r = "kiln.range"() {shape = ["B"], start = 0.000000e+00 : f64, step = 1.000000e+00 : f64} : () -> !kiln.tensor<["B"], f32>
  %g = "kiln.fallback"(%r, %f) {op_name = "aten.special_bessel_j0.default", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B"], f32>, !kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B"], f32>
  return %g : !kiln.tensor<["B"], f32>
}

// -----

// A weight transposed by kiln.transpose (nn.Linear's W^T when
// kiln-fold-constants left it: past its size limit) that only products read,
// directly or in a kiln.fused body, is no kernel of its own: each product's
// kernel gets a copy of it and of its constant, as of a constant (the
// lowering reads W through the product's map).  A kernel reading a weight
// both transposed and as it is (a tied embedding) gets one copy of it.
// CHECK-LABEL: func.func @linear$weight_transpose
// CHECK-SAME: kiln.schedule = ["linear$weight_transpose_k0", "linear$weight_transpose_k1"]
// CHECK-NEXT: %[[K0:.*]] = call @linear$weight_transpose_k0(%arg0)
// CHECK-NEXT: %[[K1:.*]] = call @linear$weight_transpose_k1(%[[K0]])
// CHECK-NEXT: return %[[K1]]
// CHECK: func.func private @linear$weight_transpose_k0(%arg0: !kiln.tensor<["B", 16], f32>)
// CHECK-SAME: kiln.ops = ["kiln.matmul"]
// CHECK-NEXT: %[[W:.*]] = "kiln.constant"() {value = dense<5.000000e-01> : tensor<32x16xf32>}
// CHECK-NEXT: %[[T:.*]] = "kiln.transpose"(%[[W]]) {perm = array<i64: 1, 0>}
// CHECK-NEXT: "kiln.matmul"(%arg0, %[[T]])
// CHECK: func.func private @linear$weight_transpose_k1(%arg0: !kiln.tensor<["B", 32], f32>)
// CHECK-SAME: kiln.group = "matmul_epilogue"
// CHECK-NEXT: %[[W2:.*]] = "kiln.constant"() {value = dense<2.500000e-01> : tensor<16x32xf32>}
// CHECK-NEXT: %[[T2:.*]] = "kiln.transpose"(%[[W2]])
// CHECK-NOT: "kiln.constant"
// CHECK: "kiln.matmul"(%arg0, %[[T2]])
// CHECK: "kiln.matmul"(%{{.*}}, %[[W2]])
// Without inline-constants the transpose is a kernel of its own (the
// runtime runs it once at load).
// ARGS-LABEL: func.func @linear$weight_transpose
// ARGS: call @linear$weight_transpose_k0(%{{.*}}) : (!kiln.tensor<[32, 16], f32>) -> !kiln.tensor<[16, 32], f32>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @linear$weight_transpose(%x: !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 32], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<32x16xf32>} : () -> !kiln.tensor<[32, 16], f32>
  %w2 = "kiln.constant"() {value = dense<0.25> : tensor<16x32xf32>} : () -> !kiln.tensor<[16, 32], f32>
  %t = "kiln.transpose"(%w) {perm = array<i64: 1, 0>} : (!kiln.tensor<[32, 16], f32>) -> !kiln.tensor<[16, 32], f32>
  %t2 = "kiln.transpose"(%w2) {perm = array<i64: 1, 0>} : (!kiln.tensor<[16, 32], f32>) -> !kiln.tensor<[32, 16], f32>
  %0 = "kiln.matmul"(%x, %t) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %1 = "kiln.fused"(%0, %t2, %w2) ({
  ^bb0(%a: !kiln.tensor<["B", 32], f32>, %bt: !kiln.tensor<[32, 16], f32>, %bw: !kiln.tensor<[16, 32], f32>):
    %m = "kiln.matmul"(%a, %bt) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[32, 16], f32>) -> !kiln.tensor<["B", 16], f32>
    %r = "kiln.relu"(%m) : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
    %m2 = "kiln.matmul"(%r, %bw) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
    "kiln.yield"(%m2) {operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 32], f32>) -> ()
  }) {kind = "matmul_epilogue", operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[32, 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  return %1 : !kiln.tensor<["B", 32], f32>
}

// -----

// A transposed constant that something else than a product reads keeps its
// kernel (the runtime runs it once at load).
// CHECK-LABEL: func.func @transpose$not_only_products
// CHECK-SAME: kiln.schedule = ["transpose$not_only_products_k0", "transpose$not_only_products_k1"]
// CHECK: func.func private @transpose$not_only_products_k0()
// CHECK-SAME: kiln.ops = ["kiln.transpose"]
func.func @transpose$not_only_products(%x: !kiln.tensor<[16, 16], f32>) -> !kiln.tensor<[16, 16], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<16x16xf32>} : () -> !kiln.tensor<[16, 16], f32>
  %t = "kiln.transpose"(%w) {perm = array<i64: 1, 0>} : (!kiln.tensor<[16, 16], f32>) -> !kiln.tensor<[16, 16], f32>
  %0 = "kiln.matmul"(%x, %t) : (!kiln.tensor<[16, 16], f32>, !kiln.tensor<[16, 16], f32>) -> !kiln.tensor<[16, 16], f32>
  %1 = "kiln.add"(%0, %t) : (!kiln.tensor<[16, 16], f32>, !kiln.tensor<[16, 16], f32>) -> !kiln.tensor<[16, 16], f32>
  return %1 : !kiln.tensor<[16, 16], f32>
}

// -----

// Past inline-limit a constant stays in the schedule and is an argument the
// kernel lists in kiln.weights (a splat is copied whatever its size); a
// weight transpose is still copied into the product's kernel, reading its
// constant there.  Under the default limit (64 bytes) all are copied.
// LIMIT-LABEL: func.func @weights$past_limit
// LIMIT-NEXT: %[[W:.*]] = "kiln.constant"() {value = dense<{{\[}}[1.000000e+00, 2.000000e+00], [3.000000e+00
// LIMIT-NEXT: %[[V:.*]] = "kiln.constant"() {value = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00, 5.000000e+00]>
// LIMIT-NEXT: call @weights$past_limit_k0(%arg0, %[[W]])
// LIMIT-NEXT: call @weights$past_limit_k1(%[[V]])
// LIMIT-NEXT: call @weights$past_limit_k2()
// LIMIT: func.func private @weights$past_limit_k0(%arg0: !kiln.tensor<["B", 2], f32>, %arg1: !kiln.tensor<[4, 2], f32>)
// LIMIT-SAME: kiln.weights = array<i64: 1>
// LIMIT-NEXT: %[[T:.*]] = "kiln.transpose"(%arg1) {perm = array<i64: 1, 0>}
// LIMIT-NEXT: %[[S:.*]] = "kiln.constant"() {value = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]>
// LIMIT-NEXT: %[[M:.*]] = "kiln.matmul"(%arg0, %[[T]])
// LIMIT-NEXT: "kiln.add"(%[[M]], %[[S]])
// LIMIT: func.func private @weights$past_limit_k1(%arg0: !kiln.tensor<[5], f32>)
// LIMIT-SAME: kiln.weights = array<i64: 0>
// LIMIT: func.func private @weights$past_limit_k2()
// LIMIT-NOT: kiln.weights
// LIMIT-NEXT: "kiln.constant"() {value = dense<5.000000e-01> : tensor<64xf32>}
// CHECK-LABEL: func.func @weights$past_limit
// CHECK-NEXT: call @weights$past_limit_k0(%arg0)
// CHECK-NOT: kiln.weights
// ARGS-LABEL: func.func @weights$past_limit
// ARGS: func.func private @weights$past_limit_k0(%arg0: !kiln.tensor<[4, 2], f32>)
// ARGS-SAME: kiln.ops = ["kiln.transpose"], kiln.weights = array<i64: 0>
// ARGS: func.func private @weights$past_limit_k1(%arg0: !kiln.tensor<["B", 2], f32>, %arg1: !kiln.tensor<[2, 4], f32>, %arg2: !kiln.tensor<[4], f32>)
// ARGS-SAME: kiln.weights = array<i64: 2>
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @weights$past_limit(%x: !kiln.tensor<["B", 2], f32>) -> (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[5], f32>, !kiln.tensor<[64], f32>) {
  %w = "kiln.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]> : tensor<4x2xf32>} : () -> !kiln.tensor<[4, 2], f32>
  %s = "kiln.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %v = "kiln.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<5xf32>} : () -> !kiln.tensor<[5], f32>
  %z = "kiln.constant"() {value = dense<0.5> : tensor<64xf32>} : () -> !kiln.tensor<[64], f32>
  %t = "kiln.transpose"(%w) {perm = array<i64: 1, 0>} : (!kiln.tensor<[4, 2], f32>) -> !kiln.tensor<[2, 4], f32>
  %0 = "kiln.matmul"(%x, %t) : (!kiln.tensor<["B", 2], f32>, !kiln.tensor<[2, 4], f32>) -> !kiln.tensor<["B", 4], f32>
  %1 = "kiln.add"(%0, %s) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["B", 4], f32>
  %2 = "kiln.mul"(%v, %v) : (!kiln.tensor<[5], f32>, !kiln.tensor<[5], f32>) -> !kiln.tensor<[5], f32>
  %3 = "kiln.add"(%z, %z) : (!kiln.tensor<[64], f32>, !kiln.tensor<[64], f32>) -> !kiln.tensor<[64], f32>
  return %1, %2, %3 : !kiln.tensor<["B", 4], f32>, !kiln.tensor<[5], f32>, !kiln.tensor<[64], f32>
}
