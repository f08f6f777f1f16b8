"""vyre-promote-scratch: per-lane slices of workgroup memory become private.

The seed's scratch arrays (q_scratch, score_tile, o_acc) live in workgroup
memory, but each lane only ever touches its own `lane * stride + offset`
slice (offset < stride): that is private data in disguise.  This pass turns
such a `memref.alloc` in memory space 3 into a per-lane `memref.alloca` of
`stride` elements indexed by `offset`.  Workgroup memory is then free for
data the lanes really share (and head_dim 128 fits the 48 KiB of an H200),
and a GPU compiler can keep a private array in registers.

Runs on lowered IR (after convert-vyre-to-gpu).  Every scratch array of
the kernel qualifies: the skeleton's three and a decoder's own (e.g. MLA's
absorbed `q_lat`/`o_lat`, `lane * kv_lora_rank + r`).  An array with any
other access (another lane's slice, an unknown offset, a use that is not a
load or store) stays in workgroup memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, gpu, memref
from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from vyre_xdsl.dialects.launch import launch_of
from vyre_xdsl.loop_bounds import constant_index, upper_bound

WORKGROUP_MEMORY_SPACE = 3


def _is_lane_x(value: SSAValue) -> bool:
    owner = value.owner
    return isinstance(owner, gpu.ThreadIdOp) and owner.dimension.data == gpu.DimensionEnum.X


def lane_slice(index: SSAValue, stride: int) -> tuple[SSAValue, SSAValue] | None:
    """`(lane, offset)` if `index` is `lane * stride + offset`, with lane
    the thread_id.x and `offset < stride` provably, else None."""
    add = index.owner
    if not isinstance(add, arith.AddiOp):
        return None
    for base, offset in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
        mul = base.owner
        if not isinstance(mul, arith.MuliOp):
            continue
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


class PromoteLaneSlices(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: memref.AllocOp, rewriter: PatternRewriter):
        found = lane_slice_accesses(op)
        if found is None:
            return
        stride, accesses = found
        private = memref.AllocaOp.get(op.memref.type.element_type, shape=[stride])
        private.memref.name_hint = op.memref.name_hint
        rewriter.replace(op, private)
        for access in accesses:
            if isinstance(access.op, memref.LoadOp):
                new = memref.LoadOp.get(private.memref, [access.offset])
            else:
                new = memref.StoreOp.get(access.op.value, private.memref, [access.offset])
            rewriter.replace(access.op, new)


@dataclass(frozen=True)
class PromoteScratchPass(ModulePass):
    """Turn workgroup arrays that each lane only touches in its own slice
    into per-lane private arrays (memref.alloca)."""

    name = "vyre-promote-scratch"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(PromoteLaneSlices(), apply_recursively=False).rewrite_module(op)
