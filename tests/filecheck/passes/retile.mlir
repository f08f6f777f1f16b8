// RUN: vyre-opt %s -p 'vyre-retile{tile_size=8}' | filecheck %s
// RUN: vyre-opt %s -p vyre-retile | filecheck %s --check-prefix=AUTO
// RUN: not vyre-opt %s -p 'vyre-retile{tile_size=12}' 2>&1 | filecheck %s --check-prefix=BAD

// A causal kernel of 128 rows in 2 query blocks x 2 key tiles of 64
// (classes [partial, empty, full, partial]); the score slice of a lane is
// 64 wide.
builtin.module {
  vyre.kernel @causal items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 1] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [128, 1] : memref<128xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 128 seq_len 128 head_dim 1 tile_size 64 tile_count 2 tile_classes [2, 0, 1, 2]
        : (memref<128xf32>, memref<128xf32>, memref<64xf32>, memref<4096xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      vyre.yield
    } mask(%item3, %lane3, %kv_idx) {
      %keep = arith.cmpi ule, %kv_idx, %item3 : index
      vyre.yield %keep : i1
    }
  }
}

// Tiles of 8: each built tile becomes 8 tiles of its class; the score
// slice keeps its width (the fragments address it with the built stride,
// which the op records as score_stride).
// CHECK:      %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
// CHECK:      item_count 128 seq_len 128 head_dim 1 tile_size 8 tile_count 16 tile_classes [2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2] score_stride 64{{$}}

// Chosen for rows of at most 64 dims: 16.
// AUTO:       tile_size 16 tile_count 8 tile_classes [2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2] score_stride 64

// BAD: retile.mlir:15:5: error: vyre-retile: tile_size 12 must be a positive divisor of the built tile size 64
