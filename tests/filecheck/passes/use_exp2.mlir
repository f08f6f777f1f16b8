// RUN: vyre-opt %examples/flash_attention_2.mlir -p vyre-use-exp2 | filecheck %s
// RUN: vyre-opt %examples/flash_attention_2.mlir -p vyre-use-exp2,vyre-inline-fragments | filecheck %s --check-prefix=INLINED
// RUN: vyre-opt %s -p vyre-use-exp2 | filecheck %s --check-prefix=MODIFIED

// FlashAttention-2's score scale 1/sqrt(16) = 0.25 absorbs log2(e):
// 0.25 * 1.44269502 = 0.360673755, and the weights the update reads
// (vyre.tile_weight) come from exp2.
// CHECK:       vyre.tiled_online_softmax
// CHECK:         tile_count 4 exp2
// CHECK:       scores(
// CHECK:         %[[SCALE:.*]] = arith.constant 0.360673755 : f32
// CHECK-NEXT:    %[[SCALED:.*]] = arith.mulf %{{.*}}, %[[SCALE]] : f32
// its -80 for an infinite score in log2 units (-80 * log2(e)):
// CHECK-NEXT:    %[[S:.*]] = vyre.bounded_score log2 %[[SCALED]] : f32
// CHECK:         memref.store %[[S]], %score_tile
// CHECK:       update(
// CHECK-NOT:     math.exp
// CHECK:         vyre.tile_weight
// CHECK-NOT:     math.exp
// CHECK:         vyre.yield

// The recurrence follows the `exp2` property: rescale and tile sum use exp2,
// their arguments bounded in log2 units.
// INLINED:     vyre.bounded_exp_arg nonpositive log2
// INLINED:     %rescale = math.exp2
// INLINED:     %tile_sum = scf.for
// INLINED:       vyre.bounded_exp_arg nonpositive log2
// INLINED:       math.exp2
// INLINED-NOT: math.exp {{.*}}

// A score that is not `bounded_score(x * constant)` (here a score_mod ran
// after the scale) is multiplied by log2(e) just before it is stored.
builtin.module {
  vyre.kernel @modified items 2 workgroup_size 64 {
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
      %capped = math.tanh %x : f32
      %s = vyre.bounded_score %capped : f32
      memref.store %s, %st[%tile_start] : memref<128xf32>
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      %zero = arith.constant 0 : index
      %w = vyre.tile_weight %zero : f32
      %arg = vyre.bounded_exp_arg nonpositive %m_new : f32
      %own = math.exp %arg : f32
      "test.op"(%w, %own) : (f32, f32) -> ()
      vyre.yield
    }
  }
}
// MODIFIED:      %s = vyre.bounded_score %capped : f32
// MODIFIED-NEXT: %[[LOG2E:.*]] = arith.constant 1.44269502 : f32
// MODIFIED-NEXT: %[[SCALED:.*]] = arith.mulf %s, %[[LOG2E]] : f32
// MODIFIED-NEXT: memref.store %[[SCALED]], %st[%tile_start]
// An update region's own exponent becomes exp2, its bound in log2 units.
// MODIFIED:      %arg = vyre.bounded_exp_arg nonpositive log2 %m_new : f32
// MODIFIED-NEXT: %{{.*}} = math.exp2 %arg : f32
