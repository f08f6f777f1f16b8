// ARGS: -p vyre-to-gpu
// ERROR: error:
// input cut in the middle
builtin.module {
  vyre.kernel @flash_attention_2 items 100 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [100, 16] : memref<1600xf32>
    %k = vyre.buffer "k" binding 1 read [100, 16] : memref<1600xf32>
    %v = vyre.buffer "v" binding 2 read [100, 16] : memref<1600xf32>
    %out = vyre.buffer "out" binding 3 write [100, 16] : memref<1600xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<1024xf32>
    %score_tile = vyre.scratch "score_tile" : memref<2048xf32>
    %o_acc = vyre.scratch "o_acc" : memref<1024xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 100 seq_len 100 head_dim 16 tile_size 32 tile_count 4
        : (memref<1600xf32>, memref<1600xf32>, memref<1024xf32>, memref<2048xf32>, memref<1024xf32>)
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
          %15 = memref.load %k[%14] : memref<1600xf32>
          %16 = arith.mulf %11, %15 : f32
          %17 = arith.addf %7, %16 : f32
          scf.yield %17 : f32
        }
        %18 = arith.constant 2.500000e-01 : f32
       