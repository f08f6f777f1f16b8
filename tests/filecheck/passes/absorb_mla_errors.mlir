// RUN: not vyre-opt %s -p 'vyre-absorb-mla{kernels=3 rows=4}' 2>&1 | filecheck %s
// RUN: not vyre-opt %s -p 'vyre-absorb-mla{rows=2}' 2>&1 | filecheck %s --check-prefix=ONE-KERNEL
// RUN: not vyre-opt %s -p 'vyre-absorb-mla{kernels=3 rows=-1}' 2>&1 | filecheck %s --check-prefix=NEGATIVE

// A batch of 2 sequences: an item of the projections cannot take 4 rows
// of a head, so the pass refuses the kernel where it is.
builtin.module {
  vyre.kernel @mla_paged items 4 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 4, qk_rope_head_dim = 2, batch = 2, kv_lens = true, page_size = 4, num_pages = 5>} {
    %q = vyre.buffer "q" binding 0 read [2, 2, 4] : memref<16xf32>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [5, 4, 4] : memref<80xf32>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [5, 4, 2] : memref<40xf32>
    %w_uk = vyre.buffer "w_uk" binding 3 read [4, 8] : memref<32xf32>
    %w_uv = vyre.buffer "w_uv" binding 4 read [4, 8] : memref<32xf32>
    %out = vyre.buffer "out" binding 5 write [2, 2, 4] : memref<16xf32>
    %kv_lens = vyre.buffer "kv_lens" binding 6 read [2] : memref<2xi32>
    %block_table = vyre.buffer "block_table" binding 7 read [2, 2] : memref<4xi32>
    %q_scratch = vyre.scratch "q_scratch" : memref<256xf32>
    %score_tile = vyre.scratch "score_tile" : memref<256xf32>
    %o_acc = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%kv_lens) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 4 seq_len 8 head_dim 4 tile_size 4 tile_count 2 items_per_seq 2
        : (memref<16xf32>, memref<16xf32>, memref<256xf32>, memref<256xf32>, memref<256xf32>, memref<2xi32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 2 : index
      %head = arith.remui %item, %0 : index
      %1 = arith.constant 2 : index
      %seq = arith.divui %item, %1 : index
      %2 = arith.constant 2 : index
      %table_base = arith.muli %seq, %2 : index
      %3 = arith.constant 0 : index
      %4 = arith.constant 1 : index
      scf.for %j = %3 to %tile_len step %4 {
        %t = arith.addi %tile_start, %j : index
        %5 = arith.constant 4 : index
        %6 = arith.divui %t, %5 : index
        %table_entry = arith.addi %table_base, %6 : index
        %7 = memref.load %block_table[%table_entry] : memref<4xi32>
        %8 = arith.constant 0 : i32
        %9 = arith.constant 4 : i32
        %10 = arith.maxsi %7, %8 : i32
        %11 = arith.minsi %10, %9 : i32
        %12 = arith.index_cast %11 : i32 to index
        %13 = arith.constant 4 : index
        %14 = arith.muli %12, %13 : index
        %15 = arith.constant 4 : index
        %16 = arith.remui %t, %15 : index
        %kv_row = arith.addi %14, %16 : index
        %17 = arith.constant 0.000000e+00 : f32
        %18 = arith.constant 0 : index
        %19 = arith.constant 4 : index
        %20 = arith.constant 1 : index
        %21 = scf.for %dim = %18 to %19 step %20 iter_args(%22 = %17) -> (f32) {
          %23 = arith.constant 4 : index
          %24 = arith.muli %head, %23 : index
          %25 = arith.addi %24, %dim : index
          %26 = arith.constant 0.000000e+00 : f32
          %27 = arith.constant 0 : index
          %28 = arith.constant 4 : index
          %29 = arith.constant 1 : index
          %30 = scf.for %r = %27 to %28 step %29 iter_args(%31 = %26) -> (f32) {
            %32 = arith.constant 8 : index
            %33 = arith.muli %r, %32 : index
            %34 = arith.addi %33, %25 : index
            %35 = memref.load %w_uk[%34] : memref<32xf32>
            %36 = arith.constant 4 : index
            %37 = arith.muli %kv_row, %36 : index
            %38 = arith.addi %37, %r : index
            %39 = memref.load %kv_cache[%38] : memref<80xf32>
            %40 = arith.mulf %35, %39 : f32
            %41 = arith.addf %31, %40 : f32
            scf.yield %41 : f32
          }
          %42 = arith.constant 2 : index
          %43 = arith.cmpi ult, %dim, %42 : index
          %44 = scf.if %43 -> (f32) {
            %45 = arith.constant 2 : index
            %46 = arith.muli %kv_row, %45 : index
            %47 = arith.addi %46, %dim : index
            %48 = memref.load %kr_cache[%47] : memref<40xf32>
            %49 = arith.addf %30, %48 : f32
            scf.yield %49 : f32
          } else {
            scf.yield %30 : f32
          }
          %50 = arith.constant 4 : index
          %51 = arith.muli %lane, %50 : index
          %52 = arith.addi %51, %dim : index
          %53 = memref.load %q_scratch_1[%52] : memref<256xf32>
          %54 = arith.mulf %53, %44 : f32
          %55 = arith.addf %22, %54 : f32
          scf.yield %55 : f32
        }
        %56 = arith.constant 5.000000e-01 : f32
        %57 = arith.mulf %21, %56 : f32
        %58 = vyre.bounded_score %57 : f32
        %59 = arith.constant 4 : index
        %60 = arith.muli %lane, %59 : index
        %61 = arith.addi %60, %j : index
        memref.store %58, %score_tile_1[%61] : memref<256xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %62 = arith.constant 2 : index
      %head_1 = arith.remui %item_1, %62 : index
      %63 = arith.constant 2 : index
      %seq_1 = arith.divui %item_1, %63 : index
      %64 = arith.constant 2 : index
      %table_base_1 = arith.muli %seq_1, %64 : index
      %65 = arith.constant 0 : index
      %66 = arith.constant 4 : index
      %67 = arith.constant 1 : index
      scf.for %d = %65 to %66 step %67 {
        %68 = arith.constant 4 : index
        %69 = arith.muli %lane_1, %68 : index
        %70 = arith.addi %69, %d : index
        %71 = memref.load %o_acc_1[%70] : memref<256xf32>
        %72 = arith.mulf %71, %rescale : f32
        memref.store %72, %o_acc_1[%70] : memref<256xf32>
      }
      %73 = arith.constant 0 : index
      %74 = arith.constant 1 : index
      scf.for %j_1 = %73 to %tile_len_1 step %74 {
        %weight = vyre.tile_weight %j_1 : f32
        %t_1 = arith.addi %tile_start_1, %j_1 : index
        %75 = arith.constant 4 : index
        %76 = arith.divui %t_1, %75 : index
        %table_entry_1 = arith.addi %table_base_1, %76 : index
        %77 = memref.load %block_table[%table_entry_1] : memref<4xi32>
        %78 = arith.constant 0 : i32
        %79 = arith.constant 4 : i32
        %80 = arith.maxsi %77, %78 : i32
        %81 = arith.minsi %80, %79 : i32
        %82 = arith.index_cast %81 : i32 to index
        %83 = arith.constant 4 : index
        %84 = arith.muli %82, %83 : index
        %85 = arith.constant 4 : index
        %86 = arith.remui %t_1, %85 : index
        %kv_row_1 = arith.addi %84, %86 : index
        %87 = arith.constant 0 : index
        %88 = arith.constant 4 : index
        %89 = arith.constant 1 : index
        scf.for %dim_1 = %87 to %88 step %89 {
          %90 = arith.constant 4 : index
          %91 = arith.muli %head_1, %90 : index
          %92 = arith.addi %91, %dim_1 : index
          %93 = arith.constant 0.000000e+00 : f32
          %94 = arith.constant 0 : index
          %95 = arith.constant 4 : index
          %96 = arith.constant 1 : index
          %97 = scf.for %r_1 = %94 to %95 step %96 iter_args(%98 = %93) -> (f32) {
            %99 = arith.constant 8 : index
            %100 = arith.muli %r_1, %99 : index
            %101 = arith.addi %100, %92 : index
            %102 = memref.load %w_uv[%101] : memref<32xf32>
            %103 = arith.constant 4 : index
            %104 = arith.muli %kv_row_1, %103 : index
            %105 = arith.addi %104, %r_1 : index
            %106 = memref.load %kv_cache[%105] : memref<80xf32>
            %107 = arith.mulf %102, %106 : f32
            %108 = arith.addf %98, %107 : f32
            scf.yield %108 : f32
          }
          %109 = arith.constant 4 : index
          %110 = arith.muli %lane_1, %109 : index
          %111 = arith.addi %110, %dim_1 : index
          %112 = memref.load %o_acc_1[%111] : memref<256xf32>
          %113 = arith.mulf %weight, %97 : f32
          %114 = arith.addf %112, %113 : f32
          memref.store %114, %o_acc_1[%111] : memref<256xf32>
        }
      }
      vyre.yield
    }
  }
}

// CHECK: absorb_mla_errors.mlir:8:3: error: vyre-absorb-mla: rows=4 must divide the batch (2): each invocation projects that many sequences' rows of one head

// rows is an option of the three-kernel program only, and never negative.
// NEGATIVE: error: pass 'vyre-absorb-mla': option rows takes an integer of at least 0 (e.g. vyre-absorb-mla{rows=0}), got -1
// ONE-KERNEL: vyre-absorb-mla: rows (rows of a head an item of the projections, 0 for the tuning's) must be >= 0 and is kernels=3's option, got rows=
