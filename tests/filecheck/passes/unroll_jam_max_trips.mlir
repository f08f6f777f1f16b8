// RUN: vyre-opt %s -p 'vyre-unroll-jam{factor=8}' | filecheck %s

// A loop over a tile in a tile loop (dynamic length, at most 4 keys,
// recorded by vyre-inline-fragments as vyre.max_trips) is unrolled by 4,
// not 8: with 8 the unrolled loop would never run and every key would take
// the remainder.
func.func @tile_sum(%a: memref<64xf32>, %tiles: index, %tile_len: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %sum = scf.for %tile = %c0 to %tiles step %c1 iter_args(%outer = %zero) -> (f32) {
    %total = scf.for %j = %c0 to %tile_len step %c1 iter_args(%acc = %outer) -> (f32) {
      %x = memref.load %a[%j] : memref<64xf32>
      %s = arith.addf %acc, %x : f32
      scf.yield %s : f32
    } {vyre.max_trips = 4 : i64}
    scf.yield %total : f32
  }
  func.return %sum : f32
}
// CHECK-LABEL: func.func @tile_sum
// CHECK:         %[[STEP:.*]] = arith.constant 4 : index
// CHECK:         scf.for %{{.*}} = %c0 to %{{.*}} step %[[STEP]] iter_args
// CHECK-COUNT-4:   arith.addf
// CHECK:         scf.for %{{.*}} = %{{.*}} to %tile_len step %c1 iter_args

// The same loop where it runs once an invocation (kv_lens' cut tile, after
// the loop over whole tiles) becomes its 4 iterations, each under an
// scf.if on its own constant index: no loop is left to index %a with a
// run-time value.
func.func @cut_tile_sum(%a: memref<64xf32>, %tile_len: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %total = scf.for %j = %c0 to %tile_len step %c1 iter_args(%acc = %zero) -> (f32) {
    %x = memref.load %a[%j] : memref<64xf32>
    %s = arith.addf %acc, %x : f32
    scf.yield %s : f32
  } {vyre.max_trips = 4 : i64}
  func.return %total : f32
}
// CHECK-LABEL: func.func @cut_tile_sum
// CHECK-NOT:     scf.for
// CHECK:         %[[J0:j]] = arith.constant 0 : index
// CHECK-NEXT:    %[[RUN0:.*]] = arith.cmpi ult, %[[J0]], %tile_len : index
// CHECK-NEXT:    %[[S0:.*]] = scf.if %[[RUN0]] -> (f32) {
// CHECK-NEXT:      %[[X0:.*]] = memref.load %a[%[[J0]]] : memref<64xf32>
// CHECK-NEXT:      %[[ADD0:.*]] = arith.addf %zero, %[[X0]] : f32
// CHECK-NEXT:      scf.yield %[[ADD0]] : f32
// CHECK-NEXT:    } else {
// CHECK-NEXT:      scf.yield %zero : f32
// CHECK-NEXT:    }
// CHECK:         %[[J3:j_3]] = arith.constant 3 : index
// CHECK-NEXT:    %[[RUN3:.*]] = arith.cmpi ult, %[[J3]], %tile_len : index
// CHECK-NEXT:    %[[S3:.*]] = scf.if %[[RUN3]] -> (f32) {
// CHECK-NEXT:      %[[X3:.*]] = memref.load %a[%[[J3]]] : memref<64xf32>
// CHECK-NEXT:      %[[ADD3:.*]] = arith.addf %{{.*}}, %[[X3]] : f32
// CHECK:         func.return %[[S3]] : f32
// CHECK-NOT:     scf.for

// ... and so does one in a loop of one trip (a lane's only chunk of dims,
// vyre-split-head-dim), which does not run it twice.
func.func @cut_tile_in_one_chunk(%a: memref<64xf32>, %o: memref<8xf32>, %tile_len: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  scf.for %chunk = %c0 to %c1 step %c1 {
    %total = scf.for %j = %c0 to %tile_len step %c1 iter_args(%acc = %zero) -> (f32) {
      %x = memref.load %a[%j] : memref<64xf32>
      %s = arith.addf %acc, %x : f32
      scf.yield %s : f32
    } {vyre.max_trips = 4 : i64}
    memref.store %total, %o[%chunk] : memref<8xf32>
  }
  func.return
}
// CHECK-LABEL: func.func @cut_tile_in_one_chunk
// CHECK:         scf.for %chunk = %c0 to %c1 step %c1 {
// CHECK-NOT:       scf.for
// CHECK-COUNT-4:   scf.if %{{.*}} -> (f32) {
// CHECK-NOT:       scf.for
// CHECK:           memref.store

// A loop of more trips than the factor keeps its loops.
func.func @long_sum(%a: memref<64xf32>, %len: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %total = scf.for %j = %c0 to %len step %c1 iter_args(%acc = %zero) -> (f32) {
    %x = memref.load %a[%j] : memref<64xf32>
    %s = arith.addf %acc, %x : f32
    scf.yield %s : f32
  } {vyre.max_trips = 64 : i64}
  func.return %total : f32
}
// CHECK-LABEL: func.func @long_sum
// CHECK:         scf.for %{{.*}} = %c0 to %{{.*}} step %{{.*}} iter_args
// CHECK-COUNT-8:   arith.addf
// CHECK:         scf.for %{{.*}} = %{{.*}} to %len step %c1 iter_args
