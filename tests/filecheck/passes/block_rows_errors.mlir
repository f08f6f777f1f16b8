// RUN: not vyre-opt %s -p 'vyre-block-rows{rows=2},vyre-inline-fragments' 2>&1 | filecheck %s

// The scores loop runs over `item` keys: two rows of an invocation would
// need two different loops, so widening refuses the kernel at the skeleton.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 1] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [128, 1] : memref<128xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 128 seq_len 128 head_dim 1 tile_size 64 tile_count 2
        : (memref<128xf32>, memref<128xf32>, memref<64xf32>, memref<4096xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %zero = arith.constant 0.0 : f32
      scf.for %j = %c0 to %item step %c1 {
        memref.store %zero, %st[%j] : memref<4096xf32>
      }
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      vyre.yield
    }
  }
}

// CHECK: block_rows_errors.mlir:12:5: error: vyre-inline-fragments: rows_per_lane: a loop's bounds depend on the item, so the rows of an invocation cannot share it; run this skeleton with one row a lane
