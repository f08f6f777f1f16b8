// ARGS: -t spirv-asm
// ERROR: 'arith.addf' op uses a value before it is defined
// dominance: xDSL's parser resolves the forward reference; mlir-opt-22 rejects it
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<128xf32>, memref<128xf32>) -> (), kernel}> ({
    ^bb0(%a: memref<128xf32>, %out: memref<128xf32>):
      %item = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %y = arith.addf %x, %x : f32
      %x = memref.load %a[%item] : memref<128xf32>
      memref.store %y, %out[%item] : memref<128xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 128,
        workgroup = [64, 1, 1],
        grid = [2, 1, 1],
        buffers = [
          #vyre.buffer<name = "a", binding = 0, access = read, shape = [128], dtype = f32>,
          #vyre.buffer<name = "out", binding = 1, access = write, shape = [128], dtype = f32>]>} : () -> ()
  }) : () -> ()
}
