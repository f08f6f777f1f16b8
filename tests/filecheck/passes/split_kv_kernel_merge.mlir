// RUN: vyre-opt %s -p 'vyre-split-kv{splits=4 merge=kernel}' | filecheck %s
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=4 merge=kernel}' | vyre-opt | filecheck %s
// RUN: vyre-opt %s -p 'vyre-split-kv{target_invocations=8192}' | filecheck %s --check-prefix=AUTO
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=4 merge=kernel},vyre-inline-fragments' | filecheck %s --check-prefix=EXPAND
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=4 merge=kernel},vyre-to-gpu{optimize=exact}' | filecheck %s --check-prefix=LOWERED
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=4 merge=kernel merge_dims=2}' | filecheck %s --check-prefix=DIMS
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=4 merge=kernel merge_dims=2},vyre-inline-fragments' | filecheck %s --check-prefix=DIMS-EXPAND
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=4 merge=kernel merge_teams=2}' | filecheck %s --check-prefix=TEAMS
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=4 merge=kernel merge_teams=2},vyre-inline-fragments' | filecheck %s --check-prefix=TEAMS-EXPAND
// RUN: not vyre-opt %s -p 'vyre-split-kv{splits=4 merge=kernel merge_teams=3}' 2>&1 | filecheck %s --check-prefix=BAD-TEAMS
// RUN: not vyre-opt %s -p 'vyre-split-kv{splits=4 merge=kernel merge_teams=8}' 2>&1 | filecheck %s --check-prefix=TEAMS-TOO-MANY
// RUN: not vyre-opt %s -p 'vyre-split-kv{splits=8 merge=kernel}' 2>&1 | filecheck %s --check-prefix=TOO-MANY
// RUN: not vyre-opt %s -p 'vyre-split-kv{splits=4 merge=kernel merge_dims=3}' 2>&1 | filecheck %s --check-prefix=BAD-DIMS
// RUN: not vyre-opt %s -p 'vyre-split-kv{merge=global}' 2>&1 | filecheck %s --check-prefix=BAD-MERGE
// RUN: not vyre-opt %s -p 'vyre-split-kv{target_invocations=0}' 2>&1 | filecheck %s --check-prefix=BAD-TARGET

// vyre-split-kv{merge=kernel}: flash-decoding across workgroups.  The split
// kernel leaves each invocation's partial (m, l, o_acc) in temp buffers (the
// skeleton's partials) and no longer writes out; a kernel inserted after it
// merges them, one invocation per output element.
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

// CHECK-LABEL: vyre.kernel @flash_attention_2 items 256 workgroup_size 64
// CHECK-NOT:     "out"
// CHECK:         %[[M:.*]] = vyre.buffer "flash_attention_2_split_m" binding 4 temp [64, 4] : memref<256xf32>
// CHECK-NEXT:    %[[L:.*]] = vyre.buffer "flash_attention_2_split_l" binding 5 temp [64, 4] : memref<256xf32>
// CHECK-NEXT:    %[[O:.*]] = vyre.buffer "flash_attention_2_split_o" binding 6 temp [64, 4, 2] : memref<512xf32>
// CHECK:         vyre.tiled_online_softmax q(%q) out(%[[O]]) scratch({{.*}}) partials(%[[M]], %[[L]])
// CHECK-NEXT:      item_count 64 seq_len 64 head_dim 2 tile_size 16 tile_count 4 kv_splits 4
// CHECK-LABEL: vyre.kernel @flash_attention_2_merge items 128 workgroup_size 64
// CHECK-NEXT:    %[[M2:.*]] = vyre.buffer "flash_attention_2_split_m" binding 4 temp [64, 4]
// CHECK-NEXT:    %[[L2:.*]] = vyre.buffer "flash_attention_2_split_l" binding 5 temp [64, 4]
// CHECK-NEXT:    %[[O2:.*]] = vyre.buffer "flash_attention_2_split_o" binding 6 temp [64, 4, 2]
// CHECK-NEXT:    %[[OUT:.*]] = vyre.buffer "out" binding 3 write [64, 2] : memref<128xf32>
// CHECK-NEXT:    vyre.merge_splits m(%[[M2]]) l(%[[L2]]) o(%[[O2]]) out(%[[OUT]]) item_count 64 splits 4 head_dim 2

