// RUN: not kiln-opt %s --split-input-file --kiln-cpu-library-calls 2>&1 | FileCheck %s
// RUN: not kiln-opt %s --split-input-file --kiln-cpu-to-llvm 2>&1 | FileCheck %s --check-prefix=LLVM

// A library-call placeholder names a registered CPU library kernel, and
// kiln.call_args names every operand the kernel's signature measures.  A
// placeholder left to kiln-cpu-to-llvm would become loops that compute
// nothing: refused at its location.

#in = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#out = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
// CHECK: kiln-cpu-library-calls-invalid.mlir:[[# @LINE + 3]]:3: error: library call 'native.nope' is not a registered CPU library kernel
// LLVM: kiln-cpu-library-calls-invalid.mlir:[[# @LINE + 2]]:3: error: library call 'native.nope' was not lowered: run kiln-cpu-library-calls after kiln-cpu-bufferize
func.func @unknown(%x: memref<4x8xf32>, %y: memref<4x8xf32>) {
  linalg.generic {indexing_maps = [#in, #out], iterator_types = ["reduction", "reduction", "parallel", "parallel"], library_call = "native.nope"} ins(%x : memref<4x8xf32>) outs(%y : memref<4x8xf32>) attrs = {kiln.call_args = ["x", "res"], kiln.call_attrs = {}} {
  ^bb0(%a: f32, %b: f32):
    linalg.yield %b : f32
  }
  return
}

// -----

#in = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#out = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
// CHECK: kiln-cpu-library-calls-invalid.mlir:[[# @LINE + 3]]:3: error: library call 'native.layer_norm' needs operand(s) ['x'] that kiln.call_args = ['input', 'res'] does not name
// LLVM: kiln-cpu-library-calls-invalid.mlir:[[# @LINE + 2]]:3: error: library call 'native.layer_norm' was not lowered
func.func @misnamed(%x: memref<4x8xf32>, %y: memref<4x8xf32>) {
  linalg.generic {indexing_maps = [#in, #out], iterator_types = ["reduction", "reduction", "parallel", "parallel"], library_call = "native.layer_norm"} ins(%x : memref<4x8xf32>) outs(%y : memref<4x8xf32>) attrs = {kiln.call_args = ["input", "res"], kiln.call_attrs = {axis = -1 : i64, epsilon = 1.0e-05 : f64}} {
  ^bb0(%a: f32, %b: f32):
    linalg.yield %b : f32
  }
  return
}

// -----

// The output misnamed: its pointer would have been 0.
#in = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
#out = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
// CHECK: kiln-cpu-library-calls-invalid.mlir:[[# @LINE + 2]]:3: error: library call 'native.rms_norm' needs operand(s) ['res'] that kiln.call_args = ['x', 'out'] does not name
func.func @output_misnamed(%x: memref<4x8xf32>, %y: memref<4x8xf32>) {
  linalg.generic {indexing_maps = [#in, #out], iterator_types = ["reduction", "reduction", "parallel", "parallel"], library_call = "native.rms_norm"} ins(%x : memref<4x8xf32>) outs(%y : memref<4x8xf32>) attrs = {kiln.call_args = ["x", "out"], kiln.call_attrs = {axis = -1 : i64, epsilon = 1.0e-05 : f64}} {
  ^bb0(%a: f32, %b: f32):
    linalg.yield %b : f32
  }
  return
}
