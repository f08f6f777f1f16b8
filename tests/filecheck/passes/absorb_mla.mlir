// RUN: vyre-opt %s --split-input-file -p vyre-absorb-mla | filecheck %s
// RUN: vyre-opt %s --split-input-file -p vyre-to-gpu | filecheck %s --check-prefix=DEFAULT
// RUN: vyre-opt %s --split-input-file -p 'vyre-to-gpu{optimize=exact}' | filecheck %s --check-prefix=EXACT
// RUN: vyre-opt %s --split-input-file -p 'vyre-absorb-mla{kernels=3}' | filecheck %s --check-prefix=PROGRAM
// RUN: not vyre-opt %s --split-input-file -p 'vyre-absorb-mla{kernels=2}' 2>&1 | filecheck %s --check-prefix=BAD-KERNELS

// vyre-absorb-mla rewrites the kernels that record they are the seed's MLA
// decode (vyre.mla, here seq 8, 2 heads, head_dim 4, kv_lora_rank 4, rope
// 2, tile 4, as vx.mla_decode builds it) and whose buffers and skeleton are
// the ones that record implies: it absorbs w_uk into the query and w_uv into
// the output, the kernel gains the per-lane latent scratch q_lat and o_lat,
// no fragment decompresses a key or a value any more, and the record goes.
// Batched, ragged and paged MLA likewise.  FlashAttention-2, a kernel
// without the record and one whose record its buffers contradict are left
// alone.

builtin.module {
  vyre.kernel @mla_decode items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 4, qk_rope_head_dim = 2>} {
    %q = vyre.buffer "q" binding 0 read [2, 4] : memref<8xf32>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [8, 4] : memref<32xf32>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [8, 2] : memref<16xf32>
    %w_uk = vyre.buffer "w_uk" binding 3 read [4, 8] : memref<32xf32>
    %w_uv = vyre.buffer "w_uv" binding 4 read [4, 8] : memref<32xf32>
    %out = vyre.buffer "out" binding 5 write [2, 4] : memref<8xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<256xf32>
    %score_tile = vyre.scratch "score_tile" : memref<256xf32>
    %o_acc = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2 seq_len 8 head_dim 4 tile_size 4 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<256xf32>, memref<256xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 0 : index
      %1 = arith.constant 1 : index
      scf.for %j = %0 to %tile_len step %1 {
        %t = arith.addi %tile_start, %j : index
        %2 = arith.constant 0.000000e+00 : f32
        %3 = arith.constant 0 : index
        %4 = arith.constant 4 : index
        %5 = arith.constant 1 : index
        %6 = scf.for %dim = %3 to %4 step %5 iter_args(%7 = %2) -> (f32) {
          %8 = arith.constant 4 : index
          %9 = arith.muli %item, %8 : index
          %10 = arith.addi %9, %dim : index
          %11 = arith.constant 0.000000e+00 : f32
          %12 = arith.constant 0 : index
          %13 = arith.constant 4 : index
          %14 = arith.constant 1 : index
          %15 = scf.for %r = %12 to %13 step %14 iter_args(%16 = %11) -> (f32) {
            %17 = arith.constant 8 : index
            %18 = arith.muli %r, %17 : index
            %19 = arith.addi %18, %10 : index
            %20 = memref.load %w_uk[%19] : memref<32xf32>
            %21 = arith.constant 4 : index
            %22 = arith.muli %t, %21 : index
            %23 = arith.addi %22, %r : index
            %24 = memref.load %kv_cache[%23] : memref<32xf32>
            %25 = arith.mulf %20, %24 : f32
            %26 = arith.addf %16, %25 : f32
            scf.yield %26 : f32
          }
          %27 = arith.constant 2 : index
          %28 = arith.cmpi ult, %dim, %27 : index
          %29 = scf.if %28 -> (f32) {
            %30 = arith.constant 2 : index
            %31 = arith.muli %t, %30 : index
            %32 = arith.addi %31, %dim : index
            %33 = memref.load %kr_cache[%32] : memref<16xf32>
            %34 = arith.addf %15, %33 : f32
            scf.yield %34 : f32
          } else {
            scf.yield %15 : f32
          }
          %35 = arith.constant 4 : index
          %36 = arith.muli %lane, %35 : index
          %37 = arith.addi %36, %dim : index
          %38 = memref.load %q_scratch_1[%37] : memref<256xf32>
          %39 = arith.mulf %38, %29 : f32
          %40 = arith.addf %7, %39 : f32
          scf.yield %40 : f32
        }
        %41 = arith.constant 5.000000e-01 : f32
        %42 = arith.mulf %6, %41 : f32
        %43 = vyre.bounded_score %42 : f32
        %44 = arith.constant 4 : index
        %45 = arith.muli %lane, %44 : index
        %46 = arith.addi %45, %j : index
        memref.store %43, %score_tile_1[%46] : memref<256xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %47 = arith.constant 0 : index
      %48 = arith.constant 4 : index
      %49 = arith.constant 1 : index
      scf.for %d = %47 to %48 step %49 {
        %50 = arith.constant 4 : index
        %51 = arith.muli %lane_1, %50 : index
        %52 = arith.addi %51, %d : index
        %53 = memref.load %o_acc_1[%52] : memref<256xf32>
        %54 = arith.mulf %53, %rescale : f32
        memref.store %54, %o_acc_1[%52] : memref<256xf32>
      }
      %55 = arith.constant 0 : index
      %56 = arith.constant 1 : index
      scf.for %j_1 = %55 to %tile_len_1 step %56 {
        %weight = vyre.tile_weight %j_1 : f32
        %t_1 = arith.addi %tile_start_1, %j_1 : index
        %57 = arith.constant 0 : index
        %58 = arith.constant 4 : index
        %59 = arith.constant 1 : index
        scf.for %dim_1 = %57 to %58 step %59 {
          %60 = arith.constant 4 : index
          %61 = arith.muli %item_1, %60 : index
          %62 = arith.addi %61, %dim_1 : index
          %63 = arith.constant 0.000000e+00 : f32
          %64 = arith.constant 0 : index
          %65 = arith.constant 4 : index
          %66 = arith.constant 1 : index
          %67 = scf.for %r_1 = %64 to %65 step %66 iter_args(%68 = %63) -> (f32) {
            %69 = arith.constant 8 : index
            %70 = arith.muli %r_1, %69 : index
            %71 = arith.addi %70, %62 : index
            %72 = memref.load %w_uv[%71] : memref<32xf32>
            %73 = arith.constant 4 : index
            %74 = arith.muli %t_1, %73 : index
            %75 = arith.addi %74, %r_1 : index
            %76 = memref.load %kv_cache[%75] : memref<32xf32>
            %77 = arith.mulf %72, %76 : f32
            %78 = arith.addf %68, %77 : f32
            scf.yield %78 : f32
          }
          %79 = arith.constant 4 : index
          %80 = arith.muli %lane_1, %79 : index
          %81 = arith.addi %80, %dim_1 : index
          %82 = memref.load %o_acc_1[%81] : memref<256xf32>
          %83 = arith.mulf %weight, %67 : f32
          %84 = arith.addf %82, %83 : f32
          memref.store %84, %o_acc_1[%81] : memref<256xf32>
        }
      }
      vyre.yield
    }
  }
}

