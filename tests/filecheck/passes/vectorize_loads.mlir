// RUN: vyre-opt %s --split-input-file -p vyre-vectorize-loads | filecheck %s

// A dot product over d < 8 of k[row*8 + d] (k is read-only): the d loop is
// unrolled by 4, and each run of four neighbouring k elements becomes one
// vector load whose elements feed the sums in their original order.  The
// written buffer and a misaligned run are left alone.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "dots"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>, memref<66xf32>, memref<8xf32>) -> (), kernel}> ({
    ^bb0(%k: memref<64xf32>, %skewed: memref<66xf32>, %out: memref<8xf32>):
      %row = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c8 = arith.constant 8 : index
      %zero = arith.constant 0.0 : f32
      %base = arith.muli %row, %c8 : index
      %dot = scf.for %d = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> (f32) {
        %i = arith.addi %base, %d : index
        %x = memref.load %k[%i] : memref<64xf32>
        %s = arith.addf %acc, %x : f32
        scf.yield %s : f32
      }
      %skew = arith.addi %base, %c2 : index
      %y = memref.load %skewed[%skew] : memref<66xf32>
      %o0 = memref.load %out[%c0] : memref<8xf32>
      %o1 = memref.load %out[%c1] : memref<8xf32>
      %total = arith.addf %dot, %y : f32
      memref.store %total, %out[%row] : memref<8xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "dots", gpu.kernel, vyre.launch = #vyre.launch<items = 8, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "k", binding = 0, access = read, shape = [64], dtype = f32>, #vyre.buffer<name = "skewed", binding = 1, access = read, shape = [66], dtype = f32>, #vyre.buffer<name = "out", binding = 2, access = write, shape = [8], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:         %base = arith.muli %row, %c8 : index
// CHECK:         %[[STEP:.*]] = arith.constant 4 : index
// CHECK:         %dot = scf.for %d = %c0 to %{{.*}} step %[[STEP]] iter_args(%acc = %zero) -> (f32) {
// CHECK-NEXT:      %i = arith.addi %base, %d : index
// CHECK-NEXT:      %k_vec = vector.load %k[%i] : memref<64xf32>, vector<4xf32>
// CHECK-NEXT:      %x = vector.extract %k_vec[0] : f32 from vector<4xf32>
// CHECK-NEXT:      %[[X1:.*]] = vector.extract %k_vec[1] : f32 from vector<4xf32>
// CHECK-NEXT:      %[[X2:.*]] = vector.extract %k_vec[2] : f32 from vector<4xf32>
// CHECK-NEXT:      %[[X3:.*]] = vector.extract %k_vec[3] : f32 from vector<4xf32>
// CHECK-NEXT:      %s = arith.addf %acc, %x : f32
// CHECK:           %[[S1:.*]] = arith.addf %s, %[[X1]] : f32
// CHECK:           %[[S2:.*]] = arith.addf %[[S1]], %[[X2]] : f32
// CHECK:           %[[S3:.*]] = arith.addf %[[S2]], %[[X3]] : f32
// CHECK-NEXT:      scf.yield %[[S3]] : f32
// CHECK-NEXT:    }
// CHECK:         %y = memref.load %skewed[%skew] : memref<66xf32>
// CHECK-NEXT:    %o0 = memref.load %out[%c0] : memref<8xf32>
// CHECK-NEXT:    %o1 = memref.load %out[%c1] : memref<8xf32>

// -----

// Loads out of order, with the first element's index computed last: the
// vector load goes before the first of them, its index stepped back from it.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "reversed"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>, memref<16xf32>) -> (), kernel}> ({
    ^bb0(%v: memref<64xf32>, %out: memref<16xf32>):
      %row = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c4 = arith.constant 4 : index
      %base = arith.muli %row, %c4 : index
      %i3 = arith.addi %base, %c3 : index
      %x3 = memref.load %v[%i3] : memref<64xf32>
      %i2 = arith.addi %base, %c2 : index
      %x2 = memref.load %v[%i2] : memref<64xf32>
      %i1 = arith.addi %base, %c1 : index
      %x1 = memref.load %v[%i1] : memref<64xf32>
      %c0 = arith.constant 0 : index
      %i0 = arith.addi %base, %c0 : index
      %x0 = memref.load %v[%i0] : memref<64xf32>
      %a = arith.addf %x3, %x2 : f32
      %b = arith.addf %x1, %x0 : f32
      %s = arith.addf %a, %b : f32
      memref.store %s, %out[%row] : memref<16xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "reversed", gpu.kernel, vyre.launch = #vyre.launch<items = 16, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "v", binding = 0, access = read, shape = [64], dtype = f32>, #vyre.buffer<name = "out", binding = 1, access = write, shape = [16], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:         %i3 = arith.addi %base, %c3 : index
