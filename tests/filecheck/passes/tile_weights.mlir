// RUN: vyre-opt %s --split-input-file -p vyre-inline-fragments | filecheck %s

// An update that weighs its keys through vyre.tile_weight gets the weights
// the tile sum stored over the scores: loads, no second exponent.
builtin.module {
  vyre.kernel @stored items 2 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 1] : memref<2xf32>
    %out = vyre.buffer "out" binding 1 write [2, 1] : memref<2xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<128xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2 seq_len 2 head_dim 1 tile_size 2 tile_count 1
        : (memref<2xf32>, memref<2xf32>, memref<64xf32>, memref<128xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      %one = arith.constant 1 : index
      %w = vyre.tile_weight %one : f32
      "test.op"(%w) {fragment = "update"} : (f32) -> ()
      vyre.yield
    }
  }
}

// CHECK-LABEL: vyre.kernel @stored
// CHECK:         %tile_sum = scf.for %sum_j =
// CHECK:           %[[WEIGHT:.*]] = math.exp
// CHECK:           memref.store %[[WEIGHT]], %score_tile[
// CHECK:         %l_new = arith.addf
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:    %[[TILE:.*]] = arith.constant 2 : index
// CHECK-NEXT:    %[[ROW:.*]] = arith.muli %lane, %[[TILE]] : index
// CHECK-NEXT:    %[[AT:.*]] = arith.addi %[[ROW]], %[[ONE]] : index
// CHECK-NEXT:    %weight = memref.load %score_tile[%[[AT]]] : memref<128xf32>
// CHECK-NEXT:    "test.op"(%weight) {fragment = "update"}

// -----

// An update that reads %score_tile itself still finds the scores there:
// nothing is stored over them, and its weights are recomputed.
builtin.module {
  vyre.kernel @recomputed items 2 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 1] : memref<2xf32>
    %out = vyre.buffer "out" binding 1 write [2, 1] : memref<2xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<128xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2 seq_len 2 head_dim 1 tile_size 2 tile_count 1
        : (memref<2xf32>, memref<2xf32>, memref<64xf32>, memref<128xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      %one = arith.constant 1 : index
      %s = memref.load %st2[%one] : memref<128xf32>
      %w = vyre.tile_weight %one : f32
      "test.op"(%s, %w) {fragment = "update"} : (f32, f32) -> ()
      vyre.yield
    }
  }
}

// CHECK-LABEL: vyre.kernel @recomputed
// CHECK:         %tile_sum = scf.for %sum_j =
// CHECK-NOT:       memref.store
// CHECK:         %l_new = arith.addf
// CHECK:         %[[SCORE:.*]] = memref.load %score_tile[
// CHECK:         %[[EXP:.*]] = math.exp
// CHECK-NEXT:    "test.op"(%[[SCORE]], %[[EXP]]) {fragment = "update"}