// CHECK-LABEL: vyre.kernel @mla_decode items 2 workgroup_size 64 {
// CHECK-NOT:     vyre.mla
// CHECK:         %o_acc = vyre.scratch "o_acc" : memref<256xf32>
// CHECK-NEXT:    %q_lat = vyre.scratch "q_lat" : memref<256xf32>
// CHECK-NEXT:    %o_lat = vyre.scratch "o_lat" : memref<256xf32>
// CHECK-NEXT:    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
// CHECK-NEXT:        item_count 2 seq_len 8 head_dim 4 tile_size 4 tile_count 2
// A key's score: q_lat . kv_cache[t] over the rank, then q . kr_cache[t] over
// the rope dims.
// CHECK:         scores(%item, %lane, %tile_start, %tile_len, %{{.*}}, %{{.*}}) {
// CHECK-NOT:       %w_uk
// CHECK:           scf.for %j = %{{.*}} to %tile_len
// CHECK:             scf.for %r = %{{.*}} to %{{.*}} step
// CHECK:               memref.load %q_lat
// CHECK:               memref.load %kv_cache
// CHECK:             scf.for %dim =
// CHECK:               memref.load %kr_cache
// CHECK:             vyre.bounded_score
// CHECK:             memref.store %{{.*}}, %score_tile_1
// CHECK:           vyre.yield
// CHECK-NEXT:    }
// The update folds the tile into o_lat like FlashAttention-2 folds it into
// o_acc: o_lat[r] = rescale * o_lat[r] + sum over j of weight(j) * kv_cache[t, r].
// CHECK-NEXT:    update(%{{.*}}, %{{.*}}, %{{.*}}, %[[LEN:.*]], %m_new, %rescale, %{{.*}}, %{{.*}}) {
// CHECK:           scf.for %r_1 =
// CHECK:             %[[WEIGHTED:.*]] = scf.for %j_1 = %{{.*}} to %[[LEN]]
// CHECK:               memref.load %kv_cache
// CHECK-NEXT:          %weight = vyre.tile_weight %j_1 : f32
// CHECK-NEXT:          arith.mulf %weight
// CHECK:             %[[O:.*]] = memref.load %o_lat
// CHECK-NEXT:        %[[RESCALED:.*]] = arith.mulf %rescale, %[[O]] : f32
// CHECK-NEXT:        %[[NEW:.*]] = arith.addf %[[RESCALED]], %[[WEIGHTED]] : f32
// CHECK-NEXT:        memref.store %[[NEW]], %o_lat
// CHECK:           vyre.yield
// CHECK-NEXT:    }
// The prologue computes q_lat[r] = sum over dim of q[dim] * w_uk[r, head, dim]
// and zeroes o_lat; the epilogue projects o_lat through w_uv into o_acc.
// CHECK-NEXT:    prologue(%{{.*}}, %{{.*}}, %[[QS:.*]], %{{.*}}) {
// CHECK:           scf.for %dim_1 =
// CHECK:             memref.load %[[QS]]
// CHECK:             memref.load %w_uk
// CHECK:           memref.store %{{.*}}, %q_lat
// CHECK:           memref.store %{{.*}}, %o_lat
// CHECK:         epilogue(%{{.*}}, %{{.*}}, %[[OACC:.*]]) {
// CHECK:           scf.for %d =
// CHECK:             memref.load %w_uv
// CHECK:             memref.load %o_lat
// CHECK:           memref.store %{{.*}}, %[[OACC]]
// CHECK:           vyre.yield

