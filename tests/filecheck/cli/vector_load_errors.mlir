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
    }) {sym_name = "skewed", gpu.kernel, vyre.launch = #vyre.launch<items = 64, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "k", binding = 0, access = read, shape = [68], dtype = f32>, #vyre.buffer<name = "out", binding = 1, access = write, shape = [64], dtype = f32>]>} : () -> ()
  }) : () -> ()
}
