// RUN: kiln-opt %s --kiln-cpu-vectorize | FileCheck %s
// RUN: kiln-opt %s --kiln-cpu-vectorize=level=0 | FileCheck %s --check-prefix=OFF

// Named ops are generalized; the float arithmetic of reductions may be
// reassociated (so LLVM vectorizes the loop), that of parallel ops may not.

// CHECK-LABEL: func.func @sum_rows(
// CHECK:   linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// CHECK:     arith.addf %{{.*}}, %{{.*}} fastmath<reassoc,contract> : f32
// CHECK-LABEL: func.func @scale(
// CHECK:   linalg.generic {{.*}}iterator_types = ["parallel"]
// CHECK-NOT: fastmath
// CHECK:   return
// OFF-NOT: fastmath
// OFF: linalg.reduce
func.func @sum_rows(%x: tensor<?x64xf32>, %init: tensor<?xf32>) -> tensor<?xf32> {
  %0 = linalg.reduce ins(%x : tensor<?x64xf32>) outs(%init : tensor<?xf32>) dimensions = [1]
    (%a: f32, %b: f32) {
      %s = arith.addf %a, %b : f32
      linalg.yield %s : f32
    }
  return %0 : tensor<?xf32>
}

func.func @scale(%x: tensor<?xf32>, %init: tensor<?xf32>) -> tensor<?xf32> {
  %c = arith.constant 2.0 : f32
  %0 = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>], iterator_types = ["parallel"]}
      ins(%x : tensor<?xf32>) outs(%init : tensor<?xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<?xf32>
  return %0 : tensor<?xf32>
}
