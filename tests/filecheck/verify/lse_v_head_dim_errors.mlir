// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// A log-sum-exp buffer holds one f32 per item.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 3] : memref<12xf32>
    %lse = vyre.buffer "lse" binding 2 write [5] : memref<5xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<192xf32>
    vyre.tiled_online_softmax q(%q) out(%out) lse(%lse) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 v_head_dim 3
        : (memref<8xf32>, memref<12xf32>, memref<128xf32>, memref<128xf32>, memref<192xf32>, memref<5xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}lse_v_head_dim_errors.mlir:12:5: error: 'vyre.tiled_online_softmax' op buffer 'lse' (lse) holds 5 f32 but there are 4 items, one log-sum-exp each; size it memref<4xf32>

// -----

// The log-sum-exp is an output.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 3] : memref<12xf32>
    %lse = vyre.buffer "lse" binding 2 read [4] : memref<4xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<192xf32>
    vyre.tiled_online_softmax q(%q) out(%out) lse(%lse) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 v_head_dim 3
        : (memref<8xf32>, memref<12xf32>, memref<128xf32>, memref<128xf32>, memref<192xf32>, memref<4xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}lse_v_head_dim_errors.mlir:35:5: error: 'vyre.tiled_online_softmax' op operand 'lse' must be a vyre.buffer with access "write"

// -----

// With v_head_dim, o_acc holds value rows.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 3] : memref<12xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 v_head_dim 3
        : (memref<8xf32>, memref<12xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}lse_v_head_dim_errors.mlir:57:5: error: 'vyre.tiled_online_softmax' op scratch 'o_acc' holds 128 f32 but workgroup_size * v_head_dim = 192; size it memref<192xf32>

// -----

// With v_head_dim, out holds value rows.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<192xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 v_head_dim 3
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<192xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}lse_v_head_dim_errors.mlir:79:5: error: 'vyre.tiled_online_softmax' op buffer 'out' (out) holds 8 f32 but item_count * v_head_dim = 12; size it memref<12xf32>

// -----

// Rows split over lanes keep the same dims of the query and value rows.
builtin.module {
  vyre.kernel @k items 8 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 8] : memref<32xf32>
    %out = vyre.buffer "out" binding 1 write [4, 4] : memref<16xf32>
    %qs = vyre.scratch "q_scratch" : memref<256xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 8 tile_size 2 tile_count 2 dim_parts 2 v_head_dim 4
        : (memref<32xf32>, memref<16xf32>, memref<256xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}lse_v_head_dim_errors.mlir:101:5: error: 'vyre.tiled_online_softmax' op 'dim_parts' needs value rows as wide as the query rows (v_head_dim 4, head_dim 8): a lane keeps the same dims of both
