// RUN: vyre-opt %s -p vyre-expand-stability | filecheck %s

// Each stability op becomes the select chain of its SEMANTICS.md definition:
// isnan(v) = cmpf uno v, v; isfinite(v) = cmpf one |v|, +inf.

func.func @bounded_score(%v: f32) -> f32 {
  %r = vyre.bounded_score %v : f32
  func.return %r : f32
}
// CHECK-LABEL: func.func @bounded_score(%v: f32) -> f32 {
// CHECK-NEXT:    %[[ABS:.*]] = math.absf %v : f32
// CHECK-NEXT:    %[[INF:.*]] = arith.constant 0x7f800000 : f32
// CHECK-NEXT:    %[[FIN:.*]] = arith.cmpf one, %[[ABS]], %[[INF]] : f32
// CHECK-NEXT:    %[[FLOOR:.*]] = arith.constant -8.000000e+01 : f32
// CHECK-NEXT:    %[[BOUNDED:.*]] = arith.select %[[FIN]], %v, %[[FLOOR]] : f32
// CHECK-NEXT:    %[[NAN:.*]] = arith.cmpf uno, %v, %v : f32
// CHECK-NEXT:    %[[R:.*]] = arith.select %[[NAN]], %v, %[[BOUNDED]] : f32
// CHECK-NEXT:    func.return %[[R]] : f32

func.func @bounded_exp_arg(%v: f32) -> f32 {
  %r = vyre.bounded_exp_arg %v : f32
  func.return %r : f32
}
// CHECK-LABEL: func.func @bounded_exp_arg(%v: f32) -> f32 {
// CHECK-NEXT:    %[[ABS:.*]] = math.absf %v : f32
// CHECK-NEXT:    %[[INF:.*]] = arith.constant 0x7f800000 : f32
// CHECK-NEXT:    %[[FIN:.*]] = arith.cmpf one, %[[ABS]], %[[INF]] : f32
// CHECK-NEXT:    %[[FLOOR0:.*]] = arith.constant -8.000000e+01 : f32
// CHECK-NEXT:    %[[FINITE:.*]] = arith.select %[[FIN]], %v, %[[FLOOR0]] : f32
// CHECK-NEXT:    %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    %[[FLOOR:.*]] = arith.constant -8.000000e+01 : f32
// Upper bound first, then lower:
// CHECK-NEXT:    %[[POS:.*]] = arith.cmpf ogt, %[[FINITE]], %[[ZERO]] : f32
// CHECK-NEXT:    %[[CAPPED:.*]] = arith.select %[[POS]], %[[ZERO]], %[[FINITE]] : f32
// CHECK-NEXT:    %[[LOW:.*]] = arith.cmpf olt, %[[CAPPED]], %[[FLOOR]] : f32
// CHECK-NEXT:    %[[CLAMPED:.*]] = arith.select %[[LOW]], %[[FLOOR]], %[[CAPPED]] : f32
// CHECK-NEXT:    %[[NAN:.*]] = arith.cmpf uno, %v, %v : f32
// CHECK-NEXT:    %[[R:.*]] = arith.select %[[NAN]], %v, %[[CLAMPED]] : f32
// CHECK-NEXT:    func.return %[[R]] : f32

func.func @positive_denominator(%v: f32) -> f32 {
  %r = vyre.positive_denominator %v : f32
  func.return %r : f32
}
// CHECK-LABEL: func.func @positive_denominator(%v: f32) -> f32 {
// CHECK-NEXT:    %[[TINY:.*]] = arith.constant 1.17549435e-38 : f32
// CHECK-NEXT:    %[[ABS:.*]] = math.absf %v : f32
// CHECK-NEXT:    %[[INF:.*]] = arith.constant 0x7f800000 : f32
// CHECK-NEXT:    %[[FIN:.*]] = arith.cmpf one, %[[ABS]], %[[INF]] : f32
// CHECK-NEXT:    %[[BIG:.*]] = arith.cmpf ogt, %v, %[[TINY]] : f32
// CHECK-NEXT:    %[[OK:.*]] = arith.andi %[[FIN]], %[[BIG]] : i1
// CHECK-NEXT:    %[[SAFE:.*]] = arith.select %[[OK]], %v, %[[TINY]] : f32
// CHECK-NEXT:    %[[NAN:.*]] = arith.cmpf uno, %v, %v : f32
// CHECK-NEXT:    %[[R:.*]] = arith.select %[[NAN]], %v, %[[SAFE]] : f32
// CHECK-NEXT:    func.return %[[R]] : f32

func.func @flush_tiny(%v: f32) -> f32 {
  %r = vyre.flush_tiny %v : f32
  func.return %r : f32
}
// CHECK-LABEL: func.func @flush_tiny(%v: f32) -> f32 {
// CHECK-NEXT:    %[[ABS:.*]] = math.absf %v : f32
// CHECK-NEXT:    %[[TINY:.*]] = arith.constant 1.17549435e-38 : f32
// ole is false on NaN: NaN passes through.
// CHECK-NEXT:    %[[SMALL:.*]] = arith.cmpf ole, %[[ABS]], %[[TINY]] : f32
// CHECK-NEXT:    %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    %[[R:.*]] = arith.select %[[SMALL]], %[[ZERO]], %v : f32
// CHECK-NEXT:    func.return %[[R]] : f32
