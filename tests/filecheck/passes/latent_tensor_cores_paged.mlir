// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 splits=1}' | filecheck %s
// RUN: vyre-opt %s -p 'vyre-latent-tensor-cores{device=h200 splits=2},vyre-to-gpu{optimize=exact}' | filecheck %s --check-prefix=LOWERED

// MLA decode's latent attention in f16 over a paged cache with run-time
// lengths (vx.mla_decode(seq_len=128, num_heads=16, head_dim=16,
// kv_lora_rank=64, qk_rope_head_dim=16, batch=2, page_size=16,
// num_pages=16, kv_lens=True, dtype="f16") after vyre-absorb-mla{kernels=3}):
// pages of 16 keys hold whole runs of 16, so each run looks its page up
// once; the sequence's length decides which tiles run and which keys count.
builtin.module {
  vyre.kernel @mla_decode items 32 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 16, 16] : memref<512xf16>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [16, 16, 64] : memref<16384xf16>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [16, 16, 16] : memref<4096xf16>
    %q_lat = vyre.buffer "q_lat" binding 8 temp [2, 16, 64] : memref<2048xf32>
    %o_lat = vyre.buffer "o_lat" binding 9 temp [2, 16, 64] : memref<2048xf32>
    %kv_lens = vyre.buffer "kv_lens" binding 6 read [2] : memref<2xi32>
    %block_table = vyre.buffer "block_table" binding 7 read [2, 8] : memref<16xi32>
    %q_scratch = vyre.scratch "q_scratch" : memref<4096xf32>
    %score_tile = vyre.scratch "score_tile" : memref<4096xf32>
    %o_acc = vyre.scratch "o_acc" : memref<4096xf32>
    vyre.tiled_online_softmax q(%q_lat) out(%o_lat) kv_lens(%kv_lens) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 32 seq_len 128 head_dim 64 tile_size 64 tile_count 2 items_per_seq 16
        : (memref<2048xf32>, memref<2048xf32>, memref<4096xf32>, memref<4096xf32>, memref<4096xf32>, memref<2xi32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 16 : index
      %seq = arith.divui %item, %0 : index
      %1 = arith.constant 8 : index
      %table_base = arith.muli %seq, %1 : index
      %2 = arith.constant 0 : index
      %3 = arith.constant 1 : index
      scf.for %j = %2 to %tile_len step %3 {
        %t = arith.addi %tile_start, %j : index
        %4 = arith.constant 16 : index
        %5 = arith.divui %t, %4 : index
        %table_entry = arith.addi %table_base, %5 : index
        %6 = memref.load %block_table[%table_entry] : memref<16xi32>
        %7 = arith.constant 0 : i32
        %8 = arith.constant 15 : i32
        %9 = arith.maxsi %6, %7 : i32
        %10 = arith.minsi %9, %8 : i32
        %11 = arith.index_cast %10 : i32 to index
        %12 = arith.muli %5, %4 : index
        %13 = arith.subi %t, %12 : index
        %14 = arith.muli %11, %4 : index
        %kv_row = arith.addi %14, %13 : index
        %15 = arith.constant 0.000000e+00 : f32
        %16 = arith.constant 0 : index
        %17 = arith.constant 64 : index
        %18 = arith.constant 1 : index
        %19 = scf.for %r = %16 to %17 step %18 iter_args(%20 = %15) -> (f32) {
          %21 = arith.constant 64 : index
          %22 = arith.muli %item, %21 : index
          %23 = arith.addi %22, %r : index
          %24 = memref.load %q_lat[%23] : memref<2048xf32>
          %25 = arith.constant 64 : index
          %26 = arith.muli %kv_row, %25 : index
          %27 = arith.addi %26, %r : index
          %28 = memref.load %kv_cache[%27] : memref<16384xf16>
          %29 = arith.extf %28 : f16 to f32
          %30 = arith.mulf %24, %29 : f32
          %31 = arith.addf %20, %30 : f32
          scf.yield %31 : f32
        }
        %32 = arith.constant 0 : index
        %33 = arith.constant 16 : index
        %34 = arith.constant 1 : index
        %35 = scf.for %dim = %32 to %33 step %34 iter_args(%36 = %19) -> (f32) {
          %37 = arith.constant 16 : index
          %38 = arith.muli %item, %37 : index
          %39 = arith.addi %38, %dim : index
          %40 = memref.load %q[%39] : memref<512xf16>
          %41 = arith.extf %40 : f16 to f32
          %42 = arith.constant 16 : index
          %43 = arith.muli %kv_row, %42 : index
          %44 = arith.addi %43, %dim : index
          %45 = memref.load %kr_cache[%44] : memref<4096xf16>
          %46 = arith.extf %45 : f16 to f32
          %47 = arith.mulf %41, %46 : f32
          %48 = arith.addf %36, %47 : f32
          scf.yield %48 : f32
        }
        %49 = arith.constant 2.500000e-01 : f32
        %50 = arith.mulf %35, %49 : f32
        %51 = vyre.bounded_score %50 : f32
        %52 = arith.constant 64 : index
        %53 = arith.muli %lane, %52 : index
        %54 = arith.addi %53, %j : index
        memref.store %51, %score_tile_1[%54] : memref<4096xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %55 = arith.constant 16 : index
      %seq_1 = arith.divui %item_1, %55 : index
      %56 = arith.constant 8 : index
      %table_base_1 = arith.muli %seq_1, %56 : index
      %57 = arith.constant 0 : index
      %58 = arith.constant 64 : index
      %59 = arith.constant 1 : index
      scf.for %r_1 = %57 to %58 step %59 {
        %60 = arith.constant 0.000000e+00 : f32
        %61 = arith.constant 0 : index
        %62 = arith.constant 1 : index
        %63 = scf.for %j_1 = %61 to %tile_len_1 step %62 iter_args(%64 = %60) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %65 = arith.constant 16 : index
          %66 = arith.divui %t_1, %65 : index
          %table_entry_1 = arith.addi %table_base_1, %66 : index
          %67 = memref.load %block_table[%table_entry_1] : memref<16xi32>
          %68 = arith.constant 0 : i32
          %69 = arith.constant 15 : i32
          %70 = arith.maxsi %67, %68 : i32
          %71 = arith.minsi %70, %69 : i32
          %72 = arith.index_cast %71 : i32 to index
          %73 = arith.muli %66, %65 : index
          %74 = arith.subi %t_1, %73 : index
          %75 = arith.muli %72, %65 : index
          %kv_row_1 = arith.addi %75, %74 : index
          %76 = arith.constant 64 : index
          %77 = arith.muli %kv_row_1, %76 : index
          %78 = arith.addi %77, %r_1 : index
          %79 = memref.load %kv_cache[%78] : memref<16384xf16>
          %80 = arith.extf %79 : f16 to f32
          %81 = arith.mulf %weight, %80 : f32
          %82 = arith.addf %64, %81 : f32
          scf.yield %82 : f32
        }
        %83 = arith.constant 64 : index
        %84 = arith.muli %lane_1, %83 : index
        %85 = arith.addi %84, %r_1 : index
        %86 = memref.load %o_acc_1[%85] : memref<4096xf32>
        %87 = arith.mulf %rescale, %86 : f32
        %88 = arith.addf %87, %63 : f32
        memref.store %88, %o_acc_1[%85] : memref<4096xf32>
      }
      vyre.yield
    }
  }
}

