"""The forms in which passes find a skeleton's scratch arrays: by name on
vyre IR, and as per-lane slices of workgroup memory on lowered IR
(vyre-promote-scratch makes them private, vyre-interleave-scratch
lane-minor)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import gpu, memref
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import Operation, SSAValue

from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import WORKGROUP_MEMORY_SPACE
from vyre_xdsl.dialects.launch import launch_of
from vyre_xdsl.loop_bounds import constant_index, products_plus, upper_bound


def scratch_name(skeleton: vyre.TiledOnlineSoftmaxOp, role: str) -> str:
    """The name of the vyre.scratch that is `skeleton`'s operand `role`."""
    owner = getattr(skeleton, role).owner
    assert isinstance(owner, vyre.ScratchOp)
    return owner.sym_name.data


def _is_lane_x(value: SSAValue) -> bool:
    owner = value.owner
    return isinstance(owner, gpu.ThreadIdOp) and owner.dimension.data == gpu.DimensionEnum.X


def lane_slice(index: SSAValue, stride: int) -> tuple[SSAValue, SSAValue] | None:
    """`(lane, offset)` if `index` is `lane * stride + offset`, with lane
    the thread_id.x and `offset < stride` provably, else None."""
    for mul, offset in products_plus(index):
        for lane, factor in ((mul.lhs, mul.rhs), (mul.rhs, mul.lhs)):
            if _is_lane_x(lane) and constant_index(factor) == stride:
                bound = upper_bound(offset)
                if bound is not None and 0 <= bound < stride:
                    return lane, offset
    return None


def lanes_per_workgroup(op: Operation) -> int | None:
    func = op.parent_op()
    while func is not None and not isinstance(func, gpu.FuncOp):
        func = func.parent_op()
    if func is None:
        return None
    launch = launch_of(func)
    if launch is None:
        return None
    x, y, z = launch.workgroup_size
    return x if y == z == 1 else None


@dataclass(frozen=True)
class LaneSliceAccess:
    """A load or store of a lane's own slice: `index = lane * stride + offset`."""

    op: memref.LoadOp | memref.StoreOp
    lane: SSAValue
    offset: SSAValue


def lane_slice_accesses(alloc: memref.AllocOp) -> tuple[int, list[LaneSliceAccess]] | None:
    """The slice length and every access of the one-dimensional workgroup
    array `alloc`, if each lane only ever touches its own slice; else None."""
    memref_type = alloc.memref.type
    space = memref_type.memory_space
    if not (isinstance(space, IntegerAttr) and space.value.data == WORKGROUP_MEMORY_SPACE):
        return None
    lanes = lanes_per_workgroup(alloc)
    shape = memref_type.get_shape()
    if lanes is None or len(shape) != 1 or shape[0] % lanes:
        return None
    stride = shape[0] // lanes
    accesses = []
    for use in alloc.memref.uses:
        access = use.operation
        if not (
            isinstance(access, memref.LoadOp) and use.index == 0
            or isinstance(access, memref.StoreOp) and use.index == 1
        ):
            return None
        found = lane_slice(access.indices[0], stride)
        if found is None:
            return None
        accesses.append(LaneSliceAccess(access, *found))
    return stride, accesses
