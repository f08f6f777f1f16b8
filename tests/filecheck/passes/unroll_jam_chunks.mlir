// RUN: vyre-opt %s -p 'vyre-unroll-jam{factor=8}' | filecheck %s

// A lane's share of a row split over two lanes (vyre-split-head-dim): a loop
// over its chunks around a loop over the 4 dims of a chunk (vyre.dim_chunk).
// The chunk loop is unrolled first, jammed around the inner loop over keys,
// so that the loop over chunks then has the shape of a loop over a whole
// row's dims, and is jammed in turn: one loop over the keys carrying the
// 2 chunks x 4 dims = 8 sums.
func.func @weighted_sums(%v: memref<256xf32>, %w: memref<16xf32>, %part: index) {
  %o = memref.alloca() : memref<8xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %first = arith.muli %part, %c4 : index
  scf.for %c = %c0 to %c2 step %c1 {
    scf.for %e = %c0 to %c4 step %c1 {
      %c_slots = arith.muli %c, %c4 : index
      %slot = arith.addi %c_slots, %e : index
      %c_dims = arith.muli %c, %c8 : index
      %chunk = arith.addi %c_dims, %first : index
      %d = arith.addi %chunk, %e : index
      %zero = arith.constant 0.0 : f32
      %sum = scf.for %j = %c0 to %c16 step %c1 iter_args(%acc = %zero) -> (f32) {
        %row = arith.muli %j, %c16 : index
        %i = arith.addi %row, %d : index
        %x = memref.load %v[%i] : memref<256xf32>
        %y = memref.load %w[%j] : memref<16xf32>
        %p = arith.mulf %x, %y : f32
        %s = arith.addf %acc, %p : f32
        scf.yield %s : f32
      }
      %old = memref.load %o[%slot] : memref<8xf32>
      %new = arith.addf %old, %sum : f32
      memref.store %new, %o[%slot] : memref<8xf32>
    } {vyre.dim_chunk}
  }
  func.return
}
// CHECK-LABEL: func.func @weighted_sums
// CHECK-NOT:     vyre.dim_chunk
// CHECK:         scf.for %j = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32) {
// CHECK-COUNT-8:   memref.load %v
// CHECK:         }
// CHECK-COUNT-8: memref.store %{{.*}}, %o[%{{.*}}] : memref<8xf32>
// CHECK-NOT:     scf.for
// CHECK:         func.return
