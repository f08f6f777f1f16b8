// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not vyre-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT

// Structural rules xDSL does not verify (dialects/structure.py): SSA
// dominance, no definitions inside a kernel, no stores into read buffers,
// barriers only where every lane reaches them. Each error names the op.
// EXIT: {{.*}}structure_errors.mlir:20:7: error: 'arith.addf' op uses its own result: operand 0 (%x)
// An op cannot use its own result (mlir-opt rejects it; xDSL's parser takes it).
builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      %x = arith.addf %x, %x : f32
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}structure_errors.mlir:20:7: error: 'arith.addf' op uses its own result: operand 0 (%x)

// -----

// A value is defined before its first use.
builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      %y = arith.mulf %x, %x : f32
      %x = arith.constant 1.0 : f32
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}structure_errors.mlir:44:7: error: 'arith.mulf' op uses a value before it is defined (or outside its region): operand 0 (%x)

// -----

// Kernels cannot define functions: not in a fragment...
builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      func.func @helper() {
        func.return
      }
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}structure_errors.mlir:69:7: error: 'func.func' op defined inside kernel @k: kernels cannot define or call functions, modules or kernels

// -----

// ... nor kernels in a kernel.
builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
    vyre.kernel @inner items 1 workgroup_size 64 {
    }
  }
}
// CHECK: {{.*}}structure_errors.mlir:100:5: error: 'vyre.kernel' op defined inside kernel @k: kernels cannot define or call functions, modules or kernels

// -----

// A fragment never stores into a read buffer (an input).
builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      %c0 = arith.constant 0 : index
      %z = arith.constant 0.0 : f32
      memref.store %z, %q[%c0] : memref<128xf32>
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}structure_errors.mlir:122:7: error: 'memref.store' op writes buffer 'q', which is declared read (an input)

// -----

// A barrier in a fragment needs every lane: 100 items leave 28 lanes of the
// second workgroup without one.
builtin.module {
  vyre.kernel @k items 100 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [100, 2] : memref<200xf32>
    %out = vyre.buffer "out" binding 1 write [100, 2] : memref<200xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 100 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<200xf32>, memref<200xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      "gpu.barrier"() : () -> ()
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}structure_errors.mlir:147:7: error: 'gpu.barrier' op in a fragment of a kernel whose last workgroup has lanes without an item (100 invocations, 64 lanes a workgroup): those lanes never reach it

// -----

// ... and not under a branch on the lane.
builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      %c32 = arith.constant 32 : index
      %low = arith.cmpi ult, %lane, %c32 : index
      scf.if %low {
        "gpu.barrier"() : () -> ()
      }
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}structure_errors.mlir:174:9: error: 'gpu.barrier' op under an 'scf.if' whose condition or bounds depend on the item or lane: lanes that take another path never reach it

// -----

// A binding is 32-bit in the lowered kernel: 2^40 is refused here, not after lowering.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 1099511627776 read [4, 2] : memref<8xf32>
  }
}
// CHECK: {{.*}}structure_errors.mlir:190:5: error: 'vyre.buffer' op buffer 'q' has binding 1099511627776

// -----

// A kernel runs one skeleton (two hung lavapipe and broke the lowering).
builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item3, %lane3, %ts3, %tl3, %a3, %b3) {
      vyre.yield
    }
    update(%item4, %lane4, %ts4, %tl4, %m4, %r4, %c4, %d4) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}structure_errors.mlir:199:3: error: 'vyre.kernel' op kernel @k holds 2 skeletons (vyre.tiled_online_softmax, vyre.tiled_online_softmax)
