// Causal grouped-query attention with ALiBi, as built by
//   vx.flash_attention_2(128, 2, 32, num_heads=2, num_kv_heads=1,
//       mask_mod=lambda q, kv: kv <= q,
//       score_mod=lambda s, q, kv, h: s - vx.exp2(-8.0 * (h + 1) / 2) * vx.abs(q - kv))
// The mask region and the compile-time tile_classes drive tile skipping.
builtin.module {
  vyre.kernel @flex_attention items 256 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 128, 2] : memref<512xf32>
    %k = vyre.buffer "k" binding 1 read [1, 128, 2] : memref<256xf32>
    %v = vyre.buffer "v" binding 2 read [1, 128, 2] : memref<256xf32>
    %out = vyre.buffer "out" binding 3 write [2, 128, 2] : memref<512xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<128xf32>
    %score_tile = vyre.scratch "score_tile" : memref<2048xf32>
    %o_acc = vyre.scratch "o_acc" : memref<128xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 256 seq_len 128 head_dim 2 tile_size 32 tile_count 4 tile_classes [2, 2, 0, 0, 1, 1, 2, 2, 2, 2, 0, 0, 1, 1, 2, 2]
        : (memref<512xf32>, memref<512xf32>, memref<128xf32>, memref<2048xf32>, memref<128xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 128 : index
      %1 = arith.divui %item, %0 : index
      %2 = arith.constant 2 : index
      %kv_head = arith.divui %1, %2 : index
      %3 = arith.constant 128 : index
      %kv_base = arith.muli %kv_head, %3 : index
      %4 = arith.index_cast %item : index to i32
      %5 = arith.constant 128 : i32
      %6 = arith.remsi %4, %5 : i32
      %7 = arith.constant 128 : i32
      %8 = arith.divsi %4, %7 : i32
      %9 = arith.constant 0 : index
      %10 = arith.constant 1 : index
      scf.for %j = %9 to %tile_len step %10 {
        %t = arith.addi %tile_start, %j : index
        %kv_row = arith.addi %kv_base, %t : index
        %11 = arith.constant 0.000000e+00 : f32
        %12 = arith.constant 0 : index
        %13 = arith.constant 2 : index
        %14 = arith.constant 1 : index
        %15 = scf.for %d = %12 to %13 step %14 iter_args(%16 = %11) -> (f32) {
          %17 = arith.constant 2 : index
          %18 = arith.muli %lane, %17 : index
          %19 = arith.addi %18, %d : index
          %20 = memref.load %q_scratch_1[%19] : memref<128xf32>
          %21 = arith.constant 2 : index
          %22 = arith.muli %kv_row, %21 : index
          %23 = arith.addi %22, %d : index
          %24 = memref.load %k[%23] : memref<256xf32>
          %25 = arith.mulf %20, %24 : f32
          %26 = arith.addf %16, %25 : f32
          scf.yield %26 : f32
        }
        %27 = arith.constant 0.707106769 : f32
        %28 = arith.mulf %15, %27 : f32
        %29 = arith.index_cast %t : index to i32
        %30 = arith.constant 1 : i32
        %31 = arith.addi %8, %30 : i32
        %32 = arith.constant -8.000000e+00 : f32
        %33 = arith.sitofp %31 : i32 to f32
        %34 = arith.mulf %32, %33 : f32
        %35 = arith.constant 2.000000e+00 : f32
        %36 = arith.divf %34, %35 : f32
        %37 = math.exp2 %36 : f32
        %38 = arith.subi %6, %29 : i32
        %39 = arith.constant 0 : i32
        %40 = arith.cmpi slt, %38, %39 : i32
        %41 = arith.constant 0 : i32
        %42 = arith.subi %41, %38 : i32
        %43 = arith.select %40, %42, %38 : i32
        %44 = arith.sitofp %43 : i32 to f32
        %45 = arith.mulf %37, %44 : f32
        %46 = arith.subf %28, %45 : f32
        %47 = vyre.bounded_score %46 : f32
        %48 = arith.constant 0xff800000 : f32
        %49 = arith.cmpf oeq, %46, %48 : f32
        %50 = arith.select %49, %48, %47 : f32
        %51 = arith.constant 32 : index
        %52 = arith.muli %lane, %51 : index
        %53 = arith.addi %52, %j : index
        memref.store %50, %score_tile_1[%53] : memref<2048xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %54 = arith.constant 128 : index
      %55 = arith.divui %item_1, %54 : index
      %56 = arith.constant 2 : index
      %kv_head_1 = arith.divui %55, %56 : index
      %57 = arith.constant 128 : index
      %kv_base_1 = arith.muli %kv_head_1, %57 : index
      %58 = arith.constant 0 : index
      %59 = arith.constant 2 : index
      %60 = arith.constant 1 : index
      scf.for %d_1 = %58 to %59 step %60 {
        %61 = arith.constant 0.000000e+00 : f32
        %62 = arith.constant 0 : index
        %63 = arith.constant 1 : index
        %64 = scf.for %j_1 = %62 to %tile_len_1 step %63 iter_args(%65 = %61) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %kv_row_1 = arith.addi %kv_base_1, %t_1 : index
          %66 = arith.constant 2 : index
          %67 = arith.muli %kv_row_1, %66 : index
          %68 = arith.addi %67, %d_1 : index
          %69 = memref.load %v[%68] : memref<256xf32>
          %70 = arith.mulf %weight, %69 : f32
          %71 = arith.constant 0.000000e+00 : f32
          %72 = arith.cmpf oeq, %weight, %71 : f32
          %73 = arith.select %72, %71, %70 : f32
          %74 = arith.addf %65, %73 : f32
          scf.yield %74 : f32
        }
        %75 = arith.constant 2 : index
        %76 = arith.muli %lane_1, %75 : index
        %77 = arith.addi %76, %d_1 : index
        %78 = memref.load %o_acc_1[%77] : memref<128xf32>
        %79 = arith.mulf %rescale, %78 : f32
        %80 = arith.addf %79, %64 : f32
        memref.store %80, %o_acc_1[%77] : memref<128xf32>
      }
      vyre.yield
    }
    mask(%item_2, %lane_2, %kv_idx) {
      %81 = arith.index_cast %item_2 : index to i32
      %82 = arith.index_cast %kv_idx : index to i32
      %83 = arith.constant 128 : i32
      %84 = arith.remsi %81, %83 : i32
      %85 = arith.cmpi sle, %82, %84 : i32
      vyre.yield %85 : i1
    }
  }
}
