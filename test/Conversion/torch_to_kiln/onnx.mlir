// RUN: kiln-opt %s --convert-torch-to-kiln --mlir-print-debuginfo | FileCheck %s

// ONNX ops as torch-mlir's ONNX importer leaves them (torch.operator "onnx.*").
// Shape subgraphs fold into attributes; each kiln op keeps the node's NameLoc.

// CHECK-LABEL: func.func @gemm$trans_b
// CHECK: %[[T:.*]] = "kiln.transpose"(%arg1) {perm = array<i64: 1, 0>}
// CHECK: %[[M:.*]] = "kiln.matmul"(%arg0, %[[T]]) : {{.*}} -> !kiln.tensor<[2, 5], f32>
// CHECK: %[[A:.*]] = "kiln.mul"(%[[M]], %{{.*}})
// CHECK: "kiln.add"(%[[A]], %arg2)
func.func @gemm$trans_b(%a: !torch.vtensor<[2,4],f32>, %b: !torch.vtensor<[5,4],f32>, %c: !torch.vtensor<[5],f32>) -> !torch.vtensor<[2,5],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Gemm"(%a, %b, %c) {torch.onnx.alpha = 2.0 : f32, torch.onnx.transB = 1 : si64} : (!torch.vtensor<[2,4],f32>, !torch.vtensor<[5,4],f32>, !torch.vtensor<[5],f32>) -> !torch.vtensor<[2,5],f32>
  return %0 : !torch.vtensor<[2,5],f32>
}

// CHECK-LABEL: func.func @conv$auto_pad_same_upper
// CHECK: "kiln.conv2d"(%arg0, %arg1) {dilations = array<i64: 1, 1>, groups = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : {{.*}} -> !kiln.tensor<[1, 4, 8, 8], f32>
func.func @conv$auto_pad_same_upper(%x: !torch.vtensor<[1,3,8,8],f32>, %w: !torch.vtensor<[4,3,3,3],f32>) -> !torch.vtensor<[1,4,8,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Conv"(%x, %w) {torch.onnx.auto_pad = "SAME_UPPER", torch.onnx.kernel_shape = [3 : si64, 3 : si64]} : (!torch.vtensor<[1,3,8,8],f32>, !torch.vtensor<[4,3,3,3],f32>) -> !torch.vtensor<[1,4,8,8],f32>
  return %0 : !torch.vtensor<[1,4,8,8],f32>
}

// CHECK-LABEL: func.func @reshape$shape_subgraph_folds
// CHECK-NOT: "kiln.fallback"
// CHECK: "kiln.reshape"(%arg0) {shape = ["B", 12]} : (!kiln.tensor<["B", 3, 4], f32>) -> !kiln.tensor<["B", 12], f32>
func.func @reshape$shape_subgraph_folds(%x: !torch.vtensor<[?,3,4],f32>) -> !torch.vtensor<[?,12],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %b = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  torch.bind_symbolic_shape %x, [%b], affine_map<()[s0] -> (s0, 3, 4)> : !torch.vtensor<[?,3,4],f32>
  %shape = torch.operator "onnx.Shape"(%x) : (!torch.vtensor<[?,3,4],f32>) -> !torch.vtensor<[3],si64>
  %idx = torch.operator "onnx.Constant"() {torch.onnx.value = dense<0> : tensor<1xsi64>} : () -> !torch.vtensor<[1],si64>
  %n = torch.operator "onnx.Gather"(%shape, %idx) {torch.onnx.axis = 0 : si64} : (!torch.vtensor<[3],si64>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[1],si64>
  %m1 = torch.operator "onnx.Constant"() {torch.onnx.value = dense<-1> : tensor<1xsi64>} : () -> !torch.vtensor<[1],si64>
  %target = torch.operator "onnx.Concat"(%n, %m1) {torch.onnx.axis = 0 : si64} : (!torch.vtensor<[1],si64>, !torch.vtensor<[1],si64>) -> !torch.vtensor<[2],si64>
  %0 = torch.operator "onnx.Reshape"(%x, %target) : (!torch.vtensor<[?,3,4],f32>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[?,12],f32>
  return %0 : !torch.vtensor<[?,12],f32>
}

// CHECK-LABEL: func.func @softmax$opset11_flattens
// CHECK: %[[F:.*]] = "kiln.reshape"(%arg0) {shape = [2, 12]}
// CHECK: %[[S:.*]] = "kiln.softmax"(%[[F]]) {axis = -1 : i64}
// CHECK: "kiln.reshape"(%[[S]]) {shape = [2, 3, 4]}
func.func @softmax$opset11_flattens(%x: !torch.vtensor<[2,3,4],f32>) -> !torch.vtensor<[2,3,4],f32> attributes {torch.onnx_meta.opset_version = 11 : si64} {
  %0 = torch.operator "onnx.Softmax"(%x) {torch.onnx.axis = 1 : si64} : (!torch.vtensor<[2,3,4],f32>) -> !torch.vtensor<[2,3,4],f32>
  return %0 : !torch.vtensor<[2,3,4],f32>
}

// CHECK-LABEL: func.func @batchnorm$inference
// CHECK: "kiln.batch_norm"(%arg0, %arg1, %arg2, %arg3, %arg4) {epsilon = 5.000000e-01 : f64}
func.func @batchnorm$inference(%x: !torch.vtensor<[1,2,4,4],f32>, %s: !torch.vtensor<[2],f32>, %b: !torch.vtensor<[2],f32>, %m: !torch.vtensor<[2],f32>, %v: !torch.vtensor<[2],f32>) -> !torch.vtensor<[1,2,4,4],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.BatchNormalization"(%x, %s, %b, %m, %v) {torch.onnx.epsilon = 5.0e-01 : f32} : (!torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[2],f32>, !torch.vtensor<[2],f32>, !torch.vtensor<[2],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[1,2,4,4],f32>
  return %0 : !torch.vtensor<[1,2,4,4],f32>
}

