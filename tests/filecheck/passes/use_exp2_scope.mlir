// RUN: vyre-opt %s --split-input-file -p vyre-use-exp2 | filecheck %s
// RUN: vyre-opt %examples/flash_attention_2.mlir -p 'vyre-split-kv{splits=2 merge=kernel},vyre-use-exp2' | filecheck %s --check-prefix=SPLIT

// Split first, its partial maxima merged by a kernel of their own: the
// merge reads them in log2 units too.
// SPLIT:     tile_count 4 exp2 kv_splits 2
// SPLIT:     vyre.kernel @flash_attention_2_merge
// SPLIT:     vyre.merge_splits {{.*}} head_dim 16 exp2 :

// An exponent of a value derived from the scores becomes exp2 and the bound
// on its way is in log2 units; an exponent of anything else stays exp.
builtin.module {
  vyre.kernel @derived items 2 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 1] : memref<2xf32>
    %out = vyre.buffer "out" binding 1 write [2, 1] : memref<2xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<128xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2 seq_len 3 head_dim 1 tile_size 2 tile_count 2
        : (memref<2xf32>, memref<2xf32>, memref<64xf32>, memref<128xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      %x = "test.op"() : () -> f32
      %s = vyre.bounded_score %x : f32
      memref.store %s, %st[%tile_start] : memref<128xf32>
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      %zero = arith.constant 0 : index
      %s2 = memref.load %st2[%zero] : memref<128xf32>
      %diff = arith.subf %s2, %m_new : f32
      %half = arith.constant 5.000000e-01 : f32
      %tempered = arith.mulf %diff, %half : f32
      %arg = vyre.bounded_exp_arg %tempered : f32
      %w = math.exp %arg : f32
      %two = arith.constant 2.000000e+00 : f32
      %e = math.exp %two : f32
      "test.op"(%w, %e) : (f32, f32) -> ()
      vyre.yield
    }
  }
}
// CHECK:      tile_count 2 exp2
// CHECK:      %arg = vyre.bounded_exp_arg log2 %tempered : f32
// CHECK-NEXT: %w = math.exp2 %arg : f32
// CHECK:      %e = math.exp %two : f32

// -----

// A score minus a constant is not a difference of two scores: scaling the
// scores would move it, so the pass leaves the skeleton alone.
builtin.module {
  vyre.kernel @offset items 2 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 1] : memref<2xf32>
    %out = vyre.buffer "out" binding 1 write [2, 1] : memref<2xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<128xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2 seq_len 3 head_dim 1 tile_size 2 tile_count 2
        : (memref<2xf32>, memref<2xf32>, memref<64xf32>, memref<128xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      %x = "test.op"() : () -> f32
      %s = vyre.bounded_score %x : f32
      memref.store %s, %st[%tile_start] : memref<128xf32>
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      %zero = arith.constant 0 : index
      %s2 = memref.load %st2[%zero] : memref<128xf32>
      %one = arith.constant 1.000000e+00 : f32
      %shifted = arith.subf %s2, %one : f32
      %w = math.exp %shifted : f32
      "test.op"(%w) : (f32) -> ()
      vyre.yield
    }
  }
}
// CHECK:     vyre.kernel @offset
// CHECK:     tile_count 2
// CHECK-NOT: exp2
// CHECK:     memref.store %s, %st[%tile_start]
// CHECK:     %w = math.exp %shifted : f32

// -----

// The row's maximum used as it is (here by an unknown op) would see the
// scaling too.
builtin.module {
  vyre.kernel @max_used items 2 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 1] : memref<2xf32>
    %out = vyre.buffer "out" binding 1 write [2, 1] : memref<2xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<128xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2 seq_len 3 head_dim 1 tile_size 2 tile_count 2
        : (memref<2xf32>, memref<2xf32>, memref<64xf32>, memref<128xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      %x = "test.op"() : () -> f32
      %s = vyre.bounded_score %x : f32
      memref.store %s, %st[%tile_start] : memref<128xf32>
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      "test.op"(%m_new) : (f32) -> ()
      vyre.yield
    }
  }
}
// CHECK:     vyre.kernel @max_used
// CHECK:     tile_count 2
// CHECK-NOT: exp2
// CHECK:     memref.store %s, %st[%tile_start]
