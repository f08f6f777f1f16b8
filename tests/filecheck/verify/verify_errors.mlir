// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not vyre-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT

// One chunk per verifier error of the vyre dialect; each message names
// the problem and the fix.
// EXIT: error: 'vyre.kernel' op 'item_count' must be > 0, got 0

// A kernel runs at least one item.
builtin.module {
  vyre.kernel @k items 0 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:10:3: error: 'vyre.kernel' op 'item_count' must be > 0, got 0

// -----

// Workgroups have lanes.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 0 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:33:3: error: 'vyre.kernel' op 'workgroup_size' must be > 0, got 0

// -----

// Names are unique.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "q" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:56:3: error: 'vyre.kernel' op two buffers or scratch arrays are named 'q'; give each a distinct name

// -----

// Bindings are unique.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 0 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:79:3: error: 'vyre.kernel' op buffers 'q' and 'out' both use binding 0; give each buffer its own binding

// -----

// A buffer dimension of zero.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 0] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:103:5: error: 'vyre.buffer' op buffer 'q' has shape [4, 0]; every dimension must be > 0

// -----

// The logical shape must match the memref.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 3] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:126:5: error: 'vyre.buffer' op buffer 'q' has shape [4, 3] (12 elements) but type memref<8xf32>; make the memref hold exactly 12 f32

// -----

// q and out hold f32, f16 or bf16 (i32 buffers hold integers: lengths, tables).
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xi32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xi32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:154:5: error: 'vyre.tiled_online_softmax' op operand 'q' must be a static 1-D memref of f32, f16 or bf16 (e.g. memref<4096xf32> or memref<4096xbf16>: the builders' dtype=), got memref<8xi32>

// -----

// A buffer larger than u32 can index.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [65536, 65536] : memref<4294967296xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<4294967296xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:172:5: error: 'vyre.buffer' op buffer 'q' size = dim0 (65536) * dim1 (65536) = 4294967296 does not fit in u32 (max 4294967295); shrink the buffer

// -----

// Scratch arrays are flat.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<2x64xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<2x64xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:197:5: error: 'vyre.scratch' op scratch 'q_scratch' must be a static 1-D memref of f32, f16 or bf16 (e.g. memref<4096xf32>), got memref<2x64xf32>

// -----

// A zero sequence length.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 0 head_dim 2 tile_size 2 tile_count 0
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:223:5: error: 'vyre.tiled_online_softmax' op 'seq_len' must be > 0, got 0; every dimension of the skeleton must be positive

// -----

// A zero head_dim.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 0 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:246:5: error: 'vyre.tiled_online_softmax' op 'head_dim' must be > 0, got 0; every dimension of the skeleton must be positive

// -----

// A zero tile_size.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 0 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:269:5: error: 'vyre.tiled_online_softmax' op 'tile_size' must be > 0, got 0; every dimension of the skeleton must be positive

// -----

// tile_count must be ceil(seq_len / tile_size).
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 3
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:292:5: error: 'vyre.tiled_online_softmax' op 'tile_count' is 3 but ceil(seq_len / tile_size) = ceil(4 / 2) = 2; set tile_count 2

// -----

// The skeleton's item_count is the kernel's.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 3 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:315:5: error: 'vyre.tiled_online_softmax' op 'item_count' is 3 but the enclosing kernel runs 4 items; make them equal

// -----

// q must be an input buffer.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%out) out(%q) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:338:5: error: 'vyre.tiled_online_softmax' op operand 'q' must be a vyre.buffer with access "read"

// -----

// q holds item_count * head_dim floats.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [10] : memref<10xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<10xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:361:5: error: 'vyre.tiled_online_softmax' op buffer 'q' (q) holds 10 f32 but item_count * head_dim = 8; size it memref<8xf32>

// -----

// Scratch holds workgroup_size * stride floats.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<64xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<64xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:384:5: error: 'vyre.tiled_online_softmax' op scratch 'q_scratch' holds 64 f32 but workgroup_size * head_dim = 128; size it memref<128xf32>

// -----

// item_count * head_dim must fit u32.
builtin.module {
  vyre.kernel @k items 65536 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 65536 seq_len 2 head_dim 65536 tile_size 2 tile_count 1
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:407:5: error: 'vyre.tiled_online_softmax' op q/out size = item_count (65536) * head_dim (65536) = 4294967296 does not fit in u32 (max 4294967295); reduce item_count or head_dim

// -----

// workgroup_size * head_dim must fit u32.
builtin.module {
  vyre.kernel @k items 1 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [1, 67108864] : memref<67108864xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 1 seq_len 2 head_dim 67108864 tile_size 2 tile_count 1
        : (memref<67108864xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:430:5: error: 'vyre.tiled_online_softmax' op buffer 'out' (out) holds 8 f32 but item_count * head_dim = 67108864; size it memref<67108864xf32>

// -----

// A fragment ends with vyre.yield.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      %z = arith.constant 0 : index
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:453:5: error: 'vyre.tiled_online_softmax' op region 'scores' must end with vyre.yield, got arith.constant

// -----

// The scores region reads index tile bounds, not f32 (generic form).
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    "vyre.tiled_online_softmax"(%q, %out, %qs, %st, %oa) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 0>, item_count = 4 : i64, seq_len = 4 : i64, head_dim = 2 : i64, tile_size = 2 : i64, tile_count = 2 : i64}> ({
    ^bb0(%item: index, %lane: index, %ts: f32, %tl: index, %a: memref<128xf32>, %b: memref<128xf32>):
      "vyre.yield"() : () -> ()
    }, {
    ^bb0(%item2: index, %lane2: index, %ts2: index, %tl2: index, %m: f32, %r: f32, %c: memref<128xf32>, %d: memref<128xf32>):
      "vyre.yield"() : () -> ()
    }, {
    ^bb0(%item3: index, %lane3: index, %e: memref<128xf32>, %f: memref<128xf32>):
      "vyre.yield"() : () -> ()
    }, {
    ^bb0(%item4: index, %lane4: index, %g: memref<128xf32>):
      "vyre.yield"() : () -> ()
    }) : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>) -> ()
  }
}
// CHECK: {{.*}}verify_errors.mlir:476:5: error: 'vyre.tiled_online_softmax' op region 'scores' must take (%item: index, %lane: index, %tile_start: index, %tile_len: index, %q_scratch: memref<128xf32>, %score_tile: memref<128xf32>), got (index, index, f32, index, memref<128xf32>, memref<128xf32>)

// -----

// A region lists every argument.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:506:40: error: region 'scores' takes 6 arguments, got 5

// -----

// The access is a #vyre<access ...> enum: read, write or temp (generic form).
builtin.module {
  vyre.kernel @k items 1 workgroup_size 64 {
    %q = "vyre.buffer"() <{sym_name = "q", binding = 0 : i64, access = "readwrite", shape = array<i64: 8>}> : () -> memref<8xf32>
  }
}
// CHECK: {{.*}}verify_errors.mlir:521:5: error: 'vyre.buffer' op "readwrite" should be of base attribute vyre.access

// -----

// Stability helpers take f32.
func.func @f(%x: i32) -> i32 {
  %y = vyre.bounded_score %x : i32
  func.return %y : i32
}
// CHECK: {{.*}}verify_errors.mlir:530:3: error: 'vyre.bounded_score' op takes an f32 score, got i32; the stability helpers are defined on f32 only (convert the value first)

// -----

// vyre.yield ends a fragment and nothing else.
func.func @f() {
  vyre.yield
}
// CHECK: {{.*}}verify_errors.mlir:539:3: error: 'vyre.yield' op 'vyre.yield' expects parent op 'vyre.tiled_online_softmax'

// -----

// Buffers live in a kernel.
func.func @f() {
  %q = vyre.buffer "q" binding 0 read [8] : memref<8xf32>
  func.return
}
// CHECK: {{.*}}verify_errors.mlir:547:3: error: 'vyre.buffer' op 'vyre.buffer' expects parent op 'vyre.kernel'

// -----

// Scratch is declared in the default memory space.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32, 3>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32, 3>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:559:5: error: 'vyre.scratch' op scratch 'q_scratch' must be in the default memory space; convert-vyre-to-gpu places it in workgroup memory

// -----

// Bindings are not negative (generic form).
builtin.module {
  vyre.kernel @k items 1 workgroup_size 64 {
    %q = "vyre.buffer"() <{sym_name = "q", binding = -1 : i64, access = #vyre<access read>, shape = array<i64: 8>}> : () -> memref<8xf32>
  }
}
// CHECK: {{.*}}verify_errors.mlir:580:5: error: 'vyre.buffer' op buffer 'q' has a negative binding

// -----

// The scratch operands are vyre.scratch arrays.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%out, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:595:5: error: 'vyre.tiled_online_softmax' op operand 'q_scratch' must be a vyre.scratch

// -----

// A kernel's item count fits u32.
builtin.module {
  vyre.kernel @k items 4294967296 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:612:3: error: 'vyre.kernel' op 'item_count' = 4294967296 does not fit in u32 (max 4294967295); use a smaller value

// -----

// The skeleton's dimensions fit u32.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4294967296 head_dim 2 tile_size 2 tile_count 2147483648
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:641:5: error: 'vyre.tiled_online_softmax' op 'seq_len' = 4294967296 does not fit in u32 (max 4294967295); use a smaller value

// -----

// A wider slice of scores a lane than the tile needs is the op's own
// score_stride (vyre-retile records it), not what the array happens to
// hold: the fragments and the recurrence would address it differently.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<256xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<256xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:{{[0-9]+}}:5: error: 'vyre.tiled_online_softmax' op scratch 'score_tile' holds 256 f32 but workgroup_size * tile_size = 128; size it memref<128xf32>

// -----

// A score_stride below the tile size leaves no room for a tile's scores.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<64xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 score_stride 1
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<64xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}verify_errors.mlir:{{[0-9]+}}:5: error: 'vyre.tiled_online_softmax' op 'score_stride' is 1 but a lane's slice of score_tile holds a tile's 2 scores; give it at least tile_size
