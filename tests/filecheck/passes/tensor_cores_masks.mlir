// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 stage=true}' | filecheck %s
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 stage=true},vyre-to-gpu{optimize=exact}' | filecheck %s --check-prefix=LOWERED
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200}' | filecheck %s --check-prefix=LEFT
// RUN: not vyre-opt %s -p 'vyre-tensor-cores{device=h200 force=true}' 2>&1 | filecheck %s --check-prefix=STAGE
// RUN: vyre-opt %s -p 'vyre-plan{device=h200}' | filecheck %s --check-prefix=PLAN

// A causal FlashAttention-2 in f16 (vx.flash_attention_2(seq_len=128,
// head_dim=16, tile_size=16, dtype="f16", mask_mod=q >= k)) on the matrix
// units.  Workgroups of 64 rows (four subgroups of 16), the heavier one
// first: each runs its tiles from tiles_lo to tiles_hi, and tiles outside
// its full run (tiles_flo..tiles_fhi) are partial: a dropped key's score
// is -inf there, and where the staged value tile holds an infinity or NaN
// it is cleared between two barriers and added back on the lanes for the
// keys the mask keeps, in loops left rolled.  Without stage it stays as it
// is (forced: the reason); the plan takes a staged tiling for it (on this
// small grid, the one with the most workgroups).
builtin.module {
  vyre.kernel @flex_attention items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [128, 16] : memref<2048xf16>
    %k = vyre.buffer "k" binding 1 read [128, 16] : memref<2048xf16>
    %v = vyre.buffer "v" binding 2 read [128, 16] : memref<2048xf16>
    %out = vyre.buffer "out" binding 3 write [128, 16] : memref<2048xf16>
    %q_scratch = vyre.scratch "q_scratch" : memref<1024xf32>
    %score_tile = vyre.scratch "score_tile" : memref<1024xf32>
    %o_acc = vyre.scratch "o_acc" : memref<1024xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 128 seq_len 128 head_dim 16 tile_size 16 tile_count 8 tile_classes [2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
        : (memref<2048xf16>, memref<2048xf16>, memref<1024xf32>, memref<1024xf32>, memref<1024xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 0 : index
      %1 = arith.constant 1 : index
      scf.for %j = %0 to %tile_len step %1 {
        %t = arith.addi %tile_start, %j : index
        %2 = arith.constant 0.000000e+00 : f32
        %3 = arith.constant 0 : index
        %4 = arith.constant 16 : index
        %5 = arith.constant 1 : index
        %6 = scf.for %d = %3 to %4 step %5 iter_args(%7 = %2) -> (f32) {
          %8 = arith.constant 16 : index
          %9 = arith.muli %lane, %8 : index
          %10 = arith.addi %9, %d : index
          %11 = memref.load %q_scratch_1[%10] : memref<1024xf32>
          %12 = arith.constant 16 : index
          %13 = arith.muli %t, %12 : index
          %14 = arith.addi %13, %d : index
          %15 = memref.load %k[%14] : memref<2048xf16>
          %16 = arith.extf %15 : f16 to f32
          %17 = arith.mulf %11, %16 : f32
          %18 = arith.addf %7, %17 : f32
          scf.yield %18 : f32
        }
        %19 = arith.constant 2.500000e-01 : f32
        %20 = arith.mulf %6, %19 : f32
        %21 = vyre.bounded_score %20 : f32
        %22 = arith.constant 16 : index
        %23 = arith.muli %lane, %22 : index
        %24 = arith.addi %23, %j : index
        memref.store %21, %score_tile_1[%24] : memref<1024xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %25 = arith.constant 0 : index
      %26 = arith.constant 16 : index
      %27 = arith.constant 1 : index
      scf.for %d_1 = %25 to %26 step %27 {
        %28 = arith.constant 0.000000e+00 : f32
        %29 = arith.constant 0 : index
        %30 = arith.constant 1 : index
        %31 = scf.for %j_1 = %29 to %tile_len_1 step %30 iter_args(%32 = %28) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %33 = arith.constant 16 : index
          %34 = arith.muli %t_1, %33 : index
          %35 = arith.addi %34, %d_1 : index
          %36 = memref.load %v[%35] : memref<2048xf16>
          %37 = arith.extf %36 : f16 to f32
          %38 = arith.mulf %weight, %37 : f32
          %39 = arith.constant 0.000000e+00 : f32
          %40 = arith.cmpf oeq, %weight, %39 : f32
          %41 = arith.select %40, %39, %38 : f32
          %42 = arith.addf %32, %41 : f32
          scf.yield %42 : f32
        }
        %43 = arith.constant 16 : index
        %44 = arith.muli %lane_1, %43 : index
        %45 = arith.addi %44, %d_1 : index
        %46 = memref.load %o_acc_1[%45] : memref<1024xf32>
        %47 = arith.mulf %rescale, %46 : f32
        %48 = arith.addf %47, %31 : f32
        memref.store %48, %o_acc_1[%45] : memref<1024xf32>
      }
      vyre.yield
    }
    mask(%item_2, %lane_2, %kv_idx) {
      %49 = arith.index_cast %item_2 : index to i32
      %50 = arith.index_cast %kv_idx : index to i32
      %51 = arith.cmpi sge, %49, %50 : i32
      vyre.yield %51 : i1
    }
  }
}

