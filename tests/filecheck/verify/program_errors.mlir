// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The kernels of a module run as one program over one set of buffers: a
// buffer name means the same buffer in every kernel, and a binding belongs
// to one name.

// A name declared with another binding in a later kernel.
builtin.module {
  vyre.kernel @partials items 8 workgroup_size 8 {
    %q = vyre.buffer "q" binding 0 read [8] : memref<8xf32>
    %tmp = vyre.buffer "tmp" binding 2 temp [8] : memref<8xf32>
  }
  vyre.kernel @merge items 8 workgroup_size 8 {
    %tmp = vyre.buffer "tmp" binding 3 temp [8] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [8] : memref<8xf32>
  }
}
// CHECK: {{.*}}program_errors.mlir:13:3: error: 'vyre.kernel' op buffer 'tmp' is binding 2 temp [8] f32 in kernel @partials but binding 3 temp [8] f32 in kernel @merge; the kernels of a module share their buffers, so declare it the same way in each

// -----

// A name declared with another access or shape.
builtin.module {
  vyre.kernel @partials items 8 workgroup_size 8 {
    %tmp = vyre.buffer "tmp" binding 2 temp [8] : memref<8xf32>
  }
  vyre.kernel @merge items 8 workgroup_size 8 {
    %tmp = vyre.buffer "tmp" binding 2 read [2, 4] : memref<8xf32>
  }
}
// CHECK: {{.*}}program_errors.mlir:27:3: error: 'vyre.kernel' op buffer 'tmp' is binding 2 temp [8] f32 in kernel @partials but binding 2 read [2, 4] f32 in kernel @merge; the kernels of a module share their buffers, so declare it the same way in each

// -----

// Two names sharing one binding across kernels.
builtin.module {
  vyre.kernel @partials items 8 workgroup_size 8 {
    %tmp = vyre.buffer "tmp" binding 2 temp [8] : memref<8xf32>
  }
  vyre.kernel @merge items 8 workgroup_size 8 {
    %out = vyre.buffer "out" binding 2 write [8] : memref<8xf32>
  }
}
// CHECK: {{.*}}program_errors.mlir:40:3: error: 'vyre.kernel' op binding 2 is buffer 'tmp' in kernel @partials but buffer 'out' in kernel @merge; the kernels of a module share their buffers, so give each name its own binding
