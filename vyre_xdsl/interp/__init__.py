"""Run lowered vyre kernels in xDSL's interpreter, f32-exact.

`execute(module, info, arrays)` is what `vx.run(..., backend="interpreter")`
calls (`info` a KernelInfo, or a ProgramInfo whose kernels run in order).
Each kernel's `gpu.func` is executed by xDSL's `Interpreter` with this
package's InterpreterFunctions: a workgroup's lanes run in lock-step, every
SSA value a numpy scalar (uniform) or a vector over lanes.
"""

from vyre_xdsl.interp.arith import ArithFunctions
from vyre_xdsl.interp.execute import (
    FUNCTION_CLASSES,
    check_supported,
    execute,
    make_interpreter,
    supported_ops,
)
from vyre_xdsl.interp.gpu import GpuFunctions
from vyre_xdsl.interp.lanes import LaneState
from vyre_xdsl.interp.math import MathFunctions
from vyre_xdsl.interp.memref import Buffer, MemRefFunctions
from vyre_xdsl.interp.scf import ScfFunctions
from vyre_xdsl.interp.vector import VectorFunctions

__all__ = [
    "ArithFunctions",
    "Buffer",
    "FUNCTION_CLASSES",
    "GpuFunctions",
    "LaneState",
    "MathFunctions",
    "MemRefFunctions",
    "ScfFunctions",
    "VectorFunctions",
    "check_supported",
    "execute",
    "make_interpreter",
    "supported_ops",
]
