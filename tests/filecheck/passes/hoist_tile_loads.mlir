// RUN: vyre-opt %s --split-input-file -p 'vyre-hoist-tile-loads{buffers=v}' | filecheck %s
// RUN: not vyre-opt %s --split-input-file -p 'vyre-hoist-tile-loads{buffers=values}' 2>&1 | filecheck %s --check-prefix=NAME
// NAME: error: vyre-hoist-tile-loads: buffers=values names no buffer of a lowered kernel here; the kernels' buffers are k, out, v

// A loop over tiles of two keys: the scores read K, the update loop reads V
// for each key.  The update loop (two trips) is unrolled, and both copies'
// V loads, with the index arithmetic they need, go to the top of the tile;
// the K load and everything else stay in order after them.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>, memref<64xf32>, memref<64xf32>) -> (), kernel}> ({
    ^bb0(%k: memref<64xf32>, %v: memref<64xf32>, %out: memref<64xf32>):
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c32 = arith.constant 32 : index
      %zero = arith.constant 0.0 : f32
      %acc = scf.for %tile = %c0 to %c32 step %c2 iter_args(%sum = %zero) -> (f32) {
        %key = arith.addi %tile, %lane : index
        %score = memref.load %k[%key] : memref<64xf32>
        %weight = arith.mulf %score, %sum : f32
        %next = scf.for %j = %c0 to %c2 step %c1 iter_args(%o = %weight) -> (f32) {
          %at = arith.addi %tile, %j : index
          %value = memref.load %v[%at] : memref<64xf32>
          %term = arith.mulf %value, %o : f32
          scf.yield %term : f32
        }
        scf.yield %next : f32
      }
      memref.store %acc, %out[%lane] : memref<64xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 64, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "k", binding = 0, access = read, shape = [64], dtype = f32>, #vyre.buffer<name = "v", binding = 1, access = read, shape = [64], dtype = f32>, #vyre.buffer<name = "out", binding = 2, access = write, shape = [64], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:      scf.for %tile = %c0 to %c32 step %c2 iter_args(%sum = %zero) -> (f32) {
// CHECK-NEXT:   %[[AT0:.*]] = arith.addi %tile, %c0 : index
// CHECK-NEXT:   %[[V0:.*]] = memref.load %v[%[[AT0]]] : memref<64xf32>
// CHECK-NEXT:   %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:   %[[J1:.*]] = arith.addi %c0, %[[ONE]] : index
// CHECK-NEXT:   %[[AT1:.*]] = arith.addi %tile, %[[J1]] : index
// CHECK-NEXT:   %[[V1:.*]] = memref.load %v[%[[AT1]]] : memref<64xf32>
// CHECK-NEXT:   %key = arith.addi %tile, %lane : index
// CHECK-NEXT:   %score = memref.load %k[%key] : memref<64xf32>
// CHECK-NEXT:   %weight = arith.mulf %score, %sum : f32
// CHECK-NEXT:   %[[T0:.*]] = arith.mulf %[[V0]], %weight : f32
// CHECK-NEXT:   %[[T1:.*]] = arith.mulf %[[V1]], %[[T0]] : f32
// CHECK-NEXT:   scf.yield %[[T1]] : f32
// CHECK-NEXT: } {vyre.hoisted_loads = 2 : i64}

// -----

// A load whose index needs a carried value stays where it is: a load moves
// only with arithmetic that the tile's index alone gives.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>, memref<64xf32>, memref<64xf32>) -> (), kernel}> ({
    ^bb0(%k: memref<64xf32>, %v: memref<64xf32>, %out: memref<64xf32>):
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c32 = arith.constant 32 : index
      %acc = scf.for %tile = %c0 to %c32 step %c1 iter_args(%at = %c0) -> (index) {
        %score = memref.load %k[%tile] : memref<64xf32>
        %value = memref.load %v[%at] : memref<64xf32>
        %sum = arith.addf %score, %value : f32
        memref.store %sum, %out[%tile] : memref<64xf32>
        %next = arith.addi %at, %c1 : index
        scf.yield %next : index
      }
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 64, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "k", binding = 0, access = read, shape = [64], dtype = f32>, #vyre.buffer<name = "v", binding = 1, access = read, shape = [64], dtype = f32>, #vyre.buffer<name = "out", binding = 2, access = write, shape = [64], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:      scf.for %tile = %c0 to %c32 step %c1 iter_args(%at = %c0) -> (index) {
// CHECK-NEXT:   %score = memref.load %k[%tile] : memref<64xf32>
// CHECK-NEXT:   %value = memref.load %v[%at] : memref<64xf32>
// CHECK:        scf.yield %next : index
// CHECK-NEXT: }
// CHECK-NOT:  vyre.hoisted_loads

// -----

// Nor does a load of a buffer that the kernel also writes: a store in an
// earlier iteration may be what it reads.
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "k"}> ({
    "gpu.func"() <{function_type = (memref<64xf32>, memref<64xf32>, memref<64xf32>) -> (), kernel}> ({
    ^bb0(%k: memref<64xf32>, %v: memref<64xf32>, %out: memref<64xf32>):
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c32 = arith.constant 32 : index
      scf.for %tile = %c0 to %c32 step %c1 {
        %score = memref.load %k[%tile] : memref<64xf32>
        %value = memref.load %v[%tile] : memref<64xf32>
        %sum = arith.addf %score, %value : f32
        memref.store %sum, %v[%c0] : memref<64xf32>
      }
      "gpu.return"() : () -> ()
    }) {sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 64, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "k", binding = 0, access = read, shape = [64], dtype = f32>, #vyre.buffer<name = "v", binding = 1, access = temp, shape = [64], dtype = f32>, #vyre.buffer<name = "out", binding = 2, access = write, shape = [64], dtype = f32>]>} : () -> ()
  }) : () -> ()
}

// CHECK-LABEL: "gpu.func"
// CHECK:      scf.for %tile = %c0 to %c32 step %c1 {
// CHECK-NEXT:   %score = memref.load %k[%tile] : memref<64xf32>
// CHECK-NEXT:   %value = memref.load %v[%tile] : memref<64xf32>
// CHECK:      }
// CHECK-NOT:  vyre.hoisted_loads
