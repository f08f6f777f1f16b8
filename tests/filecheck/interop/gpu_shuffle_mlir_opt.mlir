// REQUIRES: mlir-opt-22
// RUN: vyre-opt %s | mlir-opt-22 --allow-unregistered-dialect | filecheck %s
// RUN: vyre-opt %s --print-op-generic | mlir-opt-22 --allow-unregistered-dialect | filecheck %s

// Upstream MLIR 22 accepts a lowered kernel that adds each value to its
// xor-1 and xor-2 partners with gpu.shuffle, the width being the subgroup
// size (the idiom vyre's passes emit, tests/test_gpu_shuffle.py runs it),
// in custom form and in generic form (mode = #gpu<shuffle_mode xor>).
// CHECK:      gpu.func @pairs(%{{.*}}: memref<64xf32>, %{{.*}}: memref<64xf32>) kernel
// CHECK:        %[[SG:[0-9]+]] = gpu.subgroup_size : index
// CHECK-NEXT:   %[[W:[0-9]+]] = arith.index_cast %[[SG]] : index to i32
// CHECK:        %[[R1:[a-zA-Z0-9_]+]], %{{.*}} = gpu.shuffle  xor %[[X:[0-9]+]], %c1_i32, %[[W]] : f32
// CHECK-NEXT:   %[[S1:[0-9]+]] = arith.addf %[[X]], %[[R1]] : f32
// CHECK:        %[[R2:[a-zA-Z0-9_]+]], %{{.*}} = gpu.shuffle  xor %[[S1]], %c2_i32, %[[W]] : f32
// CHECK-NEXT:   arith.addf %[[S1]], %[[R2]] : f32
// CHECK:        gpu.return
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "pairs"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>, memref<64xf32>) -> (), kernel}> ({
    ^bb0(%x_buf: memref<64xf32>, %out: memref<64xf32>):
      %i = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %n = arith.constant 64 : index
      %in_range = arith.cmpi ult, %i, %n : index
      scf.if %in_range {
        %x = memref.load %x_buf[%i] : memref<64xf32>
        %sg = "gpu.subgroup_size"() : () -> index
        %w = arith.index_cast %sg : index to i32
        %c1 = arith.constant 1 : i32
        %r1, %ok1 = gpu.shuffle xor %x, %c1, %w : f32
        %s1 = arith.addf %x, %r1 : f32
        %c2 = arith.constant 2 : i32
        %r2, %ok2 = gpu.shuffle xor %s1, %c2, %w : f32
        %s2 = arith.addf %s1, %r2 : f32
        memref.store %s2, %out[%i] : memref<64xf32>
      }
      "gpu.return"() : () -> ()
    }) {sym_name = "pairs", gpu.kernel, vyre.launch = #vyre.launch<items = 64,
        workgroup = [32, 1, 1],
        grid = [2, 1, 1],
        buffers = [
          #vyre.buffer<name = "x", binding = 0, access = read, shape = [64], dtype = f32>,
          #vyre.buffer<name = "out", binding = 1, access = write, shape = [64], dtype = f32>]>}
      : () -> ()
  }) : () -> ()
}
