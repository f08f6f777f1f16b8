"""Run a lowered kernel, or a program of several, in xDSL's `Interpreter`.

`execute` runs the kernels in module order over one set of arrays; each
launches `grid_size` workgroups one after the other; within a workgroup,
xDSL's Interpreter walks the kernel's IR once for all `workgroup_size`
lanes, with this project's InterpreterFunctions (arith, math, memref, scf,
gpu, vector) computing on lane vectors under an active-lane mask.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from xdsl.dialects import gpu, vector
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter, InterpreterFunctions
from xdsl.ir import Operation
from xdsl.utils.exceptions import InterpretationError

from vyre_xdsl.errors import VyreError, op_error
from vyre_xdsl.interp.arith import ArithFunctions
from vyre_xdsl.interp.gpu import GpuFunctions
from vyre_xdsl.interp.lanes import SUBGROUP_SIZE, LaneState
from vyre_xdsl.interp.math import MathFunctions
from vyre_xdsl.interp.memref import Buffer, MemRefFunctions
from vyre_xdsl.interp.mma import MmaFunctions
from vyre_xdsl.interp.scf import ScfFunctions
from vyre_xdsl.interp.vector import VectorFunctions
from vyre_xdsl.kernel_info import KernelInfo, ProgramInfo, as_program

FUNCTION_CLASSES: tuple[type[InterpreterFunctions], ...] = (
    ArithFunctions,
    MathFunctions,
    MemRefFunctions,
    ScfFunctions,
    GpuFunctions,
    MmaFunctions,
    VectorFunctions,
)


def supported_ops() -> frozenset[type[Operation]]:
    """Every op type the interpreter implements."""
    ops: set[type[Operation]] = set()
    for cls in FUNCTION_CLASSES:
        ops.update(op_type for op_type, _ in cls._impls())  # pyright: ignore
    return frozenset(ops)


def _location(op: Operation) -> str:
    parent = op.parent_op()
    where = f" inside {parent.name}" if parent is not None else ""
    return f"'{op.name}'{where}"


def check_supported(func: gpu.FuncOp) -> None:
    """Raise VyreError naming the first op the interpreter cannot run."""
    known = supported_ops()
    for op in func.body.walk():
        if type(op) not in known:
            raise VyreError(
                f"the interpreter does not support the op {_location(op)} in "
                f"kernel @{func.sym_name.data}; the lowered form "
                f"(docs/lowered-ir.md) lists the ops it runs"
            )
        if isinstance(op, vector.LoadOp) and any(
            not isinstance(use.operation, vector.ExtractOp | vector.StoreOp)
            for use in op.result.uses
        ):
            raise VyreError(
                f"the interpreter only extracts elements of a vector or stores it; "
                f"the result of {_location(op)} in kernel @{func.sym_name.data} has "
                f"other uses"
            )


# Lanes are numpy vectors: a workgroup far beyond any device's
# maxComputeWorkGroupInvocations (1024 on the H200 and lavapipe) only makes
# the interpreter allocate and walk lanes until it runs out of memory.
MAX_LANES = 65536


def check_launch(kernel: KernelInfo) -> None:
    """Raise VyreError for a workgroup the interpreter cannot run."""
    lanes = int(np.prod(kernel.workgroup_size))
    if lanes > MAX_LANES:
        raise VyreError(
            f"workgroup size {tuple(kernel.workgroup_size)} of kernel @{kernel.name} "
            f"has {lanes} lanes; the interpreter runs at most {MAX_LANES} (devices "
            f"allow 1024 or so): use a smaller one (vyre-resize-workgroup{{size=...}})"
        )
    subgroup = min(SUBGROUP_SIZE, lanes)
    if kernel.shuffle_lanes > subgroup:  # the lanes it would pair do not exist
        raise VyreError(
            f"kernel @{kernel.name} adds values across {kernel.shuffle_lanes} lanes with "
            f"subgroup shuffles (vyre-split-head-dim{{parts={kernel.shuffle_lanes}}}), but the "
            f"interpreter's subgroups have {subgroup} lanes (32, or the workgroup's lanes "
            f"if fewer); lower it with at most {subgroup} parts"
        )


def make_interpreter(
    module: ModuleOp, state: LaneState, listeners: tuple = ()
) -> Interpreter:
    """An xDSL Interpreter with this project's functions registered."""
    interpreter = Interpreter(module, index_bitwidth=32, listeners=listeners)
    for cls in FUNCTION_CLASSES:
        interpreter.register_implementations(cls(state))
    return interpreter


