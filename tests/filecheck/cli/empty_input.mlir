// An empty or whitespace-only input is an empty module, as mlir-opt-22
// prints it (`mlir-opt-22 /dev/null`); vyre-run has nothing to run.
// RUN: printf '' | vyre-opt | filecheck %s
// RUN: printf '  \n\t\n' | vyre-opt | filecheck %s
// RUN: printf '// a comment\n' | vyre-opt | filecheck %s
// RUN: vyre-opt /dev/null | filecheck %s
// RUN: printf '' | vyre-opt - | filecheck %s
// RUN: printf '' | not vyre-run - 2>&1 | filecheck %s --check-prefix=NOTHING
// CHECK: builtin.module {
// CHECK-NEXT: }
// NOTHING: <stdin>:1:1: error: the input holds no operation
