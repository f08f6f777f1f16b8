// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 stage=true prefetch=true keys=64 registers=true}' | filecheck %s
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200},vyre-to-gpu{optimize=exact}' | filecheck %s --check-prefix=LOWERED
// RUN: vyre-opt %s -p 'vyre-to-gpu{device=h200}' | filecheck %s --check-prefix=PLANNED

// FlashAttention-2 in bf16 (vx.flash_attention_2(seq_len=64, head_dim=16,
// tile_size=16, dtype="bf16")) on bf16 matrices, which the H200 has; the
// default plan takes them there (vyre_xdsl.tuning.tensor_core_tiling).
builtin.module {
  vyre.kernel @flash_attention_2 items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 16] : memref<1024xbf16>
    %k = vyre.buffer "k" binding 1 read [64, 16] : memref<1024xbf16>
    %v = vyre.buffer "v" binding 2 read [64, 16] : memref<1024xbf16>
    %out = vyre.buffer "out" binding 3 write [64, 16] : memref<1024xbf16>
    %q_scratch = vyre.scratch "q_scratch" : memref<1024xf32>
    %score_tile = vyre.scratch "score_tile" : memref<1024xf32>
    %o_acc = vyre.scratch "o_acc" : memref<1024xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 64 seq_len 64 head_dim 16 tile_size 16 tile_count 4
        : (memref<1024xbf16>, memref<1024xbf16>, memref<1024xf32>, memref<1024xf32>, memref<1024xf32>)
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
          %15 = memref.load %k[%14] : memref<1024xbf16>
          %16 = arith.extf %15 : bf16 to f32
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
          %36 = memref.load %v[%35] : memref<1024xbf16>
          %37 = arith.extf %36 : bf16 to f32
          %38 = arith.mulf %weight, %37 : f32
          %39 = arith.addf %32, %38 : f32
          scf.yield %39 : f32
        }
        %40 = arith.constant 16 : index
        %41 = arith.muli %lane_1, %40 : index
        %42 = arith.addi %41, %d_1 : index
        %43 = memref.load %o_acc_1[%42] : memref<1024xf32>
        %44 = arith.mulf %rescale, %43 : f32
        %45 = arith.addf %44, %31 : f32
        memref.store %45, %o_acc_1[%42] : memref<1024xf32>
      }
      vyre.yield
    }
  }
}

// CHECK:      vyre.kernel @flash_attention_2 items 128 workgroup_size 128
// CHECK:      %tc_key_tile = vyre.scratch "tc_key_tile" : memref<3072xbf16>
// CHECK:      %tc_value_tile = vyre.scratch "tc_value_tile" : memref<3072xbf16>
// CHECK:      gpu.subgroup_mma_load_matrix %q[%{{.*}}] {leadDimension = 16 : index} : memref<1024xbf16> -> !gpu.mma_matrix<16x16xbf16, "AOp">
// CHECK:      scf.for %tile_idx
// CHECK:        gpu.subgroup_mma_load_matrix %tc_key_tile[%{{.*}}] {leadDimension = 24 : index, transpose} : memref<3072xbf16> -> !gpu.mma_matrix<16x16xbf16, "BOp">
// CHECK:        gpu.subgroup_mma_compute %{{.*}}, %{{.*}}, %{{.*}} : !gpu.mma_matrix<16x16xbf16, "AOp">, !gpu.mma_matrix<16x16xbf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
// The weights, at least exp(-80) and so above bf16's smallest normal (not
// raised to it), cut to bf16 (an f32's top 16 bits), in P V's A operand;
// the row's denominator sums the cut weight.
// CHECK:        %rescale_1 = math.exp
// CHECK:        %[[SUM:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:        vyre.bounded_exp_arg
// CHECK-NEXT:   %[[W:.*]] = math.exp
// CHECK-NOT:    arith.constant 1.17549435e-38 : f32
// CHECK-NEXT:   %[[BITS:.*]] = arith.bitcast %[[W]] : f32 to i32
// CHECK-NEXT:   %[[MASK:.*]] = arith.constant -65536 : i32
// CHECK-NEXT:   %[[KEPT:.*]] = arith.andi %[[BITS]], %[[MASK]] : i32
// CHECK-NEXT:   %[[CUT:.*]] = arith.bitcast %[[KEPT]] : i32 to f32
// CHECK-NEXT:   arith.truncf %[[CUT]] : f32 to bf16
// CHECK-NEXT:   arith.addf %[[SUM]], %[[CUT]] : f32
// CHECK:        gpu.subgroup_mma_insert_thread_local %{{.*}} : bf16, !gpu.mma_matrix<16x16xbf16, "AOp">
// CHECK:      gpu.subgroup_mma_store_matrix %{{.*}}, %out[%{{.*}}] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xbf16, "COp">, memref<1024xbf16>

// LOWERED:      "gpu.func"() <{function_type = (memref<1024xbf16>, memref<1024xbf16>, memref<1024xbf16>, memref<1024xbf16>) -> ()
// LOWERED:        gpu.subgroup_mma_compute {{.*}} : !gpu.mma_matrix<16x16xbf16, "AOp">, !gpu.mma_matrix<16x16xbf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
// LOWERED-NOT:    vyre.tiled_online_softmax

// PLANNED:      "gpu.func"() <{function_type = (memref<1024xbf16>
// PLANNED:        gpu.subgroup_mma_compute {{.*}} : !gpu.mma_matrix<16x16xbf16, "AOp">, !gpu.mma_matrix<16x16xbf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
// PLANNED-NOT:    vyre.tiled_online_softmax
