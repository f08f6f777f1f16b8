// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 force=true stage=true row_groups=2}' | filecheck %s
// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 force=true stage=true row_groups=2},vyre-to-gpu{optimize=exact}' | filecheck %s --check-prefix=LOWERED
// RUN: vyre-opt %s -p 'vyre-plan{device=h200}' | filecheck %s --check-prefix=PLAN
// RUN: vyre-opt %s -p 'vyre-to-gpu{device=h200}' | filecheck %s --check-prefix=DEFAULT
// RUN: not vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 force=true row_groups=2}' 2>&1 | filecheck %s --check-prefix=UNSTAGED
// RUN: not vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 force=true stage=true row_groups=4}' 2>&1 | filecheck %s --check-prefix=FOUR

// MLA decode's latent attention in f16 with 32 heads (vx.mla_decode(
// seq_len=64, num_heads=32, head_dim=64, kv_lora_rank=64,
// qk_rope_head_dim=64, dtype="f16") after vyre-absorb-mla{kernels=3}),
// staged, in two groups of four subgroups: a workgroup of 256 lanes whose
// groups own a row block of 16 heads each and share the staged tiles, each
// subgroup staging half as many of a tile's blocks as with one group.

// CHECK:      vyre.kernel @mla_decode items 256 workgroup_size 256
// CHECK:        %tc_stage = vyre.scratch "tc_stage" : memref<4352xf16>
// CHECK-NEXT:   %tc_scores = vyre.scratch "tc_scores" : memref<2048xf32>
// CHECK-NEXT:   %tc_query_scale = vyre.scratch "tc_query_scale" : memref<512xf32>
// CHECK:        %subgroup = arith.divui %{{.*}}, %{{.*}} : index
// CHECK:        %group_subgroup = arith.remui %subgroup, %{{.*}} : index
// CHECK:        %row_base = arith.muli %{{.*}}, %{{.*}} : index
// CHECK:        %my_row = arith.addi %first_row, %{{.*}} : index
// The staged tile loop is marked for the driver not to unroll (DontUnroll).
// CHECK:        scf.for %split_tile =
// CHECK:        } {vyre.dont_unroll}
// CHECK-NOT:    vyre.tiled_online_softmax

// LOWERED:    sym_name = "mla_decode", gpu.kernel, vyre.launch = #vyre.launch<items = 256, workgroup = [256, 1, 1], grid = [1, 1, 1]

// The plan takes two groups where a sequence's heads fill them and the
// workgroup memory holds them (vyre_xdsl.tuning.LATENT_TILINGS), and
// vyre-to-gpu follows it.
// PLAN:       vyre.tiled_online_softmax
// PLAN:         item_count 32 seq_len 64 {{.*}} {vyre.latent_tensor_cores = #vyre.latent_tensor_cores<row_tiles = 1, splits = 1, row_groups = 2, stage = true, skip_rescale = false>}
// DEFAULT:    sym_name = "mla_decode", gpu.kernel, vyre.launch = #vyre.launch<items = 256, workgroup = [256, 1, 1]

// UNSTAGED:   error: vyre-latent-tensor-cores: this skeleton cannot run on subgroup matrix ops: row groups share the staged tiles: row_groups 2 needs stage=true
// FOUR:       error: vyre-latent-tensor-cores: this skeleton cannot run on subgroup matrix ops: row_groups must be 1 or 2, got 4

builtin.module {
  vyre.kernel @mla_decode items 32 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [32, 64] : memref<2048xf16>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [64, 64] : memref<4096xf16>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [64, 64] : memref<4096xf16>
    %q_lat = vyre.buffer "q_lat" binding 6 temp [32, 64] : memref<2048xf32>
    %o_lat = vyre.buffer "o_lat" binding 7 temp [32, 64] : memref<2048xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<4096xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<4096xf32>
    vyre.tiled_online_softmax q(%q_lat) out(%o_lat) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 32 seq_len 64 head_dim 64 tile_size 64 tile_count 1
        : (memref<2048xf32>, memref<2048xf32>, memref<4096xf32>, memref<4096xf32>, memref<4096xf32>)
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
          %11 = memref.load %q_lat[%10] : memref<2048xf32>
          %12 = arith.constant 64 : index
          %13 = arith.muli %t, %12 : index
          %14 = arith.addi %13, %r : index
          %15 = memref.load %kv_cache[%14] : memref<4096xf16>
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
          %27 = memref.load %q[%26] : memref<2048xf16>
          %28 = arith.extf %27 : f16 to f32
          %29 = arith.constant 64 : index
          %30 = arith.muli %t, %29 : index
          %31 = arith.addi %30, %dim : index
          %32 = memref.load %kr_cache[%31] : memref<4096xf16>
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
          %53 = memref.load %kv_cache[%52] : memref<4096xf16>
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
