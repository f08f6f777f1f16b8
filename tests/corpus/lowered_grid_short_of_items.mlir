// ARGS: -t spirv-asm
// ERROR: fewer than its 100 items
// a grid of 1 workgroup of 64 lanes covers 64 of the 100 items: the rest would stay 0
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<128xf32>, memref<128xf32>) -> (), kernel}> ({
    ^bb0(%a: memref<128xf32>, %out: memref<128xf32>):
      %item = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %n = arith.constant 100 : index
      %in = arith.cmpi ult, %item, %n : index
      scf.if %in {
        %x = memref.load %a[%item] : memref<128xf32>
        memref.store %x, %out[%item] : memref<128xf32>
      }
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 100,
        workgroup = [64, 1, 1],
        grid = [1, 1, 1],
        buffers = [
          #vyre.buffer<name = "a", binding = 0, access = read, shape = [128], dtype = f32>,
          #vyre.buffer<name = "out", binding = 1, access = write, shape = [128], dtype = f32>]>} : () -> ()
  }) : () -> ()
}
