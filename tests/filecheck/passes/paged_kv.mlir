// RUN: vyre-opt %s | filecheck %s --check-prefix=ROUNDTRIP
// RUN: vyre-opt %s -p vyre-inline-fragments | filecheck %s
// RUN: vyre-opt %s -p 'vyre-stage-kv-tiles' | filecheck %s --check-prefix=ROUNDTRIP

// Paged KV with ragged lengths, as vx.flash_attention_2(seq_len=2,
// head_dim=2, tile_size=2, kv_len=5, batch=2, page_size=2, num_pages=4,
// mask_mod=lambda q, k: k <= q, return_lse=True) builds it: k and v are
// pools of 4 pages of 2 rows, kv_lens [2] and block_table [2, 3] are i32
// inputs, and the skeleton reads each item's key count at run time.
// vyre-stage-kv-tiles leaves such a skeleton alone (its lanes may run
// different numbers of tiles; paged rows are not provable).

// ROUNDTRIP:      %kv_lens = vyre.buffer "kv_lens" binding 5 read [2] : memref<2xi32>
// ROUNDTRIP:      %block_table = vyre.buffer "block_table" binding 6 read [2, 3] : memref<6xi32>
// ROUNDTRIP:      vyre.tiled_online_softmax q(%q) out(%out) lse(%lse) kv_lens(%kv_lens) scratch(%q_scratch, %score_tile, %o_acc)
// ROUNDTRIP-NEXT:     item_count 4 seq_len 5 head_dim 2 tile_size 2 tile_count 3 items_per_seq 2
// ROUNDTRIP-NEXT:     : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<4xf32>, memref<2xi32>)
// ROUNDTRIP-NOT:  barrier
// ROUNDTRIP:      mask(

