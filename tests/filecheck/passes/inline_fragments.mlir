// RUN: vyre-opt %s -p vyre-inline-fragments | filecheck %s

// Two opaque fragments (test.op) make the recurrence around them visible:
// each is spliced into the tile loop with its block arguments replaced.
builtin.module {
  vyre.kernel @tiny items 2 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 1] : memref<2xf32>
    %out = vyre.buffer "out" binding 1 write [2, 1] : memref<2xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<128xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2 seq_len 3 head_dim 1 tile_size 2 tile_count 2
        : (memref<2xf32>, memref<2xf32>, memref<64xf32>, memref<128xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      "test.op"(%item, %lane, %tile_start, %tile_len, %qs, %st) {fragment = "scores"} : (index, index, index, index, memref<64xf32>, memref<128xf32>) -> ()
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      "test.op"(%item2, %ts2, %tl2, %m_new, %rescale, %o) {fragment = "update"} : (index, index, index, f32, f32, memref<64xf32>) -> ()
      vyre.yield
    } prologue(%item3, %lane3, %qs3, %o3) {
      "test.op"(%item3, %lane3, %qs3, %o3) {fragment = "prologue"} : (index, index, memref<64xf32>, memref<64xf32>) -> ()
      vyre.yield
    } epilogue(%item4, %lane4, %o4) {
      "test.op"(%item4, %o4) {fragment = "epilogue"} : (index, memref<64xf32>) -> ()
      vyre.yield
    }
  }
}

