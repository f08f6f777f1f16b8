// An unterminated string literal is the lexer's located error at once: xDSL's
// string regex backtracked exponentially in the length of the line (this file
// never finished), in vyre-opt and in vyre-run alike.
// RUN: not vyre-opt %s 2>&1 | filecheck %s
// RUN: not vyre-run %s 2>&1 | filecheck %s

builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q binding 0 read [4, 2] : memref<8xf32> with a long tail of words
    %out = vyre.buffer "out" binding 1 write [4, 2] : memref<8xf32>
  }
}
// CHECK: unterminated_string.mlir:9:22: error: End of file reached before closing string literal.
// CHECK-NOT: Traceback