def _check_arrays(program: ProgramInfo, arrays: Mapping[str, np.ndarray]) -> None:
    for buffer in program.buffers:
        if buffer.is_temporary and buffer.name not in arrays:
            continue  # allocated by execute
        if buffer.name not in arrays:
            raise VyreError(
                f"no array for buffer {buffer.name!r} of {program.label}"
            )
        array = arrays[buffer.name]
        if (
            not isinstance(array, np.ndarray)
            or array.dtype != buffer.numpy_dtype
            or array.ndim != 1
            or not array.flags.c_contiguous
            or array.size != buffer.count
        ):
            raise VyreError(
                f"buffer {buffer.name!r} of {program.label} must be a flat "
                f"contiguous {buffer.numpy_dtype} array of {buffer.count} elements"
            )
        if not buffer.is_input and not array.flags.writeable:
            kind = "output" if buffer.is_output else "temporary"
            raise VyreError(f"{kind} buffer {buffer.name!r} is read-only")


def execute(
    module: ModuleOp,
    info: KernelInfo | ProgramInfo,
    arrays: dict[str, np.ndarray],
    *,
    listeners: tuple = (),
) -> None:
    """Run the kernel of `module`, or each kernel of a program in order, on
    `arrays` (buffer name -> flat array of the buffer's dtype: float32,
    float16, ml_dtypes.bfloat16 or int32, shared by the kernels);
    outputs are written in place. A temporary buffer starts zeroed: one
    given in `arrays` is zeroed and left holding what the kernels wrote (for
    debugging), one left out is allocated here. `listeners` are xDSL
    `Interpreter.Listener`s (e.g. `xdsl.interpreter.OpCounter`)."""
    program = as_program(info)
    _check_arrays(program, arrays)
    for kernel in program.kernels:  # refuse before any kernel has run
        check_supported(kernel.func)
        check_launch(kernel)
    storage = dict(arrays)
    for buffer in program.temporaries:
        if buffer.name in storage:
            storage[buffer.name][:] = 0
        else:
            storage[buffer.name] = np.zeros(buffer.count, buffer.numpy_dtype)
    buffers = {
        b.name: Buffer(
            # the interpreter holds integers unsigned (lanes.py): an i32
            # buffer is read through its uint32 view (the same bits)
            storage[b.name].view(np.uint32) if b.dtype == "i32" else storage[b.name],
            (b.count,),
            private=False,
            name=f"buffer {b.name!r}",
            read_only=b.is_input,
        )
        for b in program.buffers
    }
    try:
        with np.errstate(all="ignore"):
            for kernel in program.kernels:
                _run_kernel(module, kernel, buffers, listeners)
    except VyreError as error:
        # xDSL attaches the printed module to errors raised inside ops;
        # the message alone is what a user needs, and the op where it has one
        if (op := getattr(error, "op", None)) is not None:
            raise op_error(op, str(error)) from None
        raise VyreError(str(error)) from None
    except InterpretationError as error:
        raise VyreError(f"interpreter error: {error}") from None


def _run_kernel(
    module: ModuleOp,
    kernel: KernelInfo,
    buffers: Mapping[str, Buffer],
    listeners: tuple,
) -> None:
    """Launch every workgroup of `kernel`, one after the other."""
    func = kernel.func
    state = LaneState(tuple(kernel.workgroup_size), tuple(kernel.grid_size),
                      accumulator=kernel.accumulator)
    interpreter = make_interpreter(module, state, listeners)
    args = tuple(buffers[b.name] for b in kernel.buffers)
    gx, gy, gz = kernel.grid_size
    for bz in range(gz):
        for by in range(gy):
            for bx in range(gx):
                state.start_workgroup((bx, by, bz))
                interpreter.run_ssacfg_region(func.body, args, func.sym_name.data)
