// RUN: vyre-opt %s -p 'vyre-plan{device=h200}' | filecheck %s --check-prefix=PLAN
// RUN: vyre-opt %s -p 'vyre-plan{device=h200}' | vyre-opt | filecheck %s --check-prefix=PLAN
// RUN: vyre-opt %s -p 'vyre-to-gpu{device=h200}' | filecheck %s --check-prefix=PLANNED
// RUN: vyre-opt %s -p 'vyre-to-gpu{device=generic}' | filecheck %s --check-prefix=GENERIC

// FlashAttention-2, one head of 2048 rows of 32 dims
// (vx.flash_attention_2(seq_len=2048, head_dim=32)): a small grid.
builtin.module {
  vyre.kernel @flash_attention_2 items 2048 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2048, 32] : memref<65536xf32>
    %k = vyre.buffer "k" binding 1 read [2048, 32] : memref<65536xf32>
    %v = vyre.buffer "v" binding 2 read [2048, 32] : memref<65536xf32>
    %out = vyre.buffer "out" binding 3 write [2048, 32] : memref<65536xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<2048xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<2048xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2048 seq_len 2048 head_dim 32 tile_size 64 tile_count 32
        : (memref<65536xf32>, memref<65536xf32>, memref<2048xf32>, memref<4096xf32>, memref<2048xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 0 : index
      %1 = arith.constant 1 : index
      scf.for %j = %0 to %tile_len step %1 {
        %t = arith.addi %tile_start, %j : index
        %2 = arith.constant 0.000000e+00 : f32
        %3 = arith.constant 0 : index
        %4 = arith.constant 32 : index
        %5 = arith.constant 1 : index
        %6 = scf.for %d = %3 to %4 step %5 iter_args(%7 = %2) -> (f32) {
          %8 = arith.constant 32 : index
          %9 = arith.muli %lane, %8 : index
          %10 = arith.addi %9, %d : index
          %11 = memref.load %q_scratch_1[%10] : memref<2048xf32>
          %12 = arith.constant 32 : index
          %13 = arith.muli %t, %12 : index
          %14 = arith.addi %13, %d : index
          %15 = memref.load %k[%14] : memref<65536xf32>
          %16 = arith.mulf %11, %15 : f32
          %17 = arith.addf %7, %16 : f32
          scf.yield %17 : f32
        }
        %18 = arith.constant 0.176776692 : f32
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
      %25 = arith.constant 32 : index
      %26 = arith.constant 1 : index
      scf.for %d_1 = %24 to %25 step %26 {
        %27 = arith.constant 0.000000e+00 : f32
        %28 = arith.constant 0 : index
        %29 = arith.constant 1 : index
        %30 = scf.for %j_1 = %28 to %tile_len_1 step %29 iter_args(%31 = %27) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %32 = arith.constant 32 : index
          %33 = arith.muli %t_1, %32 : index
          %34 = arith.addi %33, %d_1 : index
          %35 = memref.load %v[%34] : memref<65536xf32>
          %36 = arith.mulf %weight, %35 : f32
          %37 = arith.addf %31, %36 : f32
          scf.yield %37 : f32
        }
        %38 = arith.constant 32 : index
        %39 = arith.muli %lane_1, %38 : index
        %40 = arith.addi %39, %d_1 : index
        %41 = memref.load %o_acc_1[%40] : memref<2048xf32>
        %42 = arith.mulf %rescale, %41 : f32
        %43 = arith.addf %42, %30 : f32
        memref.store %43, %o_acc_1[%40] : memref<2048xf32>
      }
      vyre.yield
    }
  }
}

// The H200's plan: register blocks of 2 rows x 4 keys a lane, 8 lanes a
// row, in workgroups of 128: 64 workgroups (vyre_xdsl.tuning.block_blocking).
// PLAN:     vyre.block_product = #vyre.block_product<lanes = 128, key_lanes = 8, rows = 2, keys = 4>
// PLAN-NOT: vyre.plan =
// PLANNED:  vector.load %block_key_tile
// PLANNED:  vyre.launch = #vyre.launch<items = 8192, workgroup = [128, 1, 1], grid = [64, 1, 1]
// A device without shuffles keeps a lane a row.
// GENERIC-NOT: block_key_tile
// GENERIC:     vyre.launch
