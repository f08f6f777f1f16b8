// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not vyre-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT

// vector.from_elements' verifier and parser: one chunk per error.
// One operand per element of the vector.
func.func @count(%a: f16) {
  %v = "vector.from_elements"(%a, %a) : (f16, f16) -> vector<4xf16>
  func.return
}
// CHECK: {{.*}}vector_from_elements_errors.mlir:7:3: error: 'vector.from_elements' op builds a vector of 2 elements, not vector<4xf16>

// -----

// Every operand of the vector's element type.
func.func @element_type(%a: f16, %b: bf16) {
  %v = "vector.from_elements"(%a, %b) : (f16, bf16) -> vector<2xf16>
  func.return
}
// CHECK: {{.*}}vector_from_elements_errors.mlir:16:3: error: 'vector.from_elements' op an element of type bf16 in a vector<2xf16>

// -----

// The custom form names a 1-d vector type.
func.func @not_a_vector(%a: f16) {
  %v = vector.from_elements %a, %a : tensor<2xf16>
  func.return
}
// CHECK: {{.*}}vector_from_elements_errors.mlir:25:38: error: expected a 1-d vector type, got tensor<2xf16>

// EXIT: error:
