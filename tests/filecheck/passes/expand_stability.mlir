// RUN: vyre-opt %s -p vyre-expand-stability | filecheck %s

// Each stability op becomes a select chain equal to its SEMANTICS.md
// definition: an ordered compare is false on NaN, so NaN keeps its side.

// bounded_score: only +-inf (|v| oeq +inf) becomes -80; NaN and finite v pass.
func.func @bounded_score(%v: f32) -> f32 {
  %r = vyre.bounded_score %v : f32
  func.return %r : f32
}
// CHECK-LABEL: func.func @bounded_score(%v: f32) -> f32 {
// CHECK-NEXT:    %[[FLOOR:.*]] = arith.constant -8.000000e+01 : f32
// CHECK-NEXT:    %[[ABS:.*]] = math.absf %v : f32
// CHECK-NEXT:    %[[INF:.*]] = arith.constant 0x7f800000 : f32
// CHECK-NEXT:    %[[INFINITE:.*]] = arith.cmpf oeq, %[[ABS]], %[[INF]] : f32
// CHECK-NEXT:    %[[R:.*]] = arith.select %[[INFINITE]], %[[FLOOR]], %v : f32
// CHECK-NEXT:    func.return %[[R]] : f32

// bounded_exp_arg: the lower bound (-inf and below -80 -> -80), NaN passed
// by its own select (a device compiler may turn the clamp into a max, which
// drops NaN); then above 0 (NaN is not) +inf -> -80 and the rest -> 0.
func.func @bounded_exp_arg(%v: f32) -> f32 {
  %r = vyre.bounded_exp_arg %v : f32
  func.return %r : f32
}
// CHECK-LABEL: func.func @bounded_exp_arg(%v: f32) -> f32 {
// CHECK-NEXT:    %[[FLOOR:.*]] = arith.constant -8.000000e+01 : f32
// CHECK-NEXT:    %[[LOW:.*]] = arith.cmpf olt, %v, %[[FLOOR]] : f32
// CHECK-NEXT:    %[[CLAMPED:.*]] = arith.select %[[LOW]], %[[FLOOR]], %v : f32
// CHECK-NEXT:    %[[NAN:.*]] = arith.cmpf uno, %v, %v : f32
// CHECK-NEXT:    %[[RAISED:.*]] = arith.select %[[NAN]], %v, %[[CLAMPED]] : f32
// CHECK-NEXT:    %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    %[[INF:.*]] = arith.constant 0x7f800000 : f32
// CHECK-NEXT:    %[[IS_INF:.*]] = arith.cmpf oeq, %v, %[[INF]] : f32
// CHECK-NEXT:    %[[CAPPED:.*]] = arith.select %[[IS_INF]], %[[FLOOR]], %[[ZERO]] : f32
// CHECK-NEXT:    %[[POS:.*]] = arith.cmpf ogt, %v, %[[ZERO]] : f32
// CHECK-NEXT:    %[[R:.*]] = arith.select %[[POS]], %[[CAPPED]], %[[RAISED]] : f32
// CHECK-NEXT:    func.return %[[R]] : f32

// With `nonpositive` (v <= 0, -inf or NaN) only the lower bound is left.
func.func @bounded_exp_arg_nonpositive(%v: f32) -> f32 {
  %r = vyre.bounded_exp_arg nonpositive %v : f32
  func.return %r : f32
}
// CHECK-LABEL: func.func @bounded_exp_arg_nonpositive(%v: f32) -> f32 {
// CHECK-NEXT:    %[[FLOOR:.*]] = arith.constant -8.000000e+01 : f32
// CHECK-NEXT:    %[[LOW:.*]] = arith.cmpf olt, %v, %[[FLOOR]] : f32
// CHECK-NEXT:    %[[CLAMPED:.*]] = arith.select %[[LOW]], %[[FLOOR]], %v : f32
// CHECK-NEXT:    %[[NAN:.*]] = arith.cmpf uno, %v, %v : f32
// CHECK-NEXT:    %[[R:.*]] = arith.select %[[NAN]], %v, %[[CLAMPED]] : f32
// CHECK-NEXT:    func.return %[[R]] : f32

// A nonpositive argument used only by exponents: each is the exponent of
// the floor where the argument is below it (-inf too), else of the
// argument itself, NaN included: one compare and select, no NaN test.
func.func @weight(%v: f32) -> (f32, f32) {
  %r = vyre.bounded_exp_arg nonpositive %v : f32
  %e = math.exp %r : f32
  %e2 = math.exp2 %r : f32
  func.return %e, %e2 : f32, f32
}
// CHECK-LABEL: func.func @weight(%v: f32) -> (f32, f32) {
// CHECK-NEXT:    %[[FLOOR:.*]] = arith.constant -8.000000e+01 : f32
// CHECK-NEXT:    %[[LOW:.*]] = arith.cmpf olt, %v, %[[FLOOR]] : f32
// CHECK-NEXT:    %[[AT_FLOOR:.*]] = math.exp %[[FLOOR]] : f32
// CHECK-NEXT:    %[[AT_V:.*]] = math.exp %v : f32
// CHECK-NEXT:    %[[E:.*]] = arith.select %[[LOW]], %[[AT_FLOOR]], %[[AT_V]] : f32
// CHECK-NEXT:    %[[FLOOR2:.*]] = arith.constant -8.000000e+01 : f32
// CHECK-NEXT:    %[[LOW2:.*]] = arith.cmpf olt, %v, %[[FLOOR2]] : f32
// CHECK-NEXT:    %[[AT_FLOOR2:.*]] = math.exp2 %[[FLOOR2]] : f32
// CHECK-NEXT:    %[[AT_V2:.*]] = math.exp2 %v : f32
// CHECK-NEXT:    %[[E2:.*]] = arith.select %[[LOW2]], %[[AT_FLOOR2]], %[[AT_V2]] : f32
// CHECK-NEXT:    func.return %[[E]], %[[E2]] : f32, f32

// Another use too: the clamp and the NaN test, as above.
func.func @weight_and_more(%v: f32) -> (f32, f32) {
  %r = vyre.bounded_exp_arg nonpositive %v : f32
  %e = math.exp %r : f32
  %f = arith.addf %r, %r : f32
  func.return %e, %f : f32, f32
}
// CHECK-LABEL: func.func @weight_and_more(%v: f32) -> (f32, f32) {
// CHECK:         arith.cmpf uno, %v, %v : f32
// CHECK:         math.exp %{{.*}} : f32

// `log2` (vyre-use-exp2's scores and exp2's arguments): the floor is
// -80 * log2(e), so exp2 of it is still e^-80.
func.func @in_log2_units(%v: f32) -> (f32, f32) {
  %r = vyre.bounded_score log2 %v : f32
  %a = vyre.bounded_exp_arg nonpositive log2 %v : f32
  %e = math.exp2 %a : f32
  func.return %r, %e : f32, f32
}
// CHECK-LABEL: func.func @in_log2_units(%v: f32) -> (f32, f32) {
// CHECK-NEXT:    %[[FLOOR:.*]] = arith.constant -115.415604 : f32
// CHECK:         %[[R:.*]] = arith.select %{{.*}}, %[[FLOOR]], %v : f32
// CHECK-NEXT:    %[[FLOOR2:.*]] = arith.constant -115.415604 : f32
// CHECK-NEXT:    %[[LOW:.*]] = arith.cmpf olt, %v, %[[FLOOR2]] : f32
// CHECK-NEXT:    %[[AT_FLOOR:.*]] = math.exp2 %[[FLOOR2]] : f32

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
