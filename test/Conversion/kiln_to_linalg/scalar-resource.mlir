// RUN: kiln-opt %s --split-input-file --convert-kiln-to-linalg | FileCheck %s --check-prefix=LINALG
// RUN: kiln-opt %s --split-input-file --pass-pipeline='builtin.module(convert-kiln-to-linalg,kiln-cpu-lower)' | FileCheck %s --check-prefix=LLVM

// A rank-0 constant whose data is a dense_resource blob (what ONNX
// initializers and torch literals become) lowers to a plain dense constant:
// upstream finalize-memref-to-llvm loops forever on a rank-0 resource global.
// Every element type reads its blob (f32, f64, f16, bf16, i64, i32, i1).
// LINALG-LABEL: func.func @scalars(
// LINALG-DAG: arith.constant dense<2.500000e+00> : tensor<f32>
// LINALG-DAG: arith.constant dense<2.000000e+00> : tensor<f64>
// LINALG-DAG: arith.constant dense<1.500000e+00> : tensor<f16>
// LINALG-DAG: arith.constant dense<2.500000e+00> : tensor<bf16>
// LINALG-DAG: arith.constant dense<-3> : tensor<i64>
// LINALG-DAG: arith.constant dense<7> : tensor<i32>
// LINALG-DAG: arith.constant dense<true> : tensor<i1>
// LINALG-NOT: dense_resource
// LLVM-LABEL: llvm.func @scalars(
// LLVM-NOT: dense_resource
func.func @scalars(%x: !kiln.tensor<[3], f32>) -> (!kiln.tensor<[3], f32>, !kiln.tensor<[], f64>, !kiln.tensor<[], f16>, !kiln.tensor<[], bf16>, !kiln.tensor<[], i64>, !kiln.tensor<[], i32>, !kiln.tensor<[], i1>) {
  %s = "kiln.constant"() {value = dense_resource<sf32> : tensor<f32>} : () -> !kiln.tensor<[], f32>
  %0 = "kiln.mul"(%x, %s) : (!kiln.tensor<[3], f32>, !kiln.tensor<[], f32>) -> !kiln.tensor<[3], f32>
  %d = "kiln.constant"() {value = dense_resource<sf64> : tensor<f64>} : () -> !kiln.tensor<[], f64>
  %h = "kiln.constant"() {value = dense_resource<sf16> : tensor<f16>} : () -> !kiln.tensor<[], f16>
  %b = "kiln.constant"() {value = dense_resource<sbf16> : tensor<bf16>} : () -> !kiln.tensor<[], bf16>
  %l = "kiln.constant"() {value = dense_resource<si64> : tensor<i64>} : () -> !kiln.tensor<[], i64>
  %i = "kiln.constant"() {value = dense_resource<si32> : tensor<i32>} : () -> !kiln.tensor<[], i32>
  %t = "kiln.constant"() {value = dense_resource<si1> : tensor<i1>} : () -> !kiln.tensor<[], i1>
  return %0, %d, %h, %b, %l, %i, %t : !kiln.tensor<[3], f32>, !kiln.tensor<[], f64>, !kiln.tensor<[], f16>, !kiln.tensor<[], bf16>, !kiln.tensor<[], i64>, !kiln.tensor<[], i32>, !kiln.tensor<[], i1>
}

// A resource constant of rank 1 or more stays a resource (it lowers as it is),
// but for i1 elements: the translation to LLVM IR rejects an i1 resource
// global ("no known conversion for innermost element type"; a BERT exported
// by torch.onnx has its attention mask as such an initializer).
// LINALG-LABEL: func.func @vector(
// LINALG-DAG: arith.constant dense_resource<vf32> : tensor<2xf32>
// LINALG-DAG: arith.constant dense<[true, false, true]> : tensor<3xi1>
// LLVM-LABEL: llvm.func @vector(
// LLVM-NOT: dense_resource<vi1>
func.func @vector() -> (!kiln.tensor<[2], f32>, !kiln.tensor<[3], i1>) {
  %v = "kiln.constant"() {value = dense_resource<vf32> : tensor<2xf32>} : () -> !kiln.tensor<[2], f32>
  %m = "kiln.constant"() {value = dense_resource<vi1> : tensor<3xi1>} : () -> !kiln.tensor<[3], i1>
  return %v, %m : !kiln.tensor<[2], f32>, !kiln.tensor<[3], i1>
}

{-#
  dialect_resources: {
    builtin: {
      sf32: "0x0400000000002040",
      sf64: "0x080000000000000000000040",
      sf16: "0x02000000003E",
      sbf16: "0x020000002040",
      si64: "0x08000000FDFFFFFFFFFFFFFF",
      si32: "0x0400000007000000",
      si1: "0x0100000001",
      vf32: "0x040000000000803F00000040",
      vi1: "0x01000000010001"
    }
  }
#-}

// -----

// A rank-0 resource global reaching the LLVM lowering directly (not through
// convert-kiln-to-linalg) is made dense there too.
// LLVM-LABEL: llvm.mlir.global private constant @g(2.500000e+00 : f32)
module {
  memref.global "private" constant @g : memref<f32> = dense_resource<g32> {alignment = 64 : i64}
  func.func @read(%out: memref<f32>) attributes {llvm.emit_c_interface} {
    %0 = memref.get_global @g : memref<f32>
    %1 = memref.load %0[] : memref<f32>
    memref.store %1, %out[] : memref<f32>
    return
  }
}

{-#
  dialect_resources: {
    builtin: {
      g32: "0x0400000000002040"
    }
  }
#-}