// kernels=3 absorbs once per head: a program of three kernels that pass
// q_lat and o_lat through temp buffers; the attention between them reads
// the latent cache with a plain skeleton (no hooks).
// PROGRAM-LABEL: vyre.kernel @mla_decode_absorb_query items 8
// PROGRAM:         %q_lat = vyre.buffer "q_lat" binding 6 temp [2, 4]
// PROGRAM:         scf.for %dim
// PROGRAM:         memref.store %{{.*}}, %q_lat[%item]
// PROGRAM-LABEL: vyre.kernel @mla_decode items 2
// PROGRAM:         %o_lat = vyre.buffer "o_lat" binding 7 temp [2, 4]
// PROGRAM:         vyre.tiled_online_softmax q(%q_lat) out(%o_lat)
// PROGRAM-NEXT:      item_count 2 seq_len 8 head_dim 4
// PROGRAM-NOT:     prologue
// PROGRAM-LABEL: vyre.kernel @mla_decode_project items 8
// PROGRAM:         memref.load %w_uv
// PROGRAM:         memref.load %o_lat
// PROGRAM:         memref.store %{{.*}}, %out[%item]
// BAD-KERNELS: vyre-absorb-mla: kernels must be 1 (absorbed in each invocation) or 3 (once per head, a program of three kernels), got 2

// At optimize=default vyre-to-gpu absorbs once per head, and vyre-split-kv
// leaves the merge of each head's splits to a kernel of its own: four
// kernels run in order; optimize=exact keeps the seed's form.
// DEFAULT-LABEL: "gpu.module"() <{sym_name = "mla_decode_absorb_query"}>
// DEFAULT-LABEL: "gpu.module"() <{sym_name = "mla_decode"}>
// DEFAULT-LABEL: "gpu.module"() <{sym_name = "mla_decode_merge"}>
// DEFAULT-LABEL: "gpu.module"() <{sym_name = "mla_decode_project"}>
// EXACT-LABEL:   gpu.func
// EXACT-NOT:       q_lat
// EXACT:           gpu.return

// -----