// merge=auto merges in a kernel where item_count * workgroup size falls
// short of the target (64 * 64 < 8192); the splits are then bounded by the
// 4 tiles only.
// AUTO-LABEL: vyre.kernel @flash_attention_2 items 256
// AUTO:         kv_splits 4
// AUTO-LABEL: vyre.kernel @flash_attention_2_merge items 128

// The split kernel stores m, l and its o_acc row at its invocation; the
// merge kernel takes m* over the splits, then the denominator, then the
// weighted sum of its dim.
// EXPAND-LABEL: vyre.kernel @flash_attention_2 items 256
// EXPAND:         %item = vyre.item_index
// EXPAND:         %split = arith.remui %item
// EXPAND:         memref.store %{{.*}}, %flash_attention_2_split_m[%item]
// EXPAND-NEXT:    memref.store %{{.*}}, %flash_attention_2_split_l[%item]
// EXPAND-NEXT:    %{{.*}} = arith.constant 0 : index
// EXPAND:         scf.for %publish_d =
// EXPAND:           memref.store %{{.*}}, %flash_attention_2_split_o[%{{.*}}]
// EXPAND-NOT:     gpu.barrier
// EXPAND-LABEL: vyre.kernel @flash_attention_2_merge items 128
// EXPAND:         %invocation = vyre.item_index
// EXPAND:         %item = arith.divui %invocation
// EXPAND:         %d = arith.remui %invocation
// EXPAND:         %m_max = scf.for %max_s =
// EXPAND:           memref.load %flash_attention_2_split_m[%row]
// EXPAND:         scf.for %sum_s =
// EXPAND:           vyre.bounded_exp_arg
// EXPAND:           memref.load %flash_attention_2_split_l[
// EXPAND:         %denom = vyre.positive_denominator
// EXPAND:         scf.for %o_s =
// EXPAND:           memref.load %flash_attention_2_split_o[
// EXPAND:         arith.divf %{{.*}}, %denom
// EXPAND-NEXT:    vyre.flush_tiny
// EXPAND-NEXT:    memref.store %{{.*}}, %out[%invocation]

// merge_dims=2: each invocation merges both dims of an item (head_dim /
// 2 apart), m and l combined once for them.
// DIMS-LABEL: vyre.kernel @flash_attention_2_merge items 64 workgroup_size 64
// DIMS:         vyre.merge_splits m(%{{.*}}) l(%{{.*}}) o(%{{.*}}) out(%out) item_count 64 splits 4 head_dim 2 dims 2
// DIMS-EXPAND-LABEL: vyre.kernel @flash_attention_2_merge items 64
// DIMS-EXPAND:         %item = arith.divui %invocation
// DIMS-EXPAND:         %denom = vyre.positive_denominator
// DIMS-EXPAND:         scf.for %merge_d =
// DIMS-EXPAND:           scf.for %o_s =
// DIMS-EXPAND:             memref.load %flash_attention_2_split_o[
// DIMS-EXPAND:           arith.divf %{{.*}}, %denom
// DIMS-EXPAND:           memref.store %{{.*}}, %out[

// Lowered, the two kernels are two gpu.modules, in order, whose temp
// buffers a runtime allocates.
// LOWERED-LABEL: "gpu.module"() <{sym_name = "flash_attention_2"}>
// LOWERED:         grid = [4, 1, 1]
// LOWERED-SAME:    #vyre.buffer<name = "flash_attention_2_split_m", binding = 4, access = temp
// LOWERED-LABEL: "gpu.module"() <{sym_name = "flash_attention_2_merge"}>
// LOWERED:         grid = [2, 1, 1]
// LOWERED-SAME:    #vyre.buffer<name = "out", binding = 3, access = write

