// RUN: vyre-opt %s --split-input-file -p 'vyre-plan{device=h200}' | filecheck %s --check-prefix=H200
// RUN: vyre-opt %s --split-input-file -p vyre-plan | filecheck %s --check-prefix=GENERIC
// RUN: vyre-opt %s --split-input-file -p 'vyre-plan{device=h200},vyre-resize-workgroup,vyre-retile,vyre-split-kv,vyre-split-head-dim' | filecheck %s --check-prefix=FOLLOWED
// RUN: vyre-opt %s --split-input-file -p 'vyre-resize-workgroup,vyre-retile,vyre-split-kv' | filecheck %s --check-prefix=RECORDED
// RUN: not vyre-opt %s --split-input-file -p 'vyre-plan{device=tpu}' 2>&1 | filecheck %s --check-prefix=BAD-DEVICE
// RUN: not vyre-opt %s --split-input-file -p 'vyre-plan{device=3}' 2>&1 | filecheck %s --check-prefix=BAD-TYPE

// FlashAttention-2, two heads of 4096 rows of 64 dims (128 workgroups: a
// small grid), as vx.flash_attention_2(seq_len=4096, head_dim=64,
// num_heads=2) builds it (on the H200 one head runs as register blocks:
// block_product.mlir).
// vyre-plan records the plan on the skeleton and changes nothing else.
builtin.module {
  vyre.kernel @flash_attention_2 items 8192 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 4096, 64] : memref<524288xf32>
    %k = vyre.buffer "k" binding 1 read [2, 4096, 64] : memref<524288xf32>
    %v = vyre.buffer "v" binding 2 read [2, 4096, 64] : memref<524288xf32>
    %out = vyre.buffer "out" binding 3 write [2, 4096, 64] : memref<524288xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<4096xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<4096xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 8192 seq_len 4096 head_dim 64 tile_size 64 tile_count 64
        : (memref<524288xf32>, memref<524288xf32>, memref<4096xf32>, memref<4096xf32>, memref<4096xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 4096 : index
      %1 = arith.divui %item, %0 : index
      %2 = arith.constant 1 : index
      %kv_head = arith.divui %1, %2 : index
      %3 = arith.constant 4096 : index
      %kv_base = arith.muli %kv_head, %3 : index
      %4 = arith.constant 0 : index
      %5 = arith.constant 1 : index
      scf.for %j = %4 to %tile_len step %5 {
        %t = arith.addi %tile_start, %j : index
        %kv_row = arith.addi %kv_base, %t : index
        %6 = arith.constant 0.000000e+00 : f32
        %7 = arith.constant 0 : index
        %8 = arith.constant 64 : index
        %9 = arith.constant 1 : index
        %10 = scf.for %d = %7 to %8 step %9 iter_args(%11 = %6) -> (f32) {
          %12 = arith.constant 64 : index
          %13 = arith.muli %lane, %12 : index
          %14 = arith.addi %13, %d : index
          %15 = memref.load %q_scratch_1[%14] : memref<4096xf32>
          %16 = arith.constant 64 : index
          %17 = arith.muli %kv_row, %16 : index
          %18 = arith.addi %17, %d : index
          %19 = memref.load %k[%18] : memref<524288xf32>
          %20 = arith.mulf %15, %19 : f32
          %21 = arith.addf %11, %20 : f32
          scf.yield %21 : f32
        }
        %22 = arith.constant 1.250000e-01 : f32
        %23 = arith.mulf %10, %22 : f32
        %24 = vyre.bounded_score %23 : f32
        %25 = arith.constant 64 : index
        %26 = arith.muli %lane, %25 : index
        %27 = arith.addi %26, %j : index
        memref.store %24, %score_tile_1[%27] : memref<4096xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %28 = arith.constant 4096 : index
      %29 = arith.divui %item_1, %28 : index
      %30 = arith.constant 1 : index
      %kv_head_1 = arith.divui %29, %30 : index
      %31 = arith.constant 4096 : index
      %kv_base_1 = arith.muli %kv_head_1, %31 : index
      %32 = arith.constant 0 : index
      %33 = arith.constant 64 : index
      %34 = arith.constant 1 : index
      scf.for %d_1 = %32 to %33 step %34 {
        %35 = arith.constant 0.000000e+00 : f32
        %36 = arith.constant 0 : index
        %37 = arith.constant 1 : index
        %38 = scf.for %j_1 = %36 to %tile_len_1 step %37 iter_args(%39 = %35) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %kv_row_1 = arith.addi %kv_base_1, %t_1 : index
          %40 = arith.constant 64 : index
          %41 = arith.muli %kv_row_1, %40 : index
          %42 = arith.addi %41, %d_1 : index
          %43 = memref.load %v[%42] : memref<524288xf32>
          %44 = arith.mulf %weight, %43 : f32
          %45 = arith.addf %39, %44 : f32
          scf.yield %45 : f32
        }
        %46 = arith.constant 64 : index
        %47 = arith.muli %lane_1, %46 : index
        %48 = arith.addi %47, %d_1 : index
        %49 = memref.load %o_acc_1[%48] : memref<4096xf32>
        %50 = arith.mulf %rescale, %49 : f32
        %51 = arith.addf %50, %38 : f32
        memref.store %51, %o_acc_1[%48] : memref<4096xf32>
      }
      vyre.yield
    }
  }
}

