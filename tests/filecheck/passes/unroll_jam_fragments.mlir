// RUN: vyre-opt %s -p 'vyre-unroll-jam{factor=32}' | filecheck %s

// Before vyre-to-gpu, a fragment's loop to its %tile_len runs at most
// tile_size (8) times: it is unrolled by 8, not 32, with a remainder loop
// for a short last tile (a factor past the tile left a main loop whose
// indexes vyre-run's bounds check could not clear).
builtin.module {
  vyre.kernel @flash_attention_2 items 32 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [32, 2] : memref<64xf32>
    %k = vyre.buffer "k" binding 1 read [32, 2] : memref<64xf32>
    %v = vyre.buffer "v" binding 2 read [32, 2] : memref<64xf32>
    %out = vyre.buffer "out" binding 3 write [32, 2] : memref<64xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<128xf32>
    %score_tile = vyre.scratch "score_tile" : memref<512xf32>
    %o_acc = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 32 seq_len 32 head_dim 2 tile_size 8 tile_count 4
        : (memref<64xf32>, memref<64xf32>, memref<128xf32>, memref<512xf32>, memref<128xf32>)
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
          %15 = memref.load %k[%14] : memref<64xf32>
          %16 = arith.mulf %11, %15 : f32
          %17 = arith.addf %7, %16 : f32
          scf.yield %17 : f32
        }
        %18 = arith.constant 0.707106769 : f32
        %19 = arith.mulf %6, %18 : f32
        %20 = vyre.bounded_score %19 : f32
        %21 = arith.constant 8 : index
        %22 = arith.muli %lane, %21 : index
        %23 = arith.addi %22, %j : index
        memref.store %20, %score_tile_1[%23] : memref<512xf32>
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
          %35 = memref.load %v[%34] : memref<64xf32>
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
// CHECK:      scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
// CHECK:        %[[EIGHT:.*]] = arith.constant 8 : index
// CHECK:        scf.for %j = %{{.*}} to %{{.*}} step %[[EIGHT]] {
// CHECK:        scf.for %j_1 = %{{.*}} to %tile_len step %{{.*}} {
// CHECK:      update(
// CHECK:        scf.for %j_2 = %{{.*}} to %tile_len_1 step %{{.*}} iter_args(%{{.*}}, %{{.*}}) -> (f32, f32)
