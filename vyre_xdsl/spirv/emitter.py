"""Drives the conversion of a lowered module (docs/lowered-ir.md) to one
SPIR-V module with an entry point per kernel. The per-op conversions live in
one module per op family (`arith`, `math`, `memref`, `scf`, `gpu`, `vector`,
`half`, `mma`), each a HANDLERS table keyed by op class; this file holds the state
they share: the module builder and the variables every entry point may use
(`ProgramEmitter`), and per kernel the SSA value -> id map, the type
mapping and what its entry point needs (`KernelEmitter`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    IndexType,
    IntegerType,
    ModuleOp,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from vyre_xdsl.dialects.gpu_mma import MMAMatrixType
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import KernelInfo, ProgramInfo, program_info
from vyre_xdsl.spirv.builder import FunctionBuilder, ModuleBuilder
from vyre_xdsl.spirv.module import EntryPoint, SpirvModule
from vyre_xdsl.spirv.spec import (
    GLSL_STD_450,
    Capability,
    ExecutionMode,
    ExecutionModel,
    Op,
)

Handler = Callable[["KernelEmitter", Operation], None]

FLOAT_CONTROLS = "SPV_KHR_float_controls"
WORD_BYTES = 4  # every scalar the emitter declares is one 32-bit word


def _handlers() -> dict[type[Operation], Handler]:
    """Op class -> conversion, of every op family (imported here: each
    family module imports this one)."""
    from vyre_xdsl.spirv import arith, gpu, half, math, memref, mma, scf, vector

    handlers: dict[type[Operation], Handler] = {}
    for family in (arith, half, math, memref, scf, gpu, vector, mma):
        handlers.update(family.HANDLERS)
    return handlers


@dataclass
class MemoryObject:
    """How a memref value maps to SPIR-V: a variable, the access-chain prefix
    to its array, and how an MLIR index becomes an array element index."""

    variable: int
    storage_class: int
    element_type: int  # SPIR-V type id of one element
    prefix: tuple[int, ...]  # constant ids before the element index
    shape: tuple[int, ...]
    # >1: an array of vectors of this width (spirv/vector.py); element i is
    # component i % width of vector i / width
    vector_width: int = 1
    # "f16" / "bf16": a buffer of 16-bit elements, each loaded into the low
    # half of a 32-bit uint and stored back from it (spirv/half.py)
    half: str | None = None
    # an array of uvec4s, eight 16-bit elements each, that lanes write
    # with vector.store and matrix ops read (spirv/memref.py wide_access)
    wide: bool = False


class ProgramEmitter:
    """One SPIR-V module for the kernels of a program: the module builder,
    and the module-level variables its entry points share (a storage buffer
    per binding, its vector views, the builtin inputs). Workgroup variables
    belong to the kernel that allocates them."""

    _handlers: dict[type[Operation], Handler] | None = None

    def __init__(self, module: ModuleOp, program: ProgramInfo | None = None, *,
                 preserve_nan_inf: bool = False):
        self.program: ProgramInfo = program_info(module) if program is None else program
        self.preserve_nan_inf = preserve_nan_inf
        if ProgramEmitter._handlers is None:
            ProgramEmitter._handlers = _handlers()
        self.handlers = ProgramEmitter._handlers
        self.b = ModuleBuilder()
        self.storage_buffers: dict[int, int] = {}  # binding -> variable
        # (binding, width, NonWritable or NonReadable) -> a vector view of that
        # buffer, for loads or for stores (spirv/vector.py)
        self.vector_views: dict[tuple[int, int, int], MemoryObject] = {}
        self.builtins: dict[int, int] = {}  # BuiltIn -> Input variable
        # what every entry point needs, in declaration order
        self.capabilities = [Capability.Shader]
        self.extensions: list[str] = []
        if preserve_nan_inf:
            self.capabilities.append(Capability.SignedZeroInfNanPreserve)
            self.extensions.append(FLOAT_CONTROLS)

    def emit(self) -> SpirvModule:
        b = self.b
        for capability in self.capabilities:
            b.capability(capability)
        for extension in self.extensions:
            b.extension(extension)
        b.ext_inst_import(GLSL_STD_450)
        entries = tuple(KernelEmitter(self, kernel).emit() for kernel in self.program.kernels)
        return SpirvModule(b.encode(), entries)


class KernelEmitter:
    """The entry point and function of one kernel of a program."""

    def __init__(self, program: ProgramEmitter, info: KernelInfo):
        self.program = program
        self.info = info
        self.func = info.func
        self.preserve_nan_inf = program.preserve_nan_inf
        self.b = program.b
        self.values: dict[SSAValue, int] = {}
        self.memories: dict[SSAValue, MemoryObject] = {}
        self.interface: list[int] = []  # Input variables of the entry point
        self.capabilities: set[int] = set()  # beyond the program's
        self.extensions: set[str] = set()  # beyond the program's
        self.workgroup_bytes = 0
        self.fn: FunctionBuilder | None = None

    # shared helpers --------------------------------------------------------
    @property
    def uint(self) -> int:
        return self.b.type_int(32, False)

    @property
    def f32(self) -> int:
        return self.b.type_float(32)

    @property
    def bool(self) -> int:
        return self.b.type_bool()

    def type_of(self, attr: Attribute, what: str = "value") -> int:
        if isinstance(attr, IndexType):
            return self.uint
        if isinstance(attr, IntegerType):
            width = attr.width.data
            if width == 1:
                return self.bool
            if width == 32:
                return self.uint
        if isinstance(attr, Float32Type):
            return self.f32
        if isinstance(attr, MMAMatrixType):  # a loop-carried matrix, say
            from vyre_xdsl.spirv.mma import matrix_type

            return matrix_type(self, attr)
        if isinstance(attr, Float16Type | BFloat16Type):
            raise VyreError(
                f"the SPIR-V emitter supports {attr} values only as loads and stores "
                f"of storage buffers, widened to f32 (arith.extf) and narrowed from "
                f"it (arith.truncf); {what} has type {attr}"
            )
        raise VyreError(
            f"the SPIR-V emitter supports index, i1, i32 and f32 values; "
            f"{what} has type {attr}"
        )

    def is_bool(self, value: SSAValue) -> bool:
        return isinstance(value.type, IntegerType) and value.type.width.data == 1

    def value(self, value: SSAValue) -> int:
        try:
            return self.values[value]
        except KeyError:
            raise VyreError(
                f"SPIR-V emission: value {value} is used before it is defined "
                f"(or is a memref used as a scalar)"
            ) from None

    def bind(self, value: SSAValue, result: int) -> None:
        self.values[value] = result

    def capability(self, capability: int) -> None:
        """Declare `capability` for the module, needed by this kernel."""
        self.capabilities.add(capability)
        self.b.capability(capability)

    def extension(self, name: str) -> None:
        """Declare extension `name` for the module, needed by this kernel."""
        self.extensions.add(name)
        self.b.extension(name)

    def glsl(self, number: int, result_type: int, *args: int) -> int:
        std = self.b.ext_inst_import(GLSL_STD_450)
        return self.fn.op(Op.ExtInst, result_type, std, number, *args)

    # traversal -------------------------------------------------------------
    def emit_block(self, block: Block) -> None:
        for op in block.ops:
            self.emit_op(op)

    def emit_op(self, op: Operation) -> None:
        handler = self.program.handlers.get(type(op))
        try:
            if handler is None:
                raise VyreError(
                    f"the SPIR-V emitter does not support '{op.name}'; the lowered "
                    f"form (docs/lowered-ir.md) lists the ops it accepts"
                )
            handler(self, op)
        except VyreError as error:
            if getattr(error, "op", None) is None:  # vyre-opt locates it at the op
                error.op = op  # type: ignore[attr-defined]
            raise

    def emit(self) -> EntryPoint:
        """Add this kernel's function, entry point and execution modes."""
        from vyre_xdsl.spirv import gpu, memref

        b = self.b
        void = b.type_void()
        fn_type = b.type_function(void)
        self.fn = b.function(void, fn_type)
        b.name(self.fn.id, self.info.name)
        self.fn.label()
        body = self.func.body.blocks[0]
        memref.bind_buffers(self, body)
        self.emit_block(body)
        wg = self.info.workgroup_size
        b.entry_point(ExecutionModel.GLCompute, self.fn.id, self.info.name,
                      self.interface)
        b.execution_mode(self.fn.id, ExecutionMode.LocalSize, *wg)
        if self.preserve_nan_inf:
            b.execution_mode(self.fn.id, ExecutionMode.SignedZeroInfNanPreserve, 32)
        gpu.check_terminated(self)
        program = self.program
        return EntryPoint(self.info.name, tuple(wg), self.workgroup_bytes,
                          frozenset(program.capabilities) | self.capabilities,
                          frozenset(program.extensions) | self.extensions)


