// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Partials hold the results of splits: they need kv_splits.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "o" binding 1 temp [128, 2] : memref<256xf32>
    %m = vyre.buffer "m" binding 2 temp [64, 2] : memref<128xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa) partials(%m, %l)
        item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4
        : (memref<128xf32>, memref<256xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}merge_errors.mlir:13:5: error: 'vyre.tiled_online_softmax' op 'partials' takes two buffers, (m, l), and needs kv_splits >= 2: they hold the partial results of an item's splits

// -----

// A later kernel reads the partials: they are temp buffers.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "o" binding 1 temp [128, 2] : memref<256xf32>
    %m = vyre.buffer "m" binding 2 read [64, 2] : memref<128xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa) partials(%m, %l)
        item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4 kv_splits 2
        : (memref<128xf32>, memref<256xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}merge_errors.mlir:37:5: error: 'vyre.tiled_online_softmax' op partials operand 'm' must be a vyre.buffer with access "temp" (a later kernel merges it)

// -----

// One m and one l per invocation.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "o" binding 1 temp [128, 2] : memref<256xf32>
    %m = vyre.buffer "m" binding 2 temp [64, 2] : memref<128xf32>
    %l = vyre.buffer "l" binding 3 temp [64] : memref<64xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa) partials(%m, %l)
        item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4 kv_splits 2
        : (memref<128xf32>, memref<256xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>, memref<128xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}merge_errors.mlir:61:5: error: 'vyre.tiled_online_softmax' op partials buffer 'l' (l) holds 64 f32 but item_count * kv_splits = 128; size it memref<128xf32>

// -----

// With partials, out takes one row per split.
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "o" binding 1 temp [64, 2] : memref<128xf32>
    %m = vyre.buffer "m" binding 2 temp [64, 2] : memref<128xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 2] : memref<128xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa) partials(%m, %l)
        item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4 kv_splits 2
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}merge_errors.mlir:85:5: error: 'vyre.tiled_online_softmax' op buffer 'o' (out) holds 128 f32 but with partials it takes one row per split: item_count * kv_splits * head_dim = 256

// -----

// The merge reads what a split kernel left in temp buffers.
builtin.module {
  vyre.kernel @k_merge items 128 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 read [64, 4] : memref<256xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 4] : memref<256xf32>
    %o = vyre.buffer "o" binding 4 temp [512] : memref<512xf32>
    %out = vyre.buffer "out" binding 5 write [64, 2] : memref<128xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 64 splits 4 head_dim 2 : (memref<256xf32>, memref<256xf32>, memref<512xf32>, memref<128xf32>)
  }
}
// CHECK: {{.*}}merge_errors.mlir:106:5: error: 'vyre.merge_splits' op operand 'm' must be a vyre.buffer with access "temp"

// -----

// o holds a row of head_dim per split of every item.
builtin.module {
  vyre.kernel @k_merge items 128 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 temp [64, 4] : memref<256xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 4] : memref<256xf32>
    %o = vyre.buffer "o" binding 4 temp [256] : memref<256xf32>
    %out = vyre.buffer "out" binding 5 write [64, 2] : memref<128xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 64 splits 4 head_dim 2 : (memref<256xf32>, memref<256xf32>, memref<256xf32>, memref<128xf32>)
  }
}
// CHECK: {{.*}}merge_errors.mlir:120:5: error: 'vyre.merge_splits' op buffer 'o' (o) holds 256 f32 but the merge of 64 items x 4 splits x 2 dims needs 512; size it memref<512xf32>

// -----

// One invocation per output element.
builtin.module {
  vyre.kernel @k_merge items 64 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 temp [64, 4] : memref<256xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 4] : memref<256xf32>
    %o = vyre.buffer "o" binding 4 temp [512] : memref<512xf32>
    %out = vyre.buffer "out" binding 5 write [64, 2] : memref<128xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 64 splits 4 head_dim 2 : (memref<256xf32>, memref<256xf32>, memref<512xf32>, memref<128xf32>)
  }
}
// CHECK: {{.*}}merge_errors.mlir:134:5: error: 'vyre.merge_splits' op the merge runs one invocation per (item, dim): set the kernel's items to item_count * head_dim = 128, not 64

// -----