// CHECK-LABEL: func.func @lrn$decomposed
// CHECK: "kiln.pad"
// CHECK-COUNT-3: "kiln.slice"
// CHECK: "kiln.pow"
// CHECK: "kiln.div"
func.func @lrn$decomposed(%x: !torch.vtensor<[1,4,2,2],f32>) -> !torch.vtensor<[1,4,2,2],f32> attributes {torch.onnx_meta.opset_version = 13 : si64} {
  %0 = torch.operator "onnx.LRN"(%x) {torch.onnx.size = 3 : si64} : (!torch.vtensor<[1,4,2,2],f32>) -> !torch.vtensor<[1,4,2,2],f32>
  return %0 : !torch.vtensor<[1,4,2,2],f32>
}

// GatherND: each row of indices picks a slice of data's leading axes, as
// advanced indexing: the rows' columns, each wrapped (negative values count
// from the end), linearized over the static [3, 4] and gathered from data
// with those axes merged.
// CHECK-LABEL: func.func @gather_nd
// CHECK: %[[I0:.*]] = "kiln.slice"(%arg1) {axes = array<i64: 1>, ends = array<i64: 1>, starts = array<i64: 0>
// CHECK: %[[R0:.*]] = "kiln.reshape"(%[[I0]]) {shape = [6]}
// CHECK: %[[I1:.*]] = "kiln.slice"(%arg1) {axes = array<i64: 1>, ends = array<i64: 2>, starts = array<i64: 1>
// CHECK: %[[R1:.*]] = "kiln.reshape"(%[[I1]]) {shape = [6]}
// CHECK: %[[FOUR:.*]] = "kiln.constant"() {value = dense<4> : tensor<i64>}
// CHECK: %[[W1:.*]] = "kiln.where"
// CHECK: %[[THREE:.*]] = "kiln.constant"() {value = dense<3> : tensor<i64>}
// CHECK: %[[W0:.*]] = "kiln.where"
// CHECK: %[[S:.*]] = "kiln.mul"(%[[W0]], %{{.*}})
// CHECK: %[[F:.*]] = "kiln.add"(%[[S]], %[[W1]])
// CHECK: %[[M:.*]] = "kiln.reshape"(%arg0) {shape = [12, 5]}
// CHECK: "kiln.gather"(%[[M]], %[[F]]) {axis = 0 : i64} : (!kiln.tensor<[12, 5], f32>, !kiln.tensor<[6], i64>) -> !kiln.tensor<[6, 5], f32>
func.func @gather_nd(%x: !torch.vtensor<[3,4,5],f32>, %i: !torch.vtensor<[6,2],si64>) -> !torch.vtensor<[6,5],f32> attributes {torch.onnx_meta.opset_version = 13 : si64} {
  %0 = torch.operator "onnx.GatherND"(%x, %i) : (!torch.vtensor<[3,4,5],f32>, !torch.vtensor<[6,2],si64>) -> !torch.vtensor<[6,5],f32>
  return %0 : !torch.vtensor<[6,5],f32>
}

// GatherND with batch_dims = 1 over symbolic dims: the batch axis is indexed
// by its own positions (a range over B), the L axis by the rows, the stride L
// a run-time value; one gather from data merged to [B*L, 8].
// CHECK-LABEL: func.func @gather_nd$batch_dims
// CHECK: %[[P:.*]] = "kiln.range"() {shape = ["B"]
// CHECK: "kiln.reshape"(%[[P]]) {shape = ["B", 1]}
// CHECK: %[[M:.*]] = "kiln.reshape"(%arg0) {shape = ["B*L", 8]}
// CHECK: "kiln.gather"(%[[M]], %{{.*}}) {axis = 0 : i64} : (!kiln.tensor<["B*L", 8], f32>, !kiln.tensor<["B", 3], i64>) -> !kiln.tensor<["B", 3, 8], f32>
func.func @gather_nd$batch_dims(%x: !torch.vtensor<[?,?,8],f32>, %i: !torch.vtensor<[?,3,1],si64>) -> !torch.vtensor<[?,3,8],f32> attributes {torch.onnx_meta.opset_version = 13 : si64} {
  %b = torch.symbolic_int "B" {min_val = 1, max_val = 64} : !torch.int
  %l = torch.symbolic_int "L" {min_val = 1, max_val = 512} : !torch.int
  torch.bind_symbolic_shape %x, [%b, %l], affine_map<()[s0, s1] -> (s0, s1, 8)> : !torch.vtensor<[?,?,8],f32>
  torch.bind_symbolic_shape %i, [%b], affine_map<()[s0] -> (s0, 3, 1)> : !torch.vtensor<[?,3,1],si64>
  %0 = torch.operator "onnx.GatherND"(%x, %i) {torch.onnx.batch_dims = 1 : si64} : (!torch.vtensor<[?,?,8],f32>, !torch.vtensor<[?,3,1],si64>) -> !torch.vtensor<[?,3,8],f32>
  return %0 : !torch.vtensor<[?,3,8],f32>
}

// CHECK-LABEL: func.func @relu$name_loc
// CHECK: "kiln.relu"(%arg0) : (!kiln.tensor<[3], f32>) -> !kiln.tensor<[3], f32> loc(#[[LOC:.*]])
// CHECK: #[[LOC]] = loc("relu_node")
func.func @relu$name_loc(%x: !torch.vtensor<[3],f32>) -> !torch.vtensor<[3],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Relu"(%x) : (!torch.vtensor<[3],f32>) -> !torch.vtensor<[3],f32> loc("relu_node")
  return %0 : !torch.vtensor<[3],f32>
}
