// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// One case per verifier error of the kiln dialect; each checks the exact message.

"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
func.func @add$broadcast_different_symbols(%a: !kiln.tensor<["B", 16], f32>, %b: !kiln.tensor<["L", 16], f32>) {
  // expected-error @below {{'kiln.add' op operands are not broadcast-compatible: cannot broadcast [B, 16] with [L, 16] (dim B vs L)}}
  %0 = "kiln.add"(%a, %b) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<["L", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  return
}
// -----
func.func @add$broadcast_different_constants(%a: !kiln.tensor<[4, 16], f32>, %b: !kiln.tensor<[3, 16], f32>) {
  // expected-error @below {{'kiln.add' op operands are not broadcast-compatible: cannot broadcast [4, 16] with [3, 16] (dim 4 vs 3)}}
  %0 = "kiln.add"(%a, %b) : (!kiln.tensor<[4, 16], f32>, !kiln.tensor<[3, 16], f32>) -> !kiln.tensor<[4, 16], f32>
  return
}
// -----
func.func @add$dtype_mismatch(%a: !kiln.tensor<[4], f32>, %b: !kiln.tensor<[4], f16>) {
  // expected-error @below {{'kiln.add' op operands must have the same dtype, got f32 and f16 (operand #1)}}
  %0 = "kiln.add"(%a, %b) : (!kiln.tensor<[4], f32>, !kiln.tensor<[4], f16>) -> !kiln.tensor<[4], f32>
  return
}
// -----
func.func @add$wrong_result_dim(%a: !kiln.tensor<[4, 16], f32>) {
  // expected-error @below {{'kiln.add' op result #0 dim 1 is 8, but its shape function gives 16 (result [4, 8] vs inferred [4, 16])}}
  %0 = "kiln.add"(%a, %a) : (!kiln.tensor<[4, 16], f32>, !kiln.tensor<[4, 16], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @add$wrong_result_rank(%a: !kiln.tensor<[4, 16], f32>) {
  // expected-error @below {{'kiln.add' op result #0 has rank 1 [64], but its shape function gives rank 2 [4, 16]}}
  %0 = "kiln.add"(%a, %a) : (!kiln.tensor<[4, 16], f32>, !kiln.tensor<[4, 16], f32>) -> !kiln.tensor<[64], f32>
  return
}
// -----
func.func @add$wrong_result_dtype(%a: !kiln.tensor<[4], f32>) {
  // expected-error @below {{'kiln.add' op result #0 has dtype f16, but the operands give f32}}
  %0 = "kiln.add"(%a, %a) : (!kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f16>
  return
}
// -----
func.func @add$one_operand(%a: !kiln.tensor<[4], f32>) {
  // expected-error @below {{'kiln.add' op expects 2 operands, got 1}}
  %0 = "kiln.add"(%a) : (!kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  return
}
// -----
func.func @add$builtin_tensor_operand(%a: tensor<4xf32>) {
  // expected-error @below {{'kiln.add' op operand #0: expected a !kiln.tensor, got tensor<4xf32>}}
  %0 = "kiln.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> !kiln.tensor<[4], f32>
  return
}
// -----
// expected-error @below {{function argument #0 dim 0 ('Q') uses undeclared symbol 'Q'}}
func.func @type$undeclared_symbol(%a: !kiln.tensor<["Q", 4], f32>) {
  return
}
// -----
// expected-error @below {{function argument #0 dim 0 is '?': name it with a declared symbol}}
func.func @type$unknown_dim_in_argument(%a: !kiln.tensor<["?", 4], f32>) {
  return
}
// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
// expected-error @below {{function argument #0: malformed type !kiln.tensor<["B*", 4], f32>: invalid dim expression 'B*': unexpected end}}
func.func @type$malformed_expression(%a: !kiln.tensor<["B*", 4], f32>) {
  return
}
// -----
// expected-error @below {{function argument #0: malformed type !kiln.tensor<[1.500000e+00], f32>: dim #0 is 1.500000e+00 : f64: expected an integer or a string}}
func.func @type$float_dim(%a: !kiln.tensor<[1.5], f32>) {
  return
}
// -----
// expected-error @below {{function argument #0: unsupported dtype 'complex<f32>' in !kiln.tensor<[4], complex<f32>>}}
func.func @type$unsupported_dtype(%a: !kiln.tensor<[4], complex<f32>>) {
  return
}
// -----
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
// expected-error @below {{function argument #0: malformed type !kiln.tensor<["L/0"], f32>: invalid dim expression 'L/0': the divisor of '/' must be positive}}
func.func @type$division_by_zero(%a: !kiln.tensor<["L/0"], f32>) {
  return
}
// -----
func.func @matmul$contracting_mismatch(%a: !kiln.tensor<[4, 8], f32>, %b: !kiln.tensor<[16, 2], f32>) {
  // expected-error @below {{'kiln.matmul' op contracting dims differ between [4, 8] and [16, 2]: 8 vs 16}}
  %0 = "kiln.matmul"(%a, %b) : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[16, 2], f32>) -> !kiln.tensor<[4, 2], f32>
  return
}
// -----
func.func @transpose$missing_perm(%a: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.transpose' op requires attribute 'perm'}}
  %0 = "kiln.transpose"(%a) : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[8, 4], f32>
  return
}
// -----
func.func @transpose$not_a_permutation(%a: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.transpose' op attribute 'perm' [0, 0] is not a permutation of 2 dims}}
  %0 = "kiln.transpose"(%a) {perm = array<i64: 0, 0>} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, 4], f32>
  return
}
// -----
func.func @softmax$axis_wrong_kind(%a: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.softmax' op attribute 'axis' must be an integer, got "last"}}
  %0 = "kiln.softmax"(%a) {axis = "last"} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @softmax$axis_out_of_range(%a: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.softmax' op axis 2 is out of range for rank 2}}
  %0 = "kiln.softmax"(%a) {axis = 2 : i64} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64} : () -> ()
func.func @reshape$element_count(%a: !kiln.tensor<["B", "L", 16], f32>) {
  // expected-error @below {{'kiln.reshape' op cannot reshape [B, L, 16] (16*B*L elements) to [B, 16] (16*B elements)}}
  %0 = "kiln.reshape"(%a) {shape = ["B", 16]} : (!kiln.tensor<["B", "L", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  return
}
// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @concat$other_dim_differs(%a: !kiln.tensor<["B", 16], f32>, %b: !kiln.tensor<["B", 8], f32>) {
  // expected-error @below {{'kiln.concat' op operand #1 dim 1 is 8, operand #0 has 16}}
  %0 = "kiln.concat"(%a, %b) {axis = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<["B", 8], f32>) -> !kiln.tensor<["2*B", 16], f32>
  return
}
// -----
func.func @conv2d$channels(%x: !kiln.tensor<[1, 4, 8, 8], f32>, %w: !kiln.tensor<[8, 3, 3, 3], f32>) {
  // expected-error @below {{'kiln.conv2d' op input channels must equal weight dim 1 times groups (1): 4 vs 3}}
  %0 = "kiln.conv2d"(%x, %w) {operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<[1, 4, 8, 8], f32>, !kiln.tensor<[8, 3, 3, 3], f32>) -> !kiln.tensor<[1, 8, 6, 6], f32>
  return
}
// -----
func.func @conv2d$window_too_large(%x: !kiln.tensor<[1, 3, 2, 2], f32>, %w: !kiln.tensor<[8, 3, 3, 3], f32>) {
  // expected-error @below {{'kiln.conv2d' op window of extent 3 does not fit an input of size 2 with padding 0+0}}
  %0 = "kiln.conv2d"(%x, %w) {operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<[1, 3, 2, 2], f32>, !kiln.tensor<[8, 3, 3, 3], f32>) -> !kiln.tensor<[1, 8, 1, 1], f32>
  return
}
// -----
func.func @max_pool2d$padding(%x: !kiln.tensor<[1, 3, 8, 8], f32>) {
  // expected-error @below {{'kiln.max_pool2d' op padding [0, -1, 0, 0] must be non-negative}}
  %0 = "kiln.max_pool2d"(%x) {kernel = array<i64: 2, 2>, pads = array<i64: 0, -1, 0, 0>} : (!kiln.tensor<[1, 3, 8, 8], f32>) -> !kiln.tensor<[1, 3, 4, 4], f32>
  return
}
// -----
func.func @reduce_sum$repeated_axis(%x: !kiln.tensor<[4, 8], f32>) {
  // expected-error @below {{'kiln.reduce_sum' op axes [1, -1] repeat an axis}}
  %0 = "kiln.reduce_sum"(%x) {axes = array<i64: 1, -1>} : (!kiln.tensor<[4, 8], f32>) -> !kiln.tensor<[4], f32>
  return
}
// -----
func.func @exp$integer_operand(%x: !kiln.tensor<[4], i32>) {
  // expected-error @below {{'kiln.exp' op requires a floating-point operand, got i32}}
  %0 = "kiln.exp"(%x) : (!kiln.tensor<[4], i32>) -> !kiln.tensor<[4], i32>
  return
}
// -----
func.func @gelu$bad_approximation(%x: !kiln.tensor<[4], f32>) {
  // expected-error @below {{'kiln.gelu' op attribute 'approximate' must be "none" or "tanh", got "fast"}}
  %0 = "kiln.gelu"(%x) {approximate = "fast"} : (!kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  return
}
// -----
func.func @where$condition_dtype(%c: !kiln.tensor<[4], f32>, %x: !kiln.tensor<[4], f32>) {
  // expected-error @below {{'kiln.where' op condition must have dtype i1, got f32}}
  %0 = "kiln.where"(%c, %x, %x) : (!kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[4], f32>
  return
}
// -----
func.func @gather$float_indices(%t: !kiln.tensor<[10, 4], f32>, %i: !kiln.tensor<[3], f32>) {
  // expected-error @below {{'kiln.gather' op indices must have an integer dtype, got f32}}
  %0 = "kiln.gather"(%t, %i) : (!kiln.tensor<[10, 4], f32>, !kiln.tensor<[3], f32>) -> !kiln.tensor<[3, 4], f32>
  return
}
// -----
func.func @slice$lengths_differ(%x: !kiln.tensor<[10, 4], f32>) {
  // expected-error @below {{'kiln.slice' op attributes 'starts', 'ends', 'axes' and 'steps' must have the same length}}
  %0 = "kiln.slice"(%x) {starts = array<i64: 0, 1>, ends = array<i64: 5>, axes = array<i64: 0>} : (!kiln.tensor<[10, 4], f32>) -> !kiln.tensor<[5, 4], f32>
  return
}
// -----
func.func @pad$wrong_length(%x: !kiln.tensor<[10, 4], f32>) {
  // expected-error @below {{'kiln.pad' op attribute 'pads' must have 4 values for rank 2, got 2}}
  %0 = "kiln.pad"(%x) {pads = array<i64: 1, 1>} : (!kiln.tensor<[10, 4], f32>) -> !kiln.tensor<[12, 4], f32>
  return
}
// -----
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @expand$incompatible(%x: !kiln.tensor<[3, 4], f32>) {
  // expected-error @below {{'kiln.expand' op operand and target shape are not broadcast-compatible: cannot broadcast [3, 4] with [B, 4] (dim 3 vs B)}}
  %0 = "kiln.expand"(%x) {shape = ["B", 4]} : (!kiln.tensor<[3, 4], f32>) -> !kiln.tensor<["B", 4], f32>
  return
}
// -----
func.func @layer_norm$weight_shape(%x: !kiln.tensor<[2, 8], f32>, %g: !kiln.tensor<[4], f32>) {
  // expected-error @below {{'kiln.layer_norm' op weight must have shape [8], got [4]}}
  %0 = "kiln.layer_norm"(%x, %g) {operandSegmentSizes = array<i32: 1, 1, 0>} : (!kiln.tensor<[2, 8], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[2, 8], f32>
  return
}
// -----
func.func @batch_norm$param_shape(%x: !kiln.tensor<[2, 8, 4, 4], f32>, %c: !kiln.tensor<[4], f32>) {
  // expected-error @below {{'kiln.batch_norm' op scale must have shape [8], got [4]}}
  %0 = "kiln.batch_norm"(%x, %c, %c, %c, %c) : (!kiln.tensor<[2, 8, 4, 4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>, !kiln.tensor<[4], f32>) -> !kiln.tensor<[2, 8, 4, 4], f32>
  return
}
// -----
func.func @attention$head_dims(%q: !kiln.tensor<[2, 8, 16], f32>, %k: !kiln.tensor<[2, 8, 32], f32>) {
  // expected-error @below {{'kiln.attention' op q and k head dims differ: 16 vs 32}}
  %0 = "kiln.attention"(%q, %k, %k) {operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (!kiln.tensor<[2, 8, 16], f32>, !kiln.tensor<[2, 8, 32], f32>, !kiln.tensor<[2, 8, 32], f32>) -> !kiln.tensor<[2, 8, 32], f32>
  return
}
// -----
func.func @packed_attention$heads(%x: !kiln.tensor<["B", 8, 48], f32>) {
  // expected-error @below {{'kiln.packed_attention' op qkv's last dim must be a static multiple of 3 * heads = 15, got [B, 8, 48]}}
  %0 = "kiln.packed_attention"(%x) {heads = 5 : i64} : (!kiln.tensor<["B", 8, 48], f32>) -> !kiln.tensor<["B", 8, 16], f32>
  return
}
// -----
func.func @packed_attention$no_heads(%x: !kiln.tensor<[8, 48], f32>) {
  // expected-error @below {{'kiln.packed_attention' op heads must be positive, got 0}}
  %0 = "kiln.packed_attention"(%x) {heads = 0 : i64} : (!kiln.tensor<[8, 48], f32>) -> !kiln.tensor<[8, 16], f32>
  return
}
// -----
func.func @packed_attention$rank(%x: !kiln.tensor<[48], f32>) {
  // expected-error @below {{'kiln.packed_attention' op qkv must have rank >= 2, got [48]}}
  %0 = "kiln.packed_attention"(%x) {heads = 2 : i64} : (!kiln.tensor<[48], f32>) -> !kiln.tensor<[16], f32>
  return
}
// -----
func.func @constant$shape_mismatch() {
  // expected-error @below {{'kiln.constant' op result #0 dim 0 is 4, but its shape function gives 3 (result [4] vs inferred [3])}}
  %0 = "kiln.constant"() {value = dense<1.0> : tensor<3xf32>} : () -> !kiln.tensor<[4], f32>
  return
}
// -----
func.func @constant$not_elements() {
  // expected-error @below {{'kiln.constant' op attribute 'value' must be a dense or dense_resource elements attribute, got 1.000000e+00 : f32}}
  %0 = "kiln.constant"() {value = 1.0 : f32} : () -> !kiln.tensor<[], f32>
  return
}
// -----
func.func @fallback$unknown_result_dim(%x: !kiln.tensor<[4], f32>) {
  // expected-error @below {{'kiln.fallback' op result #0 must have known dims (a fallback op has no shape function)}}
  %0 = "kiln.fallback"(%x) {op_name = "aten.foo", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0>} : (!kiln.tensor<[4], f32>) -> !kiln.tensor<["?"], f32>
  return
}
// -----
// expected-error @below {{'kiln.symbol' op symbol 'B' has min 8 > max 4}}
"kiln.symbol"() {sym_name = "B", min = 8 : i64, max = 4 : i64} : () -> ()
// -----
// expected-error @below {{'kiln.symbol' op symbol 'B' has opt 8 outside [1, 4]}}
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 4 : i64, opt = 8 : i64} : () -> ()
// -----
// expected-error @below {{'kiln.symbol' op symbol 'B' has min -1 < 0}}
"kiln.symbol"() {sym_name = "B", min = -1 : i64, max = 4 : i64} : () -> ()
// -----
// expected-error @below {{'kiln.symbol' op '2B' is not a valid symbol name}}
"kiln.symbol"() {sym_name = "2B", min = 1 : i64, max = 4 : i64} : () -> ()
// -----
// expected-note @below {{see existing symbol definition here}}
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 4 : i64} : () -> ()
// expected-error @below {{redefinition of symbol named 'B'}}
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 8 : i64} : () -> ()
// -----
func.func @symbol$inside_function() {
  // expected-error @below {{'kiln.symbol' op must be at module level}}
  "kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 4 : i64} : () -> ()
  return
}
// -----
// expected-error @below {{'kiln.symbol' op requires attribute 'min'}}
"kiln.symbol"() {sym_name = "B", max = 4 : i64} : () -> ()
// -----
func.func @range$two_dims() {
  // expected-error @below {{'kiln.range' op attribute 'shape' must hold one known dim, got [2, 3]}}
  %0 = "kiln.range"() {shape = [2, 3]} : () -> !kiln.tensor<[2, 3], i64>
  return
}
// -----
func.func @range$zero_step() {
  // expected-error @below {{'kiln.range' op attribute 'step' must not be 0}}
  %0 = "kiln.range"() {shape = [4], step = 0.0 : f64} : () -> !kiln.tensor<[4], i64>
  return
}
// -----
func.func @gather_elements$rank(%d: !kiln.tensor<[4, 8], f32>, %i: !kiln.tensor<[4], i64>) {
  // expected-error @below {{'kiln.gather_elements' op indices must have the rank of data (2), got [4]}}
  %0 = "kiln.gather_elements"(%d, %i) {axis = 1 : i64} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[4], i64>) -> !kiln.tensor<[4], f32>
  return
}
// -----
func.func @layer_norm$no_segment_sizes(%x: !kiln.tensor<[4, 8], f32>, %g: !kiln.tensor<[8], f32>) {
  // expected-error @below {{'kiln.layer_norm' op needs an 'operandSegmentSizes' attribute: array<i32: ...> with one size per operand group (3 groups; 1 for a required operand, 0 or 1 for an optional one)}}
  %0 = "kiln.layer_norm"(%x, %g) {axis = -1 : i64, epsilon = 1.0e-05 : f64} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
// -----
func.func @layer_norm$short_segment_sizes(%x: !kiln.tensor<[4, 8], f32>, %g: !kiln.tensor<[8], f32>) {
  // expected-error @below {{'kiln.layer_norm' op 'operandSegmentSizes' has 2 sizes, but the op has 3 operand groups}}
  %0 = "kiln.layer_norm"(%x, %g) {axis = -1 : i64, epsilon = 1.0e-05 : f64, operandSegmentSizes = array<i32: 1, 1>} : (!kiln.tensor<[4, 8], f32>, !kiln.tensor<[8], f32>) -> !kiln.tensor<[4, 8], f32>
  return
}