// merge_teams=2: two invocations merge each column, one over splits 0-1
// and one over splits 2-3; the kernel runs twice the invocations, a
// workgroup of 64 lanes holding both teams of 32 columns.
// TEAMS-LABEL: vyre.kernel @flash_attention_2_merge items 256 workgroup_size 64
// TEAMS:         vyre.merge_splits m(%{{.*}}) l(%{{.*}}) o(%{{.*}}) out(%out) item_count 64 splits 4 head_dim 2 teams 2
// Each team's max meets the others' in workgroup memory, then its sums;
// team 0 adds the sums pairwise and writes the column.
// TEAMS-EXPAND-LABEL: vyre.kernel @flash_attention_2_merge items 256
// TEAMS-EXPAND:         %lane = vyre.lane_index
// TEAMS-EXPAND:         %team = arith.divui %lane
// TEAMS-EXPAND:         %column_lane = arith.remui %lane
// TEAMS-EXPAND:         %merge_max = vyre.scratch "merge_max" : memref<64xf32>
// TEAMS-EXPAND-NEXT:    %merge_sum = vyre.scratch "merge_sum" : memref<128xf32>
// TEAMS-EXPAND:         %first_split = arith.muli %team
// TEAMS-EXPAND:         scf.for %max_s =
// TEAMS-EXPAND:           %split = arith.addi %first_split, %max_s
// TEAMS-EXPAND:         memref.store %{{.*}}, %merge_max[%lane]
// TEAMS-EXPAND-NEXT:    "gpu.barrier"
// TEAMS-EXPAND:         %m_max = arith.select
// TEAMS-EXPAND:         scf.for %sum_s =
// TEAMS-EXPAND:         memref.store %{{.*}}, %merge_sum[
// TEAMS-EXPAND:         scf.for %o_s =
// TEAMS-EXPAND:         memref.store %{{.*}}, %merge_sum[
// TEAMS-EXPAND-NEXT:    "gpu.barrier"
// TEAMS-EXPAND:         arith.cmpi eq, %team
// TEAMS-EXPAND-NEXT:    scf.if
// TEAMS-EXPAND-COUNT-2:   memref.load %merge_sum[
// TEAMS-EXPAND-NEXT:      arith.addf
// TEAMS-EXPAND-NEXT:      %denom = vyre.positive_denominator
// TEAMS-EXPAND-COUNT-2:   memref.load %merge_sum[
// TEAMS-EXPAND-NEXT:      arith.addf
// TEAMS-EXPAND-NEXT:      arith.divf %{{.*}}, %denom
// TEAMS-EXPAND-NEXT:      vyre.flush_tiny
// TEAMS-EXPAND:           memref.store %{{.*}}, %out[
// BAD-TEAMS: vyre-split-kv: merge_teams must be 0 (choose) or a power of two, got 3
// TEAMS-TOO-MANY: error: vyre-split-kv: the merge kernel of @flash_attention_2 cannot merge in 8 teams: they must divide its 4 splits and its workgroup of 64 lanes, and lanes / teams its 128 columns; give merge_teams a power of two that does (or 0 to choose)
// TOO-MANY: error: vyre-split-kv: kernel @flash_attention_2 cannot be split 8 ways: there are only 4 tiles
// BAD-DIMS: split_kv_kernel_merge.mlir:{{[0-9]+}}:{{[0-9]+}}: error: vyre-split-kv: the merge kernel of @flash_attention_2 cannot merge 3 dims an invocation: its rows have 2; give merge_dims a divisor of 2 (or 0 to choose)
// BAD-MERGE: vyre-split-kv: merge must be one of auto, workgroup, kernel, got 'global'
// BAD-TARGET: vyre-split-kv: target_invocations must be >= 1 (the invocations to reach by splitting), got 0
