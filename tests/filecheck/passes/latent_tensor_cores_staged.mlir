// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 stage=true}' | filecheck %s
// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 stage=true splits=2},vyre-to-gpu{optimize=exact}' | filecheck %s --check-prefix=LOWERED
// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 stage=true skip_rescale=true}' | filecheck %s --check-prefix=SKIP

// MLA decode's latent attention in f16 with 64 latent and 64 rope dims
// (vx.mla_decode(seq_len=128, num_heads=16, head_dim=64, kv_lora_rank=64,
// qk_rope_head_dim=64, dtype="f16") after vyre-absorb-mla{kernels=3}),
// its key rows staged by the workgroup (`stage=true`): eight blocks of 16
// query dims, two a subgroup.
builtin.module {
  vyre.kernel @mla_decode items 16 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [16, 64] : memref<1024xf16>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [128, 64] : memref<8192xf16>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [128, 64] : memref<8192xf16>
    %q_lat = vyre.buffer "q_lat" binding 6 temp [16, 64] : memref<1024xf32>
    %o_lat = vyre.buffer "o_lat" binding 7 temp [16, 64] : memref<1024xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<4096xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<4096xf32>
    vyre.tiled_online_softmax q(%q_lat) out(%o_lat) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 16 seq_len 128 head_dim 64 tile_size 64 tile_count 2
        : (memref<1024xf32>, memref<1024xf32>, memref<4096xf32>, memref<4096xf32>, memref<4096xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 0 : index
      %1 = arith.constant 1 : index
      scf.for %j = %0 to %tile_len step %1 {
        %t = arith.addi %tile_start, %j : index
        %2 = arith.constant 0.000000e+00 : f32
        %3 = arith.constant 0 : index
        %4 = arith.constant 64 : index
        %5 = arith.constant 1 : index
        %6 = scf.for %r = %3 to %4 step %5 iter_args(%7 = %2) -> (f32) {
          %8 = arith.constant 64 : index
          %9 = arith.muli %item, %8 : index
          %10 = arith.addi %9, %r : index
          %11 = memref.load %q_lat[%10] : memref<1024xf32>
          %12 = arith.constant 64 : index
          %13 = arith.muli %t, %12 : index
          %14 = arith.addi %13, %r : index
          %15 = memref.load %kv_cache[%14] : memref<8192xf16>
          %16 = arith.extf %15 : f16 to f32
          %17 = arith.mulf %11, %16 : f32
          %18 = arith.addf %7, %17 : f32
          scf.yield %18 : f32
        }
        %19 = arith.constant 0 : index
        %20 = arith.constant 64 : index
        %21 = arith.constant 1 : index
        %22 = scf.for %dim = %19 to %20 step %21 iter_args(%23 = %6) -> (f32) {
          %24 = arith.constant 64 : index
          %25 = arith.muli %item, %24 : index
          %26 = arith.addi %25, %dim : index
          %27 = memref.load %q[%26] : memref<1024xf16>
          %28 = arith.extf %27 : f16 to f32
          %29 = arith.constant 64 : index
          %30 = arith.muli %t, %29 : index
          %31 = arith.addi %30, %dim : index
          %32 = memref.load %kr_cache[%31] : memref<8192xf16>
          %33 = arith.extf %32 : f16 to f32
          %34 = arith.mulf %28, %33 : f32
          %35 = arith.addf %23, %34 : f32
          scf.yield %35 : f32
        }
        %36 = arith.constant 1.250000e-01 : f32
        %37 = arith.mulf %22, %36 : f32
        %38 = vyre.bounded_score %37 : f32
        %39 = arith.constant 64 : index
        %40 = arith.muli %lane, %39 : index
        %41 = arith.addi %40, %j : index
        memref.store %38, %score_tile_1[%41] : memref<4096xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %42 = arith.constant 0 : index
      %43 = arith.constant 64 : index
      %44 = arith.constant 1 : index
      scf.for %r_1 = %42 to %43 step %44 {
        %45 = arith.constant 0.000000e+00 : f32
        %46 = arith.constant 0 : index
        %47 = arith.constant 1 : index
        %48 = scf.for %j_1 = %46 to %tile_len_1 step %47 iter_args(%49 = %45) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %50 = arith.constant 64 : index
          %51 = arith.muli %t_1, %50 : index
          %52 = arith.addi %51, %r_1 : index
          %53 = memref.load %kv_cache[%52] : memref<8192xf16>
          %54 = arith.extf %53 : f16 to f32
          %55 = arith.mulf %weight, %54 : f32
          %56 = arith.addf %49, %55 : f32
          scf.yield %56 : f32
        }
        %57 = arith.constant 64 : index
        %58 = arith.muli %lane_1, %57 : index
        %59 = arith.addi %58, %r_1 : index
        %60 = memref.load %o_acc_1[%59] : memref<4096xf32>
        %61 = arith.mulf %rescale, %60 : f32
        %62 = arith.addf %61, %48 : f32
        memref.store %62, %o_acc_1[%59] : memref<4096xf32>
      }
      vyre.yield
    }
  }
}

