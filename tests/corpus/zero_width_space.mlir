// ARGS:
// ERROR: invisible character U+200B (ZERO WIDTH SPACE)
// a zero-width space pasted into an op (the lexer said only 'Unexpected character')
builtin.module {
  %x = arith.constant​ 1.0 : f32
}
