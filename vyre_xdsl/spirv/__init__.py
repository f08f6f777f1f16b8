"""SPIR-V emission for lowered vyre kernels (docs/lowered-ir.md).

    emit_spirv(module) -> bytes     SPIR-V 1.3 binary, valid for Vulkan 1.1, with
                                    one entry point per kernel of the module
    disassemble(binary) -> str      text like `spirv-dis --raw-id`

One conversion module per op family (arith, math, memref, scf, gpu) on top of
a small module builder (builder.py); opcode numbers in spec.py."""

from vyre_xdsl.spirv.disasm import disassemble
from vyre_xdsl.spirv.emitter import KernelEmitter, ProgramEmitter, emit_spirv

__all__ = ["emit_spirv", "disassemble", "KernelEmitter", "ProgramEmitter"]
