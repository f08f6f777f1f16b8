// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200}' | filecheck %s
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200},vyre-to-gpu{optimize=exact}' | filecheck %s --check-prefix=LOWERED
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 keys=32}' | filecheck %s --check-prefix=KEYS32
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 stage=true}' | filecheck %s --check-prefix=STAGED
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 stage=true prefetch=true keys=64}' | filecheck %s --check-prefix=PREFETCH
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 registers=true}' | filecheck %s --check-prefix=REGISTERS
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 stage_q=true}' | filecheck %s --check-prefix=QUERIES
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 skip_rescale=true}' | filecheck %s --check-prefix=SKIP
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 rolled=true}' | filecheck %s --check-prefix=ROLLED
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200}' | filecheck %s --check-prefix=UNROLLED
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 rolled=true unroll=3}' | filecheck %s --check-prefix=THREE
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200 unroll=100}' | filecheck %s --check-prefix=ALL
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=generic}' | filecheck %s --check-prefix=LEFT
// RUN: vyre-opt %s -p 'vyre-to-gpu{device=h200}' | filecheck %s --check-prefix=PLANNED
// RUN: vyre-opt %s -p 'vyre-plan{device=h200}' | filecheck %s --check-prefix=PLAN
// RUN: vyre-opt %s -p 'vyre-plan{device=h200}' | vyre-opt | filecheck %s --check-prefix=PLAN
// RUN: vyre-opt %s -p 'vyre-to-gpu{device=h200 matrix_units=false}' | filecheck %s --check-prefix=LANES
// RUN: vyre-opt %s -p 'vyre-plan{device=h200 matrix_units=false}' | filecheck %s --check-prefix=LANES-PLAN

// FlashAttention-2 in f16 (vx.flash_attention_2(seq_len=64, head_dim=16,
// tile_size=16, dtype="f16")): 64 rows, one workgroup of four subgroups.
builtin.module {
  vyre.kernel @flash_attention_2 items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 16] : memref<1024xf16>
    %k = vyre.buffer "k" binding 1 read [64, 16] : memref<1024xf16>
    %v = vyre.buffer "v" binding 2 read [64, 16] : memref<1024xf16>
    %out = vyre.buffer "out" binding 3 write [64, 16] : memref<1024xf16>
    %q_scratch = vyre.scratch "q_scratch" : memref<1024xf32>
    %score_tile = vyre.scratch "score_tile" : memref<1024xf32>
    %o_acc = vyre.scratch "o_acc" : memref<1024xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 64 seq_len 64 head_dim 16 tile_size 16 tile_count 4
        : (memref<1024xf16>, memref<1024xf16>, memref<1024xf32>, memref<1024xf32>, memref<1024xf32>)
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
          %15 = memref.load %k[%14] : memref<1024xf16>
          %16 = arith.extf %15 : f16 to f32
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
          %36 = memref.load %v[%35] : memref<1024xf16>
          %37 = arith.extf %36 : f16 to f32
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