// The accumulator's columns and the subgroups' cut value blocks.
// CHECK:      vyre.kernel @mla_decode items 256 workgroup_size 128
// CHECK:        %tc_columns = vyre.scratch "tc_columns" : memref<256xf32>
// CHECK-NEXT:   %tc_value_block = vyre.scratch "tc_value_block" : memref<1024xf16>
// The row block's sequence's length, clamped to the kernel's 128 keys.
// CHECK:        memref.load %kv_lens
// CHECK:        arith.minsi
// Element (r, c) of tc_columns is c, stored before the query's barrier.
// CHECK:        memref.store {{.*}} %tc_columns
// CHECK:        "gpu.barrier"
// A tile runs where it starts before the end, whole where it ends before it.
// CHECK:        scf.for %split_tile
// CHECK:        arith.cmpi ult, %{{.*}}, %kv_len
// CHECK:        arith.cmpi ule, %{{.*}}, %kv_len
// CHECK:        memref.load %block_table
// CHECK:        gpu.subgroup_mma_load_matrix %kv_cache{{.*}}transpose
// The tile the sequence ends in: each kept score by its column, then the
// run of 16 keys that holds the end copied with zeros past it.
// CHECK:      } else {
// CHECK:        arith.cmpf olt
// CHECK:        scf.for %cut_e
// CHECK:          memref.load %block_table
// CHECK:          arith.select
// CHECK:          memref.store {{.*}} %tc_value_block
// CHECK:        "gpu.barrier"
// CHECK:        gpu.subgroup_mma_load_matrix %tc_value_block

// LOWERED:    "gpu.module"() <{sym_name = "mla_decode"}>
// LOWERED:      gpu.subgroup_mma_compute
// LOWERED:    "gpu.module"() <{sym_name = "mla_decode_merge"}>
