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
