// ARGS: -t spirv-asm
// ERROR: binding -1 is outside [0, 2^31)
// fuzz: a negative binding reached the SPIR-V encoder (struct.error)
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "exchange"}> ({
    "gpu.func"() <{function_type = (memref<128xf32>, memref<128xf32>) -> (), kernel}> ({
    ^bb0(%a: memref<128xf32>, %out: memref<128xf32>):
      %item = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index

      %tile = memref.alloc() : memref<64xf32, 3 : i64>
      %x = memref.load %a[%item] : memref<128xf32>
      memref.store %x, %tile[%lane] : memref<64xf32, 3 : i64>
      "gpu.barrier"() : () -> ()
      %c1 = arith.constant 1 : index
      %c64 = arith.constant 64 : index
      %next = arith.addi %lane, %c1 : index
      %wrapped = arith.remui %next, %c64 : index
      %y = memref.load %tile[%wrapped] : memref<64xf32, 3 : i64>
      memref.store %y, %out[%item] : memref<128xf32>

      "gpu.return"() : () -> ()
    }) {sym_name = "exchange", gpu.kernel, vyre.launch = #vyre.launch<items = 128,
        workgroup = [64, 1, 1],
        grid = [2, 1, 1],
        buffers = [
          #vyre.buffer<name = "a", binding = 0, access = read, shape = [128], dtype = f32>,
          #vyre.buffer<name = "out", binding = -1, access = write, shape = [128], dtype = f32>]>} : () -> ()
  }) : () -> ()
}
