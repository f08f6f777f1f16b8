// ARGS:
// ERROR: U+202E (RIGHT-TO-LEFT OVERRIDE)
// a right-to-left override hides what the line says
builtin.module {
  %x = arith.constant 1.0 : f32 ‮
}
