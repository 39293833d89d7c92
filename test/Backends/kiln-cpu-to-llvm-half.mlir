// RUN: kiln-opt %s --kiln-cpu-to-llvm | FileCheck %s

// bf16 arithmetic and math reach LLVM as f32, and every f32 -> bf16 rounding
// as integer ops (round half to even, NaN to 0x7FC0): left to LLVM, a CPU
// without AVX512-BF16 rounds through __truncsfbf2, a runtime-library call the
// JIT cannot resolve.  f16 math is computed in f32 and rounded by LLVM (F16C).

// CHECK-LABEL: llvm.func @bf16_math
// CHECK-DAG: %[[NAN:.*]] = llvm.mlir.constant(32704 : i16) : i16
// CHECK-DAG: %[[HALF:.*]] = llvm.mlir.constant(32767 : i32) : i32
// CHECK-NOT: fptrunc
// CHECK: llvm.fadd {{.*}} : f32
// CHECK: %[[E:.*]] = llvm.call @erff({{.*}}) : (f32) -> f32
// CHECK: %[[ISNAN:.*]] = llvm.fcmp "une" %[[E]], %[[E]] : f32
// CHECK: %[[BITS:.*]] = llvm.bitcast %[[E]] : f32 to i32
// CHECK: llvm.add %{{.*}}, %[[HALF]] : i32
// CHECK: %[[T:.*]] = llvm.trunc {{.*}} : i32 to i16
// CHECK: llvm.select %[[ISNAN]], %[[NAN]], %[[T]] : i1, i16
// CHECK-NOT: fptrunc
// CHECK: llvm.return
func.func @bf16_math(%x: bf16, %y: bf16) -> bf16 {
  %0 = arith.addf %x, %y : bf16
  %1 = math.erf %0 : bf16
  return %1 : bf16
}

// CHECK-LABEL: llvm.func @f16_math
// CHECK: llvm.fpext {{.*}} : f16 to f32
// CHECK: llvm.intr.sqrt({{.*}}) : (f32) -> f32
// CHECK: llvm.fptrunc {{.*}} : f32 to f16
func.func @f16_math(%x: f16) -> f16 {
  %0 = math.sqrt %x : f16
  return %0 : f16
}
