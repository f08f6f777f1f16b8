// RUN: vyre-opt %s -p 'vyre-unroll-jam{factor=8}' | filecheck %s

// A loop over a tile (dynamic length, at most 4 keys, recorded by
// vyre-inline-fragments as vyre.max_trips) is unrolled by 4, not 8: with 8
// the unrolled loop would never run and every key would take the remainder.
func.func @tile_sum(%a: memref<64xf32>, %tile_len: index) -> f32 {
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
// CHECK-LABEL: func.func @tile_sum
// CHECK:         %[[STEP:.*]] = arith.constant 4 : index
// CHECK:         scf.for %{{.*}} = %c0 to %{{.*}} step %[[STEP]] iter_args
// CHECK-COUNT-4:   arith.addf
// CHECK:         scf.for %{{.*}} = %{{.*}} to %tile_len step %c1 iter_args
