// RUN: vyre-opt %s -p 'vyre-to-gpu{optimize=none}' | filecheck %s
// RUN: vyre-opt %s -p vyre-stage-kv-tiles | filecheck %s --check-prefix=STAGE
// RUN: vyre-opt %s -p 'vyre-to-gpu{device=h200}' | filecheck %s --check-prefix=DEFAULT
// RUN: vyre-opt %s -p 'vyre-to-gpu{optimize=none}' -t spirv-asm | filecheck %s --check-prefix=SPIRV
// RUN: vyre-opt %s -p vyre-to-gpu -t spirv -o %t.spv
// RUN: %if spirv-val %{ spirv-val --target-env vulkan1.1 %t.spv %}

// FlashAttention-2 with f16 buffers (vx.flash_attention_2(64, 4, 16,
// dtype="f16")): every load of q, k and v is widened to f32 (arith.extf),
// the scratch arrays, scores and softmax state stay f32, and the one write
// of the output rounds to nearest even (arith.truncf).
// CHECK:       "gpu.func"() <{function_type = (memref<256xf16>, memref<256xf16>, memref<256xf16>, memref<256xf16>) -> (), kernel}>
// CHECK:         %q_scratch = memref.alloc() {vyre.role = #vyre<scratch_role q_scratch>} : memref<256xf32, 3 : i64>
// CHECK:         %[[Q:.*]] = memref.load %q[%{{.*}}] : memref<256xf16>
// CHECK-NEXT:    %[[QW:.*]] = arith.extf %[[Q]] : f16 to f32
// CHECK:         memref.store %[[QW]], %q_scratch[%{{.*}}] : memref<256xf32, 3 : i64>
// CHECK:         %[[K:.*]] = memref.load %k[%{{.*}}] : memref<256xf16>
// CHECK-NEXT:    %{{.*}} = arith.extf %[[K]] : f16 to f32
// CHECK:         math.exp
// CHECK:         %[[V:.*]] = memref.load %v[%{{.*}}] : memref<256xf16>
// CHECK-NEXT:    %{{.*}} = arith.extf %[[V]] : f16 to f32
// CHECK:         %[[OUT:.*]] = arith.truncf %{{.*}} : f32 to f16
// CHECK-NEXT:    memref.store %[[OUT]], %out[%{{.*}}] : memref<256xf16>
// CHECK-NOT:     arith.truncf
// CHECK:         buffers = [#vyre.buffer<name = "q", binding = 0, access = read, shape = [64, 4], dtype = f16>

// vyre-stage-kv-tiles copies a tile of k (then v) widened into an f32
// workgroup array; the fragment then reads f32 there, without a widening.
// STAGE:       %kv_tile = vyre.scratch "kv_tile" {vyre.role = #vyre<scratch_role kv_tile>} : memref<64xf32>
// STAGE:       %[[K:.*]] = memref.load %k[%{{.*}}] : memref<256xf16>
// STAGE-NEXT:  %[[KW:.*]] = arith.extf %[[K]] : f16 to f32
// STAGE:       memref.store %[[KW]], %kv_tile[%{{.*}}] : memref<64xf32>
// STAGE:       gpu.barrier
// STAGE:       %[[T:.*]] = memref.load %kv_tile[%{{.*}}] : memref<64xf32>
// STAGE-NOT:   arith.extf %[[T]]
// STAGE:       memref.load %v[%{{.*}}] : memref<256xf16>

// The default optimisation reads the f16 buffers four halves at a time
// (rows of 4 dims), each half widened on its own, and the output is
// still written one rounded element at a time.
// DEFAULT:     "gpu.func"
// DEFAULT:     %[[QV:.*]] = vector.load %q[%{{.*}}] : memref<256xf16>, vector<4xf16>
// DEFAULT-NEXT: %[[Q0:.*]] = vector.extract %[[QV]][0] : f16 from vector<4xf16>
// DEFAULT:     arith.extf %[[Q0]] : f16 to f32
// DEFAULT:     vector.load %k[%{{.*}}] : memref<256xf16>, vector<4xf16>
// DEFAULT:     arith.truncf %{{.*}} : f32 to f16
// DEFAULT-NOT: vector.load %out

// SPIR-V: 16-bit storage only (no Float16 arithmetic): the buffers are
// arrays of 16-bit uints, widened and narrowed with integer instructions.
// SPIRV:       OpCapability Shader
// SPIRV-NEXT:  OpCapability StorageBuffer16BitAccess
// SPIRV-NOT:   OpCapability Float16
// SPIRV:       OpDecorate %{{.*}} ArrayStride 2
// SPIRV:       OpTypeInt 16 0
// SPIRV:       OpUConvert
builtin.module {
  vyre.kernel @flash_attention_2 items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 4] : memref<256xf16>
    %k = vyre.buffer "k" binding 1 read [64, 4] : memref<256xf16>
    %v = vyre.buffer "v" binding 2 read [64, 4] : memref<256xf16>
    %out = vyre.buffer "out" binding 3 write [64, 4] : memref<256xf16>
    %q_scratch = vyre.scratch "q_scratch" : memref<256xf32>
    %score_tile = vyre.scratch "score_tile" : memref<1024xf32>
    %o_acc = vyre.scratch "o_acc" : memref<256xf32>
    vyre.tiled_online_softmax q(%q) out(%out) scratch(%q_scratch, %score_tile, %o_acc)
        item_count 64 seq_len 64 head_dim 4 tile_size 16 tile_count 4
        : (memref<256xf16>, memref<256xf16>, memref<256xf32>, memref<1024xf32>, memref<256xf32>)
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
          %15 = memref.load %k[%14] : memref<256xf16>
          %16 = arith.extf %15 : f16 to f32
          %17 = arith.mulf %11, %16 : f32
          %18 = arith.addf %7, %17 : f32
          scf.yield %18 : f32
        }
        %19 = arith.constant 5.000000e-01 : f32
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
      %26 = arith.constant 4 : index
      %27 = arith.constant 1 : index
      scf.for %d_1 = %25 to %26 step %27 {
        %28 = arith.constant 0.000000e+00 : f32
        %29 = arith.constant 0 : index
        %30 = arith.constant 1 : index
        %31 = scf.for %j_1 = %29 to %tile_len_1 step %30 iter_args(%32 = %28) -> (f32) {
          %weight = vyre.tile_weight %j_1 : f32
          %t_1 = arith.addi %tile_start_1, %j_1 : index
          %33 = arith.constant 4 : index
          %34 = arith.muli %t_1, %33 : index
          %35 = arith.addi %34, %d_1 : index
          %36 = memref.load %v[%35] : memref<256xf16>
          %37 = arith.extf %36 : f16 to f32
          %38 = arith.mulf %weight, %37 : f32
          %39 = arith.addf %32, %38 : f32
          scf.yield %39 : f32
        }
        %40 = arith.constant 4 : index
        %41 = arith.muli %lane_1, %40 : index
        %42 = arith.addi %41, %d_1 : index
        %43 = memref.load %o_acc_1[%42] : memref<256xf32>
        %44 = arith.mulf %rescale, %43 : f32
        %45 = arith.addf %44, %31 : f32
        memref.store %45, %o_acc_1[%42] : memref<256xf32>
      }
      vyre.yield
    }
  }
}
