// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Integer buffers and run-time key counts (kv_lens): what verifies and what
// is refused, each error naming the value and the fix.

// CHECK-LABEL: vyre.kernel @k
// CHECK:         %lens = vyre.buffer "kv_lens" binding 2 read [2] : memref<2xi32>
// CHECK:         vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%lens) scratch(%qs, %st, %oa)
// CHECK-NEXT:        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 items_per_seq 2
// Two sequences of two items each: verifies (and prints back).
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %lens = vyre.buffer "kv_lens" binding 2 read [2] : memref<2xi32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%lens) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 items_per_seq 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<2xi32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}

// -----

// Integer buffers are inputs only.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    // expected-error @+1 {{buffer 'kv_lens' holds i32 and has access "write"; integer buffers are inputs only: use access "read"}}
    %lens = vyre.buffer "kv_lens" binding 2 write [2] : memref<2xi32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%lens) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 items_per_seq 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<2xi32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}

// -----

// kv_lens needs items_per_seq.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %lens = vyre.buffer "kv_lens" binding 2 read [2] : memref<2xi32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    // expected-error @+1 {{kv_lens(%lens) needs 'items_per_seq N': item i's key count is kv_lens[i / N]}}
    vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%lens) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<2xi32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}

// -----

// items_per_seq needs kv_lens.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %lens = vyre.buffer "kv_lens" binding 2 read [2] : memref<2xi32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    // expected-error @+1 {{'items_per_seq' needs a kv_lens(%lens) operand: it says which entry of kv_lens gives an item's key count}}
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 items_per_seq 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}

// -----

// items_per_seq divides item_count.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %lens = vyre.buffer "kv_lens" binding 2 read [1] : memref<1xi32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    // expected-error @+1 {{'items_per_seq' is 3; it must be > 0 and divide item_count (4): every sequence has as many items}}
    vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%lens) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 items_per_seq 3
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<1xi32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}

// -----

// kv_lens holds i32.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %lens = vyre.buffer "kv_lens" binding 2 read [2] : memref<2xf32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    // expected-error @+1 {{operand 'kv_lens' must be a static 1-D memref of i32 (e.g. memref<4xi32>), got memref<2xf32>}}
    vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%lens) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 items_per_seq 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<2xf32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}

// -----

// One key count per sequence.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %lens = vyre.buffer "kv_lens" binding 2 read [4] : memref<4xi32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    // expected-error @+1 {{buffer 'kv_lens' (kv_lens) holds 4 i32 but there are item_count / items_per_seq = 2 sequences, one key count each; size it memref<2xi32>}}
    vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%lens) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 items_per_seq 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<4xi32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
  }
}

// -----

// No compile-time tile classes with run-time lengths.
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
    %lens = vyre.buffer "kv_lens" binding 2 read [2] : memref<2xi32>
    %qs = vyre.scratch "q_scratch" : memref<128xf32>
    %st = vyre.scratch "score_tile" : memref<128xf32>
    %oa = vyre.scratch "o_acc" : memref<128xf32>
    // expected-error @+1 {{'tile_classes' cannot be combined with kv_lens: the key count is only known at run time, so every tile of a mask is partial (leave tile_classes out)}}
    vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%lens) scratch(%qs, %st, %oa)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 tile_classes [2, 2] items_per_seq 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<2xi32>)
    scores(%item, %lane, %ts, %tl, %a, %b) {
      vyre.yield
    }
    update(%item2, %lane2, %ts2, %tl2, %m, %r, %c, %d) {
      vyre.yield
    }
    mask(%item3, %lane3, %kv) {
      %t = arith.constant true
      vyre.yield %t : i1
    }
  }
}
