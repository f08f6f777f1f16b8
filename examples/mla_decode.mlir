// The mla_decode decoder as vyre IR (written by vx.mla_decode, printed by vyre-opt).
// Lower it:  vyre-opt examples/mla_decode.mlir -p vyre-to-gpu
// To SPIR-V: vyre-opt examples/mla_decode.mlir -p vyre-to-gpu -t spirv -o mla_decode.spv
builtin.module {
  vyre.kernel @mla_decode items 4 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 100, num_heads = 4, head_dim = 16, kv_lora_rank = 8, qk_rope_head_dim = 4>} {
    %q = vyre.buffer "q" binding 0 read [4, 16] : memref<64xf32>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [100, 8] : memref<800xf32>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [100, 4] : memref<400xf32>
    %w_uk = vyre.buffer "w_uk" binding 3 read [8, 64] : memref<512xf32>
    %w_uv = vyre.buffer "w_uv" binding 4 read [8, 64] : memref<512xf32>
    %out = vyre.buffer "out" binding 5 write [4, 16] : memref<64xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<1024xf32>
    %score_tile = vyre.scratch "score_tile" : memref<2048xf32>
    %o_acc = vyre.scratch "o_acc" : memref<1024xf32>
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
        %4 = arith.constant 16 : index
        %5 = arith.constant 1 : index
        %6 = scf.for %dim = %3 to %4 step %5 iter_args(%7 = %2) -> (f32) {
          %8 = arith.constant 16 : index
          %9 = arith.muli %item, %8 : index
          %10 = arith.addi %9, %dim : index
          %11 = arith.constant 0.000000e+00 : f32
          %12 = arith.constant 0 : index
          %13 = arith.constant 8 : index
          %14 = arith.constant 1 : index
          %15 = scf.for %r = %12 to %13 step %14 iter_args(%16 = %11) -> (f32) {
            %17 = arith.constant 64 : index
            %18 = arith.muli %r, %17 : index
            %19 = arith.addi %18, %10 : index
            %20 = memref.load %w_uk[%19] : memref<512xf32>
            %21 = arith.constant 8 : index
            %22 = arith.muli %t, %21 : index
            %23 = arith.addi %22, %r : index
            %24 = memref.load %kv_cache[%23] : memref<800xf32>
            %25 = arith.mulf %20, %24 : f32
            %26 = arith.addf %16, %25 : f32
            scf.yield %26 : f32
          }
          %27 = arith.constant 4 : index
          %28 = arith.cmpi ult, %dim, %27 : index
          %29 = scf.if %28 -> (f32) {
            %30 = arith.constant 4 : index
            %31 = arith.muli %t, %30 : index
            %32 = arith.addi %31, %dim : index
            %33 = memref.load %kr_cache[%32] : memref<400xf32>
            %34 = arith.addf %15, %33 : f32
            scf.yield %34 : f32
          } else {
            scf.yield %15 : f32
          }
          %35 = arith.constant 16 : index
          %36 = arith.muli %lane, %35 : index
          %37 = arith.addi %36, %dim : index
          %38 = memref.load %q_scratch_1[%37] : memref<1024xf32>
          %39 = arith.mulf %38, %29 : f32
          %40 = arith.addf %7, %39 : f32
          scf.yield %40 : f32
        }
        %41 = arith.constant 2.500000e-01 : f32
        %42 = arith.mulf %6, %41 : f32
        %43 = vyre.bounded_score %42 : f32
        %44 = arith.constant 32 : index
        %45 = arith.muli %lane, %44 : index
        %46 = arith.addi %45, %j : index
        memref.store %43, %score_tile_1[%46] : memref<2048xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %47 = arith.constant 0 : index
      %48 = arith.constant 16 : index
      %49 = arith.constant 1 : index
      scf.for %d = %47 to %48 step %49 {
        %50 = arith.constant 16 : index
        %51 = arith.muli %lane_1, %50 : index
        %52 = arith.addi %51, %d : index
        %53 = memref.load %o_acc_1[%52] : memref<1024xf32>
        %54 = arith.mulf %53, %rescale : f32
        memref.store %54, %o_acc_1[%52] : memref<1024xf32>
      }
      %55 = arith.constant 0 : index
      %56 = arith.constant 1 : index
      scf.for %j_1 = %55 to %tile_len_1 step %56 {
        %weight = vyre.tile_weight %j_1 : f32
        %t_1 = arith.addi %tile_start_1, %j_1 : index
        %57 = arith.constant 0 : index
        %58 = arith.constant 16 : index
        %59 = arith.constant 1 : index
        scf.for %dim_1 = %57 to %58 step %59 {
          %60 = arith.constant 16 : index
          %61 = arith.muli %item_1, %60 : index
          %62 = arith.addi %61, %dim_1 : index
          %63 = arith.constant 0.000000e+00 : f32
          %64 = arith.constant 0 : index
          %65 = arith.constant 8 : index
          %66 = arith.constant 1 : index
          %67 = scf.for %r_1 = %64 to %65 step %66 iter_args(%68 = %63) -> (f32) {
            %69 = arith.constant 64 : index
            %70 = arith.muli %r_1, %69 : index
            %71 = arith.addi %70, %62 : index
            %72 = memref.load %w_uv[%71] : memref<512xf32>
            %73 = arith.constant 8 : index
            %74 = arith.muli %t_1, %73 : index
            %75 = arith.addi %74, %r_1 : index
            %76 = memref.load %kv_cache[%75] : memref<800xf32>
            %77 = arith.mulf %72, %76 : f32
            %78 = arith.addf %68, %77 : f32
            scf.yield %78 : f32
          }
          %79 = arith.constant 16 : index
          %80 = arith.muli %lane_1, %79 : index
          %81 = arith.addi %80, %dim_1 : index
          %82 = memref.load %o_acc_1[%81] : memref<1024xf32>
          %83 = arith.mulf %weight, %67 : f32
          %84 = arith.addf %82, %83 : f32
          memref.store %84, %o_acc_1[%81] : memref<1024xf32>
        }
      }
      vyre.yield
    }
  }
}
