// RUN: vyre-opt %s -p 'vyre-split-kv{splits=2 merge=kernel},vyre-inline-fragments' | filecheck %s

// Run-time lengths (kv_lens) over two splits, as vx.flash_attention_2(
// seq_len=1, kv_len=10, batch=2, head_dim=2, tile_size=2, kv_lens=True)
// builds it: 5 tiles, 3 a split.  A split runs the whole tiles of its run
// that end before the item's length in a loop of a constant tile length
// without a branch, then the tile the length cuts if that tile is its own.

// CHECK:         %whole_tiles = arith.divui %kv_len, %{{.*}} : index
// CHECK:         %tiles = arith.divui %{{.*}}, %{{.*}} : index
// CHECK:         %first_tile = arith.muli %split, %[[SPAN:.*]] : index
// CHECK-NEXT:    %[[SPAN2:.*]] = arith.constant 3 : index
// CHECK-NEXT:    %[[PAST:.*]] = arith.addi %first_tile, %[[SPAN2]] : index
// CHECK-NEXT:    %[[TOP:.*]] = arith.minui %whole_tiles, %[[PAST]] : index
// CHECK-NEXT:    %[[FROM:.*]] = arith.maxui %[[TOP]], %first_tile : index
// CHECK-NEXT:    %whole_in_split = arith.subi %[[FROM]], %first_tile : index
// CHECK-NEXT:    %[[END:.*]] = arith.minui %tiles, %[[PAST]] : index
// CHECK:         %m_whole, %l_whole = scf.for %split_tile = %{{.*}} to %whole_in_split step %{{.*}} iter_args(%m = %{{.*}}, %l = %{{.*}}) -> (f32, f32) {
// CHECK-NEXT:      %tile_idx = arith.addi %first_tile, %split_tile : index
// CHECK-NOT:       scf.if
// CHECK:           %tile_len = arith.constant 2 : index
// CHECK-NOT:       scf.if
// CHECK:         } {vyre.max_trips = 3 : i64}
// CHECK-NEXT:    %cut_tile = arith.addi %first_tile, %whole_in_split : index
// CHECK-NEXT:    %[[CUT:.*]] = arith.cmpi ult, %cut_tile, %[[END]] : index
// CHECK-NEXT:    %[[M:.*]], %[[L:.*]] = scf.if %[[CUT]] -> (f32, f32) {
// CHECK:           %tile_end = arith.minui %{{.*}}, %kv_len : index
// CHECK:         } else {
// CHECK-NEXT:      scf.yield %m_whole, %l_whole : f32, f32
// CHECK-NEXT:    }
// The split leaves its partial row: m and l of both runs.
// CHECK:         memref.store %[[M]], %flash_attention_2_split_m[%item] : memref<4xf32>
// CHECK-NEXT:    memref.store %[[L]], %flash_attention_2_split_l[%item] : memref<4xf32>
builtin.module {
  vyre.kernel @flash_attention_2 items 2 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 1, 1, 2] : memref<4xf32>
    %k = vyre.buffer "k" binding 1 read [2, 1, 10, 2] : memref<40xf32>
    %v = vyre.buffer "v" binding 2 read [2, 1, 10, 2] : memref<40xf32>
    %out = vyre.buffer "out" binding 3 write [2, 1, 1, 2] : memref<4xf32>
    %kv_lens = vyre.buffer "kv_lens" binding 4 read [2] : memref<2xi32>
    %q_scratch = vyre.scratch "q_scratch" : memref<128xf32>
    %score_tile = vyre.scratch "score_tile" : memref<128xf32>
    %o_acc = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%kv_lens) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2 seq_len 10 head_dim 2 tile_size 2 tile_count 5 items_per_seq 1
        : (memref<4xf32>, memref<4xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<2xi32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 1 : index
      %1 = arith.divui %item, %0 : index
      %2 = arith.constant 1 : index
      %kv_head = arith.divui %1, %2 : index
      %3 = arith.constant 10 : index
      %kv_base = arith.muli %kv_head, %3 : index
      %4 = arith.constant 0 : index
      %5 = arith.constant 1 : index
      scf.for %j = %4 to %tile_len step %5 {
        %t = arith.addi %tile_start, %j : index
        %kv_row = arith.addi %kv_base, %t : index
        %6 = arith.constant 0.000000e+00 : f32
        %7 = arith.constant 0 : index
        %8 = arith.constant 2 : index
        %9 = arith.constant 1 : index
        %10 = scf.for %d = %7 to %8 step %9 iter_args(%11 = %6) -> (f32) {
          %12 = arith.constant 2 : index
          %13 = arith.muli %lane, %12 : index
          %14 = arith.addi %13, %d : index
          %15 = memref.load %q_scratch_1[%14] : memref<128xf32>
          %16 = arith.constant 2 : index
          %17 = arith.muli %kv_row, %16 : index
          %18 = arith.addi %17, %d : index
          %19 = memref.load %k[%18] : memref<40xf32>
          %20 = arith.mulf %15, %19 : f32
          %21 = arith.addf %11, %20 : f32
          scf.yield %21 : f32
        }
        %22 = arith.constant 0.707106769 : f32
        %23 = arith.mulf %10, %22 : f32
        %24 = vyre.bounded_score %23 : f32
        %25 = arith.constant 2 : index
        %26 = arith.muli %lane, %25 : index
        %27 = arith.addi %26, %j : index
        memref.store %24, %score_tile_1[%27] : memref<128xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %28 = arith.constant 1 : index
      %29 = arith.divui %item_1, %28 : index
      %30 = arith.constant 1 : index
      %kv_head_1 = arith.divui %29, %30 : index
      %31 = arith.constant 10 : index
      %kv_base_1 = arith.muli %kv_head_1, %31 : index
      %32 = arith.constant 0 : index
      %33 = arith.constant 2 : index
      %34 = arith.constant 1 : index
      scf.for %d_1 = %32 to %33 step %34 {
        %35 = arith.constant 0.000000e+00 : f32
        %36 = arith.constant 0 : index
        %37 = arith.constant 1 : index
        %38 = scf.for %j_1 = %36 to %tile_len_1 step %37 iter_args(%39 = %35) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %kv_row_1 = arith.addi %kv_base_1, %t_1 : index
          %40 = arith.constant 2 : index
          %41 = arith.muli %kv_row_1, %40 : index
          %42 = arith.addi %41, %d_1 : index
          %43 = memref.load %v[%42] : memref<40xf32>
          %44 = arith.mulf %weight, %43 : f32
          %45 = arith.addf %39, %44 : f32
          scf.yield %45 : f32
        }
        %46 = arith.constant 2 : index
        %47 = arith.muli %lane_1, %46 : index
        %48 = arith.addi %47, %d_1 : index
        %49 = memref.load %o_acc_1[%48] : memref<128xf32>
        %50 = arith.mulf %rescale, %49 : f32
        %51 = arith.addf %50, %38 : f32
        memref.store %51, %o_acc_1[%48] : memref<128xf32>
      }
      vyre.yield
    }
  }
}
