// RUN: vyre-opt %s --split-input-file -p 'vyre-interleave-scratch{arrays=o_acc,q_scratch},vyre-promote-scratch' | filecheck %s
// RUN: not vyre-opt %s --split-input-file -p 'vyre-interleave-scratch{arrays=shared}' 2>&1 | filecheck %s --check-prefix=ROLE
// ROLE: error: vyre-interleave-scratch: arrays=shared names no scratch role; the roles are q_scratch, score_tile, o_acc

// Arrays are found by their role (vyre.role), never by SSA name: %acc, the
// o_acc array, is only touched at lane * 4 + d: it moves to d * 64 + lane and
// stays in workgroup memory, while %o_acc (no role) becomes private.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>) -> (), kernel}> ({
    ^bb0(%out: memref<64xf32>):
      %acc = memref.alloc() {vyre.role = #vyre<scratch_role o_acc>} : memref<256xf32, 3 : i64>
      %o_acc = memref.alloc() : memref<256xf32, 3 : i64>
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %zero = arith.constant 0.0 : f32
      scf.for %d = %c0 to %c4 step %c1 {
        %base = arith.muli %lane, %c4 : index
        %i = arith.addi %base, %d : index
        memref.store %zero, %acc[%i] : memref<256xf32, 3 : i64>
        memref.store %zero, %o_acc[%i] : memref<256xf32, 3 : i64>
        %x = memref.load %acc[%i] : memref<256xf32, 3 : i64>
        memref.store %x, %out[%lane] : memref<64xf32>
      }
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 64, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "out", binding = 0, access = write, shape = [64], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:      %acc = memref.alloc() {vyre.role = #vyre<scratch_role o_acc>} : memref<256xf32, 3 : i64>
// CHECK-NEXT: %o_acc = memref.alloca() : memref<4xf32>
// CHECK:      scf.for %d =
// CHECK:        %[[LANES:.*]] = arith.constant 64 : index
// CHECK-NEXT:   %[[ROW:.*]] = arith.muli %d, %[[LANES]] : index
// CHECK-NEXT:   %[[AT:.*]] = arith.addi %[[ROW]], %lane : index
// CHECK-NEXT:   memref.store %zero, %acc[%[[AT]]] : memref<256xf32, 3 : i64>
// CHECK-NEXT:   memref.store %zero, %o_acc[%d] : memref<4xf32>
// CHECK:        %x = memref.load %acc[%{{.*}}] : memref<256xf32, 3 : i64>

// -----

// An array that a lane reads outside its own slice is left as it is.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>) -> (), kernel}> ({
    ^bb0(%out: memref<64xf32>):
      %shared = memref.alloc() {vyre.role = #vyre<scratch_role q_scratch>} : memref<256xf32, 3 : i64>
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c1 = arith.constant 1 : index
      %next = arith.addi %lane, %c1 : index
      %y = memref.load %shared[%next] : memref<256xf32, 3 : i64>
      memref.store %y, %out[%lane] : memref<64xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 64, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "out", binding = 0, access = write, shape = [64], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:      %shared = memref.alloc() {vyre.role = #vyre<scratch_role q_scratch>} : memref<256xf32, 3 : i64>
// CHECK:      %y = memref.load %shared[%next] : memref<256xf32, 3 : i64>
