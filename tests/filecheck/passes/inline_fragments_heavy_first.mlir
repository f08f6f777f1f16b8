// RUN: vyre-opt %s -p 'vyre-inline-fragments{heavy_first=true}' | filecheck %s
// RUN: vyre-opt %s -p vyre-inline-fragments | filecheck %s --check-prefix=NATURAL

// Two heads of 128 rows, query blocks of 64 (one workgroup each), two key
// tiles: per head tile_classes [partial, empty, full, partial], so block 0
// computes one tile and block 1 two.  With heavy_first, workgroup w runs
// the block of rank w / 2 (ranks: block 1, then block 0) of head w % 2:
// both heads' two-tile blocks start before either one-tile block.
builtin.module {
  vyre.kernel @causal items 256 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [256, 1] : memref<256xf32>
    %out = vyre.buffer "out" binding 1 write [256, 1] : memref<256xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 256 seq_len 128 head_dim 1 tile_size 64 tile_count 2
        tile_classes [2, 0, 1, 2, 2, 0, 1, 2]
        : (memref<256xf32>, memref<256xf32>, memref<64xf32>, memref<4096xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      "test.op"(%tile_start) {fragment = "scores"} : (index) -> ()
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      %zero = arith.constant 0 : index
      %w = vyre.tile_weight %zero : f32
      "test.op"(%w) {fragment = "update"} : (f32) -> ()
      vyre.yield
    } mask(%item3, %lane3, %kv_idx) {
      %keep = arith.cmpi ule, %kv_idx, %item3 : index
      vyre.yield %keep : i1
    }
  }
}

// CHECK-LABEL: vyre.kernel @causal
// CHECK:         %[[ITEM:.*]] = vyre.item_index
// CHECK:         %[[LANES:.*]] = arith.constant 64 : index
// CHECK-NEXT:    %workgroup = arith.divui %[[ITEM]], %[[LANES]] : index
// CHECK-NEXT:    %[[HEADS:.*]] = arith.constant 2 : index
// CHECK-NEXT:    %rank = arith.divui %workgroup, %[[HEADS]] : index
// CHECK-NEXT:    %repeat = arith.remui %workgroup, %[[HEADS]] : index
// CHECK-NEXT:    %[[HEAVIEST:.*]] = arith.constant 1 : index
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:    %[[SECOND:.*]] = arith.cmpi eq, %rank, %[[ONE]] : index
// CHECK-NEXT:    %[[LIGHTEST:.*]] = arith.constant 0 : index
// CHECK-NEXT:    %[[BLOCK:.*]] = arith.select %[[SECOND]], %[[LIGHTEST]], %[[HEAVIEST]] : index
// CHECK-NEXT:    %[[PERIOD:.*]] = arith.constant 2 : index
// CHECK-NEXT:    %[[BASE:.*]] = arith.muli %repeat, %[[PERIOD]] : index
// CHECK-NEXT:    %heavy_first = arith.addi %[[BASE]], %[[BLOCK]] : index
// CHECK-NEXT:    %[[FIRST:.*]] = arith.muli %heavy_first, %[[LANES]] : index
// CHECK-NEXT:    %[[LANE:.*]] = arith.remui %[[ITEM]], %[[LANES]] : index
// CHECK-NEXT:    %invocation = arith.addi %[[FIRST]], %[[LANE]] : index
// The block's tile ranges are those of the permuted invocation:
// CHECK:         %query_block = arith.divui %invocation, %{{.*}} : index

// NATURAL-LABEL: vyre.kernel @causal
// NATURAL-NOT:   %heavy_first
// NATURAL:       %query_block = arith.divui %item, %{{.*}} : index
