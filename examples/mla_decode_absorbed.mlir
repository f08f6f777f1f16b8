// The absorbed MLA decode (written by vyre_xdsl.decoders.mla_decode_absorbed, what
// vyre-absorb-mla makes of examples/mla_decode.mlir), printed by vyre-opt: its
// prologue absorbs W_uk into the query, its epilogue applies W_uv once.
// Lower it:  vyre-opt examples/mla_decode_absorbed.mlir -p vyre-to-gpu
builtin.module {
  vyre.kernel @mla_decode items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 16] : memref<64xf32>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [100, 8] : memref<800xf32>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [100, 4] : memref<400xf32>
    %w_uk = vyre.buffer "w_uk" binding 3 read [8, 64] : memref<512xf32>
    %w_uv = vyre.buffer "w_uv" binding 4 read [8, 64] : memref<512xf32>
    %out = vyre.buffer "out" binding 5 write [4, 16] : memref<64xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<1024xf32>
    %score_tile = vyre.scratch "score_tile" : memref<2048xf32>
    %o_acc = vyre.scratch "o_acc" : memref<1024xf32>
    %q_lat = vyre.scratch "q_lat" : memref<512xf32>
    %o_lat = vyre.scratch "o_lat" : memref<512xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 4 seq_len 100 head_dim 16 tile_size 32 tile_count 4
        : (memref<64xf32>, memref<64xf32>, memref<1024xf32>, memref<2048xf32>, memref<1024xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 0 : index
      %1 = arith.constant 1 : index
      scf.for %j = %0 to %tile_len step %1 {
        %t = arith.addi %tile_start, %j : index
        %2 = arith.constant 0.000000e+00 : f32
        %3 = arith.constant 0 : index
        %4 = arith.constant 8 : index
        %5 = arith.constant 1 : index
        %6 = scf.for %r = %3 to %4 step %5 iter_args(%7 = %2) -> (f32) {
          %8 = arith.constant 8 : index
          %9 = arith.muli %lane, %8 : index
          %10 = arith.addi %9, %r : index
          %11 = memref.load %q_lat[%10] : memref<512xf32>
          %12 = arith.constant 8 : index
          %13 = arith.muli %t, %12 : index
          %14 = arith.addi %13, %r : index
          %15 = memref.load %kv_cache[%14] : memref<800xf32>
          %16 = arith.mulf %11, %15 : f32
          %17 = arith.addf %7, %16 : f32
          scf.yield %17 : f32
        }
        %18 = arith.constant 0 : index
        %19 = arith.constant 4 : index
        %20 = arith.constant 1 : index
        %21 = scf.for %dim = %18 to %19 step %20 iter_args(%22 = %6) -> (f32) {
          %23 = arith.constant 16 : index
          %24 = arith.muli %lane, %23 : index
          %25 = arith.addi %24, %dim : index
          %26 = memref.load %q_scratch_1[%25] : memref<1024xf32>
          %27 = arith.constant 4 : index
          %28 = arith.muli %t, %27 : index
          %29 = arith.addi %28, %dim : index
          %30 = memref.load %kr_cache[%29] : memref<400xf32>
          %31 = arith.mulf %26, %30 : f32
          %32 = arith.addf %22, %31 : f32
          scf.yield %32 : f32
        }
        %33 = arith.constant 2.500000e-01 : f32
        %34 = arith.mulf %21, %33 : f32
        %35 = vyre.bounded_score %34 : f32
        %36 = arith.constant 32 : index
        %37 = arith.muli %lane, %36 : index
        %38 = arith.addi %37, %j : index
        memref.store %35, %score_tile_1[%38] : memref<2048xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %39 = arith.constant 0 : index
      %40 = arith.constant 8 : index
      %41 = arith.constant 1 : index
      scf.for %r_1 = %39 to %40 step %41 {
        %42 = arith.constant 0.000000e+00 : f32
        %43 = arith.constant 0 : index
        %44 = arith.constant 1 : index
        %45 = scf.for %j_1 = %43 to %tile_len_1 step %44 iter_args(%46 = %42) -> (f32) {
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %47 = arith.constant 8 : index
          %48 = arith.muli %t_1, %47 : index
          %49 = arith.addi %48, %r_1 : index
          %50 = memref.load %kv_cache[%49] : memref<800xf32>
          %weight = vyre.tile_weight %j_1 : f32
          %51 = arith.mulf %weight, %50 : f32
          %52 = arith.addf %46, %51 : f32
          scf.yield %52 : f32
        }
        %53 = arith.constant 8 : index
        %54 = arith.muli %lane_1, %53 : index
        %55 = arith.addi %54, %r_1 : index
        %56 = memref.load %o_lat[%55] : memref<512xf32>
        %57 = arith.mulf %rescale, %56 : f32
        %58 = arith.addf %57, %45 : f32
        memref.store %58, %o_lat[%55] : memref<512xf32>
      }
      vyre.yield
    }
    prologue(%item_2, %lane_2, %q_scratch_2, %o_acc_2) {
      %59 = arith.constant 0 : index
      %60 = arith.constant 8 : index
      %61 = arith.constant 1 : index
      scf.for %r_2 = %59 to %60 step %61 {
        %62 = arith.constant 0.000000e+00 : f32
        %63 = arith.constant 0 : index
        %64 = arith.constant 16 : index
        %65 = arith.constant 1 : index
        %66 = scf.for %dim_1 = %63 to %64 step %65 iter_args(%67 = %62) -> (f32) {
          %68 = arith.constant 16 : index
          %69 = arith.muli %lane_2, %68 : index
          %70 = arith.addi %69, %dim_1 : index
          %71 = memref.load %q_scratch_2[%70] : memref<1024xf32>
          %72 = arith.constant 64 : index
          %73 = arith.muli %r_2, %72 : index
          %74 = arith.constant 16 : index
          %75 = arith.muli %item_2, %74 : index
          %76 = arith.addi %75, %dim_1 : index
          %77 = arith.addi %73, %76 : index
          %78 = memref.load %w_uk[%77] : memref<512xf32>
          %79 = arith.mulf %71, %78 : f32
          %80 = arith.addf %67, %79 : f32
          scf.yield %80 : f32
        }
        %81 = arith.constant 8 : index
        %82 = arith.muli %lane_2, %81 : index
        %83 = arith.addi %82, %r_2 : index
        memref.store %66, %q_lat[%83] : memref<512xf32>
        %84 = arith.constant 0.000000e+00 : f32
        %85 = arith.constant 8 : index
        %86 = arith.muli %lane_2, %85 : index
        %87 = arith.addi %86, %r_2 : index
        memref.store %84, %o_lat[%87] : memref<512xf32>
      }
      vyre.yield
    }
    epilogue(%item_3, %lane_3, %o_acc_3) {
      %88 = arith.constant 0 : index
      %89 = arith.constant 16 : index
      %90 = arith.constant 1 : index
      scf.for %d = %88 to %89 step %90 {
        %91 = arith.constant 0.000000e+00 : f32
        %92 = arith.constant 0 : index
        %93 = arith.constant 8 : index
        %94 = arith.constant 1 : index
        %95 = scf.for %r_3 = %92 to %93 step %94 iter_args(%96 = %91) -> (f32) {
          %97 = arith.constant 64 : index
          %98 = arith.muli %r_3, %97 : index
          %99 = arith.constant 16 : index
          %100 = arith.muli %item_3, %99 : index
          %101 = arith.addi %100, %d : index
          %102 = arith.addi %98, %101 : index
          %103 = memref.load %w_uv[%102] : memref<512xf32>
          %104 = arith.constant 8 : index
          %105 = arith.muli %lane_3, %104 : index
          %106 = arith.addi %105, %r_3 : index
          %107 = memref.load %o_lat[%106] : memref<512xf32>
          %108 = arith.mulf %103, %107 : f32
          %109 = arith.addf %96, %108 : f32
          scf.yield %109 : f32
        }
        %110 = arith.constant 16 : index
        %111 = arith.muli %lane_3, %110 : index
        %112 = arith.addi %111, %d : index
        memref.store %95, %o_acc_3[%112] : memref<1024xf32>
      }
      vyre.yield
    }
  }
}