// The item's key count: kv_lens[item / items_per_seq] clamped to
// [0, seq_len] in i32; the floor(L / tile_size) whole tiles in a loop of a
// constant tile length without a branch (bounded by vyre.max_trips =
// tile_count for lavapipe's loop limit estimate), then the one that L cuts,
// if ceil(L / tile_size) is more, over its run-time length.
// CHECK:         %seq = arith.divui %item, %{{.*}} : index
// CHECK-NEXT:    %[[RAW:.*]] = memref.load %kv_lens[%seq] : memref<2xi32>
// CHECK-NEXT:    %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[TOP:.*]] = arith.constant 5 : i32
// CHECK-NEXT:    %[[LOW:.*]] = arith.maxsi %[[RAW]], %[[ZERO]] : i32
// CHECK-NEXT:    %[[LEN:.*]] = arith.minsi %[[LOW]], %[[TOP]] : i32
// CHECK-NEXT:    %kv_len = arith.index_cast %[[LEN]] : i32 to index
// CHECK-NEXT:    %[[TWO:.*]] = arith.constant 2 : index
// CHECK-NEXT:    %whole_tiles = arith.divui %kv_len, %[[TWO]] : index
// CHECK:         %tiles = arith.divui %{{.*}}, %{{.*}} : index
// CHECK:         %m_whole, %l_whole = scf.for %tile_idx = %{{.*}} to %whole_tiles step %{{.*}} iter_args(%m = %{{.*}}, %l = %{{.*}}) -> (f32, f32) {
// CHECK-NOT:       scf.if
// CHECK:           %tile_start = arith.muli %tile_idx, %{{.*}} : index
// CHECK-NEXT:      %tile_len = arith.constant 2 : index
// CHECK-NOT:       tile_end
// A key's page: block_table[seq * 3 + t / 2] clamped to [0, num_pages - 1].
// CHECK:           %table_entry = arith.addi %table_base, %{{.*}} : index
// CHECK-NEXT:      %[[PAGE:.*]] = memref.load %block_table[%table_entry] : memref<6xi32>
// CHECK-NEXT:      %[[PZERO:.*]] = arith.constant 0 : i32
// CHECK-NEXT:      %[[PTOP:.*]] = arith.constant 3 : i32
// CHECK-NEXT:      %[[PLOW:.*]] = arith.maxsi %[[PAGE]], %[[PZERO]] : i32
// CHECK-NEXT:      %[[PIN:.*]] = arith.minsi %[[PLOW]], %[[PTOP]] : i32
// CHECK-NEXT:      %{{.*}} = arith.index_cast %[[PIN]] : i32 to index
// The mask reads the length too: q_idx = L - seq_len + i.
// CHECK:           memref.load %kv_lens[%{{.*}}] : memref<2xi32>
// CHECK:         } {vyre.max_trips = 3 : i64}
// CHECK-NEXT:    %[[CUT:.*]] = arith.cmpi ult, %whole_tiles, %tiles : index
// CHECK-NEXT:    %{{.*}}, %{{.*}} = scf.if %[[CUT]] -> (f32, f32) {
// CHECK:           %[[START:.*]] = arith.muli %whole_tiles, %{{.*}} : index
// CHECK:           %tile_end = arith.minui %{{.*}}, %kv_len : index
// CHECK-NEXT:      %{{.*}} = arith.subi %tile_end, %[[START]] : index
// CHECK:           arith.cmpf ogt, %{{.*}}, %m_whole : f32
// CHECK:         } else {
// CHECK-NEXT:      scf.yield %m_whole, %l_whole : f32, f32
builtin.module {
  vyre.kernel @flex_attention items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 1, 2, 2] : memref<8xf32>
    %k = vyre.buffer "k" binding 1 read [4, 2, 1, 2] : memref<16xf32>
    %v = vyre.buffer "v" binding 2 read [4, 2, 1, 2] : memref<16xf32>
    %out = vyre.buffer "out" binding 3 write [2, 1, 2, 2] : memref<8xf32>
    %lse = vyre.buffer "lse" binding 4 write [2, 1, 2] : memref<4xf32>
    %kv_lens = vyre.buffer "kv_lens" binding 5 read [2] : memref<2xi32>
    %block_table = vyre.buffer "block_table" binding 6 read [2, 3] : memref<6xi32>
    %q_scratch = vyre.scratch "q_scratch" : memref<128xf32>
    %score_tile = vyre.scratch "score_tile" : memref<128xf32>
    %o_acc = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) lse(%lse) kv_lens(%kv_lens) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 4 seq_len 5 head_dim 2 tile_size 2 tile_count 3 items_per_seq 2
        : (memref<8xf32>, memref<8xf32>, memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<4xf32>, memref<2xi32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 2 : index
      %1 = arith.divui %item, %0 : index
      %2 = arith.constant 1 : index
      %3 = arith.remui %1, %2 : index
      %4 = arith.constant 1 : index
      %kv_head = arith.divui %3, %4 : index
      %5 = arith.constant 2 : index
      %seq = arith.divui %item, %5 : index
      %6 = arith.constant 3 : index
      %table_base = arith.muli %seq, %6 : index
      %7 = arith.constant 0 : index
      %8 = arith.constant 1 : index
      scf.for %j = %7 to %tile_len step %8 {
        %t = arith.addi %tile_start, %j : index
        %9 = arith.constant 2 : index
        %10 = arith.divui %t, %9 : index
        %table_entry = arith.addi %table_base, %10 : index
        %11 = memref.load %block_table[%table_entry] : memref<6xi32>
        %12 = arith.constant 0 : i32
        %13 = arith.constant 3 : i32
        %14 = arith.maxsi %11, %12 : i32
        %15 = arith.minsi %14, %13 : i32
        %16 = arith.index_cast %15 : i32 to index
        %17 = arith.constant 2 : index
        %18 = arith.muli %16, %17 : index
        %19 = arith.constant 2 : index
        %20 = arith.remui %t, %19 : index
        %21 = arith.addi %18, %20 : index
        %22 = arith.constant 1 : index
        %23 = arith.muli %21, %22 : index
        %kv_row = arith.addi %23, %kv_head : index
        %24 = arith.constant 0.000000e+00 : f32
        %25 = arith.constant 0 : index
        %26 = arith.constant 2 : index
        %27 = arith.constant 1 : index
        %28 = scf.for %d = %25 to %26 step %27 iter_args(%29 = %24) -> (f32) {
          %30 = arith.constant 2 : index
          %31 = arith.muli %lane, %30 : index
          %32 = arith.addi %31, %d : index
          %33 = memref.load %q_scratch_1[%32] : memref<128xf32>
          %34 = arith.constant 2 : index
          %35 = arith.muli %kv_row, %34 : index
          %36 = arith.addi %35, %d : index
          %37 = memref.load %k[%36] : memref<16xf32>
          %38 = arith.mulf %33, %37 : f32
          %39 = arith.addf %29, %38 : f32
          scf.yield %39 : f32
        }
        %40 = arith.constant 0.707106769 : f32
        %41 = arith.mulf %28, %40 : f32
        %42 = vyre.bounded_score %41 : f32
        %43 = arith.constant 2 : index
        %44 = arith.muli %lane, %43 : index
        %45 = arith.addi %44, %j : index
        memref.store %42, %score_tile_1[%45] : memref<128xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %46 = arith.constant 2 : index
      %47 = arith.divui %item_1, %46 : index
      %48 = arith.constant 1 : index
      %49 = arith.remui %47, %48 : index
      %50 = arith.constant 1 : index
      %kv_head_1 = arith.divui %49, %50 : index
      %51 = arith.constant 2 : index
      %seq_1 = arith.divui %item_1, %51 : index
      %52 = arith.constant 3 : index
      %table_base_1 = arith.muli %seq_1, %52 : index
      %53 = arith.constant 0 : index
      %54 = arith.constant 2 : index
      %55 = arith.constant 1 : index
      scf.for %d_1 = %53 to %54 step %55 {
        %56 = arith.constant 0.000000e+00 : f32
        %57 = arith.constant 0 : index
        %58 = arith.constant 1 : index
        %59 = scf.for %j_1 = %57 to %tile_len_1 step %58 iter_args(%60 = %56) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %61 = arith.constant 2 : index
          %62 = arith.divui %t_1, %61 : index
          %table_entry_1 = arith.addi %table_base_1, %62 : index
          %63 = memref.load %block_table[%table_entry_1] : memref<6xi32>
          %64 = arith.constant 0 : i32
          %65 = arith.constant 3 : i32
          %66 = arith.maxsi %63, %64 : i32
          %67 = arith.minsi %66, %65 : i32
          %68 = arith.index_cast %67 : i32 to index
          %69 = arith.constant 2 : index
          %70 = arith.muli %68, %69 : index
          %71 = arith.constant 2 : index
          %72 = arith.remui %t_1, %71 : index
          %73 = arith.addi %70, %72 : index
          %74 = arith.constant 1 : index
          %75 = arith.muli %73, %74 : index
          %kv_row_1 = arith.addi %75, %kv_head_1 : index
          %76 = arith.constant 2 : index
          %77 = arith.muli %kv_row_1, %76 : index
          %78 = arith.addi %77, %d_1 : index
          %79 = memref.load %v[%78] : memref<16xf32>
          %80 = arith.mulf %weight, %79 : f32
          %81 = arith.constant 0.000000e+00 : f32
          %82 = arith.cmpf oeq, %weight, %81 : f32
          %83 = arith.select %82, %81, %80 : f32
          %84 = arith.addf %60, %83 : f32
          scf.yield %84 : f32
        }
        %85 = arith.constant 2 : index
        %86 = arith.muli %lane_1, %85 : index
        %87 = arith.addi %86, %d_1 : index
        %88 = memref.load %o_acc_1[%87] : memref<128xf32>
        %89 = arith.mulf %rescale, %88 : f32
        %90 = arith.addf %89, %59 : f32
        memref.store %90, %o_acc_1[%87] : memref<128xf32>
      }
      vyre.yield
    }
    mask(%item_2, %lane_2, %kv_idx) {
      %91 = arith.index_cast %item_2 : index to i32
      %92 = arith.index_cast %kv_idx : index to i32
      %93 = arith.constant 2 : index
      %seq_2 = arith.divui %item_2, %93 : index
      %94 = memref.load %kv_lens[%seq_2] : memref<2xi32>
      %95 = arith.constant 0 : i32
      %96 = arith.constant 5 : i32
      %97 = arith.maxsi %94, %95 : i32
      %98 = arith.minsi %97, %96 : i32
      %99 = arith.index_cast %98 : i32 to index
      %100 = arith.constant 2 : i32
      %101 = arith.remsi %91, %100 : i32
      %102 = arith.index_cast %99 : index to i32
      %103 = arith.addi %101, %102 : i32
      %104 = arith.constant 2 : i32
      %105 = arith.subi %103, %104 : i32
      %106 = arith.cmpi sle, %92, %105 : i32
      vyre.yield %106 : i1
    }
  }
}
