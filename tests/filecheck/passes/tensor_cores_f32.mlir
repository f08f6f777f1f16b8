// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 stage=true registers=true pieces=3}' | filecheck %s
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 stage=true registers=true pieces=2}' | filecheck %s --check-prefix=TWO
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 stage=true registers=true pieces=3},vyre-to-gpu{optimize=exact}' | filecheck %s --check-prefix=LOWERED
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200}' | filecheck %s --check-prefix=LEFT
// RUN: vyre-opt %s -p 'vyre-plan{device=h200 f32_parts=3}' | filecheck %s --check-prefix=SMALL
// RUN: not vyre-opt %s -p 'vyre-to-gpu{device=h200 f32_parts=1}' 2>&1 | filecheck %s --check-prefix=PARTS
// RUN: not vyre-opt %s -p 'vyre-plan{device=h200 f32_parts=4}' 2>&1 | filecheck %s --check-prefix=PLAN-PARTS

// FlashAttention-2 in f32 (vx.flash_attention_2(seq_len=64, head_dim=16,
// tile_size=16)) on bf16 matrices: each operand split into `pieces` bf16
// parts, each but the last cut toward zero, a later part that is 0 raised to
// the smallest normal with the value's sign; the products of parts i and j
// with i + j < pieces, the smallest first; each tile's P V summed from 0 and
// added to the rescaled O on the lanes.  Without pieces it stays as it is.
// The default plan splits f32 only with f32_parts (2 or 3) and on grids that
// fill the device's SMs: these 64 rows stay on the lanes.
builtin.module {
  vyre.kernel @flash_attention_2 items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 16] : memref<1024xf32>
    %k = vyre.buffer "k" binding 1 read [64, 16] : memref<1024xf32>
    %v = vyre.buffer "v" binding 2 read [64, 16] : memref<1024xf32>
    %out = vyre.buffer "out" binding 3 write [64, 16] : memref<1024xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<1024xf32>
    %score_tile = vyre.scratch "score_tile" : memref<1024xf32>
    %o_acc = vyre.scratch "o_acc" : memref<1024xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 64 seq_len 64 head_dim 16 tile_size 16 tile_count 4
        : (memref<1024xf32>, memref<1024xf32>, memref<1024xf32>, memref<1024xf32>, memref<1024xf32>)
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
          %15 = memref.load %k[%14] : memref<1024xf32>
          %16 = arith.mulf %11, %15 : f32
          %17 = arith.addf %7, %16 : f32
          scf.yield %17 : f32
        }
        %18 = arith.constant 2.500000e-01 : f32
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
      %25 = arith.constant 16 : index
      %26 = arith.constant 1 : index
      scf.for %d_1 = %24 to %25 step %26 {
        %27 = arith.constant 0.000000e+00 : f32
        %28 = arith.constant 0 : index
        %29 = arith.constant 1 : index
        %30 = scf.for %j_1 = %28 to %tile_len_1 step %29 iter_args(%31 = %27) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %32 = arith.constant 16 : index
          %33 = arith.muli %t_1, %32 : index
          %34 = arith.addi %33, %d_1 : index
          %35 = memref.load %v[%34] : memref<1024xf32>
          %36 = arith.mulf %weight, %35 : f32
          %37 = arith.addf %31, %36 : f32
          scf.yield %37 : f32
        }
        %38 = arith.constant 16 : index
        %39 = arith.muli %lane_1, %38 : index
        %40 = arith.addi %39, %d_1 : index
        %41 = memref.load %o_acc_1[%40] : memref<1024xf32>
        %42 = arith.mulf %rescale, %41 : f32
        %43 = arith.addf %42, %30 : f32
        memref.store %43, %o_acc_1[%40] : memref<1024xf32>
      }
      vyre.yield
    }
  }
}

