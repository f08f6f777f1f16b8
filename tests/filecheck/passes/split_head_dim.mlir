// RUN: vyre-opt %s -p 'vyre-split-head-dim{parts=2}' | filecheck %s
// RUN: vyre-opt %s -p vyre-split-head-dim | filecheck %s --check-prefix=AUTO
// RUN: vyre-opt %s -p 'vyre-split-head-dim{parts=2},vyre-inline-fragments' | filecheck %s --check-prefix=INLINE
// RUN: vyre-opt %s -p 'vyre-split-head-dim{parts=4},vyre-to-gpu{optimize=exact}' | filecheck %s --check-prefix=LOWERED
// RUN: not vyre-opt %s -p 'vyre-split-head-dim{parts=3}' 2>&1 | filecheck %s --check-prefix=ODD
// RUN: not vyre-opt %s -p 'vyre-split-head-dim{parts=8}' 2>&1 | filecheck %s --check-prefix=TOO-MANY
// RUN: not vyre-opt %s -p 'vyre-split-kv{splits=2 merge=workgroup},vyre-split-head-dim{parts=2}' 2>&1 | filecheck %s --check-prefix=SPLIT-KV
// RUN: vyre-opt %s -p 'vyre-split-kv{splits=2 merge=kernel},vyre-split-head-dim{parts=2},vyre-inline-fragments' | filecheck %s --check-prefix=PARTIALS
// RUN: not vyre-opt %s -p 'vyre-split-head-dim{parts=2},vyre-split-kv{splits=2}' 2>&1 | filecheck %s --check-prefix=THEN-SPLIT-KV
// RUN: not vyre-opt %s -p 'vyre-split-head-dim{parts=2 max_parts=1}' 2>&1 | filecheck %s --check-prefix=NO-SHUFFLE
// RUN: vyre-opt %s -p 'vyre-split-head-dim{max_parts=1}' | filecheck %s --check-prefix=AUTO-NO-SHUFFLE
// RUN: vyre-opt %s -p 'vyre-split-head-dim{parts=2 chunk=8}' | filecheck %s --check-prefix=CHUNK8
// RUN: not vyre-opt %s -p 'vyre-split-head-dim{parts=2 chunk=16}' 2>&1 | filecheck %s --check-prefix=CHUNK-TOO-BIG
// RUN: not vyre-opt %s -p 'vyre-split-head-dim{parts=2 chunk=3}' 2>&1 | filecheck %s --check-prefix=CHUNK-ODD

// FlashAttention-2 with 64 rows of 16 dims in 4 tiles of 16 keys (as
// vx.flash_attention_2(64, 16, 16) builds it).
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

// Two lanes per row: twice the invocations, half a row of q and o_acc each.
// CHECK:      vyre.kernel @flash_attention_2 items 128 workgroup_size 64 {
// CHECK:        %q_scratch = vyre.scratch "q_scratch" : memref<512xf32>
// CHECK-NEXT:   %score_tile = vyre.scratch "score_tile" : memref<1024xf32>
// CHECK-NEXT:   %o_acc = vyre.scratch "o_acc" : memref<512xf32>
// CHECK:        item_count 64 seq_len 64 head_dim 16 tile_size 16 tile_count 4 dim_parts 2
// CHECK-NEXT:   : (memref<1024xf32>, memref<1024xf32>, memref<512xf32>, memref<1024xf32>, memref<512xf32>)

// The dot product runs over the lane's dims, chunk by chunk of 4 (part p
// owns dims 8c + 4p + e), its slice of q_scratch indexed by slot 4c + e;
// the two parts' sums are then added across lanes.
// CHECK-LABEL: scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
// CHECK-NEXT:    %[[TWO:.*]] = arith.constant 2 : index
// CHECK-NEXT:    %part = arith.remui %lane, %[[TWO]] : index
// CHECK:         %part_offset = arith.muli %part, %{{.*}} : index
// CHECK:         %[[DOT:.*]] = scf.for %chunk = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32) {
// CHECK:           %[[PARTIAL:.*]] = scf.for %e = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC_E:.*]] = %[[ACC]]) -> (f32) {
// CHECK-NEXT:        %[[FOUR:.*]] = arith.constant 4 : index
// CHECK-NEXT:        %[[C4:.*]] = arith.muli %chunk, %[[FOUR]] : index
// CHECK-NEXT:        %slot = arith.addi %[[C4]], %e : index
// CHECK-NEXT:        %[[EIGHT:.*]] = arith.constant 8 : index
// CHECK-NEXT:        %[[C8:.*]] = arith.muli %chunk, %[[EIGHT]] : index
// CHECK-NEXT:        %[[CHUNK_START:.*]] = arith.addi %[[C8]], %part_offset : index
// CHECK-NEXT:        %d = arith.addi %[[CHUNK_START]], %e : index
// CHECK-NEXT:        %[[STRIDE:.*]] = arith.constant 8 : index
// CHECK-NEXT:        %[[BASE:.*]] = arith.muli %lane, %[[STRIDE]] : index
// CHECK-NEXT:        %[[QI:.*]] = arith.addi %[[BASE]], %slot : index
// CHECK-NEXT:        %[[QD:.*]] = memref.load %q_scratch_1[%[[QI]]] : memref<512xf32>
// CHECK-NEXT:        %[[ROW_LEN:.*]] = arith.constant 16 : index
// CHECK-NEXT:        %[[ROW:.*]] = arith.muli %t, %[[ROW_LEN]] : index
// CHECK-NEXT:        %[[KI:.*]] = arith.addi %[[ROW]], %d : index
// CHECK-NEXT:        %[[KD:.*]] = memref.load %k[%[[KI]]] : memref<1024xf32>
// CHECK-NEXT:        %[[TERM:.*]] = arith.mulf %[[QD]], %[[KD]] : f32
// CHECK-NEXT:        %[[NEXT:.*]] = arith.addf %[[ACC_E]], %[[TERM]] : f32
// CHECK-NEXT:        scf.yield %[[NEXT]] : f32
// CHECK-NEXT:      } {vyre.dim_chunk}
// CHECK-NEXT:      scf.yield %[[PARTIAL]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[SIZE:.*]] = "gpu.subgroup_size"() : () -> index
// CHECK-NEXT:    %[[WIDTH:.*]] = arith.index_cast %[[SIZE]] : index to i32
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-NEXT:    %[[OTHER:.*]], %{{.*}} = gpu.shuffle xor %[[DOT]], %[[ONE]], %[[WIDTH]] : f32
// CHECK-NEXT:    %part_sum = arith.addf %[[DOT]], %[[OTHER]] : f32
// CHECK-NEXT:    %[[SCALE:.*]] = arith.constant 2.500000e-01 : f32
// CHECK-NEXT:    %{{.*}} = arith.mulf %part_sum, %[[SCALE]] : f32

// The update folds the tile into the lane's own dims only.
// CHECK-LABEL: update(
// CHECK-NEXT:    %[[TWO2:.*]] = arith.constant 2 : index
// CHECK-NEXT:    %part_1 = arith.remui %lane_1, %[[TWO2]] : index
// CHECK:         scf.for %chunk_1 = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           scf.for %e_1 = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:             %d_1 = arith.addi %{{.*}}, %e_1 : index
// CHECK:             memref.load %v[%{{.*}}] : memref<1024xf32>
// CHECK:             %[[OI:.*]] = arith.addi %{{.*}}, %slot_1 : index
// CHECK-NEXT:        %{{.*}} = memref.load %o_acc_1[%[[OI]]] : memref<512xf32>
// CHECK:             memref.store %{{.*}}, %o_acc_1[%{{.*}}] : memref<512xf32>
// CHECK-NEXT:      } {vyre.dim_chunk}

// 64 rows are a small grid: the automatic choice splits them too.
// AUTO:     vyre.kernel @flash_attention_2 items 128 workgroup_size 64 {
// AUTO:     dim_parts 2

// The skeleton loads and writes the lane's own dims.
// INLINE:      %item = vyre.item_index
// INLINE-NEXT: %lane = vyre.lane_index
// INLINE-NEXT: %[[TWO:.*]] = arith.constant 2 : index
// INLINE-NEXT: %item_1 = arith.divui %item, %[[TWO]] : index
// INLINE-NEXT: %[[TWO_B:.*]] = arith.constant 2 : index
// INLINE-NEXT: %part = arith.remui %item, %[[TWO_B]] : index
// INLINE:      %load_d = arith.addi %{{.*}}, %e : index
// INLINE:      %[[QV:.*]] = memref.load %q[%{{.*}}] : memref<1024xf32>
// INLINE:      memref.store %[[QV]], %q_scratch[%{{.*}}] : memref<512xf32>
// INLINE:      %final_d = arith.addi %{{.*}}, %{{.*}} : index
// INLINE:      memref.store %{{.*}}, %out[%{{.*}}] : memref<1024xf32>

// Four parts: two rounds of shuffles (lanes 1, then 2 apart), private
// slices of 4 floats.
// LOWERED:      %q_scratch = memref.alloca() : memref<4xf32>
// LOWERED:      %o_acc = memref.alloca() : memref<4xf32>
// LOWERED:      %[[C1:.*]] = arith.constant 1 : i32
// LOWERED-NEXT: %[[OTHER:.*]], %{{.*}} = gpu.shuffle xor %[[DOT:.*]], %[[C1]], %[[WIDTH:.*]] : f32
// LOWERED-NEXT: %part_sum = arith.addf %[[DOT]], %[[OTHER]] : f32
// LOWERED-NEXT: %[[C2:.*]] = arith.constant 2 : i32
// LOWERED-NEXT: %[[OTHER2:.*]], %{{.*}} = gpu.shuffle xor %part_sum, %[[C2]], %[[WIDTH]] : f32
// LOWERED-NEXT: %part_sum_1 = arith.addf %part_sum, %[[OTHER2]] : f32

