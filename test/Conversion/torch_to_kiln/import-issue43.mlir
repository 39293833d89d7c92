// Common dynamic-shape code through kiln-import (issue 43): slices with
// negative indices, strided slices and convolutions (floor divisions), and
// inputs sized by derived Dims, each with exact symbolic dims.
// The factories are in Inputs/issue43_models.py.

// RUN: env PYTHONPATH=%S/Inputs kiln-import issue43_models:slices --elide-weights | FileCheck %s --check-prefix=SLICE
// RUN: env PYTHONPATH=%S/Inputs kiln-import issue43_models:strided --elide-weights | FileCheck %s --check-prefix=STRIDED
// RUN: env PYTHONPATH=%S/Inputs kiln-import issue43_models:strided_conv --elide-weights | FileCheck %s --check-prefix=CONV
// RUN: env PYTHONPATH=%S/Inputs kiln-import issue43_models:derived --elide-weights | FileCheck %s --check-prefix=DERIVED
// RUN: env PYTHONPATH=%S/Inputs kiln-import issue43_models:derived_only --elide-weights | FileCheck %s --check-prefix=ROOT

// x[:, 1:], x[:, :-1], x[:, -1:] ("dim -1 is negative" before).
// SLICE: "kiln.symbol"() {max = 64 : i64, min = 6 : i64, sym_name = "L"}
// SLICE: func.func @main(%arg0: !kiln.tensor<["B", "L"], f32> {kiln.name = "x"}) -> (!kiln.tensor<["B", "L-1"], f32>, !kiln.tensor<["B", "L-1"], f32>, !kiln.tensor<["B", 1], f32>, !kiln.tensor<["B", "L-1"], f32>)
// SLICE: "kiln.slice"(%arg0) {axes = array<i64: 1>, ends = array<i64: 4611686018427387904>, starts = array<i64: 1>, steps = array<i64: 1>} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L-1"], f32>
// SLICE: "kiln.slice"(%arg0) {axes = array<i64: 1>, ends = array<i64: -1>, starts = array<i64: 0>, steps = array<i64: 1>} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "L-1"], f32>
// SLICE: "kiln.slice"(%arg0) {axes = array<i64: 1>, ends = array<i64: 4611686018427387904>, starts = array<i64: -1>, steps = array<i64: 1>} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", 1], f32>
// SLICE: "kiln.sub"({{.*}}) : (!kiln.tensor<["B", "L-1"], f32>, !kiln.tensor<["B", "L-1"], f32>) -> !kiln.tensor<["B", "L-1"], f32>
// SLICE-NOT: kiln.fallback

// x[:, ::2], x[:, 1::3] (torch-mlir's "FloorDiv not implemented" before).
// STRIDED: func.func @main(%arg0: !kiln.tensor<["B", "L"], f32> {kiln.name = "x"}) -> (!kiln.tensor<["B", "(L+1)/2"], f32>, !kiln.tensor<["B", "(L+1)/3"], f32>)
// STRIDED: "kiln.slice"(%arg0) {{{.*}}steps = array<i64: 2>} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "(L+1)/2"], f32>
// STRIDED: "kiln.slice"(%arg0) {{{.*}}starts = array<i64: 1>, steps = array<i64: 3>} : (!kiln.tensor<["B", "L"], f32>) -> !kiln.tensor<["B", "(L+1)/3"], f32>
// STRIDED-NOT: kiln.fallback

// A stride-2 unpadded 3x3 convolution over symbolic H and W.
// CONV: func.func @main(%arg0: !kiln.tensor<["B", 3, "H", "W"], f32> {kiln.name = "x"}) -> !kiln.tensor<["B", 4, "(H-3)/2+1", "(W-3)/2+1"], f32>
// CONV: "kiln.conv2d"({{.*}}strides = array<i64: 2, 2>} : {{.*}} -> !kiln.tensor<["B", 4, "(H-3)/2+1", "(W-3)/2+1"], f32>
// CONV-NOT: kiln.fallback

