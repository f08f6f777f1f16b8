// RUN: vyre-opt %s -p convert-vyre-to-gpu | filecheck %s
// RUN: vyre-opt %s -p vyre-to-gpu | filecheck %s --check-prefix=PIPELINE

// A program: two kernels run in module order over one set of buffers. Each
// vyre.kernel becomes its own gpu.module with one kernel gpu.func, in the
// same order; the temp buffer (allocated and zeroed by the runtime, passing
// values from @partials to @merge) keeps its access in vyre.launch.
builtin.module {
  vyre.kernel @partials items 8 workgroup_size 4 {
    %q = vyre.buffer "q" binding 0 read [8] : memref<8xf32>
    %tmp = vyre.buffer "tmp" binding 2 temp [2, 4] : memref<8xf32>
    %item = vyre.item_index
    %n = arith.constant 8 : index
    %in_range = arith.cmpi ult, %item, %n : index
    scf.if %in_range {
      %x = memref.load %q[%item] : memref<8xf32>
      %two = arith.constant 2.0 : f32
      %y = arith.mulf %x, %two : f32
      memref.store %y, %tmp[%item] : memref<8xf32>
    }
  }
  vyre.kernel @merge items 8 workgroup_size 8 {
    %q = vyre.buffer "q" binding 0 read [8] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [8] : memref<8xf32>
    %tmp = vyre.buffer "tmp" binding 2 temp [2, 4] : memref<8xf32>
    %item = vyre.item_index
    %n = arith.constant 8 : index
    %in_range = arith.cmpi ult, %item, %n : index
    scf.if %in_range {
      %t = memref.load %tmp[%item] : memref<8xf32>
      %x = memref.load %q[%item] : memref<8xf32>
      %y = arith.addf %t, %x : f32
      memref.store %y, %out[%item] : memref<8xf32>
    }
  }
}

// CHECK:       builtin.module attributes {gpu.container_module} {
// CHECK-LABEL:   "gpu.module"() <{sym_name = "partials"}> ({
// CHECK-NEXT:      "gpu.func"() <{function_type = (memref<8xf32>, memref<8xf32>) -> (), kernel}> ({
// CHECK-NEXT:      ^bb0(%q: memref<8xf32>, %tmp: memref<8xf32>):
// CHECK:             memref.store %y, %tmp[%item] : memref<8xf32>
// CHECK:           }) {sym_name = "partials", gpu.kernel, vyre.launch = #vyre.launch<items = 8, workgroup = [4, 1, 1], grid = [2, 1, 1], buffers = [#vyre.buffer<name = "q", binding = 0, access = read, shape = [8], dtype = f32>, #vyre.buffer<name = "tmp", binding = 2, access = temp, shape = [2, 4], dtype = f32>]>} : () -> ()
// CHECK-NEXT:    }) : () -> ()
// CHECK-LABEL:   "gpu.module"() <{sym_name = "merge"}> ({
// CHECK-NEXT:      "gpu.func"() <{function_type = (memref<8xf32>, memref<8xf32>, memref<8xf32>) -> (), kernel}> ({
// CHECK-NEXT:      ^bb0(%q: memref<8xf32>, %out: memref<8xf32>, %tmp: memref<8xf32>):
// CHECK:             %t = memref.load %tmp[%item] : memref<8xf32>
// CHECK:           }) {sym_name = "merge", gpu.kernel, vyre.launch = #vyre.launch<items = 8, workgroup = [8, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "q", binding = 0, access = read, shape = [8], dtype = f32>, #vyre.buffer<name = "out", binding = 1, access = write, shape = [8], dtype = f32>, #vyre.buffer<name = "tmp", binding = 2, access = temp, shape = [2, 4], dtype = f32>]>} : () -> ()
// CHECK-NEXT:    }) : () -> ()
// CHECK-NEXT:  }
// CHECK-NOT:   vyre.kernel

// The whole pipeline keeps both kernels, in order.
// PIPELINE:      "gpu.module"() <{sym_name = "partials"}>
// PIPELINE:        access = temp
// PIPELINE:      "gpu.module"() <{sym_name = "merge"}>
// PIPELINE:        access = temp