// The H200 shuffles across 32 lanes: the rows go over two, tiles of 16
// keys staged in its 48 KiB, unrolled 64 deep.
// H200:      vyre.tiled_online_softmax
// H200-NEXT: item_count 8192 seq_len 4096 head_dim 64 tile_size 64 tile_count 64 attributes {vyre.plan = #vyre.plan<device = "h200", lanes = 64, tile_size = 16, kv_splits = 1, merge = none, merge_teams = 1, dim_parts = 2, dim_chunk = 4, rows = 1, stage_bytes = 49152, unroll = 64, interleave = [], hoist_loads = []>}
// H200-NOT:  dim_parts 2

// The generic profile has no shuffles and 16 KiB of workgroup memory.
// GENERIC:   attributes {vyre.plan = #vyre.plan<device = "generic", lanes = 64, tile_size = 16, kv_splits = 1, merge = none, merge_teams = 1, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = 16384, unroll = 64, interleave = [], hoist_loads = []>}

// The passes given 0 read their choice from the plan.
// FOLLOWED:  vyre.kernel @flash_attention_2 items 16384 workgroup_size 64
// FOLLOWED:  tile_size 16 tile_count 256 dim_parts 2 score_stride 64 attributes {vyre.plan = #vyre.plan<device = "h200"
// FOLLOWED:  gpu.shuffle xor

// BAD-DEVICE: error: unknown device 'tpu'; choose one of generic, h200, lavapipe, vulkan
// BAD-TYPE:   error: pass 'vyre-plan': option device takes a name (e.g. vyre-plan{device=generic}), got 3

// -----

// A recorded plan round-trips; the passes follow it (here: 8 keys, two
// splits merged in the workgroup, workgroups of 32 lanes).
builtin.module {
  vyre.kernel @k items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 1] : memref<128xf32>
    %out = vyre.buffer "out" binding 1 write [128, 1] : memref<128xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<64xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<64xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 128 seq_len 128 head_dim 1 tile_size 64 tile_count 2
        attributes {vyre.plan = #vyre.plan<device = "mine", lanes = 32, tile_size = 8, kv_splits = 2, merge = workgroup, merge_teams = 1, dim_parts = 1, dim_chunk = 4, rows = 1, stage_bytes = 0, unroll = 32, interleave = [], hoist_loads = []>}
        : (memref<128xf32>, memref<128xf32>, memref<64xf32>, memref<4096xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      vyre.yield
    }
  }
}
// RECORDED:      vyre.kernel @k items 256 workgroup_size 32
// RECORDED:      item_count 128 seq_len 128 head_dim 1 tile_size 8 tile_count 16 kv_splits 2 score_stride 64 attributes {vyre.plan = #vyre.plan<device = "mine", lanes = 32, tile_size = 8, kv_splits = 2, merge = workgroup

// -----