// CHECK-NEXT:    %[[BACK:.*]] = arith.constant 3 : index
// CHECK-NEXT:    %[[START:.*]] = arith.subi %i3, %[[BACK]] : index
// CHECK-NEXT:    %v_vec = vector.load %v[%[[START]]] : memref<64xf32>, vector<4xf32>
// CHECK-NEXT:    %x0 = vector.extract %v_vec[0]
// CHECK-NEXT:    %x1 = vector.extract %v_vec[1]
// CHECK-NEXT:    %x2 = vector.extract %v_vec[2]
// CHECK-NEXT:    %x3 = vector.extract %v_vec[3]
// CHECK-NOT:     memref.load
// CHECK:         %a = arith.addf %x3, %x2 : f32

// -----

// A workgroup array is read as vectors too, but not across a barrier (or a
// store to it) that lies between the loads.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "shared"}> ({
    "gpu.func"() <{function_type = (memref<16xf32>) -> (), kernel}> ({
    ^bb0(%out: memref<16xf32>):
      %tile = memref.alloc() : memref<64xf32, 3 : i64>
      %row = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c4 = arith.constant 4 : index
      %base = arith.muli %row, %c4 : index
      %i1 = arith.addi %base, %c1 : index
      %i2 = arith.addi %base, %c2 : index
      %i3 = arith.addi %base, %c3 : index
      %x0 = memref.load %tile[%base] : memref<64xf32, 3 : i64>
      %x1 = memref.load %tile[%i1] : memref<64xf32, 3 : i64>
      %x2 = memref.load %tile[%i2] : memref<64xf32, 3 : i64>
      %x3 = memref.load %tile[%i3] : memref<64xf32, 3 : i64>
      "gpu.barrier"() : () -> ()
      %y0 = memref.load %tile[%base] : memref<64xf32, 3 : i64>
      %y1 = memref.load %tile[%i1] : memref<64xf32, 3 : i64>
      "gpu.barrier"() : () -> ()
      %y2 = memref.load %tile[%i2] : memref<64xf32, 3 : i64>
      %y3 = memref.load %tile[%i3] : memref<64xf32, 3 : i64>
      %a = arith.addf %x0, %x1 : f32
      %b = arith.addf %x2, %x3 : f32
      %c = arith.addf %y0, %y3 : f32
      %d = arith.addf %y1, %y2 : f32
      %s = arith.addf %a, %b : f32
      %t = arith.addf %c, %d : f32
      %u = arith.addf %s, %t : f32
      memref.store %u, %out[%row] : memref<16xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "shared", gpu.kernel, vyre.launch = #vyre.launch<items = 16, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "out", binding = 0, access = write, shape = [16], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:         %tile_vec = vector.load %tile[%base] : memref<64xf32, 3 : i64>, vector<4xf32>
// CHECK-NEXT:    %x0 = vector.extract %tile_vec[0]
// CHECK:         "gpu.barrier"() : () -> ()
// CHECK-NEXT:    %y0 = memref.load %tile[%base]
// CHECK-NEXT:    %y1 = memref.load %tile[%i1]
// CHECK-NEXT:    "gpu.barrier"() : () -> ()
// CHECK-NEXT:    %y2 = memref.load %tile[%i2]

// -----

// A bf16 buffer: eight neighbouring halves are one vector load (16 bytes,
// as four f32 are), each element widened on its own as before; four
// halves where only four are neighbours (a lane's chunk of a row split
// over lanes).
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "halves"}> ({
    "gpu.func"() <{function_type = (memref<256xbf16>, memref<8xf32>) -> (), kernel}> ({
    ^bb0(%k: memref<256xbf16>, %out: memref<8xf32>):
      %row = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c8 = arith.constant 8 : index
      %c16 = arith.constant 16 : index
      %c32 = arith.constant 32 : index
      %zero = arith.constant 0.0 : f32
      %base = arith.muli %row, %c32 : index
      %dot = scf.for %d = %c0 to %c16 step %c1 iter_args(%acc = %zero) -> (f32) {
        %i = arith.addi %base, %d : index
        %h = memref.load %k[%i] : memref<256xbf16>
        %x = arith.extf %h : bf16 to f32
        %s = arith.addf %acc, %x : f32
        scf.yield %s : f32
      }
      %c4 = arith.constant 4 : index
      %c5 = arith.constant 5 : index
      %c6 = arith.constant 6 : index
      %c7 = arith.constant 7 : index
      %c20 = arith.constant 20 : index
      %j0 = arith.addi %base, %c20 : index
      %j1 = arith.addi %j0, %c1 : index
      %c2 = arith.constant 2 : index
      %j2 = arith.addi %j0, %c2 : index
      %c3 = arith.constant 3 : index
      %j3 = arith.addi %j0, %c3 : index
      %h0 = memref.load %k[%j0] : memref<256xbf16>
      %h1 = memref.load %k[%j1] : memref<256xbf16>
      %h2 = memref.load %k[%j2] : memref<256xbf16>
      %h3 = memref.load %k[%j3] : memref<256xbf16>
      %y0 = arith.extf %h0 : bf16 to f32
      %y1 = arith.extf %h1 : bf16 to f32
      %y2 = arith.extf %h2 : bf16 to f32
      %y3 = arith.extf %h3 : bf16 to f32
      %a = arith.addf %y0, %y1 : f32
      %b = arith.addf %y2, %y3 : f32
      %t = arith.addf %a, %b : f32
      %total = arith.addf %dot, %t : f32
      memref.store %total, %out[%row] : memref<8xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "halves", gpu.kernel, vyre.launch = #vyre.launch<items = 8, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "k", binding = 0, access = read, shape = [256], dtype = bf16>, #vyre.buffer<name = "out", binding = 1, access = write, shape = [8], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:         %base = arith.muli %row, %c32 : index
// CHECK-NEXT:    %[[STEP:.*]] = arith.constant 8 : index
// CHECK:         %dot = scf.for %d = %c0 to %{{.*}} step %[[STEP]] iter_args(%acc = %zero) -> (f32) {
// CHECK-NEXT:      %i = arith.addi %base, %d : index
// CHECK-NEXT:      %k_vec = vector.load %k[%i] : memref<256xbf16>, vector<8xbf16>
// CHECK-NEXT:      %h = vector.extract %k_vec[0] : bf16 from vector<8xbf16>
// CHECK-COUNT-7:   vector.extract %k_vec[{{[1-7]}}] : bf16 from vector<8xbf16>
// CHECK-NEXT:      %x = arith.extf %h : bf16 to f32
// CHECK:         %[[V4:.*]] = vector.load %k[%j0] : memref<256xbf16>, vector<4xbf16>
// CHECK-NEXT:    %h0 = vector.extract %[[V4]][0] : bf16 from vector<4xbf16>
// CHECK-NEXT:    %h1 = vector.extract %[[V4]][1] : bf16 from vector<4xbf16>
// CHECK-NEXT:    %h2 = vector.extract %[[V4]][2] : bf16 from vector<4xbf16>
// CHECK-NEXT:    %h3 = vector.extract %[[V4]][3] : bf16 from vector<4xbf16>

// -----

// A temp buffer (an earlier kernel of the program wrote it) that this
// kernel only loads is read as vectors like a read-only one; a temp buffer
// the kernel also stores to is left alone.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "temps"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>, memref<64xf32>) -> (), kernel}> ({
    ^bb0(%lat: memref<64xf32>, %both: memref<64xf32>):
      %row = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c8 = arith.constant 8 : index
      %zero = arith.constant 0.0 : f32
      %base = arith.muli %row, %c8 : index
      %dot = scf.for %d = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> (f32) {
        %i = arith.addi %base, %d : index
        %x = memref.load %lat[%i] : memref<64xf32>
        %w = memref.load %both[%i] : memref<64xf32>
        %p = arith.mulf %x, %w : f32
        %s = arith.addf %acc, %p : f32
        scf.yield %s : f32
      }
      memref.store %dot, %both[%base] : memref<64xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "temps", gpu.kernel, vyre.launch = #vyre.launch<items = 8, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "lat", binding = 0, access = temp, shape = [64], dtype = f32>, #vyre.buffer<name = "both", binding = 1, access = temp, shape = [64], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:         %dot = scf.for %d =
// CHECK:           %lat_vec = vector.load %lat[%i] : memref<64xf32>, vector<4xf32>
// CHECK-NOT:       vector.load %both
// CHECK:           memref.load %both[%i] : memref<64xf32>
// CHECK-NOT:       vector.load %both
