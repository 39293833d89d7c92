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
