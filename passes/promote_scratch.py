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

from vyre_xdsl.loop_bounds import constant_index, upper_bound

WORKGROUP_MEMORY_SPACE = 3


def _is_lane_x(value: SSAValue) -> bool:
    owner = value.owner
    return isinstance(owner, gpu.ThreadIdOp) and owner.dimension.data == gpu.DimensionEnum.X


def lane_slice_offset(index: SSAValue, stride: int) -> SSAValue | None:
    """`offset` if `index` is `thread_id.x * stride + offset` with
    `offset < stride` provably, else None."""
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
                    return offset
    return None


def _lanes_per_workgroup(op: Operation) -> int | None:
    func = op.parent_op()
    while func is not None and not isinstance(func, gpu.FuncOp):
        func = func.parent_op()
    if func is None:
        return None
    size = func.attributes.get("vyre.workgroup_size")
    if size is None:
        return None
    x, y, z = (int(v) for v in size.get_values())
    return x if y == z == 1 else None


class PromoteLaneSlices(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: memref.AllocOp, rewriter: PatternRewriter):
        memref_type = op.memref.type
        space = memref_type.memory_space
        if not (isinstance(space, IntegerAttr) and space.value.data == WORKGROUP_MEMORY_SPACE):
            return
        lanes = _lanes_per_workgroup(op)
        shape = memref_type.get_shape()
        if lanes is None or len(shape) != 1 or shape[0] % lanes:
            return
        stride = shape[0] // lanes
        offsets: list[tuple[Operation, SSAValue]] = []
        for use in op.memref.uses:
            access = use.operation
            if isinstance(access, memref.LoadOp) and use.index == 0:
                index = access.indices[0]
            elif isinstance(access, memref.StoreOp) and use.index == 1:
                index = access.indices[0]
            else:
                return
            offset = lane_slice_offset(index, stride)
            if offset is None:
                return
            offsets.append((access, offset))
        private = memref.AllocaOp.get(memref_type.element_type, shape=[stride])
        private.memref.name_hint = op.memref.name_hint
        rewriter.replace(op, private)
        for access, offset in offsets:
            if isinstance(access, memref.LoadOp):
                rewriter.replace(access, memref.LoadOp.get(private.memref, [offset]))
            else:
                rewriter.replace(
                    access, memref.StoreOp.get(access.value, private.memref, [offset])
                )


@dataclass(frozen=True)
class PromoteScratchPass(ModulePass):
    """Turn workgroup arrays that each lane only touches in its own slice
    into per-lane private arrays (memref.alloca)."""

    name = "vyre-promote-scratch"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(PromoteLaneSlices(), apply_recursively=False).rewrite_module(op)
