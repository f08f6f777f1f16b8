// RUN: vyre-opt %s -p 'vyre-split-kv{splits=4}' | filecheck %s
// RUN: vyre-opt %s -p vyre-split-kv | filecheck %s --check-prefix=AUTO
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=4},vyre-inline-fragments' | filecheck %s --check-prefix=MERGE
// RUN: not vyre-opt %s -p 'vyre-split-kv{splits=8}' 2>&1 | filecheck %s --check-prefix=TOO-MANY
// RUN: not vyre-opt %s -p 'vyre-split-kv{splits=4 merge=workgroup shared_memory_bytes=1000}' 2>&1 | filecheck %s --check-prefix=NO-ROOM
// RUN: vyre-opt %s -p 'vyre-split-kv{shared_memory_bytes=1000}' | filecheck %s --check-prefix=AUTO-NO-ROOM

// FlashAttention-2 with 64 rows of 2 dims in 4 tiles of 16 keys (as
// vx.flash_attention_2(64, 2, 16) builds it).
builtin.module {
  vyre.kernel @flash_attention_2 items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %k = vyre.buffer "k" binding 1 read [64, 2] : memref<128xf32>
    %v = vyre.buffer "v" binding 2 read [64, 2] : memref<128xf32>
    %out = vyre.buffer "out" binding 3 write [64, 2] : memref<128xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<128xf32>
    %score_tile = vyre.scratch "score_tile" : memref<1024xf32>
    %o_acc = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4
        : (memref<128xf32>, memref<128xf32>, memref<128xf32>, memref<1024xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 0 : index
      %1 = arith.constant 1 : index
      scf.for %j = %0 to %tile_len step %1 {
        %t = arith.addi %tile_start, %j : index
        %2 = arith.constant 0.000000e+00 : f32
        %3 = arith.constant 0 : index
        %4 = arith.constant 2 : index
        %5 = arith.constant 1 : index
        %6 = scf.for %d = %3 to %4 step %5 iter_args(%7 = %2) -> (f32) {
          %8 = arith.constant 2 : index
          %9 = arith.muli %lane, %8 : index
          %10 = arith.addi %9, %d : index
          %11 = memref.load %q_scratch_1[%10] : memref<128xf32>
          %12 = arith.constant 2 : index
          %13 = arith.muli %t, %12 : index
          %14 = arith.addi %13, %d : index
          %15 = memref.load %k[%14] : memref<128xf32>
          %16 = arith.mulf %11, %15 : f32
          %17 = arith.addf %7, %16 : f32
          scf.yield %17 : f32
        }
        %18 = arith.constant 0.707106769 : f32
        %19 = arith.mulf %6, %18 : f32
        %20 = vyre.bounded_score %19 : f32
        %21 = arith.constant 16 : index
        %22 = arith.muli %lane, %21 : index
        %23 = arith.addi %22, %j : index
        memref.store %20, %score_tile_1[%23] : memref<1024xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %24 = arith.constant 0 : index
      %25 = arith.constant 2 : index
      %26 = arith.constant 1 : index
      scf.for %d_1 = %24 to %25 step %26 {
        %27 = arith.constant 0.000000e+00 : f32
        %28 = arith.constant 0 : index
        %29 = arith.constant 1 : index
        %30 = scf.for %j_1 = %28 to %tile_len_1 step %29 iter_args(%31 = %27) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %32 = arith.constant 2 : index
          %33 = arith.muli %t_1, %32 : index
          %34 = arith.addi %33, %d_1 : index
          %35 = memref.load %v[%34] : memref<128xf32>
          %36 = arith.mulf %weight, %35 : f32
          %37 = arith.addf %31, %36 : f32
          scf.yield %37 : f32
        }
        %38 = arith.constant 2 : index
        %39 = arith.muli %lane_1, %38 : index
        %40 = arith.addi %39, %d_1 : index
        %41 = memref.load %o_acc_1[%40] : memref<128xf32>
        %42 = arith.mulf %rescale, %41 : f32
        %43 = arith.addf %42, %30 : f32
        memref.store %43, %o_acc_1[%40] : memref<128xf32>
      }
      vyre.yield
    }
  }
}

