// Bad inputs found by fuzzing (tests/corpus) and hand-written ones: each is a
// located `error:` diagnostic with exit 1, never a traceback.
// RUN: vyre-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not vyre-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT
// RUN: not vyre-opt %S/../../corpus/lowered_negative_binding.mlir -t spirv-asm 2>&1 | filecheck %s --check-prefix=BINDING
// RUN: not vyre-opt %S/../../corpus/lowered_scf_if_missing_yield.mlir -t spirv-asm 2>&1 | filecheck %s --check-prefix=YIELD
// RUN: not vyre-opt %S/../../corpus/lowered_index_constant_beyond_u32.mlir -t spirv-asm 2>&1 | filecheck %s --check-prefix=CONST
// RUN: not vyre-opt %S/../../corpus/unsupported_op_for_spirv.mlir -t spirv-asm 2>&1 | filecheck %s --check-prefix=SPIRV
// RUN: not vyre-opt %S/../../corpus/memref_load_without_index.mlir -p vyre-to-gpu 2>&1 | filecheck %s --check-prefix=LOAD
// RUN: not vyre-run %S/does-not-exist.mlir 2>&1 | filecheck %s --check-prefix=RUN-MISSING
// RUN: not vyre-run %S/../../corpus/lowered_negative_binding.mlir --random 2>&1 | filecheck %s --check-prefix=RUN-BINDING

// EXIT: error: Operation vyre.no_such_op is not registered
// EXIT-NOT: Traceback
// BINDING: lowered_negative_binding.mlir:28:23: error: buffer 'out': binding -1 is outside [0, 2^31); bindings are i32 on the device
// BINDING-NOT: Traceback
// YIELD: lowered_scf_if_missing_yield.mlir:20:7: error: kernel @exchange: a region of 'scf.if' yields () but the op returns (f32)
// YIELD-NOT: Traceback
// CONST: lowered_index_constant_beyond_u32.mlir:16:7: error: kernel @exchange: constant 4294967360 : index does not fit in 32 bits
// CONST-NOT: Traceback
// SPIRV: unsupported_op_for_spirv.mlir:20:7: error: the SPIR-V emitter does not support 'math.atan'
// SPIRV-NOT: Traceback
// LOAD: memref_load_without_index.mlir:60:11: error: 'memref.load' op expected an index for each dimension
// LOAD-NOT: Traceback
// RUN-MISSING: error: cannot read {{.*}}does-not-exist.mlir
// RUN-BINDING: error: buffer 'out': binding -1 is outside [0, 2^31)

// An unknown op.
builtin.module {
  "vyre.no_such_op"() : () -> ()
}
// CHECK: {{.*}}reliability_errors.mlir:30:20: error: Operation vyre.no_such_op is not registered

// -----

// A stability op on the wrong type.
builtin.module {
  %x = arith.constant 1.0 : f64
  %y = vyre.bounded_exp_arg %x : f64
}
// CHECK: {{.*}}reliability_errors.mlir:39:3: error: 'vyre.bounded_exp_arg' op takes an f32 score, got f64

// -----

// An integer type too wide to represent (xDSL ran out of memory).
builtin.module {
  %x = arith.constant 0 : i644294967295
}
// CHECK: {{.*}}reliability_errors.mlir:47:3: error: this operation holds a type or value too large to represent

// -----

// Malformed text: a missing type.
builtin.module {
  %x = arith.constant 1.0 :
}
// CHECK: {{.*}}reliability_errors.mlir:56:1: error: type expected
