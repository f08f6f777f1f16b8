// ARGS: -t spirv-asm
// ERROR: 'vector.extract' of lane 4294967296 of a vector of 4
// a static vector.extract position past the vector (the SPIR-V encoder crashed on it; found by the IR fuzzer)
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<128xf32>, memref<128xf32>) -> (), kernel}> ({
    ^bb0(%a: memref<128xf32>, %out: memref<128xf32>):
      %item = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c0 = arith.constant 0 : index
      %x = vector.load %a[%c0] : memref<128xf32>, vector<4xf32>
      %y = vector.extract %x[4294967296] : f32 from vector<4xf32>
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
