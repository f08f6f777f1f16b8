// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// A decoder's own scratch arrays (here MLA's absorbed q_lat and o_lat),
// used from the fragments like the kernel's buffers, verify; each must hold
// at most u32 elements, like every buffer and the skeleton's scratch.

// CHECK-LABEL: vyre.kernel @own_scratch
// CHECK:         %q_lat = vyre.scratch "q_lat" : memref<256xf32>
// CHECK:         memref.store %{{.*}}, %q_lat[%{{.*}}] : memref<256xf32>
builtin.module {
  vyre.kernel @own_scratch items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    %q_lat = vyre.scratch "q_lat" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      %zero = arith.constant 0.0 : f32
      %c4 = arith.constant 4 : index
      %base = arith.muli %lane, %c4 : index
      memref.store %zero, %q_lat[%base] : memref<256xf32>
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}

// -----

// A scratch array of 2^32 f32 cannot be indexed with u32.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    %o_lat = vyre.scratch "o_lat" : memref<4294967296xf32>
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
// CHECK: {{.*}}scratch_errors.mlir:44:5: error: 'vyre.scratch' op scratch 'o_lat' holds 4294967296 f32, which does not fit in u32 (max 4294967295); shrink it (a per-lane scratch array holds workgroup_size * its per-lane length)
