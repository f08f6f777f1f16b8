// RUN: vyre-opt %s -p 'vyre-block-rows{rows=2}' | filecheck %s
// RUN: vyre-opt %s -p 'vyre-block-rows{rows=2},vyre-inline-fragments' | filecheck %s --check-prefix=WIDE
// RUN: vyre-opt %s -p 'vyre-block-rows{rows=1}' | filecheck %s --check-prefix=ONE
// RUN: vyre-opt %s -p vyre-block-rows | filecheck %s --check-prefix=ONE
// RUN: not vyre-opt %s -p 'vyre-block-rows{rows=3}' 2>&1 | filecheck %s --check-prefix=ODD
// RUN: not vyre-opt %s -p 'vyre-block-rows{rows=-1}' 2>&1 | filecheck %s --check-prefix=NEGATIVE

// A causal kernel of 128 one-dim rows in 2 query blocks x 2 key tiles of 64
// (classes [partial, empty, full, partial]); each score is q * k[key].
builtin.module {
  vyre.kernel @causal items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 1] : memref<128xf32>
    %k = vyre.buffer "k" binding 1 read [128, 1] : memref<128xf32>
    %out = vyre.buffer "out" binding 2 write [128, 1] : memref<128xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 128 seq_len 128 head_dim 1 tile_size 64 tile_count 2 tile_classes [2, 0, 1, 2]
        : (memref<128xf32>, memref<128xf32>, memref<64xf32>, memref<4096xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c64 = arith.constant 64 : index
      %row = arith.muli %lane, %c64 : index
      scf.for %j = %c0 to %tile_len step %c1 {
        %key = arith.addi %tile_start, %j : index
        %qv = memref.load %qs[%lane] : memref<64xf32>
        %kv = memref.load %k[%key] : memref<128xf32>
        %s = arith.mulf %qv, %kv : f32
        %at = arith.addi %row, %j : index
        memref.store %s, %st[%at] : memref<4096xf32>
      }
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      vyre.yield
    } mask(%item3, %lane3, %kv_idx) {
      %keep = arith.cmpi ule, %kv_idx, %item3 : index
      vyre.yield %keep : i1
    }
  }
}

// Two rows an invocation: 64 invocations, one query block of 128 rows
// (a tile is empty or full only where it was for both blocks).
// CHECK:      vyre.kernel @causal items 64 workgroup_size 64
// CHECK:      item_count 128 seq_len 128 head_dim 1 tile_size 64 tile_count 2 tile_classes [2, 2] rows_per_lane 2

// Inlined: rows 2g and 2g + 1 of invocation g, each with its own scratch;
// the query block is the invocation's, so the tile loop is shared, and so is
// each key's load, which feeds both rows' scores.
// WIDE:       %q_scratch = vyre.scratch "q_scratch"
// WIDE-NEXT:  %q_scratch_row1 = vyre.scratch "q_scratch_row1"
// WIDE:       %rows_base = arith.muli %item, %{{.*}} : index
// WIDE:       %[[C128:.*]] = arith.constant 128 : index
// WIDE-NEXT:  arith.divui %rows_base, %[[C128]] : index
// WIDE:       scf.for %tile_idx = {{.*}} iter_args(%m = %{{.*}}, %m_1 = %{{.*}}, %l = %{{.*}}, %l_1 = %{{.*}})
// WIDE:       scf.for %j = %{{.*}} to %{{.*}} step %{{.*}} {
// WIDE:         memref.load %q_scratch[%lane]
// WIDE-NEXT:    memref.load %q_scratch_row1[%lane]
// WIDE-NEXT:    %kv = memref.load %k[%key]
// WIDE-NEXT:    arith.mulf %{{.*}}, %kv
// WIDE-NEXT:    arith.mulf %{{.*}}, %kv
// WIDE-NOT:     memref.load %k
// WIDE:       }

// ONE-NOT:    rows_per_lane

// ODD:        block_rows.mlir:18:5: error: vyre-block-rows: cannot run 3 rows a lane: rows (3) must divide item_count (128)
// NEGATIVE:   error: pass 'vyre-block-rows': option rows takes an integer of at least 0 (e.g. vyre-block-rows{rows=0}), got -1
