// ARGS: 
// ERROR: takes an f32
// a stability op on the wrong type
builtin.module {
  %x = arith.constant 1.0 : f64
  %y = vyre.bounded_exp_arg %x : f64
}
