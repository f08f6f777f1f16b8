// RUN: vyre-opt %s --split-input-file -p vyre-vectorize-stores | filecheck %s
// RUN: vyre-opt %s --split-input-file -p vyre-vectorize-stores | mlir-opt-22 --allow-unregistered-dialect --split-input-file | filecheck %s --check-prefix=MLIR
// RUN: not vyre-opt %s --split-input-file -p 'vyre-vectorize-stores{width=3}' 2>&1 | filecheck %s --check-prefix=BAD-WIDTH
// REQUIRES: mlir-opt-22

// A lane's partial row: four neighbouring elements of `part` (a temp buffer
// the kernel only writes) stored one by one, their window aligned, become
// one vector store where the last of them was; a store to another window
// of the same index terms (row + 4) comes between them and is elsewhere.
// The window of `out`, which the kernel also loads, and a misaligned
// window are left alone.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "rows"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>, memref<68xf32>, memref<16xf32>) -> (), kernel}> ({
    ^bb0(%part: memref<64xf32>, %skewed: memref<68xf32>, %out: memref<16xf32>):
      %lane = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c4 = arith.constant 4 : index
      %c5 = arith.constant 5 : index
      %c8 = arith.constant 8 : index
      %x0 = arith.constant 1.0 : f32
      %x1 = arith.constant 2.0 : f32
      %x2 = arith.constant 3.0 : f32
      %x3 = arith.constant 4.0 : f32
      %row = arith.muli %lane, %c8 : index
      %i1 = arith.addi %row, %c1 : index
      %i2 = arith.addi %row, %c2 : index
      %i3 = arith.addi %row, %c3 : index
      %i4 = arith.addi %row, %c4 : index
      memref.store %x1, %part[%i1] : memref<64xf32>
      memref.store %x0, %part[%row] : memref<64xf32>
      memref.store %x0, %part[%i4] : memref<64xf32>
      memref.store %x2, %part[%i2] : memref<64xf32>
      memref.store %x3, %part[%i3] : memref<64xf32>
      %s1 = arith.addi %row, %c5 : index
      memref.store %x0, %skewed[%c1] : memref<68xf32>
      memref.store %x0, %skewed[%c2] : memref<68xf32>
      memref.store %x0, %skewed[%c3] : memref<68xf32>
      memref.store %x0, %skewed[%c4] : memref<68xf32>
      %seen = memref.load %out[%c1] : memref<16xf32>
      memref.store %seen, %out[%c4] : memref<16xf32>
      memref.store %x1, %out[%c5] : memref<16xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "rows", gpu.kernel, vyre.launch = #vyre.launch<items = 8, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "part", binding = 0, access = temp, shape = [64], dtype = f32>, #vyre.buffer<name = "skewed", binding = 1, access = write, shape = [68], dtype = f32>, #vyre.buffer<name = "out", binding = 2, access = write, shape = [16], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:         memref.store %x0, %part[%i4] : memref<64xf32>
// CHECK-NEXT:    %[[ROW:.*]] = vector.from_elements %x0, %x1, %x2, %x3 : vector<4xf32>
// CHECK-NEXT:    vector.store %[[ROW]], %part[%row] : memref<64xf32>, vector<4xf32>
// CHECK-NOT:     memref.store %{{.*}}, %part
// CHECK:         memref.store %x0, %skewed[%c1] : memref<68xf32>
// CHECK-NEXT:    memref.store %x0, %skewed[%c2] : memref<68xf32>
// CHECK-NEXT:    memref.store %x0, %skewed[%c3] : memref<68xf32>
// CHECK-NEXT:    memref.store %x0, %skewed[%c4] : memref<68xf32>
// CHECK:         memref.store %seen, %out[%c4] : memref<16xf32>
// CHECK-NEXT:    memref.store %x1, %out[%c5] : memref<16xf32>
// MLIR:          vector.store %{{.*}}, %arg0[%{{.*}}] : memref<64xf32>, vector<4xf32>

// -----

// A store that may write one of the window's elements (an index of other
// terms) ends the run: the stores stay as they are, so the last value of
// every element is the one written last.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "maybe"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>) -> (), kernel}> ({
    ^bb0(%part: memref<64xf32>):
      %lane = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c8 = arith.constant 8 : index
      %x0 = arith.constant 1.0 : f32
      %x1 = arith.constant 2.0 : f32
      %row = arith.muli %lane, %c8 : index
      %i1 = arith.addi %row, %c1 : index
      %i2 = arith.addi %row, %c2 : index
      %i3 = arith.addi %row, %c3 : index
      memref.store %x0, %part[%row] : memref<64xf32>
      memref.store %x0, %part[%i1] : memref<64xf32>
      memref.store %x1, %part[%lane] : memref<64xf32>
      memref.store %x0, %part[%i2] : memref<64xf32>
      memref.store %x0, %part[%i3] : memref<64xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "maybe", gpu.kernel, vyre.launch = #vyre.launch<items = 8, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "part", binding = 0, access = temp, shape = [64], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK-NOT:     vector.store
// CHECK:         memref.store %x1, %part[%lane] : memref<64xf32>
// CHECK-NOT:     vector.store

// BAD-WIDTH: vyre-vectorize-stores: width must be 2 or 4 (a SPIR-V vector of f32), got 3