builtin.module {
  vyre.kernel @renamed_mla items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 4, qk_rope_head_dim = 2>} {
    %q = vyre.buffer "q" binding 0 read [2, 4] : memref<8xf32>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [8, 4] : memref<32xf32>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [8, 2] : memref<16xf32>
    %w_uk = vyre.buffer "w_uk" binding 3 read [4, 8] : memref<32xf32>
    %w_uv = vyre.buffer "w_uv" binding 4 read [4, 8] : memref<32xf32>
    %out = vyre.buffer "out" binding 5 write [2, 4] : memref<8xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<256xf32>
    %score_tile = vyre.scratch "score_tile" : memref<256xf32>
    %o_acc = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2 seq_len 8 head_dim 4 tile_size 4 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<256xf32>, memref<256xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 0 : index
      %1 = arith.constant 1 : index
      scf.for %j = %0 to %tile_len step %1 {
        %t = arith.addi %tile_start, %j : index
        %2 = arith.constant 0.000000e+00 : f32
        %3 = arith.constant 0 : index
        %4 = arith.constant 4 : index
        %5 = arith.constant 1 : index
        %6 = scf.for %dim = %3 to %4 step %5 iter_args(%7 = %2) -> (f32) {
          %8 = arith.constant 4 : index
          %9 = arith.muli %item, %8 : index
          %10 = arith.addi %9, %dim : index
          %11 = arith.constant 0.000000e+00 : f32
          %12 = arith.constant 0 : index
          %13 = arith.constant 4 : index
          %14 = arith.constant 1 : index
          %15 = scf.for %r = %12 to %13 step %14 iter_args(%16 = %11) -> (f32) {
            %17 = arith.constant 8 : index
            %18 = arith.muli %r, %17 : index
            %19 = arith.addi %18, %10 : index
            %20 = memref.load %w_uk[%19] : memref<32xf32>
            %21 = arith.constant 4 : index
            %22 = arith.muli %t, %21 : index
            %23 = arith.addi %22, %r : index
            %24 = memref.load %kv_cache[%23] : memref<32xf32>
            %25 = arith.mulf %20, %24 : f32
            %26 = arith.addf %16, %25 : f32
            scf.yield %26 : f32
          }
          %27 = arith.constant 2 : index
          %28 = arith.cmpi ult, %dim, %27 : index
          %29 = scf.if %28 -> (f32) {
            %30 = arith.constant 2 : index
            %31 = arith.muli %t, %30 : index
            %32 = arith.addi %31, %dim : index
            %33 = memref.load %kr_cache[%32] : memref<16xf32>
            %34 = arith.addf %15, %33 : f32
            scf.yield %34 : f32
          } else {
            scf.yield %15 : f32
          }
          %35 = arith.constant 4 : index
          %36 = arith.muli %lane, %35 : index
          %37 = arith.addi %36, %dim : index
          %38 = memref.load %q_scratch_1[%37] : memref<256xf32>
          %39 = arith.mulf %38, %29 : f32
          %40 = arith.addf %7, %39 : f32
          scf.yield %40 : f32
        }
        %41 = arith.constant 5.000000e-01 : f32
        %42 = arith.mulf %6, %41 : f32
        %43 = vyre.bounded_score %42 : f32
        %44 = arith.constant 4 : index
        %45 = arith.muli %lane, %44 : index
        %46 = arith.addi %45, %j : index
        memref.store %43, %score_tile_1[%46] : memref<256xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %47 = arith.constant 0 : index
      %48 = arith.constant 4 : index
      %49 = arith.constant 1 : index
      scf.for %d = %47 to %48 step %49 {
        %50 = arith.constant 4 : index
        %51 = arith.muli %lane_1, %50 : index
        %52 = arith.addi %51, %d : index
        %53 = memref.load %o_acc_1[%52] : memref<256xf32>
        %54 = arith.mulf %53, %rescale : f32
        memref.store %54, %o_acc_1[%52] : memref<256xf32>
      }
      %55 = arith.constant 0 : index
      %56 = arith.constant 1 : index
      scf.for %j_1 = %55 to %tile_len_1 step %56 {
        %weight = vyre.tile_weight %j_1 : f32
        %t_1 = arith.addi %tile_start_1, %j_1 : index
        %57 = arith.constant 0 : index
        %58 = arith.constant 4 : index
        %59 = arith.constant 1 : index
        scf.for %dim_1 = %57 to %58 step %59 {
          %60 = arith.constant 4 : index
          %61 = arith.muli %item_1, %60 : index
          %62 = arith.addi %61, %dim_1 : index
          %63 = arith.constant 0.000000e+00 : f32
          %64 = arith.constant 0 : index
          %65 = arith.constant 4 : index
          %66 = arith.constant 1 : index
          %67 = scf.for %r_1 = %64 to %65 step %66 iter_args(%68 = %63) -> (f32) {
            %69 = arith.constant 8 : index
            %70 = arith.muli %r_1, %69 : index
            %71 = arith.addi %70, %62 : index
            %72 = memref.load %w_uv[%71] : memref<32xf32>
            %73 = arith.constant 4 : index
            %74 = arith.muli %t_1, %73 : index
            %75 = arith.addi %74, %r_1 : index
            %76 = memref.load %kv_cache[%75] : memref<32xf32>
            %77 = arith.mulf %72, %76 : f32
            %78 = arith.addf %68, %77 : f32
            scf.yield %78 : f32
          }
          %79 = arith.constant 4 : index
          %80 = arith.muli %lane_1, %79 : index
          %81 = arith.addi %80, %dim_1 : index
          %82 = memref.load %o_acc_1[%81] : memref<256xf32>
          %83 = arith.mulf %weight, %67 : f32
          %84 = arith.addf %82, %83 : f32
          memref.store %84, %o_acc_1[%81] : memref<256xf32>
        }
      }
      vyre.yield
    }
  }
}

