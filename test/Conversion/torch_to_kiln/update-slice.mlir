// RUN: kiln-opt %s --convert-torch-to-kiln | FileCheck %s
// torch's spellings of a slice update (what torch.export makes of
// `cache[:, p:p+L] = new` and `cache[:, arange(p, p+L)] = new`) import as
// kiln.update_slice at offset P, never as a fallback; aten.copy is the
// written value itself when the shapes and dtypes agree.

// CHECK-LABEL: func.func @slice_assign
// CHECK-NOT: kiln.fallback
// CHECK: %[[U:.*]] = "kiln.update_slice"(%arg0, %arg1) {axis = 1 : i64, offset = ["P"]} : (!kiln.tensor<[2, 64], f32>, !kiln.tensor<[2, "L"], f32>) -> !kiln.tensor<[2, 64], f32>
// CHECK-NOT: kiln.fallback
// CHECK: "kiln.gather"(%[[U]]
// CHECK: return %[[U]]
func.func @slice_assign(%arg0: !torch.vtensor<[2,64],f32>, %arg1: !torch.vtensor<[2,?],f32>, %arg2: !torch.vtensor<[?],f32>) -> (!torch.vtensor<[2,64],f32>, !torch.vtensor<[2],f32>) {
  %0 = torch.symbolic_int "L" {min_val = 1, max_val = 16} : !torch.int
  %1 = torch.symbolic_int "P" {min_val = 1, max_val = 48} : !torch.int
  torch.bind_symbolic_shape %arg1, [%0], affine_map<()[s0] -> (2, s0)> : !torch.vtensor<[2,?],f32>
  torch.bind_symbolic_shape %arg2, [%1], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],f32>
  %int1 = torch.constant.int 1
  %2 = torch.aten.size.int %arg1, %int1 : !torch.vtensor<[2,?],f32>, !torch.int -> !torch.int
  %int0 = torch.constant.int 0
  %3 = torch.aten.size.int %arg2, %int0 : !torch.vtensor<[?],f32>, !torch.int -> !torch.int
  %4 = torch.aten.add.int %3, %2 : !torch.int, !torch.int -> !torch.int
  %5 = torch.aten.slice.Tensor %arg0, %int1, %3, %4, %int1 : !torch.vtensor<[2,64],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,?],f32>
  torch.bind_symbolic_shape %5, [%0], affine_map<()[s0] -> (2, s0)> : !torch.vtensor<[2,?],f32>
  %false = torch.constant.bool false
  %6 = torch.aten.copy %5, %arg1, %false : !torch.vtensor<[2,?],f32>, !torch.vtensor<[2,?],f32>, !torch.bool -> !torch.vtensor<[2,?],f32>
  torch.bind_symbolic_shape %6, [%0], affine_map<()[s0] -> (2, s0)> : !torch.vtensor<[2,?],f32>
  %7 = torch.aten.slice_scatter %arg0, %6, %int1, %3, %4, %int1 : !torch.vtensor<[2,64],f32>, !torch.vtensor<[2,?],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,64],f32>
  %none = torch.constant.none
  %8 = torch.aten.slice.Tensor %7, %int1, %none, %4, %int1 : !torch.vtensor<[2,64],f32>, !torch.int, !torch.none, !torch.int, !torch.int -> !torch.vtensor<[2,?],f32>
  torch.bind_symbolic_shape %8, [%1, %0], affine_map<()[s0, s1] -> (2, s0 + s1)> : !torch.vtensor<[2,?],f32>
  %9 = torch.prim.ListConstruct %int1 : (!torch.int) -> !torch.list<int>
  %10 = torch.aten.sum.dim_IntList %8, %9, %false, %none : !torch.vtensor<[2,?],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2],f32>
  return %7, %10 : !torch.vtensor<[2,64],f32>, !torch.vtensor<[2],f32>
}

