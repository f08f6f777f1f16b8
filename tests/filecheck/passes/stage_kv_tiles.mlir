// RUN: vyre-opt %s -p vyre-stage-kv-tiles | filecheck %s
// RUN: vyre-opt %s -p 'vyre-stage-kv-tiles{shared_memory_bytes=128}' | filecheck %s --check-prefix=SMALL

// FlashAttention-2 with 2 query heads sharing 1 kv head, seq 64, head_dim 4,
// tile 16 (as vx.flash_attention_2(64, 4, 16, num_heads=2, num_kv_heads=1)
// builds it).  Each fragment starts with a barrier, the lanes' coalesced
// copy of the tile's rows (row base: the workgroup's kv head) and a second
// barrier; its loads of k (scores) and v (update) then read the copy at
// key * 4 + d.  Both fragments share one 16 x 4 workgroup array.
builtin.module {
  vyre.kernel @flash_attention_2 items 128 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 64, 4] : memref<512xf32>
    %k = vyre.buffer "k" binding 1 read [1, 64, 4] : memref<256xf32>
    %v = vyre.buffer "v" binding 2 read [1, 64, 4] : memref<256xf32>
    %out = vyre.buffer "out" binding 3 write [2, 64, 4] : memref<512xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<256xf32>
    %score_tile = vyre.scratch "score_tile" : memref<1024xf32>
    %o_acc = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 128 seq_len 64 head_dim 4 tile_size 16 tile_count 4
        : (memref<512xf32>, memref<512xf32>, memref<256xf32>, memref<1024xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 64 : index
      %1 = arith.divui %item, %0 : index
      %2 = arith.constant 2 : index
      %kv_head = arith.divui %1, %2 : index
      %3 = arith.constant 64 : index
      %kv_base = arith.muli %kv_head, %3 : index
      %4 = arith.constant 0 : index
      %5 = arith.constant 1 : index
      scf.for %j = %4 to %tile_len step %5 {
        %t = arith.addi %tile_start, %j : index
        %kv_row = arith.addi %kv_base, %t : index
        %6 = arith.constant 0.000000e+00 : f32
        %7 = arith.constant 0 : index
        %8 = arith.constant 4 : index
        %9 = arith.constant 1 : index
        %10 = scf.for %d = %7 to %8 step %9 iter_args(%11 = %6) -> (f32) {
          %12 = arith.constant 4 : index
          %13 = arith.muli %lane, %12 : index
          %14 = arith.addi %13, %d : index
          %15 = memref.load %q_scratch_1[%14] : memref<256xf32>
          %16 = arith.constant 4 : index
          %17 = arith.muli %kv_row, %16 : index
          %18 = arith.addi %17, %d : index
          %19 = memref.load %k[%18] : memref<256xf32>
          %20 = arith.mulf %15, %19 : f32
          %21 = arith.addf %11, %20 : f32
          scf.yield %21 : f32
        }
        %22 = arith.constant 5.000000e-01 : f32
        %23 = arith.mulf %10, %22 : f32
        %24 = vyre.bounded_score %23 : f32
        %25 = arith.constant 16 : index
        %26 = arith.muli %lane, %25 : index
        %27 = arith.addi %26, %j : index
        memref.store %24, %score_tile_1[%27] : memref<1024xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %28 = arith.constant 64 : index
      %29 = arith.divui %item_1, %28 : index
      %30 = arith.constant 2 : index
      %kv_head_1 = arith.divui %29, %30 : index
      %31 = arith.constant 64 : index
      %kv_base_1 = arith.muli %kv_head_1, %31 : index
      %32 = arith.constant 0 : index
      %33 = arith.constant 4 : index
      %34 = arith.constant 1 : index
      scf.for %d_1 = %32 to %33 step %34 {
        %35 = arith.constant 0.000000e+00 : f32
        %36 = arith.constant 0 : index
        %37 = arith.constant 1 : index
        %38 = scf.for %j_1 = %36 to %tile_len_1 step %37 iter_args(%39 = %35) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %kv_row_1 = arith.addi %kv_base_1, %t_1 : index
          %40 = arith.constant 4 : index
          %41 = arith.muli %kv_row_1, %40 : index
          %42 = arith.addi %41, %d_1 : index
          %43 = memref.load %v[%42] : memref<256xf32>
          %44 = arith.mulf %weight, %43 : f32
          %45 = arith.addf %39, %44 : f32
          scf.yield %45 : f32
        }
        %46 = arith.constant 4 : index
        %47 = arith.muli %lane_1, %46 : index
        %48 = arith.addi %47, %d_1 : index
        %49 = memref.load %o_acc_1[%48] : memref<256xf32>
        %50 = arith.mulf %rescale, %49 : f32
        %51 = arith.addf %50, %38 : f32
        memref.store %51, %o_acc_1[%48] : memref<256xf32>
      }
      vyre.yield
    }
  }
}

// CHECK:       %kv_tile = vyre.scratch "kv_tile" {vyre.role = #vyre<scratch_role kv_tile>} : memref<64xf32>
// CHECK:       scores(%item, %lane, %tile_start, %tile_len,
// CHECK-NEXT:    "gpu.barrier"() : () -> ()
// CHECK:         %[[SEQ:.*]] = arith.constant 64 : index
// CHECK-NEXT:    %[[HEAD:.*]] = arith.divui %item, %[[SEQ]] : index
// CHECK:         %kv_head = arith.divui %[[HEAD]],
// CHECK:         %[[ROW:.*]] = arith.addi %tile_start, %{{.*}} : index
// CHECK:         %tile_base = arith.muli %[[ROW]], %{{.*}} : index
// CHECK:         %tile_elements = arith.muli %tile_len, %{{.*}} : index
// CHECK:         scf.for %copy =
// CHECK:           %[[AT:.*]] = arith.addi %{{.*}}, %lane : index
// CHECK-NEXT:      %[[IN:.*]] = arith.cmpi ult, %[[AT]], %tile_elements : index
// CHECK-NEXT:      scf.if %[[IN]] {
// CHECK-NEXT:        %[[FROM:.*]] = arith.addi %tile_base, %[[AT]] : index
// CHECK-NEXT:        %[[X:.*]] = memref.load %k[%[[FROM]]] : memref<256xf32>
// CHECK:             memref.store %[[X]], %kv_tile[
// CHECK:         "gpu.barrier"() : () -> ()
// CHECK:         scf.for %j = %{{.*}} to %tile_len
// CHECK:           scf.for %d =
// CHECK:             %[[KEY:.*]] = arith.muli %j, %{{.*}} : index
// CHECK-NEXT:        %[[KEY_AT:.*]] = arith.addi %[[KEY]], %{{.*}} : index
// CHECK-NEXT:        %[[K_AT:.*]] = arith.addi %[[KEY_AT]], %d : index
// CHECK-NEXT:        memref.load %kv_tile[%[[K_AT]]] : memref<64xf32>
// CHECK:       update(
// CHECK-NEXT:    "gpu.barrier"() : () -> ()
// CHECK:         memref.load %v[
// CHECK:         memref.store {{.*}}, %kv_tile[
// CHECK:         "gpu.barrier"() : () -> ()
// CHECK-NOT:     memref.load %v[
// CHECK:         memref.load %kv_tile[
// CHECK-NOT:     memref.load %v[
// CHECK:         vyre.yield

// A tile of 16 rows of 4 floats (256 bytes) does not fit 128 bytes:
// SMALL-NOT:   gpu.barrier
// SMALL-NOT:   kv_tile
