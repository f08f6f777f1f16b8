// Command-line errors are one `error:` line and a non-zero exit, never a traceback.
// RUN: not vyre-opt %s -p no-such-pass 2>&1 | filecheck %s --check-prefix=PASS
// RUN: not vyre-opt %S/does-not-exist.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: not vyre-opt %s 2>&1 | filecheck %s --check-prefix=SYNTAX
// RUN: not vyre-opt %s -t no-such-target 2>&1 | filecheck %s --check-prefix=TARGET
// RUN: vyre-opt --version | filecheck %s --check-prefix=VERSION
// RUN: not vyre-opt %s -p 'cse{' 2>&1 | filecheck %s --check-prefix=MALFORMED

// PASS: error: Unrecognized passes: ['no-such-pass']
// PASS-NOT: Traceback
// MISSING: error: cannot open '{{.*}}does-not-exist.mlir': No such file or directory
// MISSING-NOT: Traceback
// TARGET: vyre-opt: error: argument -t/--target: invalid choice: 'no-such-target'
// TARGET-NOT: Traceback
// VERSION: vyre-opt (vyre-xdsl) built on xdsl version 0.74
// MALFORMED: error: Error parsing pass pipeline specification:
// MALFORMED-NOT: Traceback

builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [4, 2] memref<8xf32>
  }
}
// SYNTAX: {{.*}}errors.mlir:21:48: error: Expected ':'
// SYNTAX-NEXT: {{ *}}%q = vyre.buffer "q" binding 0 read [4, 2] memref<8xf32>
// SYNTAX-NOT: Traceback
