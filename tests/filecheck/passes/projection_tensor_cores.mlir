// RUN: vyre-opt %s -p 'vyre-projection-tensor-cores{device=h200}' | filecheck %s
// RUN: vyre-opt %s -p 'vyre-projection-tensor-cores{device=generic}' | filecheck %s --check-prefix=LEFT
// RUN: vyre-opt %s -p 'vyre-to-gpu{device=h200}' | filecheck %s --check-prefix=DEFAULT
// RUN: vyre-opt %s -p 'vyre-to-gpu{device=h200 matrix_units=false}' | filecheck %s --check-prefix=LANES
// RUN: vyre-opt %s -p 'vyre-plan{device=h200}' | filecheck %s --check-prefix=PLAN
// RUN: vyre-opt %s -p 'vyre-plan{device=h200 matrix_units=false}' | filecheck %s --check-prefix=NOPLAN

// MLA decode's output projection in bf16 (vx.mla_decode(batch=2,
// seq_len=64, num_heads=2, head_dim=16, kv_lora_rank=32,
// qk_rope_head_dim=16, dtype="bf16") after vyre-absorb-mla{kernels=3}):
// out[s, h, :] = o_lat[s, h, :] W_uv[h], as its record says.  Two
// sequences (one row block of 16, 14 rows past the batch) and 16 columns
// (one subgroup's block; the other three repeat it and store nothing).

// CHECK:      vyre.kernel @mla_decode_project items 256 workgroup_size 128 {
// CHECK-NOT:  vyre.head_product
// CHECK:        %hp_source = vyre.scratch "hp_source" : memref<640xbf16>
// CHECK-NEXT:   %hp_dest = vyre.scratch "hp_dest" : memref<1024xf32>
// CHECK:        gpu.subgroup_mma_constant_matrix %{{.*}} : !gpu.mma_matrix<16x16xf32, "COp">
// CHECK:        scf.for %chunk = {{.*}} iter_args({{.*}}) -> (!gpu.mma_matrix<16x16xf32, "COp">) {
// CHECK:          "gpu.barrier"() : () -> ()
// CHECK:          scf.for %staged =
// CHECK:            memref.store %{{.*}}, %hp_source[%{{.*}}] : memref<640xbf16>
// CHECK:          "gpu.barrier"() : () -> ()
// CHECK-COUNT-2:  gpu.subgroup_mma_load_matrix %w_uv[%{{.*}}] {leadDimension = 32 : index} : memref<1024xbf16> -> !gpu.mma_matrix<16x16xbf16, "BOp">
// The loop over the source dims is marked for the driver not to unroll.
// CHECK:        } {vyre.dont_unroll}
// CHECK:        gpu.subgroup_mma_store_matrix %{{.*}}, %hp_dest[%{{.*}}] {leadDimension = 16 : index}
// CHECK:        scf.for %out_1 =
// CHECK:          scf.if
// CHECK:            memref.store %{{.*}}, %out[%{{.*}}] : memref<64xbf16>

// LEFT:       vyre.kernel @mla_decode_project items 32 workgroup_size 64 attributes {vyre.head_product = #vyre.head_product<source = "o_lat", weights = "w_uv", dest = "out", sequences = 2, heads = 2, depth = 32, width = 16, transposed = false>}
// LEFT-NOT:   gpu.subgroup_mma

// PLAN:       vyre.kernel @mla_decode_project items 32 workgroup_size 64 attributes {vyre.head_product = #vyre.head_product<{{.*}}>, vyre.projection_tensor_cores = #vyre.projection_tensor_cores<row_tiles = 1, col_blocks = 1>}
// NOPLAN-NOT: vyre.projection_tensor_cores

// DEFAULT:    "gpu.module"() <{sym_name = "mla_decode_project"}>
// DEFAULT:    gpu.subgroup_mma_compute
// LANES:      "gpu.module"() <{sym_name = "mla_decode_project"}>
// LANES-NOT:  gpu.subgroup_mma
builtin.module {
  vyre.kernel @mla_decode_project items 32 workgroup_size 64 attributes {vyre.head_product = #vyre.head_product<source = "o_lat", weights = "w_uv", dest = "out", sequences = 2, heads = 2, depth = 32, width = 16, transposed = false>} {
    %w_uv = vyre.buffer "w_uv" binding 4 read [32, 32] : memref<1024xbf16>
    %o_lat = vyre.buffer "o_lat" binding 7 temp [2, 2, 32] : memref<128xf32>
    %out = vyre.buffer "out" binding 5 write [2, 2, 16] : memref<64xbf16>
    %item = vyre.item_index
    %0 = arith.constant 32 : index
    %1 = arith.cmpi ult, %item, %0 : index
    scf.if %1 {
      %2 = arith.constant 32 : index
      %3 = arith.remui %item, %2 : index
      %4 = arith.constant 16 : index
      %head = arith.divui %3, %4 : index
      %5 = arith.constant 16 : index
      %d = arith.remui %item, %5 : index
      %6 = arith.constant 32 : index
      %seq_group = arith.divui %item, %6 : index
      %7 = arith.constant 4 : index
      %8 = arith.muli %seq_group, %7 : index
      %row = arith.addi %8, %head : index
      %9 = arith.constant 2 : index
      %10 = arith.addi %row, %9 : index
      %11 = arith.constant 0.000000e+00 : f32
      %12 = arith.constant 0 : index
      %13 = arith.constant 32 : index
      %14 = arith.constant 1 : index
      %15, %16 = scf.for %r = %12 to %13 step %14 iter_args(%17 = %11, %18 = %11) -> (f32, f32) {
        %19 = arith.constant 32 : index
        %20 = arith.muli %r, %19 : index
        %21 = arith.constant 16 : index
        %22 = arith.muli %head, %21 : index
        %23 = arith.addi %22, %d : index
        %24 = arith.addi %20, %23 : index
        %25 = memref.load %w_uv[%24] : memref<1024xbf16>
        %26 = arith.extf %25 : bf16 to f32
        %27 = arith.constant 32 : index
        %28 = arith.muli %row, %27 : index
        %29 = arith.addi %28, %r : index
        %30 = memref.load %o_lat[%29] : memref<128xf32>
        %31 = arith.constant 32 : index
        %32 = arith.muli %10, %31 : index
        %33 = arith.addi %32, %r : index
        %34 = memref.load %o_lat[%33] : memref<128xf32>
        %35 = arith.mulf %26, %30 : f32
        %36 = arith.addf %17, %35 : f32
        %37 = arith.mulf %26, %34 : f32
        %38 = arith.addf %18, %37 : f32
        scf.yield %36, %38 : f32, f32
      }
      %39 = arith.constant 16 : index
      %40 = arith.muli %row, %39 : index
      %41 = arith.addi %40, %d : index
      %42 = arith.truncf %15 : f32 to bf16
      memref.store %42, %out[%41] : memref<64xbf16>
      %43 = arith.constant 16 : index
      %44 = arith.muli %10, %43 : index
      %45 = arith.addi %44, %d : index
      %46 = arith.truncf %16 : f32 to bf16
      memref.store %46, %out[%45] : memref<64xbf16>
    }
  }
}
