// RUN: kiln-opt %s --split-input-file --kiln-simplify | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-simplify --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// CHECK-LABEL: func.func @identities$dynamic
// CHECK-NEXT: return %arg0
// STATS: kiln-simplify
// STATS-NEXT: (1) mul-one
// STATS-NEXT: (1) add-zero
func.func @identities$dynamic(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32> {
  %one = "kiln.constant"() {value = dense<1.0> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %zero = "kiln.constant"() {value = dense<0.0> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %a = "kiln.mul"(%one, %x) : (!kiln.tensor<[4], f32>, !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32>
  %b = "kiln.add"(%a, %zero) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<["B", 4], f32>
  return %b : !kiln.tensor<["B", 4], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// x - 0 and x / 1 go too.
// CHECK-LABEL: func.func @sub_div
// CHECK-NEXT: return %arg0
func.func @sub_div(%x: !kiln.tensor<["B", 4], f32>) -> !kiln.tensor<["B", 4], f32> {
  %one = "kiln.constant"() {value = dense<1.0> : tensor<1xf32>} : () -> !kiln.tensor<[1], f32>
  %zero = "kiln.constant"() {value = dense<0.0> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %a = "kiln.sub"(%x, %zero) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["B", 4], f32>
  %b = "kiln.div"(%a, %one) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[1], f32>) -> !kiln.tensor<["B", 4], f32>
  return %b : !kiln.tensor<["B", 4], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// Negative: ones that broadcast x to a bigger shape; a constant that is not
// all ones; 0 - x; 1 / x.
// CHECK-LABEL: func.func @identities_negative
// CHECK: "kiln.mul"(%arg0, %{{.*}}) : (!kiln.tensor<[4], f32>, !kiln.tensor<[3, 4], f32>)
// CHECK: "kiln.mul"(%arg1, %{{.*}}) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4], f32>)
// CHECK: "kiln.sub"
// CHECK: "kiln.div"
func.func @identities_negative(%x: !kiln.tensor<[4], f32>, %y: !kiln.tensor<["B", 4], f32>) -> (!kiln.tensor<[3, 4], f32>, !kiln.tensor<["B", 4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) {
  %ones = "kiln.constant"() {value = dense<1.0> : tensor<3x4xf32>} : () -> !kiln.tensor<[3, 4], f32>
  %one = "kiln.constant"() {value = dense<1.0> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %zero = "kiln.constant"() {value = dense<0.0> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %c = "kiln.constant"() {value = dense<[1.0, 1.0, 2.0, 1.0]> : tensor<4xf32>} : () -> !kiln.tensor<[4], f32>
  %a = "kiln.mul"(%x, %ones) : (!kiln.tensor<[4], f32>, !kiln.tensor<[3, 4], f32>) -> !kiln.tensor<[3, 4], f32>
  %b = "kiln.mul"(%y, %c) : (!kiln.tensor<["B", 4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<["B", 4], f32>
  %s = "kiln.sub"(%zero, %x) : (!kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  %d = "kiln.div"(%one, %x) : (!kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  return %a, %b, %s, %d : !kiln.tensor<[3, 4], f32>, !kiln.tensor<["B", 4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// neg(neg(x)), transpose(transpose(x)) composing to the identity and to one
// transpose, reshape(reshape(x)), and no-op reshape/expand/cast.
// CHECK-LABEL: func.func @pairs$dynamic
// CHECK-NEXT: %[[T:.*]] = "kiln.transpose"(%arg0) {perm = array<i64: 2, 0, 1>}
// CHECK-NEXT: %[[R:.*]] = "kiln.reshape"(%arg0) {shape = ["B*L", 8]}
// CHECK-NEXT: return %arg0, %arg0, %[[T]], %[[R]], %arg0
func.func @pairs$dynamic(%x: !kiln.tensor<["B", "L", 8], f32>) -> (!kiln.tensor<["B", "L", 8], f32>, !kiln.tensor<["B", "L", 8], f32>, !kiln.tensor<[8, "B", "L"], f32>, !kiln.tensor<["B*L", 8], f32>, !kiln.tensor<["B", "L", 8], f32>) {
  %n1 = "kiln.neg"(%x) : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  %n2 = "kiln.neg"(%n1) : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  %t1 = "kiln.transpose"(%x) {perm = array<i64: 1, 0, 2>} : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["L", "B", 8], f32>
  %t2 = "kiln.transpose"(%t1) {perm = array<i64: 1, 0, 2>} : (!kiln.tensor<["L", "B", 8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  %t3 = "kiln.transpose"(%t1) {perm = array<i64: 2, 1, 0>} : (!kiln.tensor<["L", "B", 8], f32>) -> !kiln.tensor<[8, "B", "L"], f32>
  %r1 = "kiln.reshape"(%x) {shape = ["B", "L*8"]} : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L*8"], f32>
  %r2 = "kiln.reshape"(%r1) {shape = ["B*L", 8]} : (!kiln.tensor<["B", "L*8"], f32>) -> !kiln.tensor<["B*L", 8], f32>
  %r3 = "kiln.reshape"(%x) {shape = ["B", "L", 8]} : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  %e = "kiln.expand"(%r3) {shape = ["B", "L", 8]} : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  %c = "kiln.cast"(%e) : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  return %n2, %t2, %t3, %r2, %c : !kiln.tensor<["B", "L", 8], f32>, !kiln.tensor<["B", "L", 8], f32>, !kiln.tensor<[8, "B", "L"], f32>, !kiln.tensor<["B*L", 8], f32>, !kiln.tensor<["B", "L", 8], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// Negative: a single neg, a real transpose, a reshape that changes the shape,
// an expand that broadcasts, a cast that converts.
// CHECK-LABEL: func.func @pairs_negative
// CHECK: "kiln.neg"
// CHECK: "kiln.transpose"
// CHECK: "kiln.reshape"
// CHECK: "kiln.expand"
// CHECK: "kiln.cast"
func.func @pairs_negative(%x: !kiln.tensor<["B", 8], f32>) -> (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[8, "B"], f32>, !kiln.tensor<["B", 2, 4], f32>, !kiln.tensor<[3, "B", 8], f32>, !kiln.tensor<["B", 8], f16>) {
  %n = "kiln.neg"(%x) : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 8], f32>
  %t = "kiln.transpose"(%x) {perm = array<i64: 1, 0>} : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<[8, "B"], f32>
  %r = "kiln.reshape"(%x) {shape = ["B", 2, 4]} : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 2, 4], f32>
  %e = "kiln.expand"(%x) {shape = [3, "B", 8]} : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<[3, "B", 8], f32>
  %c = "kiln.cast"(%x) : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 8], f16>
  return %n, %t, %r, %e, %c : !kiln.tensor<["B", 8], f32>, !kiln.tensor<[8, "B"], f32>, !kiln.tensor<["B", 2, 4], f32>, !kiln.tensor<[3, "B", 8], f32>, !kiln.tensor<["B", 8], f16>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// softmax from its primitive form, with and without the max shift.
// CHECK-LABEL: func.func @softmax$dynamic
// CHECK-NEXT: %[[A:.*]] = "kiln.softmax"(%arg0) {axis = -1 : i64}
// CHECK-NEXT: %[[B:.*]] = "kiln.softmax"(%arg0) {axis = -2 : i64}
// CHECK-NEXT: return %[[A]], %[[B]]
// STATS: (2) softmax
func.func @softmax$dynamic(%x: !kiln.tensor<["B", "L"], f32>) -> (!kiln.tensor<["B", "L"], f32>, !kiln.tensor<["B", "L"], f32>) {
  %m = "kiln.reduce_max"(%x) {axes = array<i64: -1>, keepdims = true} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", 1], f32>
  %d = "kiln.sub"(%x, %m) : (!kiln.tensor<["B", "L"], f32>, !kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", "L"], f32>
  %e = "kiln.exp"(%d) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  %s = "kiln.reduce_sum"(%e) {axes = array<i64: 1>, keepdims = true} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", 1], f32>
  %r = "kiln.div"(%e, %s) : (!kiln.tensor<["B", "L"], f32>, !kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", "L"], f32>
  %e2 = "kiln.exp"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  %s2 = "kiln.reduce_sum"(%e2) {axes = array<i64: 0>, keepdims = true} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<[1, "L"], f32>
  %r2 = "kiln.div"(%e2, %s2) : (!kiln.tensor<["B", "L"], f32>, !kiln.tensor<[1, "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  return %r, %r2 : !kiln.tensor<["B", "L"], f32>, !kiln.tensor<["B", "L"], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// Negative: the sum runs over another axis than the max (the shift is kept
// inside the softmax: exp(x - m) / sum is then softmax of x - m), a sum over
// two axes, and a division by a sum of something else.
// CHECK-LABEL: func.func @softmax_negative
// CHECK: "kiln.softmax"(%{{.*}}) {axis = -1 : i64} : (!kiln.tensor<[3, "B"], f32>)
// CHECK: "kiln.reduce_sum"(%{{.*}}) {axes = array<i64: 0, 1>
// CHECK: "kiln.div"
// CHECK: "kiln.reduce_sum"(%arg0)
// CHECK: "kiln.div"
func.func @softmax_negative(%x: !kiln.tensor<[3, "B"], f32>) -> (!kiln.tensor<[3, "B"], f32>, !kiln.tensor<[3, "B"], f32>, !kiln.tensor<[3, "B"], f32>) {
  %m = "kiln.reduce_max"(%x) {axes = array<i64: 0>, keepdims = true} : (!kiln.tensor<[3, "B"], f32>) -> !kiln.tensor<[1, "B"], f32>
  %d = "kiln.sub"(%x, %m) : (!kiln.tensor<[3, "B"], f32>, !kiln.tensor<[1, "B"], f32>) -> !kiln.tensor<[3, "B"], f32>
  %e = "kiln.exp"(%d) : (!kiln.tensor<[3, "B"], f32>) -> !kiln.tensor<[3, "B"], f32>
  %s = "kiln.reduce_sum"(%e) {axes = array<i64: 1>, keepdims = true} : (!kiln.tensor<[3, "B"], f32>) -> !kiln.tensor<[3, 1], f32>
  %r = "kiln.div"(%e, %s) : (!kiln.tensor<[3, "B"], f32>, !kiln.tensor<[3, 1], f32>) -> !kiln.tensor<[3, "B"], f32>
  %s2 = "kiln.reduce_sum"(%e) {axes = array<i64: 0, 1>, keepdims = true} : (!kiln.tensor<[3, "B"], f32>) -> !kiln.tensor<[1, 1], f32>
  %r2 = "kiln.div"(%e, %s2) : (!kiln.tensor<[3, "B"], f32>, !kiln.tensor<[1, 1], f32>) -> !kiln.tensor<[3, "B"], f32>
  %s3 = "kiln.reduce_sum"(%x) {axes = array<i64: 1>, keepdims = true} : (!kiln.tensor<[3, "B"], f32>) -> !kiln.tensor<[3, 1], f32>
  %r3 = "kiln.div"(%e, %s3) : (!kiln.tensor<[3, "B"], f32>, !kiln.tensor<[3, 1], f32>) -> !kiln.tensor<[3, "B"], f32>
  return %r, %r2, %r3 : !kiln.tensor<[3, "B"], f32>, !kiln.tensor<[3, "B"], f32>, !kiln.tensor<[3, "B"], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// layer_norm from its primitive form (as torch decomposes it), then its
// weight and bias folded in.
// CHECK-LABEL: func.func @layer_norm$dynamic
// CHECK: %[[G:.*]] = "kiln.constant"() {value = dense<2.000000e+00> : tensor<8xf32>}
// CHECK: %[[B:.*]] = "kiln.constant"() {value = dense<5.000000e-01> : tensor<8xf32>}
// CHECK-NEXT: %[[N:.*]] = "kiln.layer_norm"(%arg0, %[[G]], %[[B]]) {axis = -1 : i64, epsilon = 1.000000e-05 : f64, operandSegmentSizes = array<i32: 1, 1, 1>}
// CHECK-NEXT: return %[[N]]
// STATS: (1) layer-norm
// STATS-NEXT: (1) layer-norm-weight
// STATS-NEXT: (1) layer-norm-bias
func.func @layer_norm$dynamic(%x: !kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 8], f32> {
  %eps = "kiln.constant"() {value = dense<1.0e-5> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %g = "kiln.constant"() {value = dense<2.0> : tensor<8xf32>} : () -> !kiln.tensor<[8], f32>
  %b = "kiln.constant"() {value = dense<0.5> : tensor<8xf32>} : () -> !kiln.tensor<[8], f32>
  %mean = "kiln.reduce_mean"(%x) {axes = array<i64: -1>, keepdims = true} : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 1], f32>
  %d = "kiln.sub"(%x, %mean) : (!kiln.tensor<["B", "L", 8], f32>, !kiln.tensor<["B", "L", 1], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  %sq = "kiln.mul"(%d, %d) : (!kiln.tensor<["B", "L", 8], f32>, !kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  %var = "kiln.reduce_mean"(%sq) {axes = array<i64: 2>, keepdims = true} : (!kiln.tensor<["B", "L", 8], f32>) -> !kiln.tensor<["B", "L", 1], f32>
  %ve = "kiln.add"(%var, %eps) : (!kiln.tensor<["B", "L", 1], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<["B", "L", 1], f32>
  %rs = "kiln.rsqrt"(%ve) : (!kiln.tensor<["B", "L", 1], f32>) -> !kiln.tensor<["B", "L", 1], f32>
  %n = "kiln.mul"(%d, %rs) : (!kiln.tensor<["B", "L", 8], f32>, !kiln.tensor<["B", "L", 1], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  %w = "kiln.mul"(%n, %g) : (!kiln.tensor<["B", "L", 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  %y = "kiln.add"(%w, %b) : (!kiln.tensor<["B", "L", 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", "L", 8], f32>
  return %y : !kiln.tensor<["B", "L", 8], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// The division form with pow(d, 2) and sqrt, over the two trailing axes.
// CHECK-LABEL: func.func @layer_norm_div
// CHECK-NEXT: %[[N:.*]] = "kiln.layer_norm"(%arg0) {axis = -2 : i64, epsilon = 1.000000e-03 : f64
// CHECK-NEXT: return %[[N]]
func.func @layer_norm_div(%x: !kiln.tensor<["B", 4, 8], f32>) -> !kiln.tensor<["B", 4, 8], f32> {
  %epsf = "kiln.constant"() {value = dense<1.0e-3> : tensor<1xf32>} : () -> !kiln.tensor<[1], f32>
  %two = "kiln.constant"() {value = dense<2.0> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %mean = "kiln.reduce_mean"(%x) {axes = array<i64: 1, 2>, keepdims = true} : (!kiln.tensor<["B", 4, 8], f32>) -> !kiln.tensor<["B", 1, 1], f32>
  %d = "kiln.sub"(%x, %mean) : (!kiln.tensor<["B", 4, 8], f32>, !kiln.tensor<["B", 1, 1], f32>) -> !kiln.tensor<["B", 4, 8], f32>
  %sq = "kiln.pow"(%d, %two) : (!kiln.tensor<["B", 4, 8], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<["B", 4, 8], f32>
  %var = "kiln.reduce_mean"(%sq) {axes = array<i64: 2, 1>, keepdims = true} : (!kiln.tensor<["B", 4, 8], f32>) -> !kiln.tensor<["B", 1, 1], f32>
  %ve = "kiln.add"(%epsf, %var) : (!kiln.tensor<[1], f32>, !kiln.tensor<["B", 1, 1], f32>) -> !kiln.tensor<["B", 1, 1], f32>
  %sd = "kiln.sqrt"(%ve) : (!kiln.tensor<["B", 1, 1], f32>) -> !kiln.tensor<["B", 1, 1], f32>
  %n = "kiln.div"(%d, %sd) : (!kiln.tensor<["B", 4, 8], f32>, !kiln.tensor<["B", 1, 1], f32>) -> !kiln.tensor<["B", 4, 8], f32>
  return %n : !kiln.tensor<["B", 4, 8], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// Negative: normalizing over a leading axis, a variance of something else,
// and a weight that is not shaped like the normalized dims.
// CHECK-LABEL: func.func @layer_norm_negative
// CHECK-NOT: "kiln.layer_norm"
// CHECK: "kiln.rsqrt"
// CHECK: "kiln.rsqrt"
// CHECK: %[[N:.*]] = "kiln.layer_norm"(%arg0)
// CHECK-NEXT: "kiln.mul"(%[[N]], %{{.*}}) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>)
func.func @layer_norm_negative(%x: !kiln.tensor<["B", 8], f32>, %y: !kiln.tensor<["B", 8], f32>) -> (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>) {
  %eps = "kiln.constant"() {value = dense<1.0e-5> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %mean = "kiln.reduce_mean"(%x) {axes = array<i64: 0>, keepdims = true} : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<[1, 8], f32>
  %d = "kiln.sub"(%x, %mean) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[1, 8], f32>) -> !kiln.tensor<["B", 8], f32>
  %sq = "kiln.mul"(%d, %d) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 8], f32>
  %var = "kiln.reduce_mean"(%sq) {axes = array<i64: 0>, keepdims = true} : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<[1, 8], f32>
  %ve = "kiln.add"(%var, %eps) : (!kiln.tensor<[1, 8], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<[1, 8], f32>
  %rs = "kiln.rsqrt"(%ve) : (!kiln.tensor<[1, 8], f32>) -> !kiln.tensor<[1, 8], f32>
  %n = "kiln.mul"(%d, %rs) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[1, 8], f32>) -> !kiln.tensor<["B", 8], f32>
  %mean2 = "kiln.reduce_mean"(%x) {axes = array<i64: 1>, keepdims = true} : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 1], f32>
  %d2 = "kiln.sub"(%x, %mean2) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", 8], f32>
  %sq2 = "kiln.mul"(%y, %y) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 8], f32>
  %var2 = "kiln.reduce_mean"(%sq2) {axes = array<i64: 1>, keepdims = true} : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 1], f32>
  %ve2 = "kiln.add"(%var2, %eps) : (!kiln.tensor<["B", 1], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<["B", 1], f32>
  %rs2 = "kiln.rsqrt"(%ve2) : (!kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", 1], f32>
  %n2 = "kiln.mul"(%d2, %rs2) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", 8], f32>
  %ln = "kiln.layer_norm"(%x) {operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 8], f32>
  %w = "kiln.mul"(%ln, %y) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 8], f32>
  return %n, %n2, %w : !kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// transpose with the identity permutation goes; a bias that is not shaped
// like the normalized dims stays an add (negative for layer-norm-bias), and
// so does a bias on a layer_norm whose result has a second user.
// CHECK-LABEL: func.func @transpose_identity_and_bias_negative
// CHECK-NOT: "kiln.transpose"
// CHECK: %[[N:.*]] = "kiln.layer_norm"(%arg0)
// CHECK-NEXT: "kiln.add"(%[[N]], %arg1) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>)
// CHECK: %[[M:.*]] = "kiln.layer_norm"(%arg0)
// CHECK-NEXT: "kiln.add"(%[[M]], %arg2) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[8], f32>)
// CHECK: return %arg0,
func.func @transpose_identity_and_bias_negative(%x: !kiln.tensor<["B", 8], f32>, %y: !kiln.tensor<["B", 8], f32>, %b: !kiln.tensor<[8], f32>) -> (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>) {
  %t = "kiln.transpose"(%x) {perm = array<i64: 0, 1>} : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 8], f32>
  %ln = "kiln.layer_norm"(%x) {operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 8], f32>
  %a = "kiln.add"(%ln, %y) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 8], f32>
  %ln2 = "kiln.layer_norm"(%x) {epsilon = 1.0e-3 : f64, operandSegmentSizes = array<i32: 1, 0, 0>} : (!kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["B", 8], f32>
  %a2 = "kiln.add"(%ln2, %b) : (!kiln.tensor<["B", 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<["B", 8], f32>
  return %t, %a, %a2, %ln2 : !kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>, !kiln.tensor<["B", 8], f32>
}

// -----

"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// conv-batch-norm: s = gamma / sqrt(var + eps) = [4, 3] / sqrt([3, 0] + 1) = [2, 3];
// w' = w * s = [2, 6]; b' = (b - mean) * s + beta = [(0.5 - 0.5) * 2 + 0, (-1 - 1) * 3 + 3].
// The conv keeps its strides, pads and dilations.
// CHECK-LABEL: func.func @conv_batch_norm
// CHECK-DAG: %[[W:.*]] = "kiln.constant"() {value = dense<{{\[}}[{{\[}}[2.000000e+00]]], [{{\[}}[6.000000e+00]]]]> : tensor<2x1x1x1xf32>}
// CHECK-DAG: %[[B:.*]] = "kiln.constant"() {value = dense<[0.000000e+00, -3.000000e+00]> : tensor<2xf32>}
// CHECK: %[[C:.*]] = "kiln.conv2d"(%arg0, %[[W]], %[[B]]) {dilations = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 1>, pads = array<i64: 1, 0, 1, 0>, strides = array<i64: 2, 1>}
// CHECK-NOT: kiln.batch_norm
// CHECK: return %[[C]]
// STATS: (1) conv-batch-norm
func.func @conv_batch_norm(%x: !kiln.tensor<["N", 1, 4, 4], f32>) -> !kiln.tensor<["N", 2, 3, 4], f32> {
  %w = "kiln.constant"() {value = dense<[[[[1.0]]], [[[2.0]]]]> : tensor<2x1x1x1xf32>} : () -> !kiln.tensor<[2, 1, 1, 1], f32>
  %b = "kiln.constant"() {value = dense<[0.5, -1.0]> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  %gamma = "kiln.constant"() {value = dense<[4.0, 3.0]> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  %beta = "kiln.constant"() {value = dense<[0.0, 3.0]> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  %mean = "kiln.constant"() {value = dense<[0.5, 1.0]> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  %var = "kiln.constant"() {value = dense<[3.0, 0.0]> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  %c = "kiln.conv2d"(%x, %w, %b) {strides = array<i64: 2, 1>, pads = array<i64: 1, 0, 1, 0>, operandSegmentSizes = array<i32: 1, 1, 1>} : (!kiln.tensor<["N", 1, 4, 4], f32>, !kiln.tensor<[2, 1, 1, 1], f32>, !kiln.tensor<[2], f32>) -> !kiln.tensor<["N", 2, 3, 4], f32>
  %y = "kiln.batch_norm"(%c, %gamma, %beta, %mean, %var) {epsilon = 1.0 : f64} : (!kiln.tensor<["N", 2, 3, 4], f32>, !kiln.tensor<[2], f32>, !kiln.tensor<[2], f32>, !kiln.tensor<[2], f32>, !kiln.tensor<[2], f32>) -> !kiln.tensor<["N", 2, 3, 4], f32>
  return %y : !kiln.tensor<["N", 2, 3, 4], f32>
}

// -----

"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// Negative: the conv's result has a second user, or the statistics are not
// constants: the batch_norm stays.
// CHECK-LABEL: func.func @conv_batch_norm_negative
// CHECK: "kiln.batch_norm"
// CHECK: "kiln.batch_norm"
func.func @conv_batch_norm_negative(%x: !kiln.tensor<["N", 1, 4, 4], f32>, %mean: !kiln.tensor<[2], f32>) -> (!kiln.tensor<["N", 2, 4, 4], f32>, !kiln.tensor<["N", 2, 4, 4], f32>, !kiln.tensor<["N", 2, 4, 4], f32>) {
  %w = "kiln.constant"() {value = dense<1.0> : tensor<2x1x1x1xf32>} : () -> !kiln.tensor<[2, 1, 1, 1], f32>
  %p = "kiln.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  %c = "kiln.conv2d"(%x, %w) {operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 1, 4, 4], f32>, !kiln.tensor<[2, 1, 1, 1], f32>) -> !kiln.tensor<["N", 2, 4, 4], f32>
  %y = "kiln.batch_norm"(%c, %p, %p, %p, %p) : (!kiln.tensor<["N", 2, 4, 4], f32>, !kiln.tensor<[2], f32>, !kiln.tensor<[2], f32>, !kiln.tensor<[2], f32>, !kiln.tensor<[2], f32>) -> !kiln.tensor<["N", 2, 4, 4], f32>
  %c2 = "kiln.conv2d"(%x, %w) {operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<["N", 1, 4, 4], f32>, !kiln.tensor<[2, 1, 1, 1], f32>) -> !kiln.tensor<["N", 2, 4, 4], f32>
  %z = "kiln.batch_norm"(%c2, %p, %p, %mean, %p) : (!kiln.tensor<["N", 2, 4, 4], f32>, !kiln.tensor<[2], f32>, !kiln.tensor<[2], f32>, !kiln.tensor<[2], f32>, !kiln.tensor<[2], f32>) -> !kiln.tensor<["N", 2, 4, 4], f32>
  return %y, %c, %z : !kiln.tensor<["N", 2, 4, 4], f32>, !kiln.tensor<["N", 2, 4, 4], f32>, !kiln.tensor<["N", 2, 4, 4], f32>
}

// -----

"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 8 : i64} : () -> ()
// avg-pool-global: an unpadded average pool whose window is the whole 7 x 7
// image is the mean over dims 2 and 3, kept.  Not rewritten: a padded one,
// a smaller window, and a window over an image whose side is a symbol.
// CHECK-LABEL: func.func @global_avg_pool
// CHECK-NEXT: %[[M:.*]] = "kiln.reduce_mean"(%arg0) {axes = array<i64: 2, 3>, keepdims = true} : (!kiln.tensor<["N", 4, 7, 7], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32>
// CHECK-NEXT: return %[[M]]
// CHECK-LABEL: func.func @avg_pool_padded
// CHECK: "kiln.avg_pool2d"
// CHECK-LABEL: func.func @avg_pool_window
// CHECK: "kiln.avg_pool2d"
// CHECK-LABEL: func.func @avg_pool_symbolic
// CHECK: "kiln.avg_pool2d"
// STATS: (1) avg-pool-global
func.func @global_avg_pool(%x: !kiln.tensor<["N", 4, 7, 7], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32> {
  %p = "kiln.avg_pool2d"(%x) {kernel = array<i64: 7, 7>, strides = array<i64: 1, 1>} : (!kiln.tensor<["N", 4, 7, 7], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32>
  return %p : !kiln.tensor<["N", 4, 1, 1], f32>
}
func.func @avg_pool_padded(%x: !kiln.tensor<["N", 4, 7, 7], f32>) -> !kiln.tensor<["N", 4, 3, 3], f32> {
  %p = "kiln.avg_pool2d"(%x) {kernel = array<i64: 7, 7>, strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>} : (!kiln.tensor<["N", 4, 7, 7], f32>) -> !kiln.tensor<["N", 4, 3, 3], f32>
  return %p : !kiln.tensor<["N", 4, 3, 3], f32>
}
func.func @avg_pool_window(%x: !kiln.tensor<["N", 4, 7, 7], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32> {
  %p = "kiln.avg_pool2d"(%x) {kernel = array<i64: 6, 6>, strides = array<i64: 6, 6>} : (!kiln.tensor<["N", 4, 7, 7], f32>) -> !kiln.tensor<["N", 4, 1, 1], f32>
  return %p : !kiln.tensor<["N", 4, 1, 1], f32>
}
func.func @avg_pool_symbolic(%x: !kiln.tensor<["N", 4, "N", 7], f32>) -> !kiln.tensor<["N", 4, "N", 1], f32> {
  %p = "kiln.avg_pool2d"(%x) {kernel = array<i64: 1, 7>, strides = array<i64: 1, 1>} : (!kiln.tensor<["N", 4, "N", 7], f32>) -> !kiln.tensor<["N", 4, "N", 1], f32>
  return %p : !kiln.tensor<["N", 4, "N", 1], f32>
}

// -----

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 64 : i64} : () -> ()
// packed-attention: one projection [B, L, 3 * 2 * 8] split into q, k, v of
// two heads (reshape, transpose, a slice and reshape each), attended and
// merged back (transpose, reshape) is one kiln.packed_attention, its scale
// kept; the chain goes.  Not rewritten: k and v taken from each other's
// part, the attention's result used besides the merge, and a merge that
// is not the heads' transpose.
// CHECK-LABEL: func.func @packed
// CHECK-NEXT: %[[A:.*]] = "kiln.packed_attention"(%arg0) {causal = true, heads = 2 : i64, scale = 5.000000e-01 : f64} : (!kiln.tensor<["B", "L", 48], f32>) -> !kiln.tensor<["B", "L", 16], f32>
// CHECK-NEXT: return %[[A]]
// CHECK-LABEL: func.func @packed_swapped
// CHECK-NOT: packed_attention
// CHECK: "kiln.attention"
// CHECK-LABEL: func.func @packed_used_twice
// CHECK-NOT: packed_attention
// CHECK: "kiln.attention"
// CHECK-LABEL: func.func @packed_other_merge
// CHECK-NOT: packed_attention
// CHECK: "kiln.attention"
// STATS: (1) packed-attention
func.func @packed(%p: !kiln.tensor<["B", "L", 48], f32>) -> (!kiln.tensor<["B", "L", 16], f32>) {
  %r = "kiln.reshape"(%p) {shape = ["B", "L", 3, 2, 8]} : (!kiln.tensor<["B", "L", 48], f32>) -> !kiln.tensor<["B", "L", 3, 2, 8], f32>
  %t = "kiln.transpose"(%r) {perm = array<i64: 2, 0, 3, 1, 4>} : (!kiln.tensor<["B", "L", 3, 2, 8], f32>) -> !kiln.tensor<[3, "B", 2, "L", 8], f32>
  %sq = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 0>, ends = array<i64: 1>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %q = "kiln.reshape"(%sq) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %sk = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 1>, ends = array<i64: 2>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %k = "kiln.reshape"(%sk) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %sv = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 2>, ends = array<i64: 3>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %v = "kiln.reshape"(%sv) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %a = "kiln.attention"(%q, %k, %v) {causal = true, scale = 5.000000e-01 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %m = "kiln.transpose"(%a) {perm = array<i64: 0, 2, 1, 3>} : (!kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", "L", 2, 8], f32>
  %o = "kiln.reshape"(%m) {shape = ["B", "L", 16]} : (!kiln.tensor<["B", "L", 2, 8], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  return %o : !kiln.tensor<["B", "L", 16], f32>
}
func.func @packed_swapped(%p: !kiln.tensor<["B", "L", 48], f32>) -> (!kiln.tensor<["B", "L", 16], f32>) {
  %r = "kiln.reshape"(%p) {shape = ["B", "L", 3, 2, 8]} : (!kiln.tensor<["B", "L", 48], f32>) -> !kiln.tensor<["B", "L", 3, 2, 8], f32>
  %t = "kiln.transpose"(%r) {perm = array<i64: 2, 0, 3, 1, 4>} : (!kiln.tensor<["B", "L", 3, 2, 8], f32>) -> !kiln.tensor<[3, "B", 2, "L", 8], f32>
  %sq = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 0>, ends = array<i64: 1>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %q = "kiln.reshape"(%sq) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %sk = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 2>, ends = array<i64: 3>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %k = "kiln.reshape"(%sk) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %sv = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 1>, ends = array<i64: 2>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %v = "kiln.reshape"(%sv) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %a = "kiln.attention"(%q, %k, %v) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %m = "kiln.transpose"(%a) {perm = array<i64: 0, 2, 1, 3>} : (!kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", "L", 2, 8], f32>
  %o = "kiln.reshape"(%m) {shape = ["B", "L", 16]} : (!kiln.tensor<["B", "L", 2, 8], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  return %o : !kiln.tensor<["B", "L", 16], f32>
}
func.func @packed_used_twice(%p: !kiln.tensor<["B", "L", 48], f32>) -> (!kiln.tensor<["B", "L", 16], f32>, !kiln.tensor<["B", 2, "L", 8], f32>) {
  %r = "kiln.reshape"(%p) {shape = ["B", "L", 3, 2, 8]} : (!kiln.tensor<["B", "L", 48], f32>) -> !kiln.tensor<["B", "L", 3, 2, 8], f32>
  %t = "kiln.transpose"(%r) {perm = array<i64: 2, 0, 3, 1, 4>} : (!kiln.tensor<["B", "L", 3, 2, 8], f32>) -> !kiln.tensor<[3, "B", 2, "L", 8], f32>
  %sq = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 0>, ends = array<i64: 1>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %q = "kiln.reshape"(%sq) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %sk = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 1>, ends = array<i64: 2>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %k = "kiln.reshape"(%sk) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %sv = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 2>, ends = array<i64: 3>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %v = "kiln.reshape"(%sv) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %a = "kiln.attention"(%q, %k, %v) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %m = "kiln.transpose"(%a) {perm = array<i64: 0, 2, 1, 3>} : (!kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", "L", 2, 8], f32>
  %o = "kiln.reshape"(%m) {shape = ["B", "L", 16]} : (!kiln.tensor<["B", "L", 2, 8], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  return %o, %a : !kiln.tensor<["B", "L", 16], f32>, !kiln.tensor<["B", 2, "L", 8], f32>
}
func.func @packed_other_merge(%p: !kiln.tensor<["B", "L", 48], f32>) -> !kiln.tensor<["B", "L", 16], f32> {
  %r = "kiln.reshape"(%p) {shape = ["B", "L", 3, 2, 8]} : (!kiln.tensor<["B", "L", 48], f32>) -> !kiln.tensor<["B", "L", 3, 2, 8], f32>
  %t = "kiln.transpose"(%r) {perm = array<i64: 2, 0, 3, 1, 4>} : (!kiln.tensor<["B", "L", 3, 2, 8], f32>) -> !kiln.tensor<[3, "B", 2, "L", 8], f32>
  %sq = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 0>, ends = array<i64: 1>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %q = "kiln.reshape"(%sq) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %sk = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 1>, ends = array<i64: 2>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %k = "kiln.reshape"(%sk) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %sv = "kiln.slice"(%t) {axes = array<i64: 0>, starts = array<i64: 2>, ends = array<i64: 3>, steps = array<i64: 1>} : (!kiln.tensor<[3, "B", 2, "L", 8], f32>) -> !kiln.tensor<[1, "B", 2, "L", 8], f32>
  %v = "kiln.reshape"(%sv) {shape = ["B", 2, "L", 8]} : (!kiln.tensor<[1, "B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %a = "kiln.attention"(%q, %k, %v) {causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>, !kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", 2, "L", 8], f32>
  %o = "kiln.reshape"(%a) {shape = ["B", "L", 16]} : (!kiln.tensor<["B", 2, "L", 8], f32>) -> !kiln.tensor<["B", "L", 16], f32>
  return %o : !kiln.tensor<["B", "L", 16], f32>
}
