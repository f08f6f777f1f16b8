// RUN: vyre-opt %s --split-input-file -p 'vyre-interleave-scratch{arrays=o_acc,shared},vyre-promote-scratch' | filecheck %s

// %o_acc is only touched at lane * 4 + d: it moves to d * 64 + lane and stays
// in workgroup memory, while %mine (not named) becomes private.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>) -> (), kernel}> ({
    ^bb0(%out: memref<64xf32>):
      %o_acc = memref.alloc() : memref<256xf32, 3 : i64>
      %mine = memref.alloc() : memref<256xf32, 3 : i64>
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %zero = arith.constant 0.0 : f32
      scf.for %d = %c0 to %c4 step %c1 {
        %base = arith.muli %lane, %c4 : index
        %i = arith.addi %base, %d : index
        memref.store %zero, %o_acc[%i] : memref<256xf32, 3 : i64>
        memref.store %zero, %mine[%i] : memref<256xf32, 3 : i64>
        %x = memref.load %o_acc[%i] : memref<256xf32, 3 : i64>
        memref.store %x, %out[%lane] : memref<64xf32>
      }
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.item_count = 64 : i64, vyre.workgroup_size = array<i32: 64, 1, 1>, vyre.grid_size = array<i32: 1, 1, 1>, vyre.buffers = [{name = "out", binding = 0 : i32, access = "write", shape = array<i64: 64>}]} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:      %o_acc = memref.alloc() : memref<256xf32, 3 : i64>
// CHECK-NEXT: %mine = memref.alloca() : memref<4xf32>
// CHECK:      scf.for %d =
// CHECK:        %[[LANES:.*]] = arith.constant 64 : index
// CHECK-NEXT:   %[[ROW:.*]] = arith.muli %d, %[[LANES]] : index
// CHECK-NEXT:   %[[AT:.*]] = arith.addi %[[ROW]], %lane : index
// CHECK-NEXT:   memref.store %zero, %o_acc[%[[AT]]] : memref<256xf32, 3 : i64>
// CHECK-NEXT:   memref.store %zero, %mine[%d] : memref<4xf32>
// CHECK:        %x = memref.load %o_acc[%{{.*}}] : memref<256xf32, 3 : i64>

// -----

// An array that a lane reads outside its own slice is left as it is.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>) -> (), kernel}> ({
    ^bb0(%out: memref<64xf32>):
      %shared = memref.alloc() : memref<256xf32, 3 : i64>
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c1 = arith.constant 1 : index
      %next = arith.addi %lane, %c1 : index
      %y = memref.load %shared[%next] : memref<256xf32, 3 : i64>
      memref.store %y, %out[%lane] : memref<64xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.item_count = 64 : i64, vyre.workgroup_size = array<i32: 64, 1, 1>, vyre.grid_size = array<i32: 1, 1, 1>, vyre.buffers = [{name = "out", binding = 0 : i32, access = "write", shape = array<i64: 64>}]} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:      %shared = memref.alloc() : memref<256xf32, 3 : i64>
// CHECK:      %y = memref.load %shared[%next] : memref<256xf32, 3 : i64>
