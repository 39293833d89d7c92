// RUN: kiln-opt %s --convert-kiln-to-linalg | FileCheck %s
// RUN: kiln-opt %s --pass-pipeline='builtin.module(convert-kiln-to-linalg,kiln-cpu-prepare,kiln-cpu-vectorize,kiln-cpu-bufferize)' | FileCheck %s --check-prefix=BUF

// kiln.update_slice: a generic over the update writing into a slice of dest,
// inserted back. With kiln.inplace (dest donated: the runtime passes the
// output buffer as dest), the bufferized kernel copies the L positions into a
// subview of the output and allocates and copies nothing else.

"kiln.symbol"() {sym_name = "P", min = 0 : i64, max = 2040 : i64} : () -> ()
"kiln.symbol"() {sym_name = "L", min = 1 : i64, max = 8 : i64} : () -> ()

// CHECK-LABEL: func.func @update
// CHECK-SAME: (%[[C:.*]]: tensor<2x4x2048x16xf32>, %[[N:.*]]: tensor<2x4x?x16xf32>, %{{.*}}: tensor<?xf32>)
// CHECK: %[[S:.*]] = tensor.extract_slice %[[C]][0, 0, %{{.*}}, 0] [2, 4, %{{.*}}, 16] [1, 1, 1, 1]
// CHECK: %[[W:.*]] = linalg.generic {{.*}} outs(%[[S]] : tensor<2x4x?x16xf32>)
// CHECK: tensor.extract %[[N]]
// CHECK: tensor.insert_slice %[[W]] into %[[C]][0, 0, %{{.*}}, 0] [2, 4, %{{.*}}, 16] [1, 1, 1, 1]

// BUF-LABEL: func.func @update
// BUF-SAME: (%{{.*}}: memref<2x4x2048x16xf32>, %[[N:.*]]: memref<2x4x?x16xf32>, %{{.*}}: memref<?xf32>, %[[OUT:.*]]: memref<2x4x2048x16xf32>)
// BUF-NOT: memref.alloc
// BUF-NOT: memref.copy
// BUF: %[[SV:.*]] = memref.subview %[[OUT]][0, 0, %{{.*}}, 0] [2, 4, %{{.*}}, 16] [1, 1, 1, 1]
// BUF-NOT: memref.alloc
// BUF-NOT: memref.copy
// BUF: linalg.generic {{.*}} outs(%[[SV]] :
// BUF-NOT: memref.alloc
// BUF-NOT: memref.copy
// BUF: return
func.func @update(%c: !kiln.tensor<[2, 4, 2048, 16], f32>, %n: !kiln.tensor<[2, 4, "L", 16], f32>, %p: !kiln.tensor<["P"], f32>) -> !kiln.tensor<[2, 4, 2048, 16], f32> attributes {kiln.inplace = array<i64: 0>} {
  %0 = "kiln.update_slice"(%c, %n) {axis = 2 : i64, offset = ["P"], in_place = true} : (!kiln.tensor<[2, 4, 2048, 16], f32>, !kiln.tensor<[2, 4, "L", 16], f32>) -> !kiln.tensor<[2, 4, 2048, 16], f32>
  return %0 : !kiln.tensor<[2, 4, 2048, 16], f32>
}

// The symbol P has its value from an argument's dim (kiln-partition adds such carriers).
// Without donation (no in_place) dest is copied first and the argument is
// never written (kernel arguments bufferize as writable).
// CHECK-LABEL: func.func @copied
// CHECK: linalg.generic
// CHECK: tensor.extract_slice
// BUF-LABEL: func.func @copied
// BUF-SAME: (%[[D:.*]]: memref<8x6xf32>, %{{.*}}: memref<8x2xf32>, %{{.*}}: memref<8x6xf32>)
// BUF: %[[A:.*]] = memref.alloc
// BUF: memref.load %[[D]]
// BUF: memref.subview %[[A]][0, 4] [8, 2] [1, 1]
func.func @copied(%c: !kiln.tensor<[8, 6], f32>, %n: !kiln.tensor<[8, 2], f32>) -> !kiln.tensor<[8, 6], f32> {
  %0 = "kiln.update_slice"(%c, %n) {axis = 1 : i64, offset = [4]} : (!kiln.tensor<[8, 6], f32>, !kiln.tensor<[8, 2], f32>) -> !kiln.tensor<[8, 6], f32>
  return %0 : !kiln.tensor<[8, 6], f32>
}
