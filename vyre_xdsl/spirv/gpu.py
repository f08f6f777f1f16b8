"""gpu -> SPIR-V builtins, barriers and returns.

global_id / thread_id / block_id / grid_dim read the GlobalInvocationId /
LocalInvocationId / WorkgroupId / NumWorkgroups builtins (uvec3 Input
variables, listed in the entry point interface); block_dim is the LocalSize
constant. gpu.barrier is OpControlBarrier(Workgroup, Workgroup,
AcquireRelease | WorkgroupMemory), GLSL's barrier()."""

from __future__ import annotations

from xdsl.ir import Operation

from vyre_xdsl.errors import VyreError
from vyre_xdsl.spirv.emitter import prop
from vyre_xdsl.spirv.spec import (
    BuiltIn,
    Decoration,
    MemorySemantics,
    Op,
    Scope,
    StorageClass,
)

_TERMINATORS = {Op.Return, Op.Branch, Op.BranchConditional, Op.Unreachable}


def _dimension(op: Operation) -> int:
    attr = prop(op, "dimension")
    text = str(attr)
    for index, name in enumerate("xyz"):
        if f"dim {name}" in text or text.endswith(name + ">") or text == name:
            return index
    raise VyreError(f"'{op.name}': cannot read its dimension attribute {attr}")


def _builtin(e, builtin: int, name: str) -> int:
    """The program's Input variable of `builtin`, listed in the interface of
    this kernel's entry point (each entry point lists the ones it reads)."""
    cache = e.program.builtins
    if builtin not in cache:
        b = e.b
        vec = b.type_vector(e.uint, 3)
        var = b.global_variable(b.type_pointer(StorageClass.Input, vec),
                                StorageClass.Input)
        b.decorate(var, Decoration.BuiltIn, builtin)
        b.name(var, name)
        cache[builtin] = var
    var = cache[builtin]
    if var not in e.interface:
        e.interface.append(var)
    return var


def _read_builtin(builtin: int, name: str):
    def convert(e, op: Operation) -> None:
        var = _builtin(e, builtin, name)
        vec = e.fn.op(Op.Load, e.b.type_vector(e.uint, 3), var)
        e.bind(op.results[0], e.fn.op(Op.CompositeExtract, e.uint, vec,
                                      _dimension(op)))

    return convert


def _block_dim(e, op: Operation) -> None:
    e.bind(op.results[0], e.b.constant_uint(e.info.workgroup_size[_dimension(op)]))


def _barrier(e, op: Operation) -> None:
    b = e.b
    scope = b.constant_uint(Scope.Workgroup)
    semantics = b.constant_uint(MemorySemantics.AcquireRelease
                                | MemorySemantics.WorkgroupMemory)
    e.fn.emit(Op.ControlBarrier, scope, scope, semantics)


def _return(e, op: Operation) -> None:
    if op.operands:
        raise VyreError("gpu.return in a kernel takes no operands")
    e.fn.emit(Op.Return)


def check_terminated(e) -> None:
    body = e.fn.body
    if body[-1].opcode not in _TERMINATORS:
        e.fn.emit(Op.Return)


HANDLERS = {
    "gpu.global_id": _read_builtin(BuiltIn.GlobalInvocationId, "gl_GlobalInvocationID"),
    "gpu.thread_id": _read_builtin(BuiltIn.LocalInvocationId, "gl_LocalInvocationID"),
    "gpu.block_id": _read_builtin(BuiltIn.WorkgroupId, "gl_WorkGroupID"),
    "gpu.grid_dim": _read_builtin(BuiltIn.NumWorkgroups, "gl_NumWorkGroups"),
    "gpu.block_dim": _block_dim,
    "gpu.barrier": _barrier,
    "gpu.return": _return,
}
