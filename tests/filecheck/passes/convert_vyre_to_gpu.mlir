// RUN: vyre-opt %s -p convert-vyre-to-gpu | filecheck %s

// A kernel whose skeleton is already expanded: buffers become the gpu.func's
// arguments in binding order, scratch becomes workgroup memory, item and
// lane come from the gpu ids, and the launch is recorded on the gpu.func.
builtin.module {
  vyre.kernel @copy items 100 workgroup_size 64 {
    %out = vyre.buffer "out" binding 1 write [100] : memref<100xf32>
    %x = vyre.buffer "x" binding 0 read [10, 10] : memref<100xf32>
    %stage = vyre.scratch "stage" : memref<64xf32>
    %item = vyre.item_index
    %lane = vyre.lane_index
    %n = arith.constant 100 : index
    %in_range = arith.cmpi ult, %item, %n : index
    scf.if %in_range {
      %v = memref.load %x[%item] : memref<100xf32>
      memref.store %v, %stage[%lane] : memref<64xf32>
      %w = memref.load %stage[%lane] : memref<64xf32>
      memref.store %w, %out[%item] : memref<100xf32>
    }
  }
}

// CHECK:      builtin.module attributes {gpu.container_module} {
// CHECK-NEXT:   "gpu.module"() <{sym_name = "copy"}> ({
// CHECK-NEXT:     "gpu.func"() <{function_type = (memref<100xf32>, memref<100xf32>) -> (), kernel}> ({
// CHECK-NEXT:     ^bb0(%x: memref<100xf32>, %out: memref<100xf32>):
// CHECK-NEXT:       %stage = memref.alloc() : memref<64xf32, 3 : i64>
// CHECK-NEXT:       %item = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
// CHECK-NEXT:       %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
// CHECK:            scf.if
// CHECK-NEXT:         %v = memref.load %x[%item] : memref<100xf32>
// CHECK-NEXT:         memref.store %v, %stage[%lane] : memref<64xf32, 3 : i64>
// CHECK:              memref.store %w, %out[%item] : memref<100xf32>
// CHECK:            "gpu.return"() : () -> ()
// CHECK-NEXT:     }) {sym_name = "copy", gpu.kernel, vyre.launch = #vyre.launch<items = 100, workgroup = [64, 1, 1], grid = [2, 1, 1], buffers = [#vyre.buffer<name = "x", binding = 0, access = read, shape = [10, 10], dtype = f32>, #vyre.buffer<name = "out", binding = 1, access = write, shape = [100], dtype = f32>]>} : () -> ()
// CHECK-NEXT:   }) : () -> ()
// CHECK-NEXT: }
// CHECK-NOT:  vyre.