// The kernel's name is only a label: a seed MLA body under another name is absorbed.
// CHECK-LABEL: vyre.kernel @renamed_mla
// CHECK:         %q_lat = vyre.scratch "q_lat" : memref<256xf32>
// PROGRAM-LABEL: vyre.kernel @renamed_mla_absorb_query
// PROGRAM-LABEL: vyre.kernel @renamed_mla items 2
// PROGRAM-LABEL: vyre.kernel @renamed_mla_project
// DEFAULT-LABEL: "gpu.module"() <{sym_name = "renamed_mla_absorb_query"}>
// DEFAULT-LABEL: "gpu.module"() <{sym_name = "renamed_mla_project"}>
// EXACT-LABEL:   gpu.func
// EXACT-NOT:       q_lat
// EXACT:           gpu.return

// -----

builtin.module {
  vyre.kernel @flash_attention_2 items 8 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [8, 4] : memref<32xf32>
    %k = vyre.buffer "k" binding 1 read [8, 4] : memref<32xf32>
    %v = vyre.buffer "v" binding 2 read [8, 4] : memref<32xf32>
    %out = vyre.buffer "out" binding 3 write [8, 4] : memref<32xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<256xf32>
    %score_tile = vyre.scratch "score_tile" : memref<256xf32>
    %o_acc = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 8 seq_len 8 head_dim 4 tile_size 4 tile_count 2
        : (memref<32xf32>, memref<32xf32>, memref<256xf32>, memref<256xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 0 : index
      %1 = arith.constant 1 : index
      scf.for %j = %0 to %tile_len step %1 {
        %t = arith.addi %tile_start, %j : index
        %2 = arith.constant 0.000000e+00 : f32
        %3 = arith.constant 0 : index
        %4 = arith.constant 4 : index
        %5 = arith.constant 1 : index
        %6 = scf.for %d = %3 to %4 step %5 iter_args(%7 = %2) -> (f32) {
          %8 = arith.constant 4 : index
          %9 = arith.muli %lane, %8 : index
          %10 = arith.addi %9, %d : index
          %11 = memref.load %q_scratch_1[%10] : memref<256xf32>
          %12 = arith.constant 4 : index
          %13 = arith.muli %t, %12 : index
          %14 = arith.addi %13, %d : index
          %15 = memref.load %k[%14] : memref<32xf32>
          %16 = arith.mulf %11, %15 : f32
          %17 = arith.addf %7, %16 : f32
          scf.yield %17 : f32
        }
        %18 = arith.constant 5.000000e-01 : f32
        %19 = arith.mulf %6, %18 : f32
        %20 = vyre.bounded_score %19 : f32
        %21 = arith.constant 4 : index
        %22 = arith.muli %lane, %21 : index
        %23 = arith.addi %22, %j : index
        memref.store %20, %score_tile_1[%23] : memref<256xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %24 = arith.constant 0 : index
      %25 = arith.constant 4 : index
      %26 = arith.constant 1 : index
      scf.for %d_1 = %24 to %25 step %26 {
        %27 = arith.constant 0.000000e+00 : f32
        %28 = arith.constant 0 : index
        %29 = arith.constant 1 : index
        %30 = scf.for %j_1 = %28 to %tile_len_1 step %29 iter_args(%31 = %27) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %32 = arith.constant 4 : index
          %33 = arith.muli %t_1, %32 : index
          %34 = arith.addi %33, %d_1 : index
          %35 = memref.load %v[%34] : memref<32xf32>
          %36 = arith.mulf %weight, %35 : f32
          %37 = arith.addf %31, %36 : f32
          scf.yield %37 : f32
        }
        %38 = arith.constant 4 : index
        %39 = arith.muli %lane_1, %38 : index
        %40 = arith.addi %39, %d_1 : index
        %41 = memref.load %o_acc_1[%40] : memref<256xf32>
        %42 = arith.mulf %rescale, %41 : f32
        %43 = arith.addf %42, %30 : f32
        memref.store %43, %o_acc_1[%40] : memref<256xf32>
      }
      vyre.yield
    }
  }
}

