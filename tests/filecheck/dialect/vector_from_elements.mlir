// RUN: vyre-opt %s | filecheck %s
// RUN: vyre-opt %s --print-op-generic | vyre-opt | filecheck %s
// RUN: vyre-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// vector.from_elements keeps MLIR's custom syntax (operands in order, then
// the vector type) and its generic form, beside xDSL's vector.store, as the
// matrix expansions write a lane's 16 bytes of a staged tile.
func.func @row(%a: bf16, %b: bf16, %tile: memref<64xbf16, 3 : i64>, %i: index) {
  %v = vector.from_elements %a, %b, %a, %b, %b, %a, %b, %a {vyre.note = "kept"} : vector<8xbf16>
  vector.store %v, %tile[%i] : memref<64xbf16, 3 : i64>, vector<8xbf16>
  func.return
}
// CHECK:      %v = vector.from_elements %a, %b, %a, %b, %b, %a, %b, %a {vyre.note = "kept"} : vector<8xbf16>
// CHECK-NEXT: vector.store %v, %tile[%i] : memref<64xbf16, 3 : i64>, vector<8xbf16>

// GENERIC: %v = "vector.from_elements"(%a, %b, %a, %b, %b, %a, %b, %a) {vyre.note = "kept"} : (bf16, bf16, bf16, bf16, bf16, bf16, bf16, bf16) -> vector<8xbf16>
