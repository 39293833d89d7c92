// RUN: kiln-opt %s --split-input-file --kiln-fuse | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-fuse --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS
// RUN: kiln-opt %s --split-input-file --kiln-fuse='kinds=elementwise' | FileCheck %s --check-prefix=EW
// RUN: kiln-opt %s --split-input-file --kiln-fuse='kinds=elementwise,matmul_epilogue,conv_epilogue,reduction' | FileCheck %s --check-prefix=ONE

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// matmul + bias + GELU, and matmul + bias + scale with a dynamic batch: two
// matmul_epilogue kernels; the weights and the bias stay inputs, the scalar
// constant moves in.
// CHECK-LABEL: func.func @mlp$dynamic
// CHECK: %[[W1:.*]] = "kiln.constant"() {{.*}} -> !kiln.tensor<[16, 32], f32>
// CHECK: %[[B1:.*]] = "kiln.constant"() {{.*}} -> !kiln.tensor<[32], f32>
// CHECK: %[[H:.*]] = "kiln.fused"(%arg0, %[[W1]], %[[B1]]) ({
// CHECK-NEXT: ^bb0(%[[X:.*]]: !kiln.tensor<["B", 16], f32>, %[[W:.*]]: !kiln.tensor<[16, 32], f32>, %[[B:.*]]: !kiln.tensor<[32], f32>):
// CHECK-NEXT: %[[M:.*]] = "kiln.matmul"(%[[X]], %[[W]])
// CHECK-NEXT: %[[S:.*]] = "kiln.add"(%[[M]], %[[B]])
// CHECK-NEXT: %[[G:.*]] = "kiln.gelu"(%[[S]])
// CHECK-NEXT: "kiln.yield"(%[[G]])
// CHECK-NEXT: }) {kind = "matmul_epilogue"
// CHECK: %[[O:.*]] = "kiln.fused"(%[[H]], %{{.*}}, %{{.*}}) ({
// CHECK: "kiln.constant"() {value = dense<5.000000e-01> : tensor<f32>}
// CHECK-NEXT: "kiln.matmul"
// CHECK-NEXT: "kiln.add"
// CHECK-NEXT: "kiln.mul"
// CHECK-NEXT: "kiln.yield"
// CHECK-NEXT: }) {kind = "matmul_epilogue"
// CHECK: return %[[O]]
// STATS: kiln-fuse
// STATS-NEXT: (2) groups fused
// STATS-NEXT: (6) ops fused
// STATS-NEXT: (2) matmul_epilogue groups
// Without the matmul rule the epilogues are elementwise kernels of their own.
// EW-LABEL: func.func @mlp$dynamic
// EW: "kiln.matmul"
// EW-NEXT: "kiln.fused"
// EW-NEXT: ^bb0
// EW-NEXT: "kiln.add"
// EW-NEXT: "kiln.gelu"
// EW-NEXT: "kiln.yield"
// EW-NEXT: }) {kind = "elementwise"
// EW-NEXT: "kiln.matmul"
// EW-NEXT: "kiln.fused"
// EW: return
func.func @mlp$dynamic(%x: !kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 8], f32> {
  %w1 = "kiln.constant"() {value = dense<0.5> : tensor<16x32xf32>} : () -> !kiln.tensor<[16, 32], f32>
  %b1 = "kiln.constant"() {value = dense<0.25> : tensor<32xf32>} : () -> !kiln.tensor<[32], f32>
  %w2 = "kiln.constant"() {value = dense<0.5> : tensor<32x8xf32>} : () -> !kiln.tensor<[32, 8], f32>
  %b2 = "kiln.constant"() {value = dense<0.25> : tensor<8xf32>} : () -> !kiln.tensor<[8], f32>
  %half = "kiln.constant"() {value = dense<0.5> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %h = "kiln.matmul"(%x, %w1) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %hb = "kiln.add"(%h, %b1) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[32], f32>) -> !kiln.tensor<["B", 32], f32>
  %g = "kiln.gelu"(%hb) : (!kiln.tensor<["B", 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %o = "kiln.matmul"(%g, %w2) : (!kiln.tensor<["B", 32], f32>, !kiln.tensor<[32, 8], f32>) -> !kiln.tensor<["B", 8], f32>
  %ob = "kiln.add"(%o, %b2) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", 8], f32>
  %s = "kiln.mul"(%ob, %half) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<["B", 8], f32>
  return %s : !kiln.tensor<["B", 8], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// softmax with its prologue (scale, mask) and epilogue; layer_norm with its
// weight and a residual add as epilogue.  An intermediate used outside the
// group becomes a second result.
// CHECK-LABEL: func.func @reductions$dynamic
// CHECK: %[[P:.*]] = "kiln.fused"(%arg0, %arg1) ({
// CHECK: "kiln.mul"
// CHECK-NEXT: "kiln.add"
// CHECK-NEXT: "kiln.softmax"
// CHECK-NEXT: "kiln.exp"
// CHECK-NEXT: "kiln.yield"
// CHECK-NEXT: }) {kind = "reduction"
// CHECK: %[[N:.*]]:2 = "kiln.fused"(%[[P]], %arg2) ({
// CHECK-NEXT: ^bb0
// CHECK-NEXT: %[[LN:.*]] = "kiln.layer_norm"
// CHECK-NEXT: %[[R:.*]] = "kiln.add"(%[[LN]],
// CHECK-NEXT: "kiln.yield"(%[[LN]], %[[R]])
// CHECK-NEXT: }) {kind = "reduction"
// CHECK: return %[[N]]#1, %[[N]]#0
// EW-LABEL: func.func @reductions$dynamic
// EW: "kiln.fused"
// EW-NEXT: ^bb0
// EW-NEXT: "kiln.constant"
// EW-NEXT: "kiln.mul"
// EW-NEXT: "kiln.add"
// EW-NEXT: "kiln.yield"
// EW-NEXT: }) {kind = "elementwise"
// EW-NOT: "kiln.fused"
// EW: return
func.func @reductions$dynamic(%x: !kiln.tensor<["B", "L", "L"], f32>, %mask: !kiln.tensor<["L", "L"], f32>, %g: !kiln.tensor<["L"], f32>) -> (!kiln.tensor<["B", "L", "L"], f32>, !kiln.tensor<["B", "L", "L"], f32>) {
  %scale = "kiln.constant"() {value = dense<0.125> : tensor<1xf32>} : () -> !kiln.tensor<[1], f32>
  %a = "kiln.mul"(%x, %scale) : (!kiln.tensor<["B", "L", "L"], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B", "L", "L"], f32>
  %b = "kiln.add"(%a, %mask) : (!kiln.tensor<["B", "L", "L"], f32>, !kiln.tensor<["L", "L"], f32>) -> !kiln.tensor<["B", "L", "L"], f32>
  %p = "kiln.softmax"(%b) : (!kiln.tensor<["B", "L", "L"], f32>) -> !kiln.tensor<["B", "L", "L"], f32>
  %e = "kiln.exp"(%p) : (!kiln.tensor<["B", "L", "L"], f32>) -> !kiln.tensor<["B", "L", "L"], f32>
  %n = "kiln.layer_norm"(%e, %g) {operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["B", "L", "L"], f32>, !kiln.tensor<["L"], f32>) -> !kiln.tensor<["B", "L", "L"], f32>
  %r = "kiln.add"(%n, %e) : (!kiln.tensor<["B", "L", "L"], f32>, !kiln.tensor<["B", "L", "L"], f32>) -> !kiln.tensor<["B", "L", "L"], f32>
  return %r, %n : !kiln.tensor<["B", "L", "L"], f32>, !kiln.tensor<["B", "L", "L"], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// An elementwise tree (two chains meeting in a where) is one kernel.
// CHECK-LABEL: func.func @elementwise
// CHECK: "kiln.fused"(%arg0, %arg1) ({
// CHECK-NEXT: ^bb0
// CHECK-NEXT: "kiln.constant"() {value = dense<0.000000e+00> : tensor<f32>}
// CHECK-NEXT: "kiln.neg"
// CHECK-NEXT: "kiln.exp"
// CHECK-NEXT: "kiln.gt"
// CHECK-NEXT: "kiln.where"
// CHECK-NEXT: "kiln.yield"
// CHECK-NEXT: }) {kind = "elementwise"
// CHECK-NOT: "kiln.fused"
// STATS: (1) elementwise groups
func.func @elementwise(%x: !kiln.tensor<["B", 4], f32>, %y: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32> {
  %zero = "kiln.constant"() {value = dense<0.0> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %n = "kiln.neg"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  %e = "kiln.exp"(%y) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  %c = "kiln.gt"(%x, %zero) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<["B", 4], i1>
  %w = "kiln.where"(%c, %n, %e) : (!kiln.tensor<["B", 4], i1>, !kiln.tensor<["B", 4], f32>, !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  return %w : !kiln.tensor<["B", 4], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// Negative: lone ops stay; a reduction after a matmul is not an epilogue; a
// bias that broadcasts the matmul result to a bigger shape is not either;
// '?' dims cannot be proven equal to the matmul's; ops that are never fused
// (transpose) split chains.
// CHECK-LABEL: func.func @negative
// CHECK-NOT: "kiln.fused"
// CHECK: return
func.func @negative(%x: !kiln.tensor<["B", 4], f32>, %w: !kiln.tensor<[4, 4], f32>, %big: !kiln.tensor<[2, "B", 4], f32>) -> (!kiln.tensor<["B"], f32>, !kiln.tensor<[2, "B", 4], f32>, !kiln.tensor<["B", 4], f32>, !kiln.tensor<[4, "B"], f32>) {
  %m = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4, 4], f32>) -> !kiln.tensor<["B", 4], f32>
  %s = "kiln.reduce_sum"(%m) {axes = array<i64: 1>} : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B"], f32>
  %m2 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4, 4], f32>) -> !kiln.tensor<["B", 4], f32>
  %b = "kiln.add"(%m2, %big) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[2, "B", 4], f32>) -> !kiln.tensor<[2, "B", 4], f32>
  %m3 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4, 4], f32>) -> !kiln.tensor<["?", 4], f32>
  %r = "kiln.relu"(%m3) : (!kiln.tensor<["?", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  %n = "kiln.neg"(%x) : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  %t = "kiln.transpose"(%n) {perm = array<i64: 1, 0>} : (!kiln.tensor<["B", 4], f32>) -> !kiln.tensor<[4, "B"], f32>
  %e = "kiln.exp"(%t) : (!kiln.tensor<[4, "B"], f32>) -> !kiln.tensor<[4, "B"], f32>
  return %s, %b, %r, %e : !kiln.tensor<["B"], f32>, !kiln.tensor<[2, "B", 4], f32>, !kiln.tensor<["B", 4], f32>, !kiln.tensor<[4, "B"], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// Negative (convexity): exp(x) feeds a transpose pair whose result comes back
// into the add; fusing exp with the add would need the transposes inside.
// The exp/sqrt chain still fuses; the ops reading its result in between move
// after the kernel.
// CHECK-LABEL: func.func @convex
// CHECK: %[[F:.*]]:2 = "kiln.fused"(%arg0)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: "kiln.exp"
// CHECK-NEXT: "kiln.sqrt"
// CHECK-NEXT: "kiln.yield"
// CHECK: "kiln.transpose"(%[[F]]#0)
// CHECK: "kiln.transpose"
// CHECK: "kiln.add"(%[[F]]#1,
func.func @convex(%x: !kiln.tensor<[4, 4], f32>) -> !kiln.tensor<[4, 4], f32> {
  %e = "kiln.exp"(%x) : (!kiln.tensor<[4, 4], f32>) -> !kiln.tensor<[4, 4], f32>
  %t = "kiln.transpose"(%e) {perm = array<i64: 1, 0>} : (!kiln.tensor<[4, 4], f32>) -> !kiln.tensor<[4, 4], f32>
  %q = "kiln.sqrt"(%e) : (!kiln.tensor<[4, 4], f32>) -> !kiln.tensor<[4, 4], f32>
  %t2 = "kiln.transpose"(%t) {perm = array<i64: 1, 0>} : (!kiln.tensor<[4, 4], f32>) -> !kiln.tensor<[4, 4], f32>
  %a = "kiln.add"(%q, %t2) : (!kiln.tensor<[4, 4], f32>, !kiln.tensor<[4, 4], f32>) -> !kiln.tensor<[4, 4], f32>
  return %a : !kiln.tensor<[4, 4], f32>
}

// -----

"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// A ResNet block's tail: conv2d + residual add + ReLU is one conv_epilogue
// group (the residual, the block input, is an operand).  With only the
// elementwise rule, add + relu form a group and the conv stays outside.
// CHECK-LABEL: func.func @conv_residual
// CHECK: %[[F:.*]] = "kiln.fused"(%arg0, %{{.*}}) ({
// CHECK-NEXT: ^bb0(%[[X:.*]]: !kiln.tensor<["N", 4, 6, 6], f32>, %[[W:.*]]: !kiln.tensor<[4, 4, 3, 3], f32>):
// CHECK-NEXT: %[[C:.*]] = "kiln.conv2d"(%[[X]], %[[W]])
// CHECK-NEXT: %[[A:.*]] = "kiln.add"(%[[C]], %[[X]])
// CHECK-NEXT: %[[R:.*]] = "kiln.relu"(%[[A]])
// CHECK-NEXT: "kiln.yield"(%[[R]])
// CHECK-NEXT: }) {kind = "conv_epilogue"
// CHECK: return %[[F]]
// STATS: (1) conv_epilogue groups
// EW-LABEL: func.func @conv_residual
// EW: "kiln.conv2d"
// EW: "kiln.fused"
// EW: }) {kind = "elementwise"
func.func @conv_residual(%x: !kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> !kiln.tensor<[4, 4, 3, 3], f32>
  %c = "kiln.conv2d"(%x, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 6, 6], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %a = "kiln.add"(%c, %x) : (!kiln.tensor<["N", 4, 6, 6], f32>, !kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%a) : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  return %r : !kiln.tensor<["N", 4, 6, 6], f32>
}

// -----

"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// A classifier's head: conv2d + ReLU + a mean over the pixels (dims 2, 3)
// is one conv_epilogue group (the CPU backend sums the pixels in the
// convolution's call); a mean over the channels (dim 1) stays a reduction
// of its own.
// CHECK-LABEL: func.func @conv_pool
// CHECK: %[[F:.*]] = "kiln.fused"(%arg0, %{{.*}}) ({
// CHECK-NEXT: ^bb0(%[[X:.*]]: !kiln.tensor<["N", 2, 6, 6], f32>, %[[W:.*]]: !kiln.tensor<[4, 2, 3, 3], f32>):
// CHECK-NEXT: %[[C:.*]] = "kiln.conv2d"(%[[X]], %[[W]])
// CHECK-NEXT: %[[R:.*]] = "kiln.relu"(%[[C]])
// CHECK-NEXT: %[[M:.*]] = "kiln.reduce_mean"(%[[R]]) {axes = array<i64: 2, 3>, keepdims = true}
// CHECK-NEXT: "kiln.yield"(%[[M]])
// CHECK-NEXT: }) {kind = "conv_epilogue"
// CHECK: return %[[F]]
// CHECK-LABEL: func.func @conv_channel_mean
// CHECK: }) {kind = "conv_epilogue"
// CHECK-NEXT: "kiln.reduce_mean"(%{{.*}}) {axes = array<i64: 1>
func.func @conv_pool(%x: !kiln.tensor<["N", 2, 6, 6], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<4x2x3x3xf32>} : () -> !kiln.tensor<[4, 2, 3, 3], f32>
  %c = "kiln.conv2d"(%x, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 2, 6, 6], f32>, !kiln.tensor<[4, 2, 3, 3], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%c) : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %m = "kiln.reduce_mean"(%r) {axes = array<i64: 2, 3>, keepdims = true} : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32>
  return %m : !kiln.tensor<["N", 4, 1, 1], f32>
}
func.func @conv_channel_mean(%x: !kiln.tensor<["N", 2, 6, 6], f32>) -> !kiln.tensor<["N", 6, 6], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<4x2x3x3xf32>} : () -> !kiln.tensor<[4, 2, 3, 3], f32>
  %c = "kiln.conv2d"(%x, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 2, 6, 6], f32>, !kiln.tensor<[4, 2, 3, 3], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %r = "kiln.relu"(%c) : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 4, 6, 6], f32>
  %m = "kiln.reduce_mean"(%r) {axes = array<i64: 1>, keepdims = false} : (!kiln.tensor<["N", 4, 6, 6], f32>) -> !kiln.tensor<["N", 6, 6], f32>
  return %m : !kiln.tensor<["N", 6, 6], f32>
}

