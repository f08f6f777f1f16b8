// REQUIRES: mlir-opt-22
// RUN: vyre-opt %s | mlir-opt-22 | filecheck %s
// RUN: vyre-opt %s --print-op-generic | mlir-opt-22 | filecheck %s

// Upstream MLIR 22 reads vector.from_elements as vyre prints it, in
// custom and generic form, with the vector.store of a lane's 16 bytes into
// workgroup memory that the matrix expansions emit.
// CHECK:      %[[V:[0-9]+]] = vector.from_elements %arg0, %arg1, %arg0, %arg1, %arg0, %arg1, %arg0, %arg1 : vector<8xbf16>
// CHECK-NEXT: vector.store %[[V]], %arg2[%arg3] : memref<64xbf16, 3>, vector<8xbf16>
func.func @row(%a: bf16, %b: bf16, %tile: memref<64xbf16, 3 : i64>, %i: index) {
  %v = vector.from_elements %a, %b, %a, %b, %a, %b, %a, %b : vector<8xbf16>
  vector.store %v, %tile[%i] : memref<64xbf16, 3 : i64>, vector<8xbf16>
  func.return
}
