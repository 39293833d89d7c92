// RUN: kiln-opt %s --split-input-file --kiln-plan-memory | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-plan-memory='reuse=false' | FileCheck %s --check-prefix=NOREUSE
// RUN: kiln-opt %s --split-input-file --kiln-partition --kiln-plan-memory | FileCheck %s --check-prefix=KERNELS
// RUN: kiln-opt %s --split-input-file --kiln-plan-memory='alignment=1' | FileCheck %s --check-prefix=ALIGN1

// A chain ping-pongs between two slots: the planned arena is half the
// no-reuse total, and the output is not in the arena.
// CHECK-LABEL: func.func @chain$mlp
// CHECK-SAME: kiln.arena_buffers = 4 : i64, kiln.arena_size = "128*B", kiln.no_reuse_size = "256*B"
// CHECK-NEXT: "kiln.matmul"(%arg0, %arg1) {kiln.buffers = [{live = array<i64: 0, 1>, offset = "0", size = "64*B"}]}
// CHECK-NEXT: "kiln.relu"({{.*}}) {kiln.buffers = [{live = array<i64: 1, 2>, offset = "64*B", size = "64*B"}]}
// CHECK-NEXT: "kiln.matmul"({{.*}}) {kiln.buffers = [{live = array<i64: 2, 3>, offset = "0", size = "64*B"}]}
// CHECK-NEXT: "kiln.relu"({{.*}}) {kiln.buffers = [{live = array<i64: 3, 4>, offset = "64*B", size = "64*B"}]}
// CHECK-NEXT: "kiln.matmul"({{.*}}) {kiln.buffers = [{output = 0 : i64, size = "64*B"}]}
// NOREUSE-LABEL: func.func @chain$mlp
// NOREUSE-SAME: kiln.arena_size = "256*B", kiln.no_reuse_size = "256*B"
// NOREUSE: offset = "192*B"
// After partitioning the steps are the kernel calls: matmul+relu fuse, so
// two intermediates between three kernels.
// KERNELS-LABEL: func.func @chain$mlp
// KERNELS-SAME: kiln.arena_buffers = 2 : i64, kiln.arena_size = "128*B", kiln.no_reuse_size = "128*B"
// KERNELS-NEXT: call @chain$mlp_k0(%arg0, %arg1) {kiln.buffers = [{live = array<i64: 0, 1>, offset = "0", size = "64*B"}]}
// KERNELS-NEXT: call @chain$mlp_k1({{.*}}) {kiln.buffers = [{live = array<i64: 1, 2>, offset = "64*B", size = "64*B"}]}
// KERNELS-NEXT: call @chain$mlp_k2({{.*}}) {kiln.buffers = [{output = 0 : i64, size = "64*B"}]}
// KERNELS: func.func private @chain$mlp_k0
// KERNELS-NOT: kiln.buffers
// KERNELS: {{^// -----}}
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64, opt = 8 : i64} : () -> ()
func.func @chain$mlp(%x: !kiln.tensor<["B", 16], f32>, %w: !kiln.tensor<[16, 16], f32>) -> !kiln.tensor<["B", 16], f32> {
  %0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 16], f32>) -> !kiln.tensor<["B", 16], f32>
  %1 = "kiln.relu"(%0) : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  %2 = "kiln.matmul"(%1, %w) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 16], f32>) -> !kiln.tensor<["B", 16], f32>
  %3 = "kiln.relu"(%2) : (!kiln.tensor<["B", 16], f32>) -> !kiln.tensor<["B", 16], f32>
  %4 = "kiln.matmul"(%3, %w) : (!kiln.tensor<["B", 16], f32>, !kiln.tensor<[16, 16], f32>) -> !kiln.tensor<["B", 16], f32>
  return %4 : !kiln.tensor<["B", 16], f32>
}

// -----

// Sizes over two symbols: a slot holding a [B, 1] and later a [B, L] buffer
// is max() of both; sizes that are not a multiple of the alignment round up.
// CHECK-LABEL: func.func @mixed$sizes
// CHECK-SAME: kiln.arena_buffers = 5 : i64
// CHECK-SAME: kiln.arena_size = "64*((4*B+63)/64)+64*((4*B*L+63)/64)+max(64*((4*B+63)/64),64*((4*B*L+63)/64))"
// CHECK-SAME: kiln.no_reuse_size = "128*((4*B+63)/64)+192*((4*B*L+63)/64)"
// CHECK-NEXT: "kiln.exp"(%arg0) {kiln.buffers = [{live = array<i64: 0, 3>, offset = "0", size = "64*((4*B*L+63)/64)"}]}
// CHECK-NEXT: "kiln.reduce_sum"
// CHECK-SAME: kiln.buffers = [{live = array<i64: 1, 2>, offset = "64*((4*B*L+63)/64)", size = "64*((4*B+63)/64)"}]
// CHECK-NEXT: "kiln.neg"
// CHECK-SAME: live = array<i64: 2, 5>
// ALIGN1-LABEL: func.func @mixed$sizes
// ALIGN1-SAME: kiln.arena_size = "4*B*L+4*B+max(4*B,4*B*L)", kiln.no_reuse_size = "12*B*L+8*B"
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64, opt = 8 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 512 : i64, opt = 128 : i64} : () -> ()
func.func @mixed$sizes(%x: !kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32> {
  %0 = "kiln.exp"(%x) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  %1 = "kiln.reduce_sum"(%0) {axes = array<i64: 1>, keepdims = true} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", 1], f32>
  %2 = "kiln.neg"(%1) : (!kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", 1], f32>
  %3 = "kiln.mul"(%0, %2) : (!kiln.tensor<["B", "L"], f32>, !kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", "L"], f32>
  %4 = "kiln.exp"(%3) : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L"], f32>
  %5 = "kiln.add"(%4, %2) : (!kiln.tensor<["B", "L"], f32>, !kiln.tensor<["B", 1], f32>) -> !kiln.tensor<["B", "L"], f32>
  return %5 : !kiln.tensor<["B", "L"], f32>
}
