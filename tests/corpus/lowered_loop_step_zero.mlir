// ARGS: -t spirv-asm
// ERROR: an scf.for with a step of 0 never ends (a GPU would hang); give it a positive step
// a hand-written loop of step 0: the interpreter stopped it at run time, Vulkan ran it
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<8xf32>, memref<8xf32>) -> (), kernel}> ({
    ^bb0(%a: memref<8xf32>, %out: memref<8xf32>):
      %item = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %n = arith.constant 8 : index
      %c0 = arith.constant 0 : index
      %in = arith.cmpi ult, %item, %n : index
      scf.if %in {
        scf.for %j = %c0 to %n step %c0 {
          %x = memref.load %a[%item] : memref<8xf32>
          memref.store %x, %out[%item] : memref<8xf32>
        }
      }
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 8, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "a", binding = 0, access = read, shape = [8], dtype = f32>, #vyre.buffer<name = "out", binding = 1, access = write, shape = [8], dtype = f32>]>} : () -> ()
  }) : () -> ()
}
