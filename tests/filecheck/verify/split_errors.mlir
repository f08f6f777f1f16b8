// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// A split count must divide the workgroup size.
builtin.module {
  vyre.kernel @k items 192 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4 kv_splits 3
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}split_errors.mlir:11:5: error: 'vyre.tiled_online_softmax' op 'kv_splits' is 3; it must divide the workgroup size (64), so that an item's splits share a workgroup

// -----

// No more splits than tiles.
builtin.module {
  vyre.kernel @k items 512 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4 kv_splits 8
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}split_errors.mlir:33:5: error: 'vyre.tiled_online_softmax' op 'kv_splits' is 8 but there are only 4 tiles to split; use at most 4

// -----

// Every workgroup is full (the merge has a barrier).
builtin.module {
  vyre.kernel @k items 40 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [20, 2] : memref<40xf32>
    %out = vyre.buffer "out" binding 1 write [20, 2] : memref<40xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 20 seq_len 64 head_dim 2 tile_size 16 tile_count 4 kv_splits 2
        : (memref<40xf32>, memref<40xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}split_errors.mlir:55:5: error: 'vyre.tiled_online_softmax' op with kv_splits 2, item_count * kv_splits = 40 must be a multiple of the workgroup size (64): every lane takes part in the merge's barrier

// -----

// The kernel runs item_count * kv_splits invocations.
builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4 kv_splits 2
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}split_errors.mlir:77:5: error: 'vyre.tiled_online_softmax' op with kv_splits 2 the kernel runs item_count * kv_splits = 128 invocations, not 64; set the kernel's items to that

// -----

// No splits with a mask.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4 kv_splits 2
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    } mask(%i3, %l3, %kv) {
      %keep = arith.cmpi ule, %kv, %i3 : index
      vyre.yield %keep : i1
    }
  }
}
// CHECK: {{.*}}split_errors.mlir:99:5: error: 'vyre.tiled_online_softmax' op 'kv_splits' cannot be combined with a mask region (tile skipping is decided per block of items, not per split)