// Inputs of 2*L and L+1 ("'2*s27' is not a valid symbol name" before): the
// derived dims are expressions of L, never symbols of their own.
// DERIVED: "kiln.symbol"() {max = 8 : i64, min = 1 : i64, sym_name = "B"}
// DERIVED-NEXT: "kiln.symbol"() {max = 64 : i64, min = 6 : i64, sym_name = "L"}
// DERIVED-NEXT: func.func @main(%arg0: !kiln.tensor<["B", "L"], f32> {kiln.name = "x"}, %arg1: !kiln.tensor<["B", "2*L"], f32> {kiln.name = "y"}, %arg2: !kiln.tensor<["B", "L+1"], f32> {kiln.name = "z"}) -> (!kiln.tensor<["B", "2*L"], f32>, !kiln.tensor<["B", "L"], f32>)
// DERIVED: "kiln.concat"(%arg0, %arg0) {{.*}} -> !kiln.tensor<["B", "2*L"], f32>
// DERIVED: "kiln.slice"(%arg2) {{.*}} : (!kiln.tensor<["B", "L+1"], f32>) -> !kiln.tensor<["B", "L"], f32>
// DERIVED-NOT: kiln.fallback

// Only L+1 in the inputs: the root keeps the user's name L.
// ROOT: "kiln.symbol"() {max = 64 : i64, min = 6 : i64, sym_name = "L"}
// ROOT-NEXT: func.func @main(%arg0: !kiln.tensor<[2, "L+1"], f32> {kiln.name = "x"}) -> (!kiln.tensor<[2, "L"], f32>, !kiln.tensor<[2, "L"], f32>, !kiln.tensor<[2, 1], f32>, !kiln.tensor<[2, "L"], f32>)

// The same shape maps as torch-mlir's importer writes them, through
// kiln-opt: negative constants, floor division, and a derived symbol.
// RUN: kiln-opt %s --convert-torch-to-kiln | FileCheck %s --check-prefix=MAPS
// MAPS: "kiln.symbol"() {max = 8 : i64, min = 1 : i64, sym_name = "B"}
// MAPS-NEXT: "kiln.symbol"() {max = 64 : i64, min = 6 : i64, sym_name = "L"}
// MAPS-NOT: kiln.symbol
// MAPS-LABEL: func.func @maps
// MAPS-SAME: (%arg0: !kiln.tensor<["B", "L"], f32>, %arg1: !kiln.tensor<["B", "2*L"], f32>)
// MAPS: "kiln.slice"(%arg0) {{.*}} -> !kiln.tensor<["B", "L-1"], f32>
// MAPS: "kiln.slice"(%arg1) {{.*}} -> !kiln.tensor<["B", "L"], f32>
// MAPS: return {{.*}} : !kiln.tensor<["B", "L-1"], f32>, !kiln.tensor<["B", "L"], f32>
func.func @maps(%arg0: !torch.vtensor<[?,?],f32>, %arg1: !torch.vtensor<[?,?],f32>) -> (!torch.vtensor<[?,?],f32>, !torch.vtensor<[?,?],f32>) {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 8} : !torch.int
  %1 = torch.symbolic_int "L" {min_val = 6, max_val = 64} : !torch.int
  %2 = torch.symbolic_int "2*L" {min_val = 12, max_val = 128} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, s1)> : !torch.vtensor<[?,?],f32>
  torch.bind_symbolic_shape %arg1, [%0, %1], affine_map<()[s0, s1] -> (s0, s1 * 2)> : !torch.vtensor<[?,?],f32>
  %int1 = torch.constant.int 1
  %int-1 = torch.constant.int -1
  %int0 = torch.constant.int 0
  %int2 = torch.constant.int 2
  %int_end = torch.constant.int 9223372036854775807
  %3 = torch.aten.slice.Tensor %arg0, %int1, %int1, %int_end, %int1 : !torch.vtensor<[?,?],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  torch.bind_symbolic_shape %3, [%0, %1], affine_map<()[s0, s1] -> (s0, s1 - 1)> : !torch.vtensor<[?,?],f32>
  %4 = torch.aten.slice.Tensor %arg1, %int1, %int0, %int_end, %int2 : !torch.vtensor<[?,?],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[?,?],f32>
  torch.bind_symbolic_shape %4, [%0, %1], affine_map<()[s0, s1] -> (s0, (s1 * 2 + 1) floordiv 2)> : !torch.vtensor<[?,?],f32>
  return %3, %4 : !torch.vtensor<[?,?],f32>, !torch.vtensor<[?,?],f32>
}