// FlashAttention-2 is not MLA: untouched.
// CHECK-LABEL: vyre.kernel @flash_attention_2
// CHECK-NOT:     q_lat
// CHECK:         memref.load %k[
// CHECK-NOT:     q_lat
// CHECK:         memref.load %v[
// CHECK-NOT:     q_lat
// PROGRAM-LABEL: vyre.kernel @flash_attention_2
// PROGRAM-NOT:     temp
// PROGRAM:         memref.load %v[
// DEFAULT-LABEL: gpu.func
// DEFAULT-NOT:     q_lat
// DEFAULT:         gpu.return
// EXACT-LABEL:   gpu.func
// EXACT:           gpu.return

// -----

builtin.module {
  vyre.kernel @mla_modified items 2 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [2, 4] : memref<8xf32>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [8, 4] : memref<32xf32>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [8, 2] : memref<16xf32>
    %w_uk = vyre.buffer "w_uk" binding 3 read [4, 8] : memref<32xf32>
    %w_uv = vyre.buffer "w_uv" binding 4 read [4, 8] : memref<32xf32>
    %out = vyre.buffer "out" binding 5 write [2, 4] : memref<8xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<256xf32>
    %score_tile = vyre.scratch "score_tile" : memref<256xf32>
    %o_acc = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2 seq_len 8 head_dim 4 tile_size 4 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<256xf32>, memref<256xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      %0 = arith.constant 0 : index
      %1 = arith.constant 1 : index
      scf.for %j = %0 to %tile_len step %1 {
        %t = arith.addi %tile_start, %j : index
        %2 = arith.constant 0.000000e+00 : f32
        %3 = arith.constant 0 : index
        %4 = arith.constant 4 : index
        %5 = arith.constant 1 : index
        %6 = scf.for %dim = %3 to %4 step %5 iter_args(%7 = %2) -> (f32) {
          %8 = arith.constant 4 : index
          %9 = arith.muli %item, %8 : index
          %10 = arith.addi %9, %dim : index
          %11 = arith.constant 0.000000e+00 : f32
          %12 = arith.constant 0 : index
          %13 = arith.constant 4 : index
          %14 = arith.constant 1 : index
          %15 = scf.for %r = %12 to %13 step %14 iter_args(%16 = %11) -> (f32) {
            %17 = arith.constant 8 : index
            %18 = arith.muli %r, %17 : index
            %19 = arith.addi %18, %10 : index
            %20 = memref.load %w_uk[%19] : memref<32xf32>
            %21 = arith.constant 4 : index
            %22 = arith.muli %t, %21 : index
            %23 = arith.addi %22, %r : index
            %24 = memref.load %kv_cache[%23] : memref<32xf32>
            %25 = arith.mulf %20, %24 : f32
            %26 = arith.addf %16, %25 : f32
            scf.yield %26 : f32
          }
          %27 = arith.constant 2 : index
          %28 = arith.cmpi ult, %dim, %27 : index
          %29 = scf.if %28 -> (f32) {
            %30 = arith.constant 2 : index
            %31 = arith.muli %t, %30 : index
            %32 = arith.addi %31, %dim : index
            %33 = memref.load %kr_cache[%32] : memref<16xf32>
            %34 = arith.addf %15, %33 : f32
            scf.yield %34 : f32
          } else {
            scf.yield %15 : f32
          }
          %35 = arith.constant 4 : index
          %36 = arith.muli %lane, %35 : index
          %37 = arith.addi %36, %dim : index
          %38 = memref.load %q_scratch_1[%37] : memref<256xf32>
          %39 = arith.mulf %38, %29 : f32
          %40 = arith.addf %7, %39 : f32
          scf.yield %40 : f32
        }
        %41 = arith.constant 2.500000e-01 : f32
        %42 = arith.mulf %6, %41 : f32
        %43 = vyre.bounded_score %42 : f32
        %44 = arith.constant 4 : index
        %45 = arith.muli %lane, %44 : index
        %46 = arith.addi %45, %j : index
        memref.store %43, %score_tile_1[%46] : memref<256xf32>
      }
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      %47 = arith.constant 0 : index
      %48 = arith.constant 4 : index
      %49 = arith.constant 1 : index
      scf.for %d = %47 to %48 step %49 {
        %50 = arith.constant 4 : index
        %51 = arith.muli %lane_1, %50 : index
        %52 = arith.addi %51, %d : index
        %53 = memref.load %o_acc_1[%52] : memref<256xf32>
        %54 = arith.mulf %53, %rescale : f32
        memref.store %54, %o_acc_1[%52] : memref<256xf32>
      }
      %55 = arith.constant 0 : index
      %56 = arith.constant 1 : index
      scf.for %j_1 = %55 to %tile_len_1 step %56 {
        %weight = vyre.tile_weight %j_1 : f32
        %t_1 = arith.addi %tile_start_1, %j_1 : index
        %57 = arith.constant 0 : index
        %58 = arith.constant 4 : index
        %59 = arith.constant 1 : index
        scf.for %dim_1 = %57 to %58 step %59 {
          %60 = arith.constant 4 : index
          %61 = arith.muli %item_1, %60 : index
          %62 = arith.addi %61, %dim_1 : index
          %63 = arith.constant 0.000000e+00 : f32
          %64 = arith.constant 0 : index
          %65 = arith.constant 4 : index
          %66 = arith.constant 1 : index
          %67 = scf.for %r_1 = %64 to %65 step %66 iter_args(%68 = %63) -> (f32) {
            %69 = arith.constant 8 : index
            %70 = arith.muli %r_1, %69 : index
            %71 = arith.addi %70, %62 : index
            %72 = memref.load %w_uv[%71] : memref<32xf32>
            %73 = arith.constant 4 : index
            %74 = arith.muli %t_1, %73 : index
            %75 = arith.addi %74, %r_1 : index
            %76 = memref.load %kv_cache[%75] : memref<32xf32>
            %77 = arith.mulf %72, %76 : f32
            %78 = arith.addf %68, %77 : f32
            scf.yield %78 : f32
          }
          %79 = arith.constant 4 : index
          %80 = arith.muli %lane_1, %79 : index
          %81 = arith.addi %80, %dim_1 : index
          %82 = memref.load %o_acc_1[%81] : memref<256xf32>
          %83 = arith.mulf %weight, %67 : f32
          %84 = arith.addf %82, %83 : f32
          memref.store %84, %o_acc_1[%81] : memref<256xf32>
        }
      }
      vyre.yield
    }
  }
}

