// xDSL's own targets print few of the ops a lowered kernel holds: an error
// that names the target, not an internal compiler error.
// RUN: vyre-opt %examples/flash_attention_2.mlir -p vyre-to-gpu | not vyre-opt -t wgsl 2>&1 | filecheck %s --check-prefix=WGSL
// RUN: vyre-opt %examples/flash_attention_2.mlir -p vyre-to-gpu | not vyre-opt -t riscv-asm 2>&1 | filecheck %s --check-prefix=RISCV

// WGSL: error: xDSL's target 'wgsl' cannot print this module (NotImplementedError: Printing of '{{.*}}' to WGSL is not implemented yet.); vyre-opt's own targets are mlir, spirv and spirv-asm
// WGSL-NOT: internal compiler error
// RISCV: error: xDSL's target 'riscv-asm' cannot print this module
// RISCV-NOT: internal compiler error
