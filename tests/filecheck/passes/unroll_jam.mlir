// RUN: vyre-opt %s -p 'vyre-unroll-jam{factor=2}' | filecheck %s
// RUN: not vyre-opt %s -p 'vyre-unroll-jam{factor=0}' 2>&1 | filecheck %s --check-prefix=ZERO
// RUN: not vyre-opt %s -p 'vyre-unroll-jam{factor=2147483648}' 2>&1 | filecheck %s --check-prefix=HUGE

// A factor outside [1, 256] is refused (2**31 copies of a loop body never finished).
// ZERO: error: vyre-unroll-jam: factor must be in [1, 256], got 0
// HUGE: error: vyre-unroll-jam: factor must be in [1, 256], got 2147483648
// HUGE-NOT: Traceback

// dots: for j < n (dynamic): out[j] = sum over d < 4 of a[j*4 + d] * b[d].
// The j loop is unrolled by 2 and the two copies' d loops are jammed into
// one loop carrying both sums; a remainder loop takes the odd j.  (%out is
// a local array: it cannot alias the arguments the d loop reads.)
func.func @dots(%a: memref<64xf32>, %b: memref<4xf32>, %n: index) {
  %out = memref.alloca() : memref<16xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %j = %c0 to %n step %c1 {
    %zero = arith.constant 0.0 : f32
    %row = arith.muli %j, %c4 : index
    %dot = scf.for %d = %c0 to %c4 step %c1 iter_args(%acc = %zero) -> (f32) {
      %i = arith.addi %row, %d : index
      %x = memref.load %a[%i] : memref<64xf32>
      %y = memref.load %b[%d] : memref<4xf32>
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %acc, %p : f32
      scf.yield %s : f32
    }
    memref.store %dot, %out[%j] : memref<16xf32>
  }
  func.return
}
// CHECK-LABEL: func.func @dots
// CHECK:         %[[STEP:.*]] = arith.constant 2 : index
// CHECK-NEXT:    %[[SPAN:.*]] = arith.subi %n, %c0 : index
// CHECK-NEXT:    %[[PAIRS:.*]] = arith.divui %[[SPAN]], %[[STEP]] : index
// CHECK-NEXT:    %[[WHOLE:.*]] = arith.muli %[[PAIRS]], %[[STEP]] : index
// CHECK-NEXT:    %[[MAIN_END:.*]] = arith.addi %c0, %[[WHOLE]] : index
// CHECK-NEXT:    scf.for %[[J:.*]] = %c0 to %[[MAIN_END]] step %[[STEP]] {
// Both copies' pre ops first (the second at j + 1):
// CHECK:           %[[ROW0:.*]] = arith.muli %[[J]], %c4 : index
// CHECK:           %[[J1:.*]] = arith.addi %[[J]], %{{.*}} : index
// CHECK:           %[[ROW1:.*]] = arith.muli %[[J1]], %c4 : index
// One d loop carries both dot products, each summed in its original order:
// CHECK-NEXT:      %[[DOT0:.*]], %[[DOT1:.*]] = scf.for %[[D:.*]] = %c0 to %c4 step %c1 iter_args(%[[A0:.*]] = %{{.*}}, %[[A1:.*]] = %{{.*}}) -> (f32, f32) {
// CHECK-NEXT:        %[[I0:.*]] = arith.addi %[[ROW0]], %[[D]] : index
// CHECK:             %[[S0:.*]] = arith.addf %[[A0]], %{{.*}} : f32
// CHECK-NEXT:        %[[I1:.*]] = arith.addi %[[ROW1]], %[[D]] : index
// CHECK:             %[[S1:.*]] = arith.addf %[[A1]], %{{.*}} : f32
// CHECK-NEXT:        scf.yield %[[S0]], %[[S1]] : f32, f32
// CHECK-NEXT:      }
// CHECK-NEXT:      memref.store %[[DOT0]], %out[%[[J]]] : memref<16xf32>
// CHECK-NEXT:      memref.store %[[DOT1]], %out[%[[J1]]] : memref<16xf32>
// The remainder runs the original body:
// CHECK:         scf.for %{{.*}} = %[[MAIN_END]] to %n step %c1 {
// CHECK:           scf.for %{{.*}} = %c0 to %c4 step %c1 iter_args

// sum: an innermost loop with a constant trip count is unrolled, no remainder.
func.func @sum(%a: memref<8xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %total = scf.for %i = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> (f32) {
    %x = memref.load %a[%i] : memref<8xf32>
    %s = arith.addf %acc, %x : f32
    scf.yield %s : f32
  }
  func.return %total : f32
}
// CHECK-LABEL: func.func @sum
// CHECK:         %[[TOTAL:.*]] = scf.for %[[I:.*]] = %c0 to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %zero) -> (f32) {
// CHECK-NEXT:      %[[X0:.*]] = memref.load %a[%[[I]]] : memref<8xf32>
// CHECK-NEXT:      %[[S0:.*]] = arith.addf %[[ACC]], %[[X0]] : f32
// CHECK-NEXT:      %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:      %[[I1:.*]] = arith.addi %[[I]], %[[ONE]] : index
// CHECK-NEXT:      %[[X1:.*]] = memref.load %a[%[[I1]]] : memref<8xf32>
// CHECK-NEXT:      %[[S1:.*]] = arith.addf %[[S0]], %[[X1]] : f32
// CHECK-NEXT:      scf.yield %[[S1]] : f32
// CHECK-NEXT:    }
// CHECK-NOT:     scf.for
// CHECK:         func.return %[[TOTAL]] : f32