// No vyre.mla record: not MLA decode to the pass, whatever its buffers and
// fragments (here the seed's but for the scale, 0.25 instead of
// 1/sqrt(head_dim) = 0.5; absorbing it would silently change its meaning).
// CHECK-LABEL: vyre.kernel @mla_modified
// CHECK-NOT:     q_lat
// CHECK:         arith.constant 2.500000e-01 : f32
// CHECK-NOT:     q_lat
// CHECK:         scf.for %d =
// CHECK:           %weight = vyre.tile_weight
// CHECK:             memref.load %w_uv
// CHECK-NOT:     q_lat
// PROGRAM-LABEL: vyre.kernel @mla_modified
// PROGRAM-NOT:     temp
// PROGRAM:         memref.load %w_uv
// DEFAULT-LABEL: gpu.func
// DEFAULT-NOT:     q_lat
// DEFAULT:         gpu.return
// EXACT-LABEL:   gpu.func
// EXACT:           gpu.return

// -----

// Batched (2 sequences), ragged and paged (pools of 5 pages of 4 keys, a
// block table of 2 pages a sequence), as vx.mla_decode(8, 2, 4, 4, 2, 4,
// batch=2, page_size=4, num_pages=5) builds it: the absorbed forms keep the
// run-time lengths and find each key through the block table.
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