def emit_spirv(module: ModuleOp, *, preserve_nan_inf: bool = False) -> bytes:
    """The SPIR-V binary of emit_spirv_module."""
    return emit_spirv_module(module, preserve_nan_inf=preserve_nan_inf).binary


def emit_spirv_module(module: ModuleOp, program: ProgramInfo | None = None, *,
                      preserve_nan_inf: bool = False) -> SpirvModule:
    """The SPIR-V 1.3 binary (Vulkan 1.1) of the lowered kernels in `module`
    with what a runtime needs to know of each entry point (SpirvModule):
    one GLCompute entry point per kernel, named after it, in module order.
    `program` is program_info(module), if the caller has it already.
    The kernels share one StorageBuffer variable per binding; a program's
    kernels are also emitted each in a module of its own
    (`SpirvModule.alone`), which the Vulkan runtime builds its pipelines
    from.

    Memory spaces are taken as the IR says: `memref.alloc` in space 3 is
    Workgroup memory, any other alloc/alloca a per-invocation Function array
    (vyre-promote-scratch decides which scratch is private).

    `preserve_nan_inf`: declare SignedZeroInfNanPreserve (SPV_KHR_float_controls)
    so drivers may not assume floats are finite; needs the device feature
    shaderSignedZeroInfNanPreserveFloat32."""
    if not isinstance(module, ModuleOp):
        raise VyreError(
            f"emit_spirv expects a lowered xdsl ModuleOp, got {type(module).__name__}"
        )
    program = program_info(module) if program is None else program
    whole = ProgramEmitter(module, program, preserve_nan_inf=preserve_nan_inf).emit()
    if len(program.kernels) == 1:
        return whole
    alone = tuple(ProgramEmitter(module, replace(program, kernels=(kernel,)),
                                 preserve_nan_inf=preserve_nan_inf).emit().binary
                  for kernel in program.kernels)
    return replace(whole, alone=alone)

