// RUN: vyre-opt %s -p vyre-fold-divisions | filecheck %s

// A tile of 16 keys starts at %x, a multiple of 16 (a loop of step 16); key
// %x + 3 lies in the tile's page of 16 or 64 keys: its page is the tile's,
// its slot the tile's plus 3.
func.func @in_one_page(%n: index, %out: memref<8xindex>) {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  scf.for %x = %c0 to %n step %c16 {
    %t = arith.addi %x, %c3 : index
    %page = arith.divui %t, %c16 : index
    %slot = arith.remui %t, %c16 : index
    %big_page = arith.divui %t, %c64 : index
    memref.store %page, %out[%c0] : memref<8xindex>
    memref.store %slot, %out[%c0] : memref<8xindex>
    memref.store %big_page, %out[%c0] : memref<8xindex>
  }
  func.return
}
// CHECK-LABEL: func.func @in_one_page
// (the sum %x + 3, now unused, goes)
// CHECK:         scf.for %[[X:.*]] = %c0 to %n step %c16 {
// CHECK-NEXT:      %[[PAGE:.*]] = arith.divui %[[X]], %c16 : index
// CHECK-NEXT:      %[[Q:.*]] = arith.divui %[[X]], %c16 : index
// CHECK-NEXT:      %[[QD:.*]] = arith.muli %[[Q]], %c16 : index
// CHECK-NEXT:      %[[R:.*]] = arith.subi %[[X]], %[[QD]] : index
// CHECK-NEXT:      %[[SLOT:.*]] = arith.addi %[[R]], %c3 : index
// CHECK-NEXT:      %[[BIG:.*]] = arith.divui %[[X]], %c64 : index
// CHECK-NEXT:      memref.store %[[PAGE]]
// CHECK-NEXT:      memref.store %[[SLOT]]
// CHECK-NEXT:      memref.store %[[BIG]]

// Left alone: an offset as large as the multiple (key %x + 16 is in the
// next page), a start not known to be a multiple (%n), a divisor not a
// constant, and pages of 8 keys where the offset 9 crosses one.
func.func @left_alone(%n: index, %d: index, %out: memref<8xindex>) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c9 = arith.constant 9 : index
  %c16 = arith.constant 16 : index
  scf.for %x = %c0 to %n step %c16 {
    %next = arith.addi %x, %c16 : index
    %a = arith.divui %next, %c16 : index
    %unknown = arith.addi %n, %c9 : index
    %b = arith.divui %unknown, %c16 : index
    %t = arith.addi %x, %c9 : index
    %c = arith.divui %t, %d : index
    %e = arith.remui %t, %c8 : index
    memref.store %a, %out[%c0] : memref<8xindex>
    memref.store %b, %out[%c0] : memref<8xindex>
    memref.store %c, %out[%c0] : memref<8xindex>
    memref.store %e, %out[%c0] : memref<8xindex>
  }
  func.return
}
// CHECK-LABEL: func.func @left_alone
// CHECK:         arith.divui %next, %c16 : index
// CHECK:         arith.divui %unknown, %c16 : index
// CHECK:         arith.divui %t, %d : index
// CHECK:         arith.remui %t, %c8 : index