// CHECK:      %tc_key_tile = vyre.scratch "tc_key_tile" : memref<1152xbf16>
// CHECK:      %[[Q:.*]] = gpu.subgroup_mma_load_matrix %q[%{{.*}}] {leadDimension = 16 : index} : memref<1024xf32> -> !gpu.mma_matrix<16x16xf32, "COp">
// CHECK:      %[[X:.*]] = gpu.subgroup_mma_extract_thread_local %[[Q]]
// CHECK:      %[[NEGATIVE:.*]] = arith.cmpf olt, %[[X]], %{{.*}} : f32
// CHECK:      %[[SIGN:.*]] = arith.select %[[NEGATIVE]], %{{.*}}, %{{.*}} : f32
// CHECK-NEXT: %[[BITS:.*]] = arith.bitcast %[[X]] : f32 to i32
// CHECK-NEXT: %[[KEEP:.*]] = arith.constant -65536 : i32
// CHECK-NEXT: %[[CUT:.*]] = arith.andi %[[BITS]], %[[KEEP]] : i32
// CHECK-NEXT: %[[CUTF:.*]] = arith.bitcast %[[CUT]] : i32 to f32
// CHECK-NEXT: %[[NAN:.*]] = arith.cmpf uno, %[[X]], %[[X]] : f32
// CHECK-NEXT: %[[HEAD:.*]] = arith.select %[[NAN]], %[[X]], %[[CUTF]] : f32
// CHECK-NEXT: arith.truncf %[[HEAD]] : f32 to bf16
// CHECK-NEXT: %[[REST:.*]] = arith.subf %[[X]], %[[HEAD]] : f32
// CHECK-NEXT: %[[ABS:.*]] = math.absf %[[REST]] : f32
// CHECK-NEXT: %[[INF:.*]] = arith.constant 0x7f800000 : f32
// CHECK-NEXT: %[[FINITE:.*]] = arith.cmpf olt, %[[ABS]], %[[INF]] : f32
// CHECK-NEXT: %[[KEPT:.*]] = arith.select %[[FINITE]], %[[REST]], %{{.*}} : f32
// CHECK-NEXT: %[[ZERO:.*]] = arith.cmpf oeq, %[[KEPT]], %{{.*}} : f32
// CHECK-NEXT: arith.select %[[ZERO]], %[[SIGN]], %[[KEPT]] : f32
// CHECK:      gpu.subgroup_mma_insert_thread_local %{{.*}} : bf16, !gpu.mma_matrix<16x16xbf16, "AOp">
// CHECK:      scf.for %tile_idx
// The staged tiles: three bf16 copies of each f32 block, 384 elements apart.
// CHECK:        gpu.subgroup_mma_load_matrix %k[%{{.*}}] {leadDimension = 16 : index} : memref<1024xf32> -> !gpu.mma_matrix<16x16xf32, "COp">
// CHECK-COUNT-3: gpu.subgroup_mma_store_matrix %{{.*}}, %tc_key_tile[%{{.*}}] {leadDimension = 24 : index} : !gpu.mma_matrix<16x16xbf16, "COp">, memref<1152xbf16>
// CHECK:        gpu.barrier
// CHECK-COUNT-6: gpu.subgroup_mma_compute
// CHECK-NOT:    gpu.subgroup_mma_compute
// CHECK:        math.exp
// P V from 0, six products, then O rescaled plus the sum on the lanes.
// CHECK:        %[[SUM:.*]] = gpu.subgroup_mma_constant_matrix %{{.*}} : !gpu.mma_matrix<16x16xf32, "COp">
// CHECK-COUNT-6: gpu.subgroup_mma_compute
// CHECK:        arith.mulf %rescale
// CHECK-NEXT:   arith.addf
// CHECK:      gpu.subgroup_mma_store_matrix %{{.*}}, %out[%{{.*}}] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf32, "COp">, memref<1024xf32>

// TWO:        %tc_key_tile = vyre.scratch "tc_key_tile" : memref<768xbf16>
// TWO:        scf.for %tile_idx
// TWO-COUNT-3:  gpu.subgroup_mma_compute
// TWO-NOT:      gpu.subgroup_mma_compute
// TWO:          math.exp

// LOWERED:      "gpu.func"() <{function_type = (memref<1024xf32>, memref<1024xf32>, memref<1024xf32>, memref<1024xf32>) -> ()
// LOWERED:        gpu.subgroup_mma_compute {{.*}} : !gpu.mma_matrix<16x16xbf16, "AOp">, !gpu.mma_matrix<16x16xbf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
// LOWERED-NOT:    vyre.tiled_online_softmax

// LEFT:     vyre.tiled_online_softmax
// LEFT-NOT: gpu.subgroup_mma_compute

// SMALL:     vyre.plan = #vyre.plan
// SMALL-NOT: vyre.tensor_cores

// PARTS: tensor_cores_f32.mlir:{{[0-9]+}}:1: error: vyre-to-gpu: f32_parts must be 0 (f32 on the lanes), 2 or 3 (bf16 parts of an f32 on the matrix units), got 1
// PLAN-PARTS: error: vyre-plan: f32_parts must be 0 (f32 on the lanes), 2 or 3 (bf16 parts of an f32 on the matrix units), got 4
