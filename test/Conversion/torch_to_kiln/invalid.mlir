// RUN: kiln-opt %s --split-input-file --verify-diagnostics --convert-torch-to-kiln='fallback=false'

// With fallback disabled, every op without a kiln lowering is an error at its location.

func.func @unsupported$no_pattern(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  // expected-error @+1 {{unsupported op 'aten.special_bessel_j0.default': no kiln pattern for this op}}
  %0 = torch.operator "torch.aten.special_bessel_j0.default"(%arg0) : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}

// -----

func.func @unsupported$transposed_conv(%x: !torch.vtensor<[1,3,8,8],f32>, %w: !torch.vtensor<[3,2,3,3],f32>) -> !torch.vtensor<[1,2,10,10],f32> {
  %none = torch.constant.none
  %int1 = torch.constant.int 1
  %int0 = torch.constant.int 0
  %l1 = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
  %l0 = torch.prim.ListConstruct %int0, %int0 : (!torch.int, !torch.int) -> !torch.list<int>
  %true = torch.constant.bool true
  // expected-error @+1 {{unsupported op 'aten.convolution': transposed convolution}}
  %0 = torch.aten.convolution %x, %w, %none, %l1, %l0, %l1, %true, %l0, %int1 : !torch.vtensor<[1,3,8,8],f32>, !torch.vtensor<[3,2,3,3],f32>, !torch.none, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[1,2,10,10],f32>
  return %0 : !torch.vtensor<[1,2,10,10],f32>
}

// -----

func.func @unsupported$onnx_op(%arg0: !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[2,3],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  // expected-error @+1 {{unsupported op 'onnx.Round': no kiln pattern for this op}}
  %0 = torch.operator "onnx.Round"(%arg0) : (!torch.vtensor<[2,3],f32>) -> !torch.vtensor<[2,3],f32>
  return %0 : !torch.vtensor<[2,3],f32>
}

// -----

func.func @unsupported$unbind_symbolic_axis(%arg0: !torch.vtensor<[?,3],f32>) -> !torch.vtensor<[3],f32> {
  %0 = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %arg0, [%0], affine_map<()[s0] -> (s0, 3)> : !torch.vtensor<[?,3],f32>
  %int0 = torch.constant.int 0
  // expected-error @+1 {{unsupported op 'aten.unbind.int': unbind of a symbolic axis}}
  %1 = torch.aten.unbind.int %arg0, %int0 : !torch.vtensor<[?,3],f32>, !torch.int -> !torch.list<vtensor>
  %2 = torch.prim.ListUnpack %1 : !torch.list<vtensor> -> !torch.vtensor<[3],f32>
  return %2 : !torch.vtensor<[3],f32>
}

// -----

func.func @unsupported$gather_nd_symbolic_rows(%x: !torch.vtensor<[4,5],f32>, %i: !torch.vtensor<[3,?],si64>) -> !torch.vtensor<[3,?],f32> attributes {torch.onnx_meta.opset_version = 13 : si64} {
  // expected-error @+1 {{unsupported op 'onnx.GatherND': GatherND with a symbolic last dim of indices}}
  %0 = torch.operator "onnx.GatherND"(%x, %i) : (!torch.vtensor<[4,5],f32>, !torch.vtensor<[3,?],si64>) -> !torch.vtensor<[3,?],f32>
  return %0 : !torch.vtensor<[3,?],f32>
}

// -----

func.func @unsupported$gather_nd_rows_too_long(%x: !torch.vtensor<[4,5],f32>, %i: !torch.vtensor<[4,2],si64>) -> !torch.vtensor<[4],f32> attributes {torch.onnx_meta.opset_version = 13 : si64} {
  // expected-error @+1 {{unsupported op 'onnx.GatherND': GatherND with batch_dims 1 and rows of 2 indices for data of rank 2}}
  %0 = torch.operator "onnx.GatherND"(%x, %i) {torch.onnx.batch_dims = 1 : si64} : (!torch.vtensor<[4,5],f32>, !torch.vtensor<[4,2],si64>) -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}