// CHECK-LABEL: vyre.kernel @tiny
// CHECK-NOT:     vyre.tiled_online_softmax
// CHECK:         %[[ITEM:.*]] = vyre.item_index
// CHECK-NEXT:    %[[LANE:.*]] = vyre.lane_index
// CHECK-NEXT:    %[[COUNT:.*]] = arith.constant 2 : index
// CHECK-NEXT:    %[[IN_RANGE:.*]] = arith.cmpi ult, %[[ITEM]], %[[COUNT]] : index
// CHECK-NEXT:    scf.if %[[IN_RANGE]] {
// The query row is copied into the lane's slice of q_scratch.
// CHECK:           scf.for %load_d =
// CHECK:             memref.load %q[
// CHECK:             memref.store {{.*}}, %q_scratch[
// CHECK:           %[[M0:.*]] = arith.constant -3.40282347e+38 : f32
// CHECK-NEXT:      %[[L0:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:           scf.for %zero_d =
// CHECK:             memref.store {{.*}}, %o_acc[
// The prologue runs once, before the first tile:
// CHECK:           "test.op"(%[[ITEM]], %[[LANE]], %q_scratch, %o_acc) {fragment = "prologue"}
// seq_len 3 in tiles of 2: the whole tiles (one) in a loop, each of a
// constant length, then the last tile:
// CHECK:           %m_whole, %l_whole = scf.for %tile_idx = {{.*}} iter_args(%m = %[[M0]], %l = %[[L0]]) -> (f32, f32) {
// CHECK:             %tile_start = arith.muli %tile_idx,
// CHECK-NEXT:        %tile_len = arith.constant 2 : index
// The scores fragment, its arguments replaced by the loop values:
// CHECK-NEXT:        "test.op"(%[[ITEM]], %[[LANE]], %tile_start, %tile_len, %q_scratch, %score_tile) {fragment = "scores"}
// The tile max takes the larger (ogt: a NaN score never replaces it, so it
// is never NaN and needs no uno test):
// CHECK:             %tile_max = scf.for %max_j = {{.*}} to %tile_len
// CHECK:               %[[S:.*]] = memref.load %score_tile[
// CHECK-NEXT:          %[[GT:.*]] = arith.cmpf ogt, %[[S]], %[[TM:.*]] : f32
// CHECK-NEXT:          %[[NEXT:.*]] = arith.select %[[GT]], %[[S]], %[[TM]] : f32
// CHECK-NEXT:          scf.yield %[[NEXT]] : f32
// A loop over a tile runs at most tile_size times (for vyre-unroll-jam):
// CHECK-NEXT:        } {vyre.max_trips = 2 : i64}
// CHECK:             %[[NEW:.*]] = arith.cmpf ogt, %tile_max, %m : f32
// CHECK-NEXT:        %m_new = arith.select %[[NEW]], %tile_max, %m : f32
// CHECK-NEXT:        %[[DIFF:.*]] = arith.subf %m, %m_new : f32
// m <= m_new and s <= m_new: both exponents promise to be nonpositive.
// CHECK-NEXT:        %[[ARG:.*]] = vyre.bounded_exp_arg nonpositive %[[DIFF]] : f32
// CHECK-NEXT:        %rescale = math.exp %[[ARG]] : f32
// Each key's weight is computed once, and stored over its score for the
// update (whose vyre.tile_weight ops become loads):
// CHECK:             %tile_sum = scf.for %sum_j = {{.*}} iter_args(%[[SUM:.*]] = %{{.*}}) -> (f32) {
// CHECK:               %[[SCORE_AT:.*]] = arith.addi %{{.*}}, %sum_j : index
// CHECK-NEXT:          %[[SCORE:.*]] = memref.load %score_tile[%[[SCORE_AT]]]
// CHECK-NEXT:          %[[SHIFTED:.*]] = arith.subf %[[SCORE]], %m_new : f32
// CHECK-NEXT:          %[[EXP_ARG:.*]] = vyre.bounded_exp_arg nonpositive %[[SHIFTED]] : f32
// CHECK-NEXT:          %[[WEIGHT:.*]] = math.exp %[[EXP_ARG]] : f32
// CHECK:               %[[WEIGHT_AT:.*]] = arith.addi %{{.*}}, %sum_j : index
// CHECK-NEXT:          memref.store %[[WEIGHT]], %score_tile[%[[WEIGHT_AT]]]
// CHECK-NEXT:          arith.addf %[[SUM]], %[[WEIGHT]] : f32
// CHECK:             %[[RL:.*]] = arith.mulf %rescale, %l : f32
// CHECK-NEXT:        %l_new = arith.addf %[[RL]], %tile_sum : f32
// The update fragment comes after the l update:
// CHECK-NEXT:        "test.op"(%[[ITEM]], %tile_start, %tile_len, %m_new, %rescale, %o_acc) {fragment = "update"}
// CHECK-NEXT:        scf.yield %m_new, %l_new : f32, f32
// The last tile, of seq_len % tile_size keys, from the whole tiles' m and l:
// CHECK:           %{{.*}}, %[[L:.*]] = scf.if %{{.*}} -> (f32, f32) {
// CHECK:             %tile_start_1 = arith.muli
// CHECK-NEXT:        %tile_len_1 = arith.constant 1 : index
// CHECK-NEXT:        "test.op"(%[[ITEM]], %[[LANE]], %tile_start_1, %tile_len_1, %q_scratch, %score_tile) {fragment = "scores"}
// CHECK:             %[[NEW_1:.*]] = arith.cmpf ogt, %tile_max_1, %m_whole : f32
// CHECK:             "test.op"(%[[ITEM]], %tile_start_1, %tile_len_1, %m_new_1, %rescale_1, %o_acc) {fragment = "update"}
// CHECK-NEXT:        scf.yield %m_new_1, %l_new_1 : f32, f32
// The epilogue runs after the last tile, before the output is written:
// CHECK:           "test.op"(%[[ITEM]], %o_acc) {fragment = "epilogue"}
// CHECK-NEXT:      %denom = vyre.positive_denominator %[[L]] : f32
// CHECK:           scf.for %final_d =
// CHECK:             %[[O:.*]] = memref.load %o_acc[
// CHECK-NEXT:        %[[RATIO:.*]] = arith.divf %[[O]], %denom : f32
// CHECK-NEXT:        %[[FLUSHED:.*]] = vyre.flush_tiny %[[RATIO]] : f32
// CHECK:             memref.store %[[FLUSHED]], %out[
