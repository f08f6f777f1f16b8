// RUN: not vyre-opt %s -p 'vyre-block-product{lanes=16 key_lanes=4 rows=2 keys=4 force=true}' 2>&1 | filecheck %s
// RUN: vyre-opt %s -p 'vyre-block-product{lanes=16 key_lanes=4 rows=2 keys=4}' | filecheck %s --check-prefix=LEFT
// RUN: not vyre-opt %s -p 'vyre-block-product{key_lanes=3}' 2>&1 | filecheck %s --check-prefix=KEYLANES
// RUN: not vyre-opt %s -p 'vyre-block-product{rows=0}' 2>&1 | filecheck %s --check-prefix=ROWS

// A causal kernel: a mask's kept keys differ by row, which the blocks do
// not compute, so the pass refuses it when forced and leaves it otherwise.
builtin.module {
  vyre.kernel @flex_attention items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 32] : memref<2048xf32>
    %k = vyre.buffer "k" binding 1 read [64, 32] : memref<2048xf32>
    %v = vyre.buffer "v" binding 2 read [64, 32] : memref<2048xf32>
    %out = vyre.buffer "out" binding 3 write [64, 32] : memref<2048xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<2048xf32>
    %score_tile = vyre.scratch "score_tile" : memref<1024xf32>
    %o_acc = vyre.scratch "o_acc" : memref<2048xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 64 seq_len 64 head_dim 32 tile_size 16 tile_count 4 tile_classes [2, 2, 2, 2]
        : (memref<2048xf32>, memref<2048xf32>, memref<2048xf32>, memref<1024xf32>, memref<2048xf32>)
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
          %15 = memref.load %k[%14] : memref<2048xf32>
          %16 = arith.mulf %11, %15 : f32
          %17 = arith.addf %7, %16 : f32
          scf.yield %17 : f32
        }
        %18 = arith.constant 0.176776692 : f32
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
          %35 = memref.load %v[%34] : memref<2048xf32>
          %36 = arith.mulf %weight, %35 : f32
          %37 = arith.constant 0.000000e+00 : f32
          %38 = arith.cmpf oeq, %weight, %37 : f32
          %39 = arith.select %38, %37, %36 : f32
          %40 = arith.addf %31, %39 : f32
          scf.yield %40 : f32
        }
        %41 = arith.constant 32 : index
        %42 = arith.muli %lane_1, %41 : index
        %43 = arith.addi %42, %d_1 : index
        %44 = memref.load %o_acc_1[%43] : memref<2048xf32>
        %45 = arith.mulf %rescale, %44 : f32
        %46 = arith.addf %45, %30 : f32
        memref.store %46, %o_acc_1[%43] : memref<2048xf32>
      }
      vyre.yield
    }
    mask(%item_2, %lane_2, %kv_idx) {
      %47 = arith.index_cast %item_2 : index to i32
      %48 = arith.index_cast %kv_idx : index to i32
      %49 = arith.cmpi sle, %48, %47 : i32
      vyre.yield %49 : i1
    }
  }
}

// CHECK: error: vyre-block-product: this skeleton cannot be expanded into register blocks: it has a mask, kv splits, dim parts, rows per lane or kv_lens
// LEFT: vyre.tiled_online_softmax
// LEFT-NOT: block_key_tile
// KEYLANES: error: vyre-block-product: key_lanes (3) must be a power of two that divides lanes (128)
// ROWS: error: vyre-block-product: rows must be positive, got 0
