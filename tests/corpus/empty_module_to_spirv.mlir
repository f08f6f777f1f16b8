// ARGS: -t spirv-asm
// ERROR: lowered vyre kernel (a gpu.func carrying
// nothing to emit
builtin.module {}