// -----

"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// A small CNN's last two convolutions: conv + ReLU whose result only the
// next conv reads, that one with its ReLU and global pool, are one
// conv_pair group (the CPU backend's kiln_conv2d_pair).  Without the rule
// (the Triton pipeline's kinds) they are two conv_epilogue groups.
// CHECK-LABEL: func.func @conv_pair
// CHECK: %[[F:.*]] = "kiln.fused"(%arg0, %{{.*}}, %{{.*}}, %{{.*}}) ({
// CHECK-NEXT: ^bb0(%[[X:.*]]: !kiln.tensor<["N", 3, 8, 8], f32>, %[[W1:.*]]: !kiln.tensor<[4, 3, 3, 3], f32>, %[[B1:.*]]: !kiln.tensor<[4], f32>, %[[W2:.*]]: !kiln.tensor<[8, 4, 3, 3], f32>):
// CHECK-NEXT: %[[C1:.*]] = "kiln.conv2d"(%[[X]], %[[W1]], %[[B1]])
// CHECK-NEXT: %[[R1:.*]] = "kiln.relu"(%[[C1]])
// CHECK-NEXT: %[[C2:.*]] = "kiln.conv2d"(%[[R1]], %[[W2]])
// CHECK-NEXT: %[[R2:.*]] = "kiln.relu"(%[[C2]])
// CHECK-NEXT: %[[M:.*]] = "kiln.reduce_mean"(%[[R2]])
// CHECK-NEXT: "kiln.yield"(%[[M]])
// CHECK-NEXT: }) {kind = "conv_pair"
// CHECK: return %[[F]]
// STATS: (1) conv_pair groups
// ONE-LABEL: func.func @conv_pair
// ONE: }) {kind = "conv_epilogue"
// ONE: }) {kind = "conv_epilogue"
// ONE-NOT: conv_pair
func.func @conv_pair(%x: !kiln.tensor<["N", 3, 8, 8], f32>) -> !kiln.tensor<["N", 8], f32> {
  %w1 = "kiln.constant"() {value = dense<0.5> : tensor<4x3x3x3xf32>} : () -> !kiln.tensor<[4, 3, 3, 3], f32>
  %b1 = "kiln.constant"() {value = dense<[0.1, 0.2, 0.3, 0.4]> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %w2 = "kiln.constant"() {value = dense<0.25> : tensor<8x4x3x3xf32>} : () -> !kiln.tensor<[8, 4, 3, 3], f32>
  %c1 = "kiln.conv2d"(%x, %w1, %b1) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 3, 8, 8], f32>, !kiln.tensor<[4, 3, 3, 3], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %r1 = "kiln.relu"(%c1) : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %c2 = "kiln.conv2d"(%r1, %w2) {pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[8, 4, 3, 3], f32>) -> !kiln.tensor<["N", 8, 4, 4], f32>
  %r2 = "kiln.relu"(%c2) : (!kiln.tensor<["N", 8, 4, 4], f32>) -> !kiln.tensor<["N", 8, 4, 4], f32>
  %m = "kiln.reduce_mean"(%r2) {axes = array<i64: 2, 3>, keepdims = false} : (!kiln.tensor<["N", 8, 4, 4], f32>) -> !kiln.tensor<["N", 8], f32>
  return %m : !kiln.tensor<["N", 8], f32>
}

