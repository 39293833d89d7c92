// RUN: kiln-opt %s --convert-torch-to-kiln | FileCheck %s

// Integer scalar arithmetic on sizes may pass through negative values (a
// scalar is no dim): ShuffleNet's channel shuffle views its input with sizes
// computed as ((H + -1) // 2 + 1) after torch.export's size arithmetic.
// CHECK-LABEL: func.func @view$negative_term
// CHECK: "kiln.reshape"(%{{.*}}) {shape = ["B", 2, 4, "H/2"]} : (!kiln.tensor<["B", 8, "H/2"], f32>) -> !kiln.tensor<["B", 2, 4, "H/2"], f32>
func.func @view$negative_term(%arg0: !torch.vtensor<[?,8,?],f32>) -> !torch.vtensor<[?,2,4,?],f32> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  %1 = torch.symbolic_int "H" {min_val = 3, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0, %1], affine_map<()[s0, s1] -> (s0, 8, s1 floordiv 2)> : !torch.vtensor<[?,8,?],f32>
  %int0 = torch.constant.int 0
  %int2 = torch.constant.int 2
  %int4 = torch.constant.int 4
  %intm1 = torch.constant.int -1
  %intm3 = torch.constant.int -3
  %b = torch.aten.size.int %arg0, %int0 : !torch.vtensor<[?,8,?],f32>, !torch.int -> !torch.int
  %h = torch.aten.size.int %arg0, %int2 : !torch.vtensor<[?,8,?],f32>, !torch.int -> !torch.int
  // (H/2 + -1) + 1, and (-1) * (-3) + -3 = 0 added: both stay exact.
  %a = torch.aten.add.int %h, %intm1 : !torch.int, !torch.int -> !torch.int
  %c = torch.aten.mul.int %intm1, %intm3 : !torch.int, !torch.int -> !torch.int
  %d = torch.aten.add.int %c, %intm3 : !torch.int, !torch.int -> !torch.int
  %e = torch.aten.add.int %a, %d : !torch.int, !torch.int -> !torch.int
  %int1 = torch.constant.int 1
  %f = torch.aten.add.int %e, %int1 : !torch.int, !torch.int -> !torch.int
  %list = torch.prim.ListConstruct %b, %int2, %int4, %f : (!torch.int, !torch.int, !torch.int, !torch.int) -> !torch.list<int>
  %2 = torch.aten.view %arg0, %list : !torch.vtensor<[?,8,?],f32>, !torch.list<int> -> !torch.vtensor<[?,2,4,?],f32>
  return %2 : !torch.vtensor<[?,2,4,?],f32>
}
