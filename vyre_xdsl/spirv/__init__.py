"""SPIR-V emission for lowered vyre kernels (docs/lowered-ir.md).

    emit_spirv_module(module) -> SpirvModule   the binary and, per entry
                                    point, what a runtime needs (capabilities,
                                    workgroup memory and size): the Vulkan
                                    runtime takes this, it parses no binary
    emit_spirv(module) -> bytes     the SPIR-V 1.3 binary alone, valid for
                                    Vulkan 1.1, with one entry point per kernel
    disassemble(binary) -> str      text like `spirv-dis --raw-id`

One conversion module per op family (arith, math, memref, scf, gpu, vector,
half) on top of a small module builder (builder.py); opcodes and enumerants
from the Khronos grammar (spec.py, grammar.json)."""

from vyre_xdsl.spirv.disasm import disassemble
from vyre_xdsl.spirv.emitter import KernelEmitter, ProgramEmitter, emit_spirv, emit_spirv_module
from vyre_xdsl.spirv.module import EntryPoint, SpirvModule

__all__ = ["emit_spirv", "emit_spirv_module", "SpirvModule", "EntryPoint",
           "disassemble", "KernelEmitter", "ProgramEmitter"]
