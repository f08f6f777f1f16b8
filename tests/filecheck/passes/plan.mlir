// RUN: vyre-opt %s --split-input-file -p 'vyre-plan{device=h200}' | filecheck %s --check-prefix=H200
// RUN: vyre-opt %s --split-input-file -p vyre-plan | filecheck %s --check-prefix=GENERIC
// RUN: vyre-opt %s --split-input-file -p 'vyre-plan{device=h200},vyre-resize-workgroup,vyre-retile,vyre-split-kv,vyre-split-head-dim' | filecheck %s --check-prefix=FOLLOWED
// RUN: vyre-opt %s --split-input-file -p 'vyre-resize-workgroup,vyre-retile,vyre-split-kv' | filecheck %s --check-prefix=RECORDED
// RUN: not vyre-opt %s --split-input-file -p 'vyre-plan{device=tpu}' 2>&1 | filecheck %s --check-prefix=BAD-DEVICE
// RUN: not vyre-opt %s --split-input-file -p 'vyre-plan{device=3}' 2>&1 | filecheck %s --check-prefix=BAD-TYPE

// FlashAttention-2, one head of 4096 rows of 64 dims (64 workgroups: a
// small grid), as vx.flash_attention_2(seq_len=4096, head_dim=64) builds it.
// vyre-plan records the plan on the skeleton and changes nothing else.
builtin.module {
  vyre.kernel @flash_attention_2 items 4096 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4096, 64] : memref<262144xf32>
    %k = vyre.buffer "k" binding 1 read [4096, 64] : memref<262144xf32>
    %v = vyre.buffer "v" binding 2 read [4096, 64] : memref<262144xf32>
    %out = vyre.buffer "out" binding 3 write [4096, 64] : memref<262144xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<4096xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<4096xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 4096 seq_len 4096 head_dim 64 tile_size 64 tile_count 64
        : (memref<262144xf32>, memref<262144xf32>, memref<4096xf32>, memref<4096xf32>, memref<4096xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 0 : index
      %1 = arith.constant 1 : index
      scf.for %j = %0 to %tile_len step %1 {
        %t = arith.addi %tile_start, %j : index
        %2 = arith.constant 0.000000e+00 : f32
        %3 = arith.constant 0 : index
        %4 = arith.constant 64 : index
        %5 = arith.constant 1 : index
        %6 = scf.for %d = %3 to %4 step %5 iter_args(%7 = %2) -> (f32) {
          %8 = arith.constant 64 : index
          %9 = arith.muli %lane, %8 : index
          %10 = arith.addi %9, %d : index
          %11 = memref.load %q_scratch_1[%10] : memref<4096xf32>
          %12 = arith.constant 64 : index
          %13 = arith.muli %t, %12 : index
          %14 = arith.addi %13, %d : index
          %15 = memref.load %k[%14] : memref<262144xf32>
          %16 = arith.mulf %11, %15 : f32
          %17 = arith.addf %7, %16 : f32
          scf.yield %17 : f32
        }
        %18 = arith.constant 1.250000e-01 : f32
        %19 = arith.mulf %6, %18 : f32
        %20 = vyre.bounded_score %19 : f32
        %21 = arith.constant 64 : index
        %22 = arith.muli %lane, %21 : index
        %23 = arith.addi %22, %j : index
        memref.store %20, %score_tile_1[%23] : memref<4096xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %24 = arith.constant 0 : index
      %25 = arith.constant 64 : index
      %26 = arith.constant 1 : index
      scf.for %d_1 = %24 to %25 step %26 {
        %27 = arith.constant 0.000000e+00 : f32
        %28 = arith.constant 0 : index
        %29 = arith.constant 1 : index
        %30 = scf.for %j_1 = %28 to %tile_len_1 step %29 iter_args(%31 = %27) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %32 = arith.constant 64 : index
          %33 = arith.muli %t_1, %32 : index
          %34 = arith.addi %33, %d_1 : index
          %35 = memref.load %v[%34] : memref<262144xf32>
          %36 = arith.mulf %weight, %35 : f32
          %37 = arith.addf %31, %36 : f32
          scf.yield %37 : f32
        }
        %38 = arith.constant 64 : index
        %39 = arith.muli %lane_1, %38 : index
        %40 = arith.addi %39, %d_1 : index
        %41 = memref.load %o_acc_1[%40] : memref<4096xf32>
        %42 = arith.mulf %rescale, %41 : f32
        %43 = arith.addf %42, %30 : f32
        memref.store %43, %o_acc_1[%40] : memref<4096xf32>
      }
      vyre.yield
    }
  }
}

// The H200 shuffles across 32 lanes: the rows go over two, tiles of 16
// keys staged in its 48 KiB, unrolled 64 deep.
// H200:      vyre.tiled_online_softmax
// H200-NEXT: item_count 4096 seq_len 4096 head_dim 64 tile_size 64 tile_count 64 attributes {vyre.plan = #vyre.plan<device = "h200", lanes = 64, tile_size = 16, kv_splits = 1, merge = none, dim_parts = 2, rows = 1, stage_bytes = 49152, unroll = 64, interleave = []>}
// H200-NOT:  dim_parts 2

// The generic profile has no shuffles and 16 KiB of workgroup memory.
// GENERIC:   attributes {vyre.plan = #vyre.plan<device = "generic", lanes = 64, tile_size = 16, kv_splits = 1, merge = none, dim_parts = 1, rows = 1, stage_bytes = 16384, unroll = 64, interleave = []>}

// The passes given 0 read their choice from the plan.
// FOLLOWED:  vyre.kernel @flash_attention_2 items 8192 workgroup_size 64
// FOLLOWED:  tile_size 16 tile_count 256 dim_parts 2 attributes {vyre.plan = #vyre.plan<device = "h200"
// FOLLOWED:  gpu.shuffle xor

// BAD-DEVICE: error: unknown device 'tpu'; choose one of generic, h200, lavapipe, vulkan
// BAD-TYPE:   error: Incompatible types: given (3,), expected <class 'str'>

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
        attributes {vyre.plan = #vyre.plan<device = "mine", lanes = 32, tile_size = 8, kv_splits = 2, merge = workgroup, dim_parts = 1, rows = 1, stage_bytes = 0, unroll = 32, interleave = []>}
        : (memref<128xf32>, memref<128xf32>, memref<64xf32>, memref<4096xf32>, memref<64xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %qs, %st) {
      vyre.yield
    } update(%item2, %lane2, %ts2, %tl2, %m_new, %rescale, %st2, %o) {
      vyre.yield
    }
  }
}
// RECORDED:      vyre.kernel @k items 256 workgroup_size 32
// RECORDED:      item_count 128 seq_len 128 head_dim 1 tile_size 8 tile_count 16 kv_splits 2 attributes {vyre.plan = #vyre.plan<device = "mine", lanes = 32, tile_size = 8, kv_splits = 2, merge = workgroup
