"""Run a lowered kernel in xDSL's `Interpreter`.

`execute` launches `grid_size` workgroups one after the other; within a
workgroup, xDSL's Interpreter walks the kernel's IR once for all
`workgroup_size` lanes, with this project's InterpreterFunctions (arith,
math, memref, scf, gpu, vector) computing on lane vectors under an
active-lane mask.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from xdsl.dialects import gpu, vector
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter, InterpreterFunctions
from xdsl.ir import Operation
from xdsl.utils.exceptions import InterpretationError

from vyre_xdsl.errors import VyreError
from vyre_xdsl.interp.arith import ArithFunctions
from vyre_xdsl.interp.gpu import GpuFunctions
from vyre_xdsl.interp.lanes import LaneState
from vyre_xdsl.interp.math import MathFunctions
from vyre_xdsl.interp.memref import Buffer, MemRefFunctions
from vyre_xdsl.interp.scf import ScfFunctions
from vyre_xdsl.interp.vector import VectorFunctions
from vyre_xdsl.kernel_info import KernelInfo

FUNCTION_CLASSES: tuple[type[InterpreterFunctions], ...] = (
    ArithFunctions,
    MathFunctions,
    MemRefFunctions,
    ScfFunctions,
    GpuFunctions,
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
            not isinstance(use.operation, vector.ExtractOp) for use in op.result.uses
        ):
            raise VyreError(
                f"the interpreter only extracts elements of a vector; the result "
                f"of {_location(op)} in kernel @{func.sym_name.data} has other uses"
            )


def make_interpreter(
    module: ModuleOp, state: LaneState, listeners: tuple = ()
) -> Interpreter:
    """An xDSL Interpreter with this project's functions registered."""
    interpreter = Interpreter(module, index_bitwidth=32, listeners=listeners)
    for cls in FUNCTION_CLASSES:
        interpreter.register_implementations(cls(state))
    return interpreter


def _check_arrays(info: KernelInfo, arrays: Mapping[str, np.ndarray]) -> None:
    for buffer in info.buffers:
        if buffer.name not in arrays:
            raise VyreError(
                f"no array for buffer {buffer.name!r} of kernel @{info.name}"
            )
        array = arrays[buffer.name]
        if (
            not isinstance(array, np.ndarray)
            or array.dtype != np.float32
            or array.ndim != 1
            or not array.flags.c_contiguous
            or array.size != buffer.count
        ):
            raise VyreError(
                f"buffer {buffer.name!r} of kernel @{info.name} must be a flat "
                f"contiguous float32 array of {buffer.count} elements"
            )
        if buffer.is_output and not array.flags.writeable:
            raise VyreError(f"output buffer {buffer.name!r} is read-only")


def execute(
    module: ModuleOp,
    info: KernelInfo,
    arrays: dict[str, np.ndarray],
    *,
    listeners: tuple = (),
) -> None:
    """Run the kernel of `module` on `arrays` (buffer name -> flat float32
    array); outputs are written in place. `listeners` are xDSL
    `Interpreter.Listener`s (e.g. `xdsl.interpreter.OpCounter`)."""
    func = info.func
    _check_arrays(info, arrays)
    check_supported(func)
    state = LaneState(tuple(info.workgroup_size), tuple(info.grid_size))
    interpreter = make_interpreter(module, state, listeners)
    args = tuple(
        Buffer(
            arrays[b.name],
            (b.count,),
            private=False,
            name=f"buffer {b.name!r}",
            read_only=not b.is_output,
        )
        for b in info.buffers
    )
    gx, gy, gz = info.grid_size
    try:
        with np.errstate(all="ignore"):
            for bz in range(gz):
                for by in range(gy):
                    for bx in range(gx):
                        state.start_workgroup((bx, by, bz))
                        interpreter.run_ssacfg_region(
                            func.body, args, func.sym_name.data
                        )
    except VyreError as error:
        # xDSL attaches the printed module to errors raised inside ops;
        # the message alone is what a user needs
        raise VyreError(str(error)) from None
    except InterpretationError as error:
        raise VyreError(f"interpreter error: {error}") from None