// Four invocations per item: the kernel runs 64 * 4 of them.
// CHECK:       vyre.kernel @flash_attention_2 items 256 workgroup_size 64 {
// CHECK:         item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4 kv_splits 4

// Chosen: the largest power of two up to the tile count, since 64 items
// are far below the target.
// AUTO:        vyre.kernel @flash_attention_2 items 256 workgroup_size 64 {
// AUTO:          tile_count 4 kv_splits 4

// Invocation item * 4 + split runs tiles split * 1 .. split * 1 + 1, then
// publishes (m, l, o_acc) and, after a barrier, merges its item's partials
// and writes its share of the output dims (d = split, split + 4, ...).
// MERGE:       %split_m = vyre.scratch "split_m" : memref<64xf32>
// MERGE-NEXT:  %split_l = vyre.scratch "split_l" : memref<64xf32>
// MERGE-NEXT:  %split_o = vyre.scratch "split_o" : memref<128xf32>
// MERGE:       %[[INVOCATION:.*]] = vyre.item_index
// MERGE:       %item_1 = arith.divui %[[INVOCATION]], %{{.*}} : index
// MERGE:       %split = arith.remui %[[INVOCATION]], %{{.*}} : index
// MERGE:       %first_tile = arith.muli %split, %{{.*}} : index
// MERGE:       %[[M:.*]], %[[L:.*]] = scf.for %split_tile =
// MERGE-NEXT:    %tile_idx = arith.addi %first_tile, %split_tile : index
// MERGE:       memref.store %[[M]], %split_m[%lane]
// MERGE-NEXT:  memref.store %[[L]], %split_l[%lane]
// MERGE:       scf.for %publish_d =
// MERGE:         memref.store %{{.*}}, %split_o[
// MERGE:       "gpu.barrier"() : () -> ()
// MERGE-NEXT:  %first_split = arith.subi %lane, %split : index
// MERGE:       %m_max = scf.for %max_s =
// MERGE:         arith.cmpf ogt
// MERGE:       scf.for %sum_s =
// MERGE:         math.exp
// MERGE:       %denom = vyre.positive_denominator
// MERGE:       scf.for %final_c =
// MERGE:         %[[D:.*]] = arith.addi %{{.*}}, %split : index
// MERGE-NEXT:    %[[DIMS:.*]] = arith.constant 2 : index
// MERGE-NEXT:    %[[MINE:.*]] = arith.cmpi ult, %[[D]], %[[DIMS]] : index
// MERGE-NEXT:    scf.if %[[MINE]] {
// MERGE:           scf.for %o_s =
// MERGE:           vyre.flush_tiny
// MERGE:           memref.store %{{.*}}, %out[

// TOO-MANY: split_kv.mlir:19:5: error: vyre-split-kv: kernel @flash_attention_2 cannot be split 8 ways: there are only 4 tiles

// The merge in the workgroup holds every lane's partial m, l and o_acc:
// 4 * 64 * (2 + 2) = 1024 bytes. A device with less refuses it when forced,
// and the automatic choice merges in a kernel instead.
// NO-ROOM: split_kv.mlir:19:5: error: vyre-split-kv: kernel @flash_attention_2 cannot be split 4 ways: a merge in the workgroup needs 1024 bytes of workgroup memory, more than the device's 1000 (merge=kernel has no such bound)
// AUTO-NO-ROOM: vyre.kernel @flash_attention_2 items 256
// AUTO-NO-ROOM: vyre.buffer "flash_attention_2_split_o" binding 6 temp [64, 4, 2]
// AUTO-NO-ROOM: vyre.kernel @flash_attention_2_merge items 128
