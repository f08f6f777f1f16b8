// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The mask region, tile_classes and vyre.tile_weight: one chunk per error.
// A mask yields the i1 that keeps a pair.
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
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    } mask(%item3, %lane3, %kv) {
      vyre.yield
    }
  }
}
// CHECK: error: 'vyre.tiled_online_softmax' op region 'mask' must end with `vyre.yield %keep : i1`

// -----

// With a mask, weights come from vyre.tile_weight (exactly 0 when masked).
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
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      %zero = arith.constant 0 : index
      %s = memref.load %c[%zero] : memref<128xf32>
      vyre.yield
    } mask(%item3, %lane3, %kv) {
      %keep = arith.cmpi ule, %kv, %item3 : index
      vyre.yield %keep : i1
    }
  }
}
// CHECK: error: 'vyre.tiled_online_softmax' op with a mask, the update region must read weights through vyre.tile_weight

// -----

// One tile class per (query block, key tile).
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 tile_classes [1, 2, 0]
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    } mask(%item3, %lane3, %kv) {
      %keep = arith.cmpi ule, %kv, %item3 : index
      vyre.yield %keep : i1
    }
  }
}
// CHECK: error: 'vyre.tiled_online_softmax' op 'tile_classes' has 3 entries but there are 1 query blocks x 2 tiles = 2

// -----

// Tile classes are 0, 1 or 2.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 tile_classes [1, 3]
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    } mask(%item3, %lane3, %kv) {
      %keep = arith.cmpi ule, %kv, %item3 : index
      vyre.yield %keep : i1
    }
  }
}
// CHECK: error: 'vyre.tiled_online_softmax' op 'tile_classes' entries must be 0 (empty), 1 (full) or 2 (partial)

// -----

// Tile classes need a mask.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 tile_classes [1, 1]
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: error: 'vyre.tiled_online_softmax' op 'tile_classes' needs a mask region

// -----

// vyre.tile_weight belongs in an update region.
builtin.module {
  %j = arith.constant 0 : index
  %w = vyre.tile_weight %j : f32
}
// CHECK: error: 'vyre.tile_weight' op vyre.tile_weight is only valid inside the update region

// -----

// The scores and update regions yield nothing; only a mask yields a value.
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
      %true = arith.constant true
      vyre.yield %true : i1
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: error: 'vyre.tiled_online_softmax' op the scores, update, prologue and epilogue regions end with a plain vyre.yield (no values); only the mask region yields an i1
