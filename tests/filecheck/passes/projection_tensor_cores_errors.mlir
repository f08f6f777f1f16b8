// RUN: not vyre-opt %s -p 'vyre-projection-tensor-cores{device=h200 force=true}' 2>&1 | filecheck %s
// RUN: vyre-opt %s -p 'vyre-projection-tensor-cores{device=h200}' | filecheck %s --check-prefix=LEFT
// RUN: not vyre-opt %s -p 'vyre-projection-tensor-cores{row_tiles=-1}' 2>&1 | filecheck %s --check-prefix=OPTIONS
// RUN: not vyre-opt %s -p 'vyre-to-gpu{optimize=none},vyre-projection-tensor-cores{device=h200 force=true}' 2>&1 | filecheck %s --check-prefix=NOTHING

// The output projection in f32: the matrix units take f16 or bf16
// weights, so the pass refuses it when forced and leaves it otherwise.
// CHECK:      error: vyre-projection-tensor-cores: this kernel's product cannot run on subgroup matrix ops: the matrices' operands must be all f16 or all bf16, not w_uv f32
// LEFT:       vyre.kernel @mla_decode_project items 32 workgroup_size 64 attributes {vyre.head_product
// LEFT-NOT:   gpu.subgroup_mma
// OPTIONS:    error: pass 'vyre-projection-tensor-cores': option row_tiles takes an integer of at least 0 (e.g. vyre-projection-tensor-cores{row_tiles=0}), got -1
// NOTHING:    error: vyre-projection-tensor-cores: force=true, but no vyre.kernel records a per-head product (#vyre.head_product); run it on vyre IR after vyre-absorb-mla{kernels=3}, before vyre-to-gpu
builtin.module {
  vyre.kernel @mla_decode_project items 32 workgroup_size 64 attributes {vyre.head_product = #vyre.head_product<source = "o_lat", weights = "w_uv", dest = "out", sequences = 2, heads = 2, depth = 32, width = 16, transposed = false>} {
    %w_uv = vyre.buffer "w_uv" binding 4 read [32, 32] : memref<1024xf32>
    %o_lat = vyre.buffer "o_lat" binding 7 temp [2, 2, 32] : memref<128xf32>
    %out = vyre.buffer "out" binding 5 write [2, 2, 16] : memref<64xf32>
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
        %25 = memref.load %w_uv[%24] : memref<1024xf32>
        %26 = arith.extf %25 : f32 to f32
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
      %42 = arith.truncf %15 : f32 to f32
      memref.store %42, %out[%41] : memref<64xf32>
      %43 = arith.constant 16 : index
      %44 = arith.muli %10, %43 : index
      %45 = arith.addi %44, %d : index
      %46 = arith.truncf %16 : f32 to f32
      memref.store %46, %out[%45] : memref<64xf32>
    }
  }
}