// -----

"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// Negatives: the first convolution's result also returned; a residual add
// in the first group; a sigmoid (not a ReLU) after the first; no pool after
// the second.  Each convolution keeps its own conv_epilogue group.
// CHECK-LABEL: func.func @pair_first_read_twice
// CHECK-NOT: conv_pair
// CHECK: }) {kind = "conv_epilogue"
// CHECK: }) {kind = "conv_epilogue"
// CHECK-LABEL: func.func @pair_residual
// CHECK-NOT: conv_pair
// CHECK: }) {kind = "conv_epilogue"
// CHECK: }) {kind = "conv_epilogue"
// CHECK-LABEL: func.func @pair_sigmoid
// CHECK-NOT: conv_pair
// CHECK: }) {kind = "conv_epilogue"
// CHECK: }) {kind = "conv_epilogue"
// CHECK-LABEL: func.func @pair_no_pool
// CHECK-NOT: conv_pair
// CHECK: }) {kind = "conv_epilogue"
// CHECK: }) {kind = "conv_epilogue"
// CHECK-NOT: conv_pair
func.func @pair_first_read_twice(%x: !kiln.tensor<["N", 4, 8, 8], f32>) -> (!kiln.tensor<["N", 4], f32>, !kiln.tensor<["N", 4, 8, 8], f32>) {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> !kiln.tensor<[4, 4, 3, 3], f32>
  %c1 = "kiln.conv2d"(%x, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %r1 = "kiln.relu"(%c1) : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %c2 = "kiln.conv2d"(%r1, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %r2 = "kiln.relu"(%c2) : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %m = "kiln.reduce_mean"(%r2) {axes = array<i64: 2, 3>, keepdims = false} : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4], f32>
  return %m, %r1 : !kiln.tensor<["N", 4], f32>, !kiln.tensor<["N", 4, 8, 8], f32>
}
func.func @pair_residual(%x: !kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> !kiln.tensor<[4, 4, 3, 3], f32>
  %c1 = "kiln.conv2d"(%x, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %a1 = "kiln.add"(%c1, %x) : (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %r1 = "kiln.relu"(%a1) : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %c2 = "kiln.conv2d"(%r1, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %r2 = "kiln.relu"(%c2) : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %m = "kiln.reduce_mean"(%r2) {axes = array<i64: 2, 3>, keepdims = false} : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4], f32>
  return %m : !kiln.tensor<["N", 4], f32>
}
func.func @pair_sigmoid(%x: !kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> !kiln.tensor<[4, 4, 3, 3], f32>
  %c1 = "kiln.conv2d"(%x, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %r1 = "kiln.sigmoid"(%c1) : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %c2 = "kiln.conv2d"(%r1, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %r2 = "kiln.relu"(%c2) : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %m = "kiln.reduce_mean"(%r2) {axes = array<i64: 2, 3>, keepdims = false} : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4], f32>
  return %m : !kiln.tensor<["N", 4], f32>
}
func.func @pair_no_pool(%x: !kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32> {
  %w = "kiln.constant"() {value = dense<0.5> : tensor<4x4x3x3xf32>} : () -> !kiln.tensor<[4, 4, 3, 3], f32>
  %c1 = "kiln.conv2d"(%x, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %r1 = "kiln.relu"(%c1) : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %c2 = "kiln.conv2d"(%r1, %w) {pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 4, 8, 8], f32>, !kiln.tensor<[4, 4, 3, 3], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  %r2 = "kiln.relu"(%c2) : (!kiln.tensor<["N", 4, 8, 8], f32>) -> !kiln.tensor<["N", 4, 8, 8], f32>
  return %r2 : !kiln.tensor<["N", 4, 8, 8], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// A reduce over a symbolic dim (the whole tensor: a DynamicQuantizeLinear's
// max) does not take as prologue an elementwise group whose values are read
// elsewhere too: that kernel could not be split along B, and the values are
// stored anyway. The gelu fuses with its other reader instead. Over a static
// axis only (@static_axis) the prologue joins the reduction as before.
// CHECK-LABEL: func.func @whole_tensor_max
// CHECK: %[[E:.*]] = "kiln.fused"(%arg0)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: "kiln.gelu"
// CHECK-NEXT: "kiln.mul"
// CHECK: kind = "elementwise"
// CHECK: "kiln.reduce_max"(%{{.*}}) : (!kiln.tensor<["B", 64], f32>) -> !kiln.tensor<[], f32>
// CHECK-NOT: kiln.gelu
// CHECK: return
func.func @whole_tensor_max(%x: !kiln.tensor<["B", 64], f32>) -> (!kiln.tensor<[], f32>, !kiln.tensor<["B", 64], f32>) {
  %g = "kiln.gelu"(%x) : (!kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32>
  %m = "kiln.reduce_max"(%g) : (!kiln.tensor<["B", 64], f32>) -> !kiln.tensor<[], f32>
  %y = "kiln.mul"(%g, %g) : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32>
  return %m, %y : !kiln.tensor<[], f32>, !kiln.tensor<["B", 64], f32>
}
// CHECK-LABEL: func.func @static_axis
// CHECK: "kiln.fused"(%arg0)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: "kiln.gelu"
// CHECK-NEXT: "kiln.reduce_max"
func.func @static_axis(%x: !kiln.tensor<["B", 64], f32>) -> (!kiln.tensor<["B"], f32>, !kiln.tensor<["B", 64], f32>) {
  %g = "kiln.gelu"(%x) : (!kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32>
  %m = "kiln.reduce_max"(%g) {axes = array<i64: 1>} : (!kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B"], f32>
  %y = "kiln.mul"(%g, %g) : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<["B", 64], f32>) -> !kiln.tensor<["B", 64], f32>
  return %m, %y : !kiln.tensor<["B"], f32>, !kiln.tensor<["B", 64], f32>
}
