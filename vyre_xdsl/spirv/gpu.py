"""gpu -> SPIR-V builtins, barriers, subgroup shuffles and returns.

global_id / thread_id / block_id / grid_dim read the GlobalInvocationId /
LocalInvocationId / WorkgroupId / NumWorkgroups builtins (uvec3 Input
variables, listed in the entry point interface); block_dim is the LocalSize
constant. gpu.barrier is OpControlBarrier(Workgroup, Workgroup,
AcquireRelease | WorkgroupMemory), GLSL's barrier().

gpu.subgroup_size reads the SubgroupSize builtin (a u32 Input variable).
gpu.shuffle is OpGroupNonUniformShuffle{Xor,Up,Down,} at Subgroup scope
(core in SPIR-V 1.3). Those span the whole subgroup and have no width, so
the op's width must be the subgroup size: `arith.index_cast` of
`gpu.subgroup_size`, known only on the device. (MLIR's SPIR-V conversion
instead wants a constant equal to the target's subgroup size, fixed at
compile time.) `valid` is computed from SubgroupLocalInvocationId only when
it is used; the value an invalid lane gets is unspecified on the device
(MLIR: poison)."""

from __future__ import annotations

from xdsl.dialects import arith, gpu
from xdsl.ir import OpResult, Operation, SSAValue

from vyre_xdsl.dialects import gpu_shuffle
from vyre_xdsl.dialects.gpu_shuffle import ShuffleMode
from vyre_xdsl.errors import VyreError
from vyre_xdsl.spirv.spec import (
    BuiltIn,
    Capability,
    Decoration,
    MemorySemantics,
    Op,
    Scope,
    StorageClass,
)

_TERMINATORS = {Op.Return, Op.Branch, Op.BranchConditional, Op.Unreachable}


_AXES = tuple(gpu.DimensionEnum)  # x, y, z: the components of a uvec3


def _dimension(op: Operation) -> int:
    """The component that `op` (gpu.global_id, block_dim, ...) reads."""
    return _AXES.index(op.dimension.data)


def _builtin(e, builtin: int, name: str, value_type: int | None = None) -> int:
    """The program's Input variable of `builtin` (a uvec3 unless
    `value_type` says otherwise), listed in the interface of this kernel's
    entry point (each entry point lists the ones it reads)."""
    cache = e.program.builtins
    if builtin not in cache:
        b = e.b
        if value_type is None:
            value_type = b.type_vector(e.uint, 3)
        var = b.global_variable(b.type_pointer(StorageClass.Input, value_type),
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


def _read_subgroup_builtin(e, builtin: int, name: str) -> int:
    e.capability(Capability.GroupNonUniform)
    return e.fn.op(Op.Load, e.uint, _builtin(e, builtin, name, e.uint))


def _subgroup_size(e, op: Operation) -> None:
    e.bind(op.results[0],
           _read_subgroup_builtin(e, BuiltIn.SubgroupSize, "gl_SubgroupSize"))


# mode -> (opcode, capability)
_SHUFFLES = {
    ShuffleMode.XOR: (Op.GroupNonUniformShuffleXor, Capability.GroupNonUniformShuffle),
    ShuffleMode.IDX: (Op.GroupNonUniformShuffle, Capability.GroupNonUniformShuffle),
    ShuffleMode.UP: (Op.GroupNonUniformShuffleUp,
                     Capability.GroupNonUniformShuffleRelative),
    ShuffleMode.DOWN: (Op.GroupNonUniformShuffleDown,
                       Capability.GroupNonUniformShuffleRelative),
}


def _is_subgroup_size(value: SSAValue) -> bool:
    """Whether `value` is `arith.index_cast` of `gpu.subgroup_size`."""
    cast = value.owner
    return (isinstance(cast, arith.IndexCastOp)
            and isinstance(cast.operands[0].owner, gpu.SubgroupSizeOp))


def _describe(value: SSAValue) -> str:
    name = f"%{value.name_hint} " if value.name_hint else ""
    if isinstance(value, OpResult):
        return f"{name}(made by '{value.owner.name}')"
    return f"{name}(a block argument)"


def _shuffle(e, op: Operation) -> None:
    value, offset, width = op.operands
    mode = op.mode.data
    if not _is_subgroup_size(width):
        raise VyreError(
            f"'{op.name}' {mode}: the SPIR-V emitter needs its width to be the "
            f"subgroup size, but it is {_describe(width)}; SPIR-V shuffles span "
            f"the whole subgroup, so pass `arith.index_cast` of "
            f"`gpu.subgroup_size` as the width (MLIR's SPIR-V conversion "
            f"likewise accepts only a width equal to the subgroup size)"
        )
    opcode, capability = _SHUFFLES[mode]
    b, fn = e.b, e.fn
    e.capability(Capability.GroupNonUniform)
    e.capability(capability)
    result_type = e.type_of(value.type, f"'{op.name}' value")
    scope = b.constant_uint(Scope.Subgroup)
    shuffled = fn.op(opcode, result_type, scope, e.value(value), e.value(offset))
    e.bind(op.results[0], shuffled)
    if op.results[1].uses:
        e.bind(op.results[1], _shuffle_valid(e, mode, e.value(offset), e.value(width)))


def _shuffle_valid(e, mode: ShuffleMode, offset: int, size: int) -> int:
    """Whether the source lane exists: with width = subgroup size, the
    lane's id in the subgroup against the offset and the size."""
    fn, boolean, uint = e.fn, e.bool, e.uint
    if mode == ShuffleMode.IDX:
        return fn.op(Op.ULessThan, boolean, offset, size)
    lane = _read_subgroup_builtin(e, BuiltIn.SubgroupLocalInvocationId,
                                  "gl_SubgroupInvocationID")
    if mode == ShuffleMode.XOR:
        source = fn.op(Op.BitwiseXor, uint, lane, offset)
        return fn.op(Op.ULessThan, boolean, source, size)
    if mode == ShuffleMode.UP:
        return fn.op(Op.UGreaterThanEqual, boolean, lane, offset)
    # down: lane + offset < size, written so that a large offset cannot wrap
    room = fn.op(Op.ISub, uint, size, lane)
    return fn.op(Op.ULessThan, boolean, offset, room)


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
    gpu.GlobalIdOp: _read_builtin(BuiltIn.GlobalInvocationId, "gl_GlobalInvocationID"),
    gpu.ThreadIdOp: _read_builtin(BuiltIn.LocalInvocationId, "gl_LocalInvocationID"),
    gpu.BlockIdOp: _read_builtin(BuiltIn.WorkgroupId, "gl_WorkGroupID"),
    gpu.GridDimOp: _read_builtin(BuiltIn.NumWorkgroups, "gl_NumWorkGroups"),
    gpu.BlockDimOp: _block_dim,
    gpu.BarrierOp: _barrier,
    gpu.SubgroupSizeOp: _subgroup_size,
    gpu_shuffle.ShuffleOp: _shuffle,
    gpu.ReturnOp: _return,
}
