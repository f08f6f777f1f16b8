// An option whose value does not have the option's type is refused before
// any pass runs, naming the pass, the option and a value of its kind
// (xDSL's own message named neither; Python takes true for the integer 1);
// an integer option of ours is a count or a size, never negative.
// RUN: not vyre-opt %s -p 'vyre-unroll-jam{factor=abc}' 2>&1 | filecheck %s --check-prefix=TEXT
// RUN: not vyre-opt %s -p 'vyre-absorb-mla{kernels=true}' 2>&1 | filecheck %s --check-prefix=FLAG
// RUN: not vyre-opt %s -p 'cse,vyre-tensor-cores{force=1}' 2>&1 | filecheck %s --check-prefix=NUMBER
// RUN: not vyre-opt %s -p 'vyre-to-gpu{device}' 2>&1 | filecheck %s --check-prefix=NOTHING
// RUN: not vyre-opt %s -p 'vyre-retile{max_parts=-1}' 2>&1 | filecheck %s --check-prefix=NEGATIVE
// RUN: not vyre-opt %s -p 'vyre-unroll-jam{fctor=4}' 2>&1 | filecheck %s --check-prefix=UNKNOWN
// TEXT: error: pass 'vyre-unroll-jam': option factor takes an integer (e.g. vyre-unroll-jam{factor=32}), got abc
// FLAG: error: pass 'vyre-absorb-mla': option kernels takes an integer (e.g. vyre-absorb-mla{kernels=1}), got true
// NUMBER: error: pass 'vyre-tensor-cores': option force takes true or false (e.g. vyre-tensor-cores{force=false}), got 1
// NEGATIVE: error: pass 'vyre-retile': option max_parts takes an integer of at least 0 (e.g. vyre-retile{max_parts=0}), got -1
// UNKNOWN: error: pass 'vyre-unroll-jam' has no option fctor; its options are factor
// NOTHING: error: pass 'vyre-to-gpu': option device takes a name (e.g. vyre-to-gpu{device=generic}), got nothing
builtin.module {}