// CHECK:      %workgroup = arith.divui
// CHECK:      %heavy_first = arith.addi
// CHECK:      %tiles_hi = arith.select %{{.*}}, %{{.*}}, %{{.*}} : index
// CHECK:      %tiles_fhi = arith.select
// CHECK:      scf.for %tile_idx = %tiles_lo to %tiles_hi
// CHECK:        arith.cmpi ult, %tile_idx, %tiles_flo : index
// CHECK-NEXT:   arith.cmpi uge, %tile_idx, %tiles_fhi : index
// CHECK-NEXT:   %[[PARTIAL:.*]] = arith.ori
// CHECK:        scf.if %[[PARTIAL]] -> (f32, f32, f32, f32, f32, f32, f32, f32) {
// CHECK:          arith.constant 0xff800000 : f32
// CHECK:          %kv_idx = arith.addi %tile_start
// CHECK:          arith.cmpi sge
// CHECK:          arith.select
// CHECK:        %[[FOUND:.*]] = scf.if %[[PARTIAL]] -> (i32) {
// CHECK:          gpu.subgroup_mma_load_matrix %tc_value_tile{{.*}} -> !gpu.mma_matrix<16x16xf16, "COp">
// CHECK:          arith.cmpf uge
// CHECK:          gpu.shuffle xor
// CHECK:        %[[CLEARED:.*]] = arith.cmpi ne, %[[FOUND]]
// CHECK-NEXT:   scf.if %[[CLEARED]] {
// CHECK-NEXT:     "gpu.barrier"() : () -> ()
// CHECK:          gpu.subgroup_mma_store_matrix {{.*}}, %tc_value_tile
// CHECK:          "gpu.barrier"() : () -> ()
// CHECK:        gpu.subgroup_mma_compute
// CHECK:        scf.if %[[CLEARED]] -> (!gpu.mma_matrix<16x16xf32, "COp">) {
// CHECK:          scf.for %key = {{.*}} iter_args({{.*}}) -> (i32, i32) {
// CHECK:            memref.load %v
// CHECK:            arith.cmpf uno
// CHECK:          } {vyre.rolled}
// CHECK:          arith.constant 0x7fc00000 : f32

// LOWERED: "gpu.func"() <{function_type = (memref<2048xf16>, memref<2048xf16>, memref<2048xf16>, memref<2048xf16>) -> (), kernel}>
// LOWERED: } {vyre.rolled}
// LOWERED-NOT: vyre.tiled_online_softmax

// LEFT: vyre.tiled_online_softmax

// STAGE: error: vyre-tensor-cores: this skeleton cannot run on subgroup matrix ops: a mask needs staged tiles (stage=true): a partial tile whose values hold an infinity or NaN has them cleared in workgroup memory

// PLAN: vyre.tensor_cores = #vyre.tensor_cores<keys = 32, row_tiles = 1, stage = true, prefetch = false, registers = false, stage_q = false, skip_rescale = false, rolled = false, pieces = 1, unroll = 1>