// Two invocations a row in workgroups of 128; the kernel records the H200's
// accumulator layout (PTX's mma fragments: lane 0 holds (0, 0), (0, 1),
// (0, 8), (0, 9), (8, 0), ...); only the f16 weights live in workgroup
// memory, the skeleton's own scratch is gone.
// CHECK:      vyre.kernel @flash_attention_2 items 128 workgroup_size 128
// CHECK-SAME: vyre.accumulator = #vyre.accumulator<lanes = 32, positions = [0, 1, 8, 9, 128, 129, 136, 137, 2, 3,
// CHECK-NOT:  vyre.scratch "q_scratch"
// CHECK:      %tc_weights = vyre.scratch "tc_weights" : memref<1024xf16>
// CHECK-NOT:  vyre.scratch
// The rows' Q once; the tile loop carries each of a lane's two rows' max and
// denominator, and O as a matrix.
// CHECK:      gpu.subgroup_mma_load_matrix %q[%{{.*}}] {leadDimension = 16 : index} : memref<1024xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
// CHECK:      scf.for %tile_idx = {{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, !gpu.mma_matrix<16x16xf32, "COp">)
// S = Q K^T (K read column-major), its eight elements of the lane scaled by
// the fragment's epilogue, each of its two rows' max over the lanes that
// hold it (xor 1 and 2: four shuffles), the weights rounded into an f16
// matrix and stored for P V; a lane sums only its own weights.
// CHECK:        gpu.subgroup_mma_load_matrix %k[%{{.*}}] {leadDimension = 16 : index, transpose} : memref<1024xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
// CHECK:        %[[S:.*]] = gpu.subgroup_mma_compute
// CHECK-COUNT-8: gpu.subgroup_mma_extract_thread_local %[[S]]
// CHECK:        vyre.bounded_score
// CHECK-COUNT-4: gpu.shuffle xor
// CHECK-NOT:    gpu.shuffle
// CHECK:        %rescale = math.exp
// CHECK:        %rescale_1 = math.exp
// CHECK-COUNT-8: gpu.subgroup_mma_insert_thread_local %{{.*}} : f16, !gpu.mma_matrix<16x16xf16, "COp">
// CHECK:        gpu.subgroup_mma_store_matrix %{{.*}}, %tc_weights[%{{.*}}] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf16, "COp">
// CHECK:        gpu.barrier
// CHECK:        gpu.subgroup_mma_load_matrix %tc_weights[%{{.*}}] {leadDimension = 16 : index} : memref<1024xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
// O rescaled element by element, then O += P V on the matrix unit.
// CHECK-COUNT-8: gpu.subgroup_mma_insert_thread_local %{{.*}} : f32, !gpu.mma_matrix<16x16xf32, "COp">
// CHECK:        gpu.subgroup_mma_load_matrix %v[%{{.*}}] {leadDimension = 16 : index} : memref<1024xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
// CHECK:        gpu.subgroup_mma_compute
// CHECK:        gpu.barrier
// CHECK:        scf.yield
// The end: each row's denominator added over its lanes, O divided by it,
// rounded, stored to out.
// CHECK-COUNT-4: gpu.shuffle xor
// CHECK:      vyre.positive_denominator
// CHECK:      gpu.subgroup_mma_store_matrix %{{.*}}, %out[%{{.*}}] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf16, "COp">, memref<1024xf16>

// Lowered: the f16 weights are a workgroup array; the launch records the
// layout for the runtime (which checks the device's) and the interpreter.
// vyre-unroll-jam leaves the loop of matrix products (4 tiles, S and P V
// in each) as it is.
// LOWERED:    memref.alloc() : memref<1024xf16, 3 : i64>
// LOWERED:    scf.for
// LOWERED-COUNT-2: gpu.subgroup_mma_compute
// LOWERED-NOT:  gpu.subgroup_mma_compute
// LOWERED:      scf.yield
// LOWERED:    vyre.launch = #vyre.launch<items = 128, workgroup = [128, 1, 1], grid = [1, 1, 1]
// LOWERED-SAME: accumulator = #vyre.accumulator<lanes = 32

// Tiles of 32 keys: two S blocks, each stored as 16 of P's 32 columns.
// KEYS32:     %tc_weights = vyre.scratch "tc_weights" : memref<2048xf16>
// KEYS32:     gpu.subgroup_mma_store_matrix %{{.*}}, %tc_weights[%{{.*}}] {leadDimension = 32 : index}
// KEYS32:     gpu.subgroup_mma_store_matrix %{{.*}}, %tc_weights[%{{.*}}] {leadDimension = 32 : index}
// KEYS32-NOT: gpu.subgroup_mma_store_matrix
// KEYS32:     gpu.barrier

// Staged: the workgroup's subgroups copy each tile's K and V rows into
// workgroup memory once, in 16x16 blocks, each lane 16 bytes of a block
// (a vector load and a vector store: half a row), and the products read
// them there; rows of 16 elements (32 bytes) there are padded to 24 (48
// bytes: conflict_free_stride), so that a matrix load's eight rows fall
// in distinct banks. A tile of one block of K and one of V is fewer
// blocks than subgroups: each subgroup loads the last block it could have
// (a load in a branch would wait where the store is) and only the block's
// own subgroup stores it.
// STAGED:     %tc_key_tile = vyre.scratch "tc_key_tile" : memref<384xf16>
// STAGED-NEXT: %tc_value_tile = vyre.scratch "tc_value_tile" : memref<384xf16>
// STAGED:     scf.for %tile_idx
// STAGED:       arith.minui
// STAGED:       %[[K:.*]] = vector.load %k[%{{.*}}] : memref<1024xf16>, vector<8xf16>
// STAGED:       arith.minui
// STAGED:       %[[V:.*]] = vector.load %v[%{{.*}}] : memref<1024xf16>, vector<8xf16>
// STAGED:       scf.if
// STAGED:         vector.store %[[K]], %tc_key_tile[%{{.*}}] : memref<384xf16>, vector<8xf16>
// STAGED:       scf.if
// STAGED:         vector.store %[[V]], %tc_value_tile[%{{.*}}] : memref<384xf16>, vector<8xf16>
// STAGED:       gpu.barrier
// STAGED:       gpu.subgroup_mma_load_matrix %tc_key_tile[%{{.*}}] {leadDimension = 24 : index, transpose}
// STAGED:       gpu.subgroup_mma_load_matrix %tc_value_tile[%{{.*}}] {leadDimension = 24 : index}

