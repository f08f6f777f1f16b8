// RUN: not vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 force=true}' 2>&1 | filecheck %s
// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200}' | filecheck %s --check-prefix=LEFT
// RUN: not vyre-opt %s -p 'vyre-latent-tensor-cores{force=true}' 2>&1 | filecheck %s --check-prefix=GENERIC
// RUN: not vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 force=true splits=4}' 2>&1 | filecheck %s --check-prefix=SPLITS
// RUN: not vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 force=true row_tiles=2}' 2>&1 | filecheck %s --check-prefix=ROWS
// RUN: not vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 force=true row_tiles=3}' 2>&1 | filecheck %s --check-prefix=SHARES
// RUN: not vyre-opt %s -p 'vyre-latent-tensor-cores{row_tiles=0}' 2>&1 | filecheck %s --check-prefix=OPTIONS
// RUN: not vyre-opt %s -p 'vyre-latent-tensor-cores{splits=-1}' 2>&1 | filecheck %s --check-prefix=NEGATIVE
// RUN: not vyre-opt %s -p 'vyre-to-gpu{optimize=none},vyre-latent-tensor-cores{device=h200 force=true}' 2>&1 | filecheck %s --check-prefix=NOTHING
// RUN: not vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 force=true stage=true}' 2>&1 | filecheck %s --check-prefix=STAGED

// MLA decode's latent attention in f32: the matrix units take f16 keys and
// values, so the pass refuses it when forced and leaves it alone otherwise.
builtin.module {
  vyre.kernel @mla_decode items 16 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [16, 16] : memref<256xf32>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [128, 64] : memref<8192xf32>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [128, 16] : memref<2048xf32>
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
          %15 = memref.load %kv_cache[%14] : memref<8192xf32>
          %16 = arith.mulf %11, %15 : f32
          %17 = arith.addf %7, %16 : f32
          scf.yield %17 : f32
        }
        %18 = arith.constant 0 : index
        %19 = arith.constant 16 : index
        %20 = arith.constant 1 : index
        %21 = scf.for %dim = %18 to %19 step %20 iter_args(%22 = %6) -> (f32) {
          %23 = arith.constant 16 : index
          %24 = arith.muli %item, %23 : index
          %25 = arith.addi %24, %dim : index
          %26 = memref.load %q[%25] : memref<256xf32>
          %27 = arith.constant 16 : index
          %28 = arith.muli %t, %27 : index
          %29 = arith.addi %28, %dim : index
          %30 = memref.load %kr_cache[%29] : memref<2048xf32>
          %31 = arith.mulf %26, %30 : f32
          %32 = arith.addf %22, %31 : f32
          scf.yield %32 : f32
        }
        %33 = arith.constant 2.500000e-01 : f32
        %34 = arith.mulf %21, %33 : f32
        %35 = vyre.bounded_score %34 : f32
        %36 = arith.constant 64 : index
        %37 = arith.muli %lane, %36 : index
        %38 = arith.addi %37, %j : index
        memref.store %35, %score_tile_1[%38] : memref<4096xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %39 = arith.constant 0 : index
      %40 = arith.constant 64 : index
      %41 = arith.constant 1 : index
      scf.for %r_1 = %39 to %40 step %41 {
        %42 = arith.constant 0.000000e+00 : f32
        %43 = arith.constant 0 : index
        %44 = arith.constant 1 : index
        %45 = scf.for %j_1 = %43 to %tile_len_1 step %44 iter_args(%46 = %42) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %47 = arith.constant 64 : index
          %48 = arith.muli %t_1, %47 : index
          %49 = arith.addi %48, %r_1 : index
          %50 = memref.load %kv_cache[%49] : memref<8192xf32>
          %51 = arith.mulf %weight, %50 : f32
          %52 = arith.addf %46, %51 : f32
          scf.yield %52 : f32
        }
        %53 = arith.constant 64 : index
        %54 = arith.muli %lane_1, %53 : index
        %55 = arith.addi %54, %r_1 : index
        %56 = memref.load %o_acc_1[%55] : memref<4096xf32>
        %57 = arith.mulf %rescale, %56 : f32
        %58 = arith.addf %57, %45 : f32
        memref.store %58, %o_acc_1[%55] : memref<4096xf32>
      }
      vyre.yield
    }
  }
}

// CHECK: latent_tensor_cores_errors.mlir:{{[0-9]+}}:5: error: vyre-latent-tensor-cores: this skeleton cannot run on subgroup matrix ops: the matrices' operands must be all f16 or all bf16, not kv_cache f32, kr_cache f32
// LEFT:  vyre.tiled_online_softmax
// The generic profile has no cooperative matrices, so no layout to compute on.
// GENERIC: error: vyre-latent-tensor-cores: this skeleton cannot run on subgroup matrix ops: the device profile has no accumulator layout (no cooperative matrices)
// 128 keys are two tiles of 64: at most two splits.
// SPLITS: error: vyre-latent-tensor-cores: this skeleton cannot run on subgroup matrix ops: 4 splits of 2 tiles of 64 keys
// A workgroup's 32 rows would be two sequences' heads, which read different keys.
// ROWS: error: vyre-latent-tensor-cores: this skeleton cannot run on subgroup matrix ops: item_count (16) is not a multiple of 32
// SHARES: error: vyre-latent-tensor-cores: this skeleton cannot run on subgroup matrix ops: 48 rows a workgroup: its 128 lanes stage them in equal shares, so row_tiles must be 1, 2, 4 or 8
// OPTIONS: error: vyre-latent-tensor-cores: row_tiles must be positive and splits 0 (choose) or positive
// A negative count is refused before any pass runs (vyre_xdsl.compiler.check_pass_options).
// NEGATIVE: error: pass 'vyre-latent-tensor-cores': option splits takes an integer of at least 0
// Lowered first, the module holds no skeleton: force=true says so.
// NOTHING: error: vyre-latent-tensor-cores: force=true, but the module holds no vyre.tiled_online_softmax to expand
// Staged tiles share the query's 16-dim blocks (64 latent + 16 rope dims:
// five) equally among the four subgroups.
// STAGED: error: vyre-latent-tensor-cores: this skeleton cannot run on subgroup matrix ops: staged tiles split the query's 5 blocks of 16 dims over 4 subgroups: a multiple of 4 is needed
