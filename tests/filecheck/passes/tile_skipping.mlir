// RUN: vyre-opt %s -p vyre-inline-fragments | filecheck %s

// A causal mask over 2 query blocks x 2 key tiles: tile_classes [partial,
// empty, full, partial].  The tile loop branches on the block's class of
// each tile: empty tiles are skipped (m and l pass through), full tiles run
// without mask code, partial tiles evaluate the mask per key.
builtin.module {
  vyre.kernel @causal items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 1] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [128, 1] : memref<128xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 128 seq_len 128 head_dim 1 tile_size 64 tile_count 2 tile_classes [2, 0, 1, 2]
        : (memref<128xf32>, memref<128xf32>, memref<64xf32>, memref<4096xf32>, memref<64xf32>)
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
// The block's tile ranges come from the compile-time table:
// CHECK:         %query_block = arith.divui %item, %{{.*}} : index
// CHECK:         %tiles_lo =
// CHECK:         %tiles_hi = arith.select
// CHECK:         %tiles_flo =
// CHECK:         %tiles_fhi = arith.select
// CHECK:         scf.for %tile_idx = {{.*}} iter_args(%m = %{{.*}}, %l = %{{.*}}) -> (f32, f32) {
// CHECK-NEXT:      %[[GE:.*]] = arith.cmpi uge, %tile_idx, %tiles_lo : index
// CHECK-NEXT:      %[[LT:.*]] = arith.cmpi ult, %tile_idx, %tiles_hi : index
// CHECK-NEXT:      %[[COMPUTED:.*]] = arith.andi %[[GE]], %[[LT]] : i1
// CHECK-NEXT:      %{{.*}}, %{{.*}} = scf.if %[[COMPUTED]] -> (f32, f32) {
// CHECK-NEXT:        %[[FGE:.*]] = arith.cmpi uge, %tile_idx, %tiles_flo : index
// CHECK-NEXT:        %[[FLT:.*]] = arith.cmpi ult, %tile_idx, %tiles_fhi : index
// CHECK-NEXT:        %[[FULL:.*]] = arith.andi %[[FGE]], %[[FLT]] : i1
// CHECK-NEXT:        %{{.*}}, %{{.*}} = scf.if %[[FULL]] -> (f32, f32) {
// 1. A full tile: the fragments and the recurrence, no mask code.
// CHECK:               "test.op"(%tile_start) {fragment = "scores"}
// CHECK-NOT:           arith.cmpi ule
// CHECK:               %weight = memref.load %score_tile[
// CHECK-NEXT:          "test.op"(%weight) {fragment = "update"}
// CHECK:             } else {
// 2. A partial tile: the mask (kv_idx <= item) gates the max and the
// weight, which is exactly 0.0 for a masked key; the update loads it.
// CHECK:               "test.op"(%tile_start_1) {fragment = "scores"}
// CHECK:               %tile_max_1 = scf.for %max_j_1
// CHECK:                 arith.cmpf ogt
// CHECK-NEXT:            %[[NEXT:.*]] = arith.select
// CHECK-NEXT:            %kv_idx = arith.addi %tile_start_1, %max_j_1
// CHECK-NEXT:            %keep = arith.cmpi ule, %kv_idx, %item : index
// CHECK-NEXT:            %[[KEPT:.*]] = arith.select %keep, %[[NEXT]], %{{.*}} : f32
// CHECK-NEXT:            scf.yield %[[KEPT]] : f32
// CHECK:               %tile_sum_1 = scf.for %sum_j_1
// CHECK:                 %keep_1 = arith.cmpi ule
// CHECK:                 %[[E:.*]] = math.exp
// CHECK-NEXT:            %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:            %[[W:.*]] = arith.select %keep_1, %[[E]], %[[Z]] : f32
// CHECK:                 memref.store %[[W]], %score_tile[
// CHECK-NEXT:            arith.addf %{{.*}}, %[[W]] : f32
// CHECK-NOT:           %keep_2
// CHECK:               %weight_1 = memref.load %score_tile[
// CHECK-NEXT:          "test.op"(%weight_1) {fragment = "update"}
// CHECK:             }
// 3. An empty tile: nothing is computed, m and l pass through.
// CHECK:           } else {
// CHECK-NEXT:        scf.yield %m, %l : f32, f32
// CHECK-NEXT:      }
