// RUN: not vyre-opt %s -p 'vyre-split-kv{splits=2},vyre-resize-workgroup{size=32}' 2>&1 | filecheck %s --check-prefix=BAD

// A split kernel merges its partials within a workgroup: resizing it is an
// error.
builtin.module {
  vyre.kernel @split items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 1] : memref<64xf32>
    %out = vyre.buffer "out" binding 1 write [64, 1] : memref<64xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<1024xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 64 seq_len 64 head_dim 1 tile_size 16 tile_count 4
        : (memref<64xf32>, memref<64xf32>, memref<64xf32>, memref<1024xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      vyre.yield
    }
  }
}

// BAD: resize_workgroup_split.mlir:6:3: error: vyre-resize-workgroup: kernel @split is split (vyre-split-kv); resize it before splitting
