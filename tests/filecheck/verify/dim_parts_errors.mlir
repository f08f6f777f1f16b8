// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// A part count is a power of two (the parts' sums are added pairwise).
builtin.module {
  vyre.kernel @k items 192 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 8] : memref<512xf32>
    %out = vyre.buffer "out" binding 1 write [64, 8] : memref<512xf32>
    %qs = vyre.scratch "q_scratch" : memref<510xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<510xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 8 tile_size 16 tile_count 4 dim_parts 3
        : (memref<512xf32>, memref<512xf32>, memref<510xf32>, memref<1024xf32>, memref<510xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}dim_parts_errors.mlir:11:5: error: 'vyre.tiled_online_softmax' op 'dim_parts' is 3; it must be a power of two >= 2 (the parts' dot products are added pairwise across lanes)

// -----

// Split dims and split tiles need a merge by another kernel.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 8] : memref<512xf32>
    %out = vyre.buffer "out" binding 1 write [64, 8] : memref<512xf32>
    %qs = vyre.scratch "q_scratch" : memref<256xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 8 tile_size 16 tile_count 4 kv_splits 2 dim_parts 2
        : (memref<512xf32>, memref<512xf32>, memref<256xf32>, memref<1024xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}dim_parts_errors.mlir:33:5: error: 'vyre.tiled_online_softmax' op 'dim_parts' combines with 'kv_splits' only where the splits' partials are merged by another kernel (partials(%m, %l)): the merge in workgroup memory takes whole rows

// -----

// The parts take turns over chunks of 4 dims.
builtin.module {
  vyre.kernel @k items 256 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 8] : memref<512xf32>
    %out = vyre.buffer "out" binding 1 write [64, 8] : memref<512xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 8 tile_size 16 tile_count 4 dim_parts 4
        : (memref<512xf32>, memref<512xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}dim_parts_errors.mlir:55:5: error: 'vyre.tiled_online_softmax' op 'dim_parts' is 4 but head_dim (8) is not a multiple of dim_parts * dim_chunk = 16 (the parts take turns over chunks of 4 dims)

// -----

// An item's parts share a workgroup.
builtin.module {
  vyre.kernel @k items 256 workgroup_size 2 {
    %q = vyre.buffer "q" binding 0 read [64, 16] : memref<1024xf32>
    %out = vyre.buffer "out" binding 1 write [64, 16] : memref<1024xf32>
    %qs = vyre.scratch "q_scratch" : memref<8xf32>
    %st = vyre.scratch "score_tile" : memref<32xf32>
    %oa = vyre.scratch "o_acc" : memref<8xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 16 tile_size 16 tile_count 4 dim_parts 4
        : (memref<1024xf32>, memref<1024xf32>, memref<8xf32>, memref<32xf32>, memref<8xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}dim_parts_errors.mlir:77:5: error: 'vyre.tiled_online_softmax' op 'dim_parts' is 4; it must divide the workgroup size (2), so that an item's parts share a subgroup

// -----

// Hooks see an item's whole o_acc.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 8] : memref<512xf32>
    %out = vyre.buffer "out" binding 1 write [64, 8] : memref<512xf32>
    %qs = vyre.scratch "q_scratch" : memref<256xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 8 tile_size 16 tile_count 4 dim_parts 2
        : (memref<512xf32>, memref<512xf32>, memref<256xf32>, memref<1024xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    } epilogue(%item3, %lane3, %e) {
      %zero = arith.constant 0.0 : f32
      vyre.yield
    }
  }
}
// CHECK: {{.*}}dim_parts_errors.mlir:99:5: error: 'vyre.tiled_online_softmax' op 'dim_parts' cannot be combined with a prologue or epilogue (the hooks see the whole o_acc of an item)

// -----

// The kernel runs item_count * dim_parts invocations.
builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 8] : memref<512xf32>
    %out = vyre.buffer "out" binding 1 write [64, 8] : memref<512xf32>
    %qs = vyre.scratch "q_scratch" : memref<256xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 8 tile_size 16 tile_count 4 dim_parts 2
        : (memref<512xf32>, memref<512xf32>, memref<256xf32>, memref<1024xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}dim_parts_errors.mlir:124:5: error: 'vyre.tiled_online_softmax' op with dim_parts 2 the kernel runs item_count * dim_parts = 128 invocations, not 64; set the kernel's items to that

// -----

// A lane's slices hold head_dim / dim_parts floats.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 8] : memref<512xf32>
    %out = vyre.buffer "out" binding 1 write [64, 8] : memref<512xf32>
    %qs = vyre.scratch "q_scratch" : memref<512xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 8 tile_size 16 tile_count 4 dim_parts 2
        : (memref<512xf32>, memref<512xf32>, memref<512xf32>, memref<1024xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}dim_parts_errors.mlir:146:5: error: 'vyre.tiled_online_softmax' op scratch 'q_scratch' holds 512 f32 but workgroup_size * head_dim / dim_parts = 256; size it memref<256xf32>

// -----

// A lane's chunk is a power of two of dims.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 8] : memref<512xf32>
    %out = vyre.buffer "out" binding 1 write [64, 8] : memref<512xf32>
    %qs = vyre.scratch "q_scratch" : memref<256xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 8 tile_size 16 tile_count 4 dim_parts 2 dim_chunk 3
        : (memref<512xf32>, memref<512xf32>, memref<256xf32>, memref<1024xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}dim_parts_errors.mlir:168:5: error: 'vyre.tiled_online_softmax' op 'dim_chunk' is 3; it must be a power of two >= 1

// -----

// Chunks of 8 dims over 2 parts need rows of a multiple of 16.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 8] : memref<512xf32>
    %out = vyre.buffer "out" binding 1 write [64, 8] : memref<512xf32>
    %qs = vyre.scratch "q_scratch" : memref<256xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 8 tile_size 16 tile_count 4 dim_parts 2 dim_chunk 8
        : (memref<512xf32>, memref<512xf32>, memref<256xf32>, memref<1024xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}dim_parts_errors.mlir:190:5: error: 'vyre.tiled_online_softmax' op 'dim_parts' is 2 but head_dim (8) is not a multiple of dim_parts * dim_chunk = 16 (the parts take turns over chunks of 8 dims)

// -----

// A chunk says how parts deal the dims: no parts, no chunk.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 8] : memref<512xf32>
    %out = vyre.buffer "out" binding 1 write [64, 8] : memref<512xf32>
    %qs = vyre.scratch "q_scratch" : memref<256xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 64 seq_len 64 head_dim 8 tile_size 16 tile_count 4 dim_chunk 8
        : (memref<512xf32>, memref<512xf32>, memref<256xf32>, memref<1024xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}dim_parts_errors.mlir:212:5: error: 'vyre.tiled_online_softmax' op 'dim_chunk' is given without 'dim_parts': it says how the parts deal an item's head dims