// With dims, an invocation merges that many dims of an item.
builtin.module {
  vyre.kernel @k_merge items 256 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 temp [64, 4] : memref<256xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 4] : memref<256xf32>
    %o = vyre.buffer "o" binding 4 temp [1024] : memref<1024xf32>
    %out = vyre.buffer "out" binding 5 write [64, 4] : memref<256xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 64 splits 4 head_dim 4 dims 2 : (memref<256xf32>, memref<256xf32>, memref<1024xf32>, memref<256xf32>)
  }
}
// CHECK: {{.*}}merge_errors.mlir:{{[0-9]+}}:5: error: 'vyre.merge_splits' op the merge runs one invocation per 2 dims of an item: set the kernel's items to item_count * head_dim / dims = 128, not 256

// -----

// dims divides head_dim.
builtin.module {
  vyre.kernel @k_merge items 128 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 temp [64, 4] : memref<256xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 4] : memref<256xf32>
    %o = vyre.buffer "o" binding 4 temp [1024] : memref<1024xf32>
    %out = vyre.buffer "out" binding 5 write [64, 4] : memref<256xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 64 splits 4 head_dim 4 dims 3 : (memref<256xf32>, memref<256xf32>, memref<1024xf32>, memref<256xf32>)
  }
}
// CHECK: {{.*}}merge_errors.mlir:{{[0-9]+}}:5: error: 'vyre.merge_splits' op 'dims' (3) must divide head_dim (4): an invocation merges that many of an item's dims

// -----

// At least one split.
builtin.module {
  vyre.kernel @k_merge items 128 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 temp [64, 4] : memref<256xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 4] : memref<256xf32>
    %o = vyre.buffer "o" binding 4 temp [512] : memref<512xf32>
    %out = vyre.buffer "out" binding 5 write [64, 2] : memref<128xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 64 splits 0 head_dim 2 : (memref<256xf32>, memref<256xf32>, memref<512xf32>, memref<128xf32>)
  }
}
// CHECK: {{.*}}merge_errors.mlir:{{[0-9]+}}:5: error: 'vyre.merge_splits' op 'splits' must be in [1, 2^32), got 0

// -----

// The log-sum-exp undoes the weight scale of the split skeleton's keys: it
// needs them.
builtin.module {
  vyre.kernel @k_merge items 128 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 temp [64, 4] : memref<256xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 4] : memref<256xf32>
    %o = vyre.buffer "o" binding 4 temp [512] : memref<512xf32>
    %out = vyre.buffer "out" binding 5 write [64, 2] : memref<128xf32>
    %lse = vyre.buffer "lse" binding 6 write [64] : memref<64xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) lse(%lse) keys 0 item_count 64 splits 4 head_dim 2 : (memref<256xf32>, memref<256xf32>, memref<512xf32>, memref<128xf32>, memref<64xf32>)
  }
}
// CHECK: {{.*}}merge_errors.mlir:{{[0-9]+}}:5: error: 'vyre.merge_splits' op 'keys' must be in [1, 2^32), got 0

// -----

// keys without lse.
builtin.module {
  vyre.kernel @k_merge items 128 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 temp [64, 4] : memref<256xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 4] : memref<256xf32>
    %o = vyre.buffer "o" binding 4 temp [512] : memref<512xf32>
    %out = vyre.buffer "out" binding 5 write [64, 2] : memref<128xf32>
    "vyre.merge_splits"(%m, %l, %o, %out) <{item_count = 64 : i64, splits = 4 : i64, head_dim = 2 : i64, keys = 8 : i64}> : (memref<256xf32>, memref<256xf32>, memref<512xf32>, memref<128xf32>) -> ()
  }
}
// CHECK: {{.*}}merge_errors.mlir:{{[0-9]+}}:5: error: 'vyre.merge_splits' op 'lse' and 'keys' go together: the log-sum-exp undoes the weight scale of the split skeleton's keys (give both, or neither)

// -----

