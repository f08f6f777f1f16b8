// RUN: vyre-opt %s | filecheck %s
// RUN: vyre-opt %s --print-op-generic | vyre-opt | filecheck %s

func.func @helpers(%v: f32) -> f32 {
  %a = vyre.bounded_score %v : f32
  %b = vyre.bounded_exp_arg %a : f32
  %n = vyre.bounded_exp_arg nonpositive %b : f32
  %c = vyre.positive_denominator %n : f32
  %d = vyre.flush_tiny %c : f32
  func.return %d : f32
}
// CHECK:      %a = vyre.bounded_score %v : f32
// CHECK-NEXT: %b = vyre.bounded_exp_arg %a : f32
// CHECK-NEXT: %n = vyre.bounded_exp_arg nonpositive %b : f32
// CHECK-NEXT: %c = vyre.positive_denominator %n : f32
// CHECK-NEXT: %d = vyre.flush_tiny %c : f32