// ODD:      error: vyre-split-head-dim: kernel @flash_attention_2 cannot split its head dims over 3 lanes: parts must be a power of two (the parts' sums are added pairwise), got 3
// TOO-MANY: error: vyre-split-head-dim: kernel @flash_attention_2 cannot split its head dims over 8 lanes: parts 8 must divide the workgroup size (64), and head_dim (16) must be a multiple of parts * chunk = 32 (the parts take turns over chunks of 4 dims)
// CHUNK-TOO-BIG: error: vyre-split-head-dim: kernel @flash_attention_2 cannot split its head dims over 2 lanes: parts 2 must divide the workgroup size (64), and head_dim (16) must be a multiple of parts * chunk = 32 (the parts take turns over chunks of 16 dims)
// CHUNK-ODD: error: vyre-split-head-dim: chunk must be 0 (choose) or a power of two, got 3

// chunk=8: each lane takes 8 neighbouring dims in turn (16 bytes of a bf16
// row), so part p owns dims 8p .. 8p+7 of each 16: one chunk each here.
// CHUNK8:      item_count 64 seq_len 64 head_dim 16 tile_size 16 tile_count 4 dim_parts 2 dim_chunk 8
// CHUNK8:      %[[EIGHT:.*]] = arith.constant 8 : index
// CHUNK8-NEXT: %part_offset = arith.muli %part, %[[EIGHT]] : index
// CHUNK8:      %[[ONE_CHUNK:.*]] = arith.constant 1 : index
// CHUNK8:      scf.for %chunk = %{{.*}} to %[[ONE_CHUNK]] step
// CHUNK8:        %[[EIGHT_DIMS:.*]] = arith.constant 8 : index
// CHUNK8:        scf.for %e = %{{.*}} to %[[EIGHT_DIMS]] step
// CHUNK8:          %slot = arith.addi %{{.*}}, %e : index
// CHUNK8-NEXT:     %[[SIXTEEN:.*]] = arith.constant 16 : index
// CHUNK8-NEXT:     %[[C16:.*]] = arith.muli %chunk, %[[SIXTEEN]] : index
// CHUNK8-NEXT:     %[[START:.*]] = arith.addi %[[C16]], %part_offset : index
// CHUNK8-NEXT:     %d = arith.addi %[[START]], %e : index
// SPLIT-KV: error: vyre-split-head-dim: kernel @flash_attention_2 cannot split its head dims over 2 lanes: its tiles are split (vyre-split-kv) and merged in workgroup memory, which takes whole rows

// THEN-SPLIT-KV: error: vyre-split-kv: kernel @flash_attention_2 cannot be split 2 ways: its head dims are split (vyre-split-head-dim); split its tiles first

// Splits merged by a kernel of their own: each split's two parts, lanes
// (item * 2 + split) * 2 + part; part 0 stores the split's m and l, each
// part its own dims of the split's o row.
// PARTIALS:      vyre.kernel @flash_attention_2 items 256 workgroup_size 64 attributes {vyre.skeleton = #vyre.skeleton<items = 64, seq_len = 64, head_dim = 16, v_head_dim = 16, tile_size = 16, kv_splits = 2, dim_parts = 2>} {
// PARTIALS:        %item = vyre.item_index
// PARTIALS:        %item_1 = arith.divui %item, %{{.*}} : index
// PARTIALS:        %part = arith.remui %item, %{{.*}} : index
// PARTIALS:        %item_2 = arith.divui %item_1, %{{.*}} : index
// PARTIALS:        %split = arith.remui %item_1, %{{.*}} : index
// PARTIALS:        %[[FIRST:.*]] = arith.cmpi eq, %part, %{{.*}} : index
// PARTIALS-NEXT:   scf.if %[[FIRST]] {
// PARTIALS-NEXT:     memref.store %{{.*}}, %flash_attention_2_split_m[%item_1] : memref<128xf32>
// PARTIALS-NEXT:     memref.store %{{.*}}, %flash_attention_2_split_l[%item_1] : memref<128xf32>
// PARTIALS-NEXT:   }
// PARTIALS:        %publish_d = arith.addi %{{.*}}, %e{{.*}} : index
// PARTIALS:        memref.store %{{.*}}, %flash_attention_2_split_o[%{{.*}}] : memref<2048xf32>
// PARTIALS:      vyre.kernel @flash_attention_2_merge items 1024 workgroup_size 64 {
// A device without subgroup shuffles (max_parts=1): refused when forced, left
// alone when choosing.
// NO-SHUFFLE: error: vyre-split-head-dim: kernel @flash_attention_2 cannot split its head dims over 2 lanes: the device has no subgroup shuffles
// AUTO-NO-SHUFFLE: vyre.tiled_online_softmax
// AUTO-NO-SHUFFLE-NOT: dim_parts
