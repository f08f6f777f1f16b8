// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// rows_per_lane (vyre-block-rows): what verifies and what is refused.

// CHECK-LABEL: vyre.kernel @k items 64
// CHECK:         item_count 128 seq_len 4 head_dim 2 tile_size 2 tile_count 2 rows_per_lane 2
// Two rows an invocation: 64 invocations; verifies and prints back.
builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 2] : memref<256xf32>
    %out = vyre.buffer "out" binding 1 write [128, 2] : memref<256xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 128 seq_len 4 head_dim 2 tile_size 2 tile_count 2 rows_per_lane 2
        : (memref<256xf32>, memref<256xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// -----

// A lane runs at least two rows.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 2] : memref<256xf32>
    %out = vyre.buffer "out" binding 1 write [128, 2] : memref<256xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 128 seq_len 4 head_dim 2 tile_size 2 tile_count 2 rows_per_lane 1
        : (memref<256xf32>, memref<256xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}rows_errors.mlir:{{[0-9]+}}:5: error: 'vyre.tiled_online_softmax' op 'rows_per_lane' is 1; it must be at least 2 and divide item_count (128)

// -----

// The rows divide the items.
builtin.module {
  vyre.kernel @k items 42 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 2] : memref<256xf32>
    %out = vyre.buffer "out" binding 1 write [128, 2] : memref<256xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 128 seq_len 4 head_dim 2 tile_size 2 tile_count 2 rows_per_lane 3
        : (memref<256xf32>, memref<256xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}rows_errors.mlir:{{[0-9]+}}:5: error: 'vyre.tiled_online_softmax' op 'rows_per_lane' is 3; it must be at least 2 and divide item_count (128)

// -----

// The kernel runs item_count / rows invocations.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 2] : memref<256xf32>
    %out = vyre.buffer "out" binding 1 write [128, 2] : memref<256xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 128 seq_len 4 head_dim 2 tile_size 2 tile_count 2 rows_per_lane 2
        : (memref<256xf32>, memref<256xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}rows_errors.mlir:{{[0-9]+}}:5: error: 'vyre.tiled_online_softmax' op with rows_per_lane 2 the kernel runs item_count / 2 * 1 = 64 invocations, not 128; set the kernel's items to that

// -----

// The rows of an invocation share their sequence's key count.
builtin.module {
  vyre.kernel @k items 1 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %lens = vyre.buffer "kv_lens" binding 2 read [2] : memref<2xi32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%lens) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 items_per_seq 2 rows_per_lane 4
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<2xi32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}rows_errors.mlir:{{[0-9]+}}:5: error: 'vyre.tiled_online_softmax' op 'rows_per_lane' is 4 but items_per_seq (2) is not a multiple of it: the rows of a lane must share their sequence

// -----

// Tile classes are kept per block of workgroup_size * rows items.
builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 2] : memref<256xf32>
    %out = vyre.buffer "out" binding 1 write [128, 2] : memref<256xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 128 seq_len 4 head_dim 2 tile_size 2 tile_count 2 tile_classes [2, 0, 1, 2] rows_per_lane 2
        : (memref<256xf32>, memref<256xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    } mask(%i3, %l3, %kv_idx) {
      %keep = arith.cmpi ule, %kv_idx, %i3 : index
      vyre.yield %keep : i1
    }
  }
}
// CHECK: {{.*}}rows_errors.mlir:{{[0-9]+}}:5: error: 'vyre.tiled_online_softmax' op 'tile_classes' has 4 entries but there are 1 query blocks x 2 tiles = 2

// -----

// A workgroup merge of kv splits needs every lane: the row groups' splits
// must fill the workgroups.
builtin.module {
  vyre.kernel @k items 32 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 4 head_dim 2 tile_size 2 tile_count 2 kv_splits 2 rows_per_lane 4
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}rows_errors.mlir:{{[0-9]+}}:5: error: 'vyre.tiled_online_softmax' op with kv_splits 2, item_count / rows_per_lane 4 * kv_splits = 32 must be a multiple of the workgroup size (64): every lane takes part in the merge's barrier