// CHECK-LABEL: vyre.kernel @mla_paged items 4 workgroup_size 64 {
// CHECK-NOT:     vyre.mla
// CHECK:         %o_acc = vyre.scratch "o_acc" : memref<256xf32>
// CHECK-NEXT:    %q_lat = vyre.scratch "q_lat" : memref<256xf32>
// CHECK-NEXT:    %o_lat = vyre.scratch "o_lat" : memref<256xf32>
// CHECK-NEXT:    vyre.tiled_online_softmax q(%q) out(%out) kv_lens(%kv_lens) scratch(%q_scratch, %score_tile, %o_acc)
// CHECK-NEXT:        item_count 4 seq_len 8 head_dim 4 tile_size 4 tile_count 2 items_per_seq 2
// CHECK:         scores(
// CHECK-NOT:       %w_uk
// CHECK:           %seq = arith.divui %item,
// CHECK:           %table_base = arith.muli %seq,
// CHECK:             %table_entry = arith.addi %table_base,
// CHECK:             memref.load %block_table[%table_entry]
// CHECK:             %kv_row = arith.addi
// CHECK:               memref.load %q_lat
// CHECK:               arith.muli %kv_row,
// CHECK:               memref.load %kv_cache
// CHECK:             vyre.bounded_score
// CHECK:         update(
// CHECK:             memref.load %block_table
// CHECK:           memref.store %{{.*}}, %o_lat
// CHECK:         prologue(
// CHECK:           %head = arith.remui %{{.*}}, %{{.*}} : index
// CHECK:             memref.load %w_uk
// CHECK:         epilogue(
// CHECK:           %head_1 = arith.remui
// CHECK:             memref.load %w_uv
// kernels=3 with the tuning's rows for a batch of 2: an item of each
// projection computes its head's row of both sequences, reading each weight
// once for the two sums.
// PROGRAM-LABEL: vyre.kernel @mla_paged_absorb_query items 8
// PROGRAM:         %q_lat = vyre.buffer "q_lat" binding 8 temp [2, 2, 4]
// PROGRAM:           %head = arith.divui
// PROGRAM:           %seq_group = arith.divui %item
// PROGRAM:           %row = arith.addi
// PROGRAM:           scf.for %dim = {{.*}} iter_args({{.*}}) -> (f32, f32) {
// PROGRAM:             memref.load %w_uk
// PROGRAM-NOT:         memref.load %w_uk
// PROGRAM:             scf.yield
// PROGRAM:           memref.store %{{.*}}, %q_lat
// PROGRAM-NEXT:      arith.constant
// PROGRAM-NEXT:      arith.muli
// PROGRAM-NEXT:      arith.addi
// PROGRAM-NEXT:      memref.store %{{.*}}, %q_lat
// PROGRAM-LABEL: vyre.kernel @mla_paged items 4
// PROGRAM:         vyre.tiled_online_softmax q(%q_lat) out(%o_lat) kv_lens(%kv_lens)
// PROGRAM-NEXT:      item_count 4 seq_len 8 head_dim 4 tile_size 4 tile_count 2 items_per_seq 2
// PROGRAM:           memref.load %block_table
// PROGRAM-LABEL: vyre.kernel @mla_paged_project items 8
// PROGRAM:           scf.for %r = {{.*}} -> (f32, f32) {
// DEFAULT-LABEL: "gpu.module"() <{sym_name = "mla_paged_absorb_query"}>
// DEFAULT-LABEL: "gpu.module"() <{sym_name = "mla_paged"}>
// DEFAULT-LABEL: "gpu.module"() <{sym_name = "mla_paged_project"}>
// EXACT-LABEL:   gpu.func
// EXACT-NOT:       q_lat
// EXACT:           gpu.return

// -----

// The record says rows of kv_lora_rank 3, the buffers hold rows of 4: the
// kernel is not what it claims, and is left alone (the pass reads the
// record, then checks the kernel's buffers and skeleton against it).
builtin.module {
  vyre.kernel @mla_wrong_record items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 3, qk_rope_head_dim = 2>} {
    %q = vyre.buffer "q" binding 0 read [2, 4] : memref<8xf32>
    %kv_cache = vyre.buffer "kv_cache" binding 1 read [8, 4] : memref<32xf32>
    %kr_cache = vyre.buffer "kr_cache" binding 2 read [8, 2] : memref<16xf32>
    %w_uk = vyre.buffer "w_uk" binding 3 read [4, 8] : memref<32xf32>
    %w_uv = vyre.buffer "w_uv" binding 4 read [4, 8] : memref<32xf32>
    %out = vyre.buffer "out" binding 5 write [2, 4] : memref<8xf32>
    %q_scratch = vyre.scratch "q_scratch" : memref<256xf32>
    %score_tile = vyre.scratch "score_tile" : memref<256xf32>
    %o_acc = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 2 seq_len 8 head_dim 4 tile_size 4 tile_count 2
        : (memref<8xf32>, memref<8xf32>, memref<256xf32>, memref<256xf32>, memref<256xf32>)
    scores(%item, %lane, %tile_start, %tile_len, %q_scratch_1, %score_tile_1) {
      vyre.yield
    }
    update(%item_1, %lane_1, %tile_start_1, %tile_len_1, %m_new, %rescale, %score_tile_2, %o_acc_1) {
      vyre.yield
    }
  }
}

// CHECK-LABEL: vyre.kernel @mla_wrong_record items 2 workgroup_size 64 attributes {vyre.mla = #vyre.mla<seq_len = 8, num_heads = 2, head_dim = 4, kv_lora_rank = 3, qk_rope_head_dim = 2>}
// CHECK-NOT:     q_lat
// CHECK:         vyre.tiled_online_softmax q(%q) out(%out)
// PROGRAM-LABEL: vyre.kernel @mla_wrong_record items 2
// PROGRAM-NOT:     temp
// DEFAULT-LABEL: gpu.func
// DEFAULT-NOT:     q_lat
// DEFAULT:         gpu.return
// EXACT-LABEL:   gpu.func
// EXACT:           gpu.return
