// RUN: kiln-opt %s --kiln-select-kernels --convert-kiln-to-linalg --kiln-cpu-lower | FileCheck %s
// RUN: kiln-opt %s --convert-kiln-to-linalg --kiln-cpu-lower | FileCheck %s --check-prefix=GEN

// kiln IR to the LLVM dialect the way kiln.compile lowers it (the README's
// kiln-opt line): the f32 product goes to the library GEMM (kiln-cpu-library),
// the bf16 one to the native 16-bit GEMM (kiln-cpu-lowp-gemm, part of
// kiln-cpu-lower).  Without kiln-select-kernels nothing is chosen, and both
// products are generated loops: no call is raised from them.
// CHECK-DAG: llvm.call @kiln_gemm_0(
// CHECK-DAG: llvm.call @kiln_lowp_gemm_0(
// GEN: llvm.func @f(
// GEN-NOT: llvm.call @kiln_gemm
// GEN-NOT: llvm.call @kiln_lowp_gemm
// GEN-NOT: sgemm
"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()
func.func @f(%x: !kiln.tensor<["B", 64], f32>, %w: !kiln.tensor<[64, 32], f32>, %h: !kiln.tensor<["B", 64], bf16>, %hw: !kiln.tensor<[64, 32], bf16>) -> (!kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], bf16>) {
  %0 = "kiln.matmul"(%x, %w) : (!kiln.tensor<["B", 64], f32>, !kiln.tensor<[64, 32], f32>) -> !kiln.tensor<["B", 32], f32>
  %1 = "kiln.matmul"(%h, %hw) : (!kiln.tensor<["B", 64], bf16>, !kiln.tensor<[64, 32], bf16>) -> !kiln.tensor<["B", 32], bf16>
  return %0, %1 : !kiln.tensor<["B", 32], f32>, !kiln.tensor<["B", 32], bf16>
}