// The query rows share tc_stage with the two staged tiles of 16 keys x 136
// (128 dims padded against bank conflicts); each subgroup's part of S goes
// to tc_scores; no tile weights, no maxima or sums over the subgroups.
// CHECK:      vyre.kernel @mla_decode items 128 workgroup_size 128
// CHECK-SAME:   vyre.accumulator = #vyre.accumulator<lanes = 32
// CHECK-SAME:   operand_a
// CHECK:        %tc_stage = vyre.scratch "tc_stage" : memref<4352xf16>
// CHECK-NEXT:   %tc_scores = vyre.scratch "tc_scores" : memref<1024xf32>
// CHECK-NEXT:   %tc_query_scale = vyre.scratch "tc_query_scale" : memref<256xf32>
// CHECK-NOT:    tc_weights
// CHECK-NOT:    tc_row_max
// The query rows copied in eight dims a lane (16 bytes, rounded to f16
// after their scale), the subgroup's two query blocks into registers, then
// the first tile staged, each lane 16 bytes of a block of its subgroup's:
// every write of tc_stage a whole 16 bytes, so that the SPIR-V declares it
// an array of uvec4s.
// CHECK:        scf.for %query_chunk
// CHECK:          %[[ROW:.*]] = vector.from_elements {{.*}} : vector<8xf16>
// CHECK-NEXT:     vector.store %[[ROW]], %tc_stage[%{{.*}}] : memref<4352xf16>, vector<8xf16>
// CHECK:        "gpu.barrier"
// CHECK-COUNT-2: gpu.subgroup_mma_load_matrix %tc_stage{{.*}} {leadDimension = 128 : index} {{.*}} "AOp">
// CHECK-NEXT:   "gpu.barrier"
// CHECK:        %[[K:.*]] = vector.load %kv_cache[%{{.*}}] : memref<8192xf16>, vector<8xf16>
// CHECK:        %[[R:.*]] = vector.load %kr_cache[%{{.*}}] : memref<8192xf16>, vector<8xf16>
// CHECK:        vector.store %[[K]], %tc_stage
// CHECK:        vector.store %[[R]], %tc_stage
// CHECK-NEXT:   "gpu.barrier"
// Each tile: the next tile's rows loaded first, S's part from the staged
// keys, S summed over the four subgroups' parts, P V from the staged rows,
// the next tile stored into the other buffer.
// CHECK:        scf.for %split_tile
// CHECK:          vector.load %kv_cache
// CHECK:          vector.load %kr_cache
// CHECK-COUNT-2:  gpu.subgroup_mma_load_matrix %tc_stage{{.*}}transpose
// CHECK:          gpu.subgroup_mma_store_matrix {{.*}} %tc_scores
// CHECK-NEXT:     "gpu.barrier"
// CHECK-COUNT-4:  gpu.subgroup_mma_load_matrix %tc_scores
// CHECK:          gpu.subgroup_mma_load_matrix %tc_stage{{.*}} {leadDimension = 136 : index} {{.*}} "BOp">
// CHECK-NEXT:     gpu.subgroup_mma_compute
// CHECK:          vector.store {{.*}} %tc_stage
// CHECK:          vector.store {{.*}} %tc_stage
// CHECK-NEXT:     "gpu.barrier"
// CHECK-NOT:    tc_row_sum
// CHECK:        gpu.subgroup_mma_store_matrix {{.*}} %o_lat

// LOWERED:    "gpu.module"() <{sym_name = "mla_decode"}>
// LOWERED:      gpu.subgroup_mma_compute
// LOWERED:    "gpu.module"() <{sym_name = "mla_decode_merge"}>

// skip_rescale: O rescaled only where a row of the subgroup's moved its max
// (a rescale une 1, or-ed over the lanes that hold other rows), else kept
// as it is (x * 1 is x).
// SKIP:        scf.for %split_tile
// SKIP:          %[[A:.*]] = arith.cmpf une, %rescale,
// SKIP-NEXT:     %[[B:.*]] = arith.cmpf une, %rescale_1,
// SKIP-NEXT:     arith.ori %[[A]], %[[B]] : i1
// SKIP-COUNT-3:  gpu.shuffle xor %{{.*}} : i32
// SKIP:          %[[MOVED:.*]] = arith.cmpi ne
// SKIP-NEXT:     scf.if %[[MOVED]] -> (!gpu.mma_matrix<16x16xf32, "COp">) {
// SKIP-COUNT-8:    arith.mulf %rescale
// SKIP:          } else {
// SKIP-NEXT:       scf.yield %{{.*}} : !gpu.mma_matrix<16x16xf32, "COp">
// SKIP:          gpu.subgroup_mma_compute
