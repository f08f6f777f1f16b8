// The SPIR-V emitter reads vectors through a vec4 view of a read-only
// buffer: an index it cannot prove aligned, or a written buffer, is an
// error, never a silently shifted load.
// RUN: not vyre-opt %s -t spirv 2>&1 | filecheck %s
// CHECK: error: 'vector.load': its index is not provably a multiple of 4; a vector view of a buffer only addresses aligned elements
// CHECK-NOT: Traceback

builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "skewed"}> ({
    "gpu.func"() <{function_type = (memref<68xf32>, memref<64xf32>) -> (), kernel}> ({
    ^bb0(%k: memref<68xf32>, %out: memref<64xf32>):
      %row = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c1 = arith.constant 1 : index
      %skew = arith.addi %row, %c1 : index
      %kv = vector.load %k[%skew] : memref<68xf32>, vector<4xf32>
      %x = vector.extract %kv[0] : f32 from vector<4xf32>
      memref.store %x, %out[%row] : memref<64xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "skewed", gpu.kernel, vyre.item_count = 64 : i64, vyre.workgroup_size = array<i32: 64, 1, 1>, vyre.grid_size = array<i32: 1, 1, 1>, vyre.buffers = [{name = "k", binding = 0 : i32, access = "read", shape = array<i64: 68>}, {name = "out", binding = 1 : i32, access = "write", shape = array<i64: 64>}]} : () -> ()
  }) : () -> ()
}
