// RUN: not vyre-opt %s -p 'vyre-tensor-cores{device=h200 force=true}' 2>&1 | filecheck %s
// RUN: vyre-opt %s -p 'vyre-tensor-cores{device=h200}' | filecheck %s --check-prefix=LEFT
// RUN: not vyre-opt %s -p 'vyre-tensor-cores{keys=24}' 2>&1 | filecheck %s --check-prefix=KEYS
// RUN: not vyre-opt %s -p 'vyre-tensor-cores{row_tiles=0}' 2>&1 | filecheck %s --check-prefix=ROWS
// RUN: not vyre-opt %s -p 'vyre-tensor-cores{unroll=0}' 2>&1 | filecheck %s --check-prefix=UNROLL
// RUN: not vyre-opt %s -p 'vyre-tensor-cores{force=true}' 2>&1 | filecheck %s --check-prefix=GENERIC
// RUN: not vyre-opt %s -p 'vyre-tensor-cores{device=h200 force=true prefetch=true}' 2>&1 | filecheck %s --check-prefix=PREFETCH
// RUN: not vyre-opt %s -p 'vyre-to-gpu{optimize=none},vyre-tensor-cores{device=h200 force=true}' 2>&1 | filecheck %s --check-prefix=NOTHING
// RUN: not vyre-opt %s -p 'vyre-tensor-cores{device=h200 force=true pieces=4 stage=true registers=true}' 2>&1 | filecheck %s --check-prefix=PIECES
// RUN: not vyre-opt %s -p 'vyre-tensor-cores{device=h200 force=true pieces=3}' 2>&1 | filecheck %s --check-prefix=SPLIT

// An f32 kernel: the matrix units take f16 or bf16 inputs, so the pass
// refuses it when forced and leaves it alone otherwise, but split into bf16
// parts (pieces=2 or 3) with staged tiles and P and Q in registers.
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

// CHECK: tensor_cores_errors.mlir:{{[0-9]+}}:5: error: vyre-tensor-cores: this skeleton cannot run on subgroup matrix ops: the matrices' operands must be all f16 or all bf16, not q f32, k f32, v f32, out f32 (f32 ones run split into bf16 parts: pieces=2 or 3)
// LEFT:  vyre.tiled_online_softmax
// KEYS:  error: vyre-tensor-cores: keys must be a positive multiple of 16, got 24
// ROWS:  error: vyre-tensor-cores: row_tiles must be positive, got 0
// UNROLL:  error: vyre-tensor-cores: unroll must be positive, got 0
// Prefetching needs staging, and 16x16 blocks the four subgroups share.
// PREFETCH: error: vyre-tensor-cores: this skeleton cannot run on subgroup matrix ops: prefetching needs staged tiles whose 16x16 blocks (1 of K, 1 of V) the 4 subgroups share evenly
// The generic profile has no cooperative matrices, so no layout to compute on.
// GENERIC: error: vyre-tensor-cores: this skeleton cannot run on subgroup matrix ops: the device profile has no accumulator layout (no cooperative matrices)
// Lowered first, the module holds no skeleton: force=true says so.
// NOTHING: error: vyre-tensor-cores: force=true, but the module holds no vyre.tiled_online_softmax to expand
// PIECES: error: vyre-tensor-cores: this skeleton cannot run on subgroup matrix ops: f32 operands split into 2 or 3 bf16 parts, not 4
// SPLIT: error: vyre-tensor-cores: this skeleton cannot run on subgroup matrix ops: split f32 operands need staged K and V tiles and P and Q in registers (stage, registers, no stage_q), and O rescaled in every tile (no skip_rescale)
