// ARGS:
// ERROR: non-ASCII character
// an SSA name with a non-ASCII letter
builtin.module {
  %été = arith.constant 1.0 : f32
}