// One log-sum-exp per item.
builtin.module {
  vyre.kernel @k_merge items 128 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 temp [64, 4] : memref<256xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 4] : memref<256xf32>
    %o = vyre.buffer "o" binding 4 temp [512] : memref<512xf32>
    %out = vyre.buffer "out" binding 5 write [64, 2] : memref<128xf32>
    %lse = vyre.buffer "lse" binding 6 write [32] : memref<32xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) lse(%lse) keys 8 item_count 64 splits 4 head_dim 2 : (memref<256xf32>, memref<256xf32>, memref<512xf32>, memref<128xf32>, memref<32xf32>)
  }
}
// CHECK: {{.*}}merge_errors.mlir:{{[0-9]+}}:5: error: 'vyre.merge_splits' op buffer 'lse' (lse) holds 32 f32 but one log-sum-exp per item needs 64; size it memref<64xf32>

// -----

// Invocations that leave partials write no log-sum-exp: the merge kernel
// does (vyre.merge_splits lse(...)).
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "o" binding 1 temp [128, 2] : memref<256xf32>
    %m = vyre.buffer "m" binding 2 temp [64, 2] : memref<128xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 2] : memref<128xf32>
    %lse = vyre.buffer "lse" binding 4 write [64] : memref<64xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<1024xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) lse(%lse) scratch(%qs, %st, %oa) partials(%m, %l)
        item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4 kv_splits 2
        : (memref<128xf32>, memref<256xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %a, %b) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %c, %d) {
      vyre.yield
    }
  }
}
// CHECK: {{.*}}merge_errors.mlir:{{[0-9]+}}:5: error: 'vyre.tiled_online_softmax' op 'lse' cannot be combined with partials(%m, %l): the invocations leave partial results, and the kernel that merges them writes the log-sum-exp (vyre.merge_splits lse(%lse) keys N, as vyre-split-kv{merge=kernel} makes it)

// -----

// Each team takes a run of splits / teams: a power of two dividing them.
builtin.module {
  vyre.kernel @k_merge items 384 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 temp [64, 4] : memref<256xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 4] : memref<256xf32>
    %o = vyre.buffer "o" binding 4 temp [512] : memref<512xf32>
    %out = vyre.buffer "out" binding 5 write [64, 2] : memref<128xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 64 splits 4 head_dim 2 teams 3 : (memref<256xf32>, memref<256xf32>, memref<512xf32>, memref<128xf32>)
  }
}
// CHECK: {{.*}}merge_errors.mlir:{{[0-9]+}}:5: error: 'vyre.merge_splits' op 'teams' (3) must be a power of two dividing splits (4): each team merges as many splits

// -----

// A workgroup holds every team of its columns: 64 lanes as 4 teams of 16
// columns, which must divide the 8 columns.
builtin.module {
  vyre.kernel @k_merge items 32 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 temp [4, 4] : memref<16xf32>
    %l = vyre.buffer "l" binding 3 temp [4, 4] : memref<16xf32>
    %o = vyre.buffer "o" binding 4 temp [32] : memref<32xf32>
    %out = vyre.buffer "out" binding 5 write [4, 2] : memref<8xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 4 splits 4 head_dim 2 teams 4 : (memref<16xf32>, memref<16xf32>, memref<32xf32>, memref<8xf32>)
  }
}
// CHECK: {{.*}}merge_errors.mlir:{{[0-9]+}}:5: error: 'vyre.merge_splits' op a workgroup of 64 lanes holds 4 teams of the same columns: 'teams' must divide the lanes, and lanes / teams the 8 columns (item_count * head_dim / dims)

// -----

// Each team has its invocations.
builtin.module {
  vyre.kernel @k_merge items 128 workgroup_size 64 {
    %m = vyre.buffer "m" binding 2 temp [64, 4] : memref<256xf32>
    %l = vyre.buffer "l" binding 3 temp [64, 4] : memref<256xf32>
    %o = vyre.buffer "o" binding 4 temp [512] : memref<512xf32>
    %out = vyre.buffer "out" binding 5 write [64, 2] : memref<128xf32>
    vyre.merge_splits m(%m) l(%l) o(%o) out(%out) item_count 64 splits 4 head_dim 2 teams 2 : (memref<256xf32>, memref<256xf32>, memref<512xf32>, memref<128xf32>)
  }
}
// CHECK: {{.*}}merge_errors.mlir:{{[0-9]+}}:5: error: 'vyre.merge_splits' op the merge runs one invocation per (item, dim) and team (2): set the kernel's items to item_count * head_dim * teams = 256, not 128
