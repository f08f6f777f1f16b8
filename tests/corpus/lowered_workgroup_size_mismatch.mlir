// ARGS: -t spirv-asm
// ERROR: lane 127 (the workgroup has 128 lanes
// a body written for 64 lanes (a 64-float workgroup array, one per lane) recorded as 128 lanes: lanes 64..127 wrote past the array (a crash on lavapipe)
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<128xf32>, memref<128xf32>) -> (), kernel}> ({
    ^bb0(%a: memref<128xf32>, %out: memref<128xf32>):
      %item = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %tile = memref.alloc() : memref<64xf32, 3 : i64>
      %x = memref.load %a[%item] : memref<128xf32>
      memref.store %x, %tile[%lane] : memref<64xf32, 3 : i64>
      "gpu.barrier"() : () -> ()
      %y = memref.load %tile[%lane] : memref<64xf32, 3 : i64>
      memref.store %y, %out[%item] : memref<128xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 128,
        workgroup = [128, 1, 1],
        grid = [1, 1, 1],
        buffers = [
          #vyre.buffer<name = "a", binding = 0, access = read, shape = [128], dtype = f32>,
          #vyre.buffer<name = "out", binding = 1, access = write, shape = [128], dtype = f32>]>} : () -> ()
  }) : () -> ()
}
