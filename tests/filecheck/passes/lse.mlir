// RUN: vyre-opt %s -p vyre-inline-fragments | filecheck %s
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=2 merge=kernel}' | filecheck %s --check-prefix=KERNEL-MERGE
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=2 merge=kernel},vyre-inline-fragments' | filecheck %s --check-prefix=MERGE-LSE
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=2 merge=kernel},vyre-to-gpu' | mlir-opt-22 --allow-unregistered-dialect | filecheck %s --check-prefix=MLIR
// RUN: vyre-opt %s -p vyre-to-gpu | mlir-opt-22 --allow-unregistered-dialect | filecheck %s --check-prefix=MLIR

// FlashAttention-2 over 4 rows with value rows of 3 dims (query rows of 2)
// and the log-sum-exp, as vx.flash_attention_2(4, 2, 2, v_head_dim=3,
// return_lse=True) builds it.
builtin.module {
  vyre.kernel @flash_attention_2 items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf32>
    %k = vyre.buffer "k" binding 1 read [4, 2] : memref<8xf32>
    %v = vyre.buffer "v" binding 2 read [4, 3] : memref<12xf32>
    %out = vyre.buffer "out" binding 3 write [4, 3] : memref<12xf32>
    %lse = vyre.buffer "lse" binding 4 write [4] : memref<4xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<128xf32>
    %score_tile = vyre.scratch "score_tile" : memref<128xf32>
    %o_acc = vyre.scratch "o_acc" : memref<192xf32>
    vyre.tiled_online_softmax q(%q) out(%out) lse(%lse) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 4 seq_len 4 head_dim 2 tile_size 2 tile_count 2 v_head_dim 3
        : (memref<8xf32>, memref<12xf32>, memref<128xf32>, memref<128xf32>, memref<192xf32>, memref<4xf32>)
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
          %15 = memref.load %k[%14] : memref<8xf32>
          %16 = arith.mulf %11, %15 : f32
          %17 = arith.addf %7, %16 : f32
          scf.yield %17 : f32
        }
        %18 = arith.constant 0.707106769 : f32
        %19 = arith.mulf %6, %18 : f32
        %20 = vyre.bounded_score %19 : f32
        %21 = arith.constant 2 : index
        %22 = arith.muli %lane, %21 : index
        %23 = arith.addi %22, %j : index
        memref.store %20, %score_tile_1[%23] : memref<128xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %24 = arith.constant 0 : index
      %25 = arith.constant 3 : index
      %26 = arith.constant 1 : index
      scf.for %d_1 = %24 to %25 step %26 {
        %27 = arith.constant 0.000000e+00 : f32
        %28 = arith.constant 0 : index
        %29 = arith.constant 1 : index
        %30 = scf.for %j_1 = %28 to %tile_len_1 step %29 iter_args(%31 = %27) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %32 = arith.constant 3 : index
          %33 = arith.muli %t_1, %32 : index
          %34 = arith.addi %33, %d_1 : index
          %35 = memref.load %v[%34] : memref<12xf32>
          %36 = arith.mulf %weight, %35 : f32
          %37 = arith.addf %31, %36 : f32
          scf.yield %37 : f32
        }
        %38 = arith.constant 3 : index
        %39 = arith.muli %lane_1, %38 : index
        %40 = arith.addi %39, %d_1 : index
        %41 = memref.load %o_acc_1[%40] : memref<192xf32>
        %42 = arith.mulf %rescale, %41 : f32
        %43 = arith.addf %42, %30 : f32
        memref.store %43, %o_acc_1[%40] : memref<192xf32>
      }
      vyre.yield
    }
  }
}

// After the last tile each item writes lse = m + log(l), -inf where l = 0
// (log is undefined at 0 in SPIR-V), and its value rows of 3 dims.
// CHECK:      %[[ZERO:.*]] = arith.cmpf oeq, %[[L:.*]], %{{.*}} : f32
// CHECK:      %[[LOG:.*]] = math.log %[[L]] : f32
// CHECK:      %[[SUM:.*]] = arith.addf %{{.*}}, %[[LOG]] : f32
// CHECK:      %[[LSE:.*]] = arith.select %[[ZERO]], %{{.*}}, %[[SUM]] : f32
// CHECK:      memref.store %[[LSE]], %lse[%item] : memref<4xf32>

// Split and merged by a kernel: the split kernel leaves its partials and
// no longer writes lse; the merge kernel writes it, undoing the split
// weights' scale of the skeleton's 4 keys.
// KERNEL-MERGE:      vyre.kernel @flash_attention_2 items 8
// KERNEL-MERGE-NOT:  lse(
// KERNEL-MERGE:      vyre.kernel @flash_attention_2_merge items 12
// KERNEL-MERGE:        %lse = vyre.buffer "lse" binding 4 write [4] : memref<4xf32>
// KERNEL-MERGE-NEXT:   vyre.merge_splits m(%{{.*}}) l(%{{.*}}) o(%{{.*}}) out(%out) lse(%lse) keys 4 item_count 4 splits 2 head_dim 3
// The merge's invocation of dim 0 writes it: m + log(l * 4) (-inf at l = 0).
// MERGE-LSE:      %[[D0:.*]] = arith.cmpi eq, %d, %{{.*}} : index
// MERGE-LSE-NEXT: scf.if %[[D0]] {
// MERGE-LSE:        %[[UNSCALED:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// MERGE-LSE:        math.log %[[UNSCALED]] : f32
// MERGE-LSE:        memref.store %{{.*}}, %lse[%item] : memref<4xf32>

// Upstream MLIR accepts the lowered kernel.
// MLIR: gpu.func @flash_attention_2