// Prefetched: two buffers of each staged tile; the first tile copied before
// the loop; in it, the next tile's blocks (the last one's again at the end)
// loaded first, the products read this tile's buffer, and the loaded blocks
// stored into the other buffer before the tile's last barrier.
// PREFETCH:     %tc_key_tile = vyre.scratch "tc_key_tile" : memref<3072xf16>
// PREFETCH-NEXT: %tc_value_tile = vyre.scratch "tc_value_tile" : memref<3072xf16>
// PREFETCH:     vector.load %k[%{{.*}}] : memref<1024xf16>, vector<8xf16>
// PREFETCH:     vector.store %{{.*}}, %tc_key_tile[%{{.*}}]
// PREFETCH:     gpu.barrier
// PREFETCH:     scf.for %tile_idx
// PREFETCH:       arith.minui
// PREFETCH:       %[[NEXT:.*]] = vector.load %k[%{{.*}}] : memref<1024xf16>, vector<8xf16>
// PREFETCH:       gpu.subgroup_mma_load_matrix %tc_key_tile[%{{.*}}] {leadDimension = 24 : index, transpose}
// PREFETCH:       gpu.barrier
// PREFETCH:       gpu.subgroup_mma_load_matrix %tc_value_tile[%{{.*}}] {leadDimension = 24 : index}
// PREFETCH:       vector.store %[[NEXT]], %tc_key_tile[%{{.*}}]
// PREFETCH:       vector.store %{{.*}}, %tc_value_tile[%{{.*}}]
// PREFETCH-NEXT:  gpu.barrier
// PREFETCH-NEXT:  scf.yield

// Weights in registers: each lane inserts its f16 weights straight into the
// A operand of P V, in the order the layout's operand_a gives (the H200's:
// the accumulator's own), so the tile has no tc_weights and no barrier;
// the launch records the order the kernel relies on.
// REGISTERS:     vyre.kernel @flash_attention_2
// REGISTERS-SAME: operand_a = [0, 1, 2, 3, 4, 5, 6, 7]
// REGISTERS-NOT: vyre.scratch "tc_weights"
// REGISTERS:     scf.for %tile_idx
// REGISTERS:       arith.truncf %{{.*}} : f32 to f16
// REGISTERS-COUNT-8: gpu.subgroup_mma_insert_thread_local %{{.*}} : f16, !gpu.mma_matrix<16x16xf16, "AOp">
// REGISTERS-NOT:   gpu.barrier
// REGISTERS:       gpu.subgroup_mma_compute
// REGISTERS-NOT:   gpu.barrier
// REGISTERS:       scf.yield

// Q staged: each subgroup copies its rows of q into workgroup memory once,
// and each tile reads its A operands there, not from registers held
// through the loop.
// QUERIES:     %tc_query_tile = vyre.scratch "tc_query_tile" : memref<1024xf16>
// QUERIES:     gpu.subgroup_mma_load_matrix %q[%{{.*}}] {leadDimension = 16 : index} : memref<1024xf16> -> !gpu.mma_matrix<16x16xf16, "COp">
// QUERIES:     gpu.subgroup_mma_store_matrix %{{.*}}, %tc_query_tile[%{{.*}}] {leadDimension = 16 : index}
// QUERIES:     gpu.barrier
// QUERIES-NOT: gpu.subgroup_mma_load_matrix %q
// QUERIES:     scf.for %tile_idx
// QUERIES:       gpu.subgroup_mma_load_matrix %tc_query_tile[%{{.*}}] {leadDimension = 16 : index} : memref<1024xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
// QUERIES:       gpu.subgroup_mma_compute

