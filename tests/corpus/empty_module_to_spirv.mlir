// ARGS: -t spirv-asm
// ERROR: expected exactly one lowered vyre kernel
// nothing to emit
builtin.module {}