// GQA decode in bf16, 2 sequences of 256 keys, 8 query heads over 2 key
// heads of 128 dims (as vx.flash_attention_2(seq_len=1, kv_len=256, batch=2,
// num_heads=8, num_kv_heads=2, head_dim=128, dtype="bf16") builds it): the
// splits merge in a kernel; on a grid of 16 rows (at most
// tuning.FEW_SHARED_ITEMS) two of a key head's four query rows share an
// invocation (rows = 2: tuning.few_shared_rows), each over 16 lanes of 8
// dims, dealt in chunks of 8 (one 16-byte load of bf16).
builtin.module {
  vyre.kernel @flash_attention_2 items 16 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 8, 1, 128] : memref<2048xbf16>
    %k = vyre.buffer "k" binding 1 read [2, 2, 256, 128] : memref<131072xbf16>
    %v = vyre.buffer "v" binding 2 read [2, 2, 256, 128] : memref<131072xbf16>
    %out = vyre.buffer "out" binding 3 write [2, 8, 1, 128] : memref<2048xbf16>
    %q_scratch = vyre.scratch "q_scratch" : memref<8192xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<8192xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 16 seq_len 256 head_dim 128 tile_size 64 tile_count 4
        : (memref<2048xbf16>, memref<2048xbf16>, memref<8192xf32>, memref<4096xf32>, memref<8192xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 1 : index
      %1 = arith.divui %item, %0 : index
      %2 = arith.constant 4 : index
      %kv_head = arith.divui %1, %2 : index
      %3 = arith.constant 256 : index
      %kv_base = arith.muli %kv_head, %3 : index
      %4 = arith.constant 0 : index
      %5 = arith.constant 1 : index
      scf.for %j = %4 to %tile_len step %5 {
        %t = arith.addi %tile_start, %j : index
        %kv_row = arith.addi %kv_base, %t : index
        %6 = arith.constant 0.000000e+00 : f32
        %7 = arith.constant 0 : index
        %8 = arith.constant 128 : index
        %9 = arith.constant 1 : index
        %10 = scf.for %d = %7 to %8 step %9 iter_args(%11 = %6) -> (f32) {
          %12 = arith.constant 128 : index
          %13 = arith.muli %lane, %12 : index
          %14 = arith.addi %13, %d : index
          %15 = memref.load %q_scratch_1[%14] : memref<8192xf32>
          %16 = arith.constant 128 : index
          %17 = arith.muli %kv_row, %16 : index
          %18 = arith.addi %17, %d : index
          %19 = memref.load %k[%18] : memref<131072xbf16>
          %20 = arith.extf %19 : bf16 to f32
          %21 = arith.mulf %15, %20 : f32
          %22 = arith.addf %11, %21 : f32
          scf.yield %22 : f32
        }
        %23 = arith.constant 0.0883883461 : f32
        %24 = arith.mulf %10, %23 : f32
        %25 = vyre.bounded_score %24 : f32
        %26 = arith.constant 64 : index
        %27 = arith.muli %lane, %26 : index
        %28 = arith.addi %27, %j : index
        memref.store %25, %score_tile_1[%28] : memref<4096xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %29 = arith.constant 1 : index
      %30 = arith.divui %item_1, %29 : index
      %31 = arith.constant 4 : index
      %kv_head_1 = arith.divui %30, %31 : index
      %32 = arith.constant 256 : index
      %kv_base_1 = arith.muli %kv_head_1, %32 : index
      %33 = arith.constant 0 : index
      %34 = arith.constant 128 : index
      %35 = arith.constant 1 : index
      scf.for %d_1 = %33 to %34 step %35 {
        %36 = arith.constant 0.000000e+00 : f32
        %37 = arith.constant 0 : index
        %38 = arith.constant 1 : index
        %39 = scf.for %j_1 = %37 to %tile_len_1 step %38 iter_args(%40 = %36) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %kv_row_1 = arith.addi %kv_base_1, %t_1 : index
          %41 = arith.constant 128 : index
          %42 = arith.muli %kv_row_1, %41 : index
          %43 = arith.addi %42, %d_1 : index
          %44 = memref.load %v[%43] : memref<131072xbf16>
          %45 = arith.extf %44 : bf16 to f32
          %46 = arith.mulf %weight, %45 : f32
          %47 = arith.addf %40, %46 : f32
          scf.yield %47 : f32
        }
        %48 = arith.constant 128 : index
        %49 = arith.muli %lane_1, %48 : index
        %50 = arith.addi %49, %d_1 : index
        %51 = memref.load %o_acc_1[%50] : memref<8192xf32>
        %52 = arith.mulf %rescale, %51 : f32
        %53 = arith.addf %52, %39 : f32
        memref.store %53, %o_acc_1[%50] : memref<8192xf32>
      }
      vyre.yield
    }
  }
}
// H200:      #vyre.plan<device = "h200", lanes = 64, tile_size = 4, kv_splits = 64, merge = kernel, merge_teams = 8, dim_parts = 16, dim_chunk = 8, rows = 2, stage_bytes = 0, unroll = 64, interleave = [], hoist_loads = []>
// FOLLOWED:  tile_count 64 kv_splits 64 dim_parts 16 dim_chunk 8