// skip_rescale: O rescaled only where a row of the subgroup's moved its max
// (a rescale une 1, or-ed over the lanes that hold other rows: xor 4, 8 and
// 16), else kept as it is (x * 1 is x).
// SKIP:        scf.for %tile_idx
// SKIP:          gpu.barrier
// SKIP:          %[[A:.*]] = arith.cmpf une, %rescale,
// SKIP-NEXT:     %[[B:.*]] = arith.cmpf une, %rescale_1,
// SKIP-NEXT:     arith.ori %[[A]], %[[B]] : i1
// SKIP-COUNT-3:  gpu.shuffle xor %{{.*}} : i32
// SKIP:          %[[MOVED:.*]] = arith.cmpi ne
// SKIP-NEXT:     scf.if %[[MOVED]] -> (!gpu.mma_matrix<16x16xf32, "COp">) {
// SKIP-COUNT-8:    arith.mulf %rescale
// SKIP-COUNT-8:    gpu.subgroup_mma_insert_thread_local %{{.*}} : f32, !gpu.mma_matrix<16x16xf32, "COp">
// SKIP:          } else {
// SKIP-NEXT:       scf.yield %{{.*}} : !gpu.mma_matrix<16x16xf32, "COp">
// SKIP:          gpu.subgroup_mma_compute

// rolled=true: the tile loop is marked for the device's compiler not to
// unroll (the SPIR-V emitter's DontUnroll); without it, no mark.
// ROLLED:      scf.for %tile_idx
// ROLLED:      gpu.subgroup_mma_compute
// ROLLED:      } {vyre.rolled, vyre.dont_unroll}
// UNROLLED-NOT: vyre.dont_unroll

// unroll=3: three tiles a trip (two matrix products each), here one trip
// of the four tiles, the fourth in a loop of one a trip; both marked.
// THREE:          %[[STEP:.*]] = arith.constant 3 : index
// THREE-NEXT:     %[[UPPER:.*]] = arith.constant 3 : index
// THREE-NEXT:     scf.for %tile_idx = %{{.*}} to %[[UPPER]] step %[[STEP]]
// THREE-COUNT-6:  gpu.subgroup_mma_compute
// THREE-NOT:      gpu.subgroup_mma_compute
// THREE:          } {vyre.rolled, vyre.dont_unroll, vyre.unrolled = 3 : i64}
// THREE-NEXT:     scf.for %tile_idx_1 = %[[UPPER]] to
// THREE-COUNT-2:  gpu.subgroup_mma_compute
// THREE-NOT:      gpu.subgroup_mma_compute
// THREE:          } {vyre.rolled, vyre.dont_unroll}

// More tiles a trip than the four tiles: all of them, in place, no loop.
// ALL-NOT:        scf.for %tile_idx
// ALL-COUNT-8:    gpu.subgroup_mma_compute
// ALL-NOT:        gpu.subgroup_mma_compute
// ALL-NOT:        scf.for %tile_idx

// A device profile without cooperative matrices: the skeleton is left alone.
// LEFT:       vyre.tiled_online_softmax

// vyre-plan records the tiling it will run on the H200's matrix units with
// (64 rows, one workgroup: the tiling with the most workgroups), no per-lane
// plan; vyre-to-gpu's default follows it.
// PLAN:       vyre.tiled_online_softmax
// PLAN-NEXT:  attributes {vyre.tensor_cores = #vyre.tensor_cores<keys = 32, row_tiles = 1, stage = true, prefetch = false, registers = false, stage_q = false, skip_rescale = false, rolled = false, pieces = 1, unroll = 1>}
// PLAN-NOT:   vyre.plan
// f16 on the matrix units: exp2, log2(e) folded into the score's scale
// (vyre-use-exp2).
// PLANNED:    arith.constant 0.360673755 : f32
// PLANNED-NOT: math.exp %
// PLANNED:    math.exp2
// PLANNED-NOT: math.exp %
// PLANNED:    gpu.subgroup_mma_compute
// PLANNED:    accumulator = #vyre.accumulator<lanes = 32

// matrix_units=false: the plan of a device without matrices, every product
// on the lanes in f32 (vyre-plan records a per-lane plan, no tiling).
// LANES:      "gpu.func"()
// LANES-NOT:  gpu.subgroup_mma
// LANES-NOT:  vyre.accumulator
// LANES-PLAN:     vyre.tiled_online_softmax
// LANES-PLAN-NOT: vyre.tensor_cores
// LANES-PLAN:     vyre.plan = #vyre.plan<device = "h200"
