// RUN: kiln-opt %s --kiln-cpu-prepare --kiln-cpu-bufferize | FileCheck %s

// A library-call placeholder reads every operand: its payload (never run)
// uses each block argument, so one-shot bufferization keeps %a intact for
// it.  Here %a2 overwrites %a's values before the call in buffer order: it
// must go to a buffer of its own (the call reads the old %a).  With a
// payload that only yielded its output, the analysis took the inputs as
// unread and wrote %a2 in place: the call read 1.0s (a LLaMA's tokens went
// wrong that way).
#id = affine_map<(d0, d1) -> (d0, d1)>
#in = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#out = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
// CHECK-LABEL: func.func @reads_its_inputs(
// CHECK-SAME: %[[X:.*]]: memref<4x8xf32>, %[[Y:.*]]: memref<4x8xf32>, %[[A:.*]]: memref<4x8xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[X]] : memref<4x8xf32>) outs(%[[A]] : memref<4x8xf32>)
// CHECK: math.exp
// CHECK: %[[A2:.*]] = memref.alloc() {{.*}} : memref<4x8xf32>
// CHECK: linalg.generic {{.*}} outs(%[[A2]] : memref<4x8xf32>)
// CHECK: linalg.generic {{.*}}library_call = "native.rms_norm"} ins(%[[A]] : memref<4x8xf32>) outs(%[[Y]] : memref<4x8xf32>)
// CHECK: memref.copy %[[A2]], %[[A]]
func.func @reads_its_inputs(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %one = arith.constant 1.000000e+00 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = math.exp %in : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %a2 = linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%a : tensor<4x8xf32>) {
  ^bb0(%o: f32):
    linalg.yield %one : f32
  } -> tensor<4x8xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %y = linalg.generic {indexing_maps = [#in, #out], iterator_types = ["reduction", "reduction", "parallel", "parallel"], library_call = "native.rms_norm"} ins(%a : tensor<4x8xf32>) outs(%e2 : tensor<4x8xf32>) attrs = {kiln.call_args = ["x", "res"], kiln.call_attrs = {axis = -1 : i64, epsilon = 1.0e-06 : f64}} {
  ^bb0(%in: f32, %o: f32):
    %z = arith.mulf %in, %cst : f32
    %r = arith.addf %o, %z : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  return %y, %a2 : tensor<4x8xf32>, tensor<4x8xf32>
}