// feedback: post writes what the inner loop reads, so no jam; only the
// innermost loop is unrolled (completely: it has 2 iterations).
func.func @feedback(%a: memref<8xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  scf.for %j = %c0 to %n step %c1 {
    %zero = arith.constant 0.0 : f32
    %s = scf.for %d = %c0 to %c2 step %c1 iter_args(%acc = %zero) -> (f32) {
      %x = memref.load %a[%d] : memref<8xf32>
      %t = arith.addf %acc, %x : f32
      scf.yield %t : f32
    }
    memref.store %s, %a[%c0] : memref<8xf32>
  }
  func.return
}
// CHECK-LABEL: func.func @feedback
// CHECK:         scf.for %j = %c0 to %n step %c1 {
// CHECK-NOT:       scf.for
// CHECK:           %[[X0:.*]] = memref.load %a[%c0] : memref<8xf32>
// CHECK:           memref.store %{{.*}}, %a[%c0] : memref<8xf32>
// CHECK-NEXT:    }

// short: a loop of exactly `factor` iterations is unrolled completely.
func.func @short(%a: memref<2xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %total = scf.for %i = %c0 to %c2 step %c1 iter_args(%acc = %zero) -> (f32) {
    %x = memref.load %a[%i] : memref<2xf32>
    %s = arith.addf %acc, %x : f32
    scf.yield %s : f32
  }
  func.return %total : f32
}
// CHECK-LABEL: func.func @short
// CHECK-NOT:     scf.for
// CHECK:         %[[X0:.*]] = memref.load %a[%c0] : memref<2xf32>
// CHECK-NEXT:    %[[S0:.*]] = arith.addf %zero, %[[X0]] : f32
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:    %[[I1:.*]] = arith.addi %c0, %[[ONE]] : index
// CHECK-NEXT:    %[[X1:.*]] = memref.load %a[%[[I1]]] : memref<2xf32>
// CHECK-NEXT:    %[[S1:.*]] = arith.addf %[[S0]], %[[X1]] : f32
// CHECK-NEXT:    func.return %[[S1]] : f32

// aliased: %a and %b may be the same memory, so storing to %b in post could
// change what a later copy's inner loop reads from %a: no jam.
func.func @aliased(%a: memref<8xf32>, %b: memref<8xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  scf.for %j = %c0 to %n step %c1 {
    %zero = arith.constant 0.0 : f32
    %s = scf.for %d = %c0 to %c2 step %c1 iter_args(%acc = %zero) -> (f32) {
      %x = memref.load %a[%d] : memref<8xf32>
      %t = arith.addf %acc, %x : f32
      scf.yield %t : f32
    }
    memref.store %s, %b[%j] : memref<8xf32>
  }
  func.return
}
// CHECK-LABEL: func.func @aliased
// CHECK:         scf.for %j = %c0 to %n step %c1 {
// CHECK-NOT:       scf.for
// CHECK:           memref.store %{{.*}}, %b[%j] : memref<8xf32>
// CHECK-NEXT:    }

// paged: each key's pre looks its page up (a load of %table, a division
// and a remainder by the page size): it only reads, and post writes a local
// array, so the two copies' lookups run first and their d loops are jammed.
func.func @paged(%table: memref<4xi32>, %k: memref<64xf32>, %n: index) {
  %out = memref.alloca() : memref<16xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %j = %c0 to %n step %c1 {
    %zero = arith.constant 0.0 : f32
    %slot_page = arith.divui %j, %c4 : index
    %entry = memref.load %table[%slot_page] : memref<4xi32>
    %page = arith.index_cast %entry : i32 to index
    %slot = arith.remui %j, %c4 : index
    %base = arith.muli %page, %c4 : index
    %row = arith.addi %base, %slot : index
    %dot = scf.for %d = %c0 to %c4 step %c1 iter_args(%acc = %zero) -> (f32) {
      %i = arith.addi %row, %d : index
      %x = memref.load %k[%i] : memref<64xf32>
      %s = arith.addf %acc, %x : f32
      scf.yield %s : f32
    }
    memref.store %dot, %out[%j] : memref<16xf32>
  }
  func.return
}
// CHECK-LABEL: func.func @paged
// CHECK:         scf.for %[[J:.*]] = %c0 to %{{.*}} step %{{.*}} {
// CHECK:           memref.load %table
// CHECK:           arith.remui
// CHECK:           memref.load %table
// CHECK:           arith.remui
// CHECK:           %{{.*}}, %{{.*}} = scf.for %{{.*}} = %c0 to %c4 step %c1 iter_args

// rewritten: post writes the array that pre reads, so a later copy's
// pre must not move ahead of it: no jam (the inner loop is unrolled alone).
func.func @rewritten(%a: memref<8xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  scf.for %j = %c0 to %n step %c1 {
    %first = memref.load %a[%c0] : memref<8xf32>
    %s = scf.for %d = %c0 to %c2 step %c1 iter_args(%acc = %first) -> (f32) {
      %t = arith.addf %acc, %acc : f32
      scf.yield %t : f32
    }
    memref.store %s, %a[%c0] : memref<8xf32>
  }
  func.return
}
// CHECK-LABEL: func.func @rewritten
// CHECK:         scf.for %j = %c0 to %n step %c1 {
// CHECK-NEXT:      %{{.*}} = memref.load %a[%c0] : memref<8xf32>
// CHECK-NOT:       scf.for
// CHECK:           memref.store %{{.*}}, %a[%c0] : memref<8xf32>
// CHECK-NEXT:    }