// index_put (index_copy decomposes to it) with [None, arange(P, P+L)].
// CHECK-LABEL: func.func @index_put_arange
// CHECK-NOT: kiln.fallback
// CHECK: "kiln.update_slice"(%arg0, %arg1) {axis = 1 : i64, offset = ["P"]} : (!kiln.tensor<[2, 64], f32>, !kiln.tensor<[2, "L"], f32>) -> !kiln.tensor<[2, 64], f32>
// CHECK-NOT: kiln.fallback
// CHECK: return
func.func @index_put_arange(%arg0: !torch.vtensor<[2,64],f32>, %arg1: !torch.vtensor<[2,?],f32>, %arg2: !torch.vtensor<[?],f32>) -> !torch.vtensor<[2,64],f32> {
  %0 = torch.symbolic_int "L" {min_val = 1, max_val = 16} : !torch.int
  %1 = torch.symbolic_int "P" {min_val = 1, max_val = 48} : !torch.int
  torch.bind_symbolic_shape %arg1, [%0], affine_map<()[s0] -> (2, s0)> : !torch.vtensor<[2,?],f32>
  torch.bind_symbolic_shape %arg2, [%1], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],f32>
  %int1 = torch.constant.int 1
  %2 = torch.aten.size.int %arg1, %int1 : !torch.vtensor<[2,?],f32>, !torch.int -> !torch.int
  %int0 = torch.constant.int 0
  %3 = torch.aten.size.int %arg2, %int0 : !torch.vtensor<[?],f32>, !torch.int -> !torch.int
  %4 = torch.aten.add.int %3, %2 : !torch.int, !torch.int -> !torch.int
  %none = torch.constant.none
  %cpu = torch.constant.device "cpu"
  %false = torch.constant.bool false
  %5 = torch.aten.arange.start_step %3, %4, %int1, %none, %int0, %cpu, %false : !torch.int, !torch.int, !torch.int, !torch.none, !torch.int, !torch.Device, !torch.bool -> !torch.vtensor<[?],si64>
  torch.bind_symbolic_shape %5, [%0], affine_map<()[s0] -> (s0)> : !torch.vtensor<[?],si64>
  %6 = torch.prim.ListConstruct %none, %5 : (!torch.none, !torch.vtensor<[?],si64>) -> !torch.list<optional<vtensor>>
  %7 = torch.aten.index_put %arg0, %6, %arg1, %false : !torch.vtensor<[2,64],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[2,?],f32>, !torch.bool -> !torch.vtensor<[2,64],f32>
  return %7 : !torch.vtensor<[2,64],f32>
}

// An index that is not an arange (a tensor input) stays a fallback.
// CHECK-LABEL: func.func @index_put_other
// CHECK: "kiln.fallback"
// CHECK-NOT: kiln.update_slice
func.func @index_put_other(%arg0: !torch.vtensor<[2,64],f32>, %arg1: !torch.vtensor<[2,3],f32>, %arg2: !torch.vtensor<[3],si64>) -> !torch.vtensor<[2,64],f32> {
  %none = torch.constant.none
  %false = torch.constant.bool false
  %6 = torch.prim.ListConstruct %none, %arg2 : (!torch.none, !torch.vtensor<[3],si64>) -> !torch.list<optional<vtensor>>
  %7 = torch.aten.index_put %arg0, %6, %arg1, %false : !torch.vtensor<[2,64],f32>, !torch.list<optional<vtensor>>, !torch.vtensor<[2,3],f32>, !torch.bool -> !torch.vtensor<[2,64],f32>
  return %7 : !torch.vtensor<[2,64],f32>
}

// A static slice_scatter with a broadcast source (copy of a [1, 2] row into [2, 2]).
// CHECK-LABEL: func.func @static_broadcast
// CHECK: %[[E:.*]] = "kiln.expand"(%arg1) {shape = [2, 2]}
// CHECK: "kiln.update_slice"(%arg0, %[[E]]) {axis = 1 : i64, offset = [3]}
func.func @static_broadcast(%arg0: !torch.vtensor<[2,8],f32>, %arg1: !torch.vtensor<[1,2],f32>) -> !torch.vtensor<[2,8],f32> {
  %int1 = torch.constant.int 1
  %int3 = torch.constant.int 3
  %int5 = torch.constant.int 5
  %5 = torch.aten.slice.Tensor %arg0, %int1, %int3, %int5, %int1 : !torch.vtensor<[2,8],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2],f32>
  %false = torch.constant.bool false
  %6 = torch.aten.copy %5, %arg1, %false : !torch.vtensor<[2,2],f32>, !torch.vtensor<[1,2],f32>, !torch.bool -> !torch.vtensor<[2,2],f32>
  %7 = torch.aten.slice_scatter %arg0, %6, %int1, %int3, %int5, %int1 : !torch.vtensor<[2,8],f32>, !torch.vtensor<[2,2],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,8],f32>
  return %7 : !torch.vtensor<[2,8],f32>
}
