// RUN: vyre-opt %s -p vyre-promote-scratch | filecheck %s

// %mine is only touched at lane * 4 + d (d < 4): private data in disguise.
// %shared is read at another lane's slice, so it stays in workgroup memory.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>) -> (), kernel}> ({
    ^bb0(%out: memref<64xf32>):
      %mine = memref.alloc() : memref<256xf32, 3 : i64>
      %shared = memref.alloc() : memref<256xf32, 3 : i64>
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %zero = arith.constant 0.0 : f32
      scf.for %d = %c0 to %c4 step %c1 {
        %base = arith.muli %lane, %c4 : index
        %i = arith.addi %base, %d : index
        memref.store %zero, %mine[%i] : memref<256xf32, 3 : i64>
        memref.store %zero, %shared[%i] : memref<256xf32, 3 : i64>
        %next_lane = arith.addi %lane, %c1 : index
        %other_base = arith.muli %next_lane, %c4 : index
        %j = arith.addi %other_base, %d : index
        %x = memref.load %mine[%i] : memref<256xf32, 3 : i64>
        %y = memref.load %shared[%j] : memref<256xf32, 3 : i64>
        %s = arith.addf %x, %y : f32
        memref.store %s, %out[%lane] : memref<64xf32>
      }
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 64, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "out", binding = 0, access = write, shape = [64], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK:      %mine = memref.alloca() : memref<4xf32>
// CHECK-NEXT: %shared = memref.alloc() : memref<256xf32, 3 : i64>
// CHECK:      scf.for %d =
// CHECK:        memref.store %zero, %mine[%d] : memref<4xf32>
// CHECK-NEXT:   memref.store %zero, %shared[%i] : memref<256xf32, 3 : i64>
// CHECK:        %x = memref.load %mine[%d] : memref<4xf32>
// CHECK-NEXT:   %y = memref.load %shared[%j] : memref<256xf32, 3 : i64>
