// REQUIRES: mlir-opt-22
// RUN: vyre-opt %s | filecheck %s
// RUN: vyre-opt %s | mlir-opt-22 --allow-unregistered-dialect | filecheck %s --check-prefixes=CHECK,MLIR
// RUN: vyre-opt %s --print-op-generic | mlir-opt-22 --allow-unregistered-dialect | filecheck %s --check-prefixes=CHECK,MLIR

// The subgroup matrix ops (dialects/gpu_mma.py) print as MLIR 22 prints
// them, and MLIR 22 accepts them, in custom and in generic form: a lowered
// kernel that computes out = (a * b^T + 1) * 1 on one 32-lane subgroup (b
// read transposed, the accumulator a constant matrix, an element-wise
// product), f16 inputs, f32 output.
// MLIR:       gpu.func @matmul(%{{.*}}: memref<256xf16>, %{{.*}}: memref<256xf16>, %{{.*}}: memref<256xf32>) kernel
// CHECK:        %[[A:[0-9a-z_]+]] = gpu.subgroup_mma_load_matrix %{{.*}}[%[[C0:[0-9a-z_]+]]] {leadDimension = 16 : index} : memref<256xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
// CHECK-NEXT:   %[[B:[0-9a-z_]+]] = gpu.subgroup_mma_load_matrix %{{.*}}[%[[C0]]] {leadDimension = 16 : index, transpose} : memref<256xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
// CHECK:        %[[C:[0-9a-z_]+]] = gpu.subgroup_mma_constant_matrix %{{.*}} : !gpu.mma_matrix<16x16xf32, "COp">
// CHECK-NEXT:   %[[D:[0-9a-z_]+]] = gpu.subgroup_mma_compute %[[A]], %[[B]], %[[C]] : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
// CHECK-NEXT:   %[[E:[0-9a-z_]+]] = gpu.subgroup_mma_elementwise  mulf %[[D]], %[[C]] : (!gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">) -> !gpu.mma_matrix<16x16xf32, "COp">
// CHECK-NEXT:   gpu.subgroup_mma_store_matrix %[[E]], %{{.*}}[%[[C0]]] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf32, "COp">, memref<256xf32>
// MLIR:         gpu.return
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "matmul"}> ({
    "gpu.func"() <{function_type = (memref<256xf16>, memref<256xf16>, memref<256xf32>) -> (), kernel}> ({
    ^bb0(%a: memref<256xf16>, %b: memref<256xf16>, %out: memref<256xf32>):
      %c0 = arith.constant 0 : index
      %ma = gpu.subgroup_mma_load_matrix %a[%c0] {leadDimension = 16 : index} : memref<256xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
      %mb = gpu.subgroup_mma_load_matrix %b[%c0] {leadDimension = 16 : index, transpose} : memref<256xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
      %one = arith.constant 1.0 : f32
      %mc = gpu.subgroup_mma_constant_matrix %one : !gpu.mma_matrix<16x16xf32, "COp">
      %md = gpu.subgroup_mma_compute %ma, %mb, %mc : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
      %me = gpu.subgroup_mma_elementwise mulf %md, %mc : (!gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">) -> !gpu.mma_matrix<16x16xf32, "COp">
      gpu.subgroup_mma_store_matrix %me, %out[%c0] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf32, "COp">, memref<256xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "matmul", gpu.kernel, vyre.launch = #vyre.launch<items = 32,
        workgroup = [32, 1, 1], grid = [1, 1, 1],
        buffers = [
          #vyre.buffer<name = "a", binding = 0, access = read, shape = [16, 16], dtype = f16>,
          #vyre.buffer<name = "b", binding = 1, access = read, shape = [16, 16], dtype = f16>,
          #vyre.buffer<name = "out", binding = 2, access = write, shape = [16, 16], dtype = f32>]>}
      : () -> ()
  }) : () -> ()
}
