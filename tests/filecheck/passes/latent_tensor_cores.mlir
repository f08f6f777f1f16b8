// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200}' | filecheck %s
// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 splits=2}' | filecheck %s --check-prefix=SPLIT
// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 splits=2},vyre-to-gpu{optimize=exact}' | filecheck %s --check-prefix=LOWERED
// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=generic}' | filecheck %s --check-prefix=LEFT
// RUN: vyre-opt %s -p 'vyre-plan{device=h200}' | filecheck %s --check-prefix=PLAN
// RUN: vyre-opt %s -p 'vyre-to-gpu{device=h200}' | filecheck %s --check-prefix=DEFAULT
// RUN: vyre-opt %s -p 'vyre-to-gpu{device=h200 matrix_units=false}' | filecheck %s --check-prefix=LANES

// MLA decode's latent attention in f16 (vx.mla_decode(seq_len=128,
// num_heads=16, head_dim=16, kv_lora_rank=64, qk_rope_head_dim=16,
// dtype="f16") after vyre-absorb-mla{kernels=3}): a score is two chained
// dot products (q_lat with the latent row, q with the rope row); the 16
// heads are the rows of one matrix product.
builtin.module {
  vyre.kernel @mla_decode items 16 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [16, 16] : memref<256xf16>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [128, 64] : memref<8192xf16>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [128, 16] : memref<2048xf16>
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
        %20 = arith.constant 16 : index
        %21 = arith.constant 1 : index
        %22 = scf.for %dim = %19 to %20 step %21 iter_args(%23 = %6) -> (f32) {
          %24 = arith.constant 16 : index
          %25 = arith.muli %item, %24 : index
          %26 = arith.addi %25, %dim : index
          %27 = memref.load %q[%26] : memref<256xf16>
          %28 = arith.extf %27 : f16 to f32
          %29 = arith.constant 16 : index
          %30 = arith.muli %t, %29 : index
          %31 = arith.addi %30, %dim : index
          %32 = memref.load %kr_cache[%31] : memref<2048xf16>
          %33 = arith.extf %32 : f16 to f32
          %34 = arith.mulf %28, %33 : f32
          %35 = arith.addf %23, %34 : f32
          scf.yield %35 : f32
        }
        %36 = arith.constant 2.500000e-01 : f32
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

// The workgroup's query rows in f16 with their scales, the tile's weights,
// the rows' maxima and sums over the four subgroups; no split, no m and l
// to export.
// CHECK:      vyre.kernel @mla_decode items 128 workgroup_size 128
// CHECK-SAME:   vyre.skeleton = #vyre.skeleton<items = 16, seq_len = 128, head_dim = 64, v_head_dim = 64, tile_size = 64, kv_splits = 1
// CHECK-SAME:   vyre.accumulator = #vyre.accumulator<lanes = 32
// CHECK:        %tc_query = vyre.scratch "tc_query" : memref<1280xf16>
// CHECK-NEXT:   %tc_query_scale = vyre.scratch "tc_query_scale" : memref<256xf32>
// CHECK-NEXT:   %tc_weights = vyre.scratch "tc_weights" : memref<1024xf16>
// CHECK-NEXT:   %tc_row_max = vyre.scratch "tc_row_max" : memref<256xf32>
// CHECK-NEXT:   %tc_row_sum = vyre.scratch "tc_row_sum" : memref<256xf32>
// CHECK-NOT:    tc_rows
// Each row's power of two from its largest |element|'s exponent.
// CHECK:        arith.shrui
// CHECK:        arith.maxui
// CHECK:        arith.shli
// CHECK:        arith.bitcast
// The query rows are staged before any product.
// CHECK:        "gpu.barrier"
// S: 64 latent dims and 16 rope dims, each 16 a product of the subgroup's
// 16 keys (K read transposed from its buffer, Q from tc_query).
// CHECK:        scf.for %split_tile
// CHECK-COUNT-4: gpu.subgroup_mma_load_matrix %kv_cache{{.*}}transpose
// CHECK:        gpu.subgroup_mma_load_matrix %kr_cache{{.*}}transpose
// CHECK-NOT:    vyre.tiled_online_softmax
// A row's tile max over the four subgroups, then the weights, then P V.
// CHECK:        "gpu.barrier"
// CHECK:        gpu.subgroup_mma_store_matrix {{.*}} %tc_weights
// CHECK:        "gpu.barrier"
// CHECK-COUNT-4: gpu.subgroup_mma_load_matrix %tc_weights
// CHECK-COUNT-4: gpu.subgroup_mma_compute
// The rows' denominators over the subgroups, then O / l to o_lat in f32.
// CHECK:        "gpu.barrier"
// CHECK:        gpu.subgroup_mma_store_matrix {{.*}} %o_lat{{.*}} : !gpu.mma_matrix<16x16xf32, "COp">, memref<1024xf32>

// Split in two: each split's partial m, l and O for a merge kernel.
// SPLIT:      vyre.kernel @mla_decode items 256 workgroup_size 128
// SPLIT:        %mla_decode_split_o = vyre.buffer "mla_decode_split_o" binding 10 temp [16, 2, 64]
// SPLIT:        %tc_rows = vyre.scratch "tc_rows" : memref<512xf32>
// SPLIT:        gpu.subgroup_mma_store_matrix {{.*}} %mla_decode_split_o{{.*}} {leadDimension = 128 : index}
// SPLIT:        memref.store {{.*}} %mla_decode_split_m
// SPLIT:        memref.store {{.*}} %mla_decode_split_l
// SPLIT:      vyre.kernel @mla_decode_merge items 1024 workgroup_size 64
// SPLIT-NEXT:   vyre.buffer "mla_decode_split_m"
// SPLIT:        vyre.merge_splits {{.*}} item_count 16 splits 2 head_dim 64

// LOWERED:    "gpu.module"() <{sym_name = "mla_decode"}>
// LOWERED:      gpu.subgroup_mma_compute
// LOWERED:    "gpu.module"() <{sym_name = "mla_decode_merge"}>

// The generic profile has no matrix layout: the skeleton stays.
// LEFT:       vyre.tiled_online_softmax

// The H200's plan takes the expansion (vyre_xdsl.tuning.latent_tiling):
// one block of rows a workgroup, two tiles of keys too few to split.
// PLAN:      vyre.tiled_online_softmax
// PLAN:        item_count 16 seq_len 128 head_dim 64 tile_size 64 tile_count 2 attributes {vyre.latent_tensor_cores = #vyre.latent_tensor_cores<row_tiles = 1, splits = 1, row_groups = 1, stage = false, skip_rescale = false>}
// PLAN-NOT:  vyre.plan
// DEFAULT:      "gpu.func"()
// DEFAULT:        gpu.subgroup_mma_compute {{.*}} : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
// DEFAULT-NOT:    vyre.tiled_online_softmax
// matrix_units=false keeps the latent attention on the lanes.
// LANES:          "gpu.func"()
// LANES-NOT:      gpu.subgroup_mma
