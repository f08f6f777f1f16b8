"""convert-vyre-to-gpu: a `vyre.kernel` becomes a `gpu.func` kernel.

Buffers become the kernel's memref arguments (argument i = binding i), scratch
arrays become workgroup memory (`memref.alloc` in memory space 3), item and
lane come from `gpu.global_id x` / `gpu.thread_id x`.  What a runtime needs to
launch it is recorded on the `gpu.func` as one typed `vyre.launch` attribute
(dialects/launch.py, docs/lowered-ir.md): the buffers' names, bindings,
access, shapes and dtypes, the item count, workgroup and grid size, and the
shape of the skeleton the kernel was expanded from; each of the skeleton's
workgroup arrays keeps its role (`vyre.role`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import gpu, memref
from xdsl.dialects.builtin import (
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Block, Region
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import WORKGROUP_MEMORY_SPACE
from vyre_xdsl.dialects.launch import (
    ACCUMULATOR_ATTR,
    LAUNCH_ATTR,
    SCRATCH_ATTR,
    SKELETON_ATTR,
    BufferAttr,
    LaunchAttr,
)
from vyre_xdsl.dtypes import dtype_name
from vyre_xdsl.errors import pass_error
from vyre_xdsl.skeleton import Captures
from vyre_xdsl.walk import walk_once


def _buffer_description(op: vyre.BufferOp) -> BufferAttr:
    return BufferAttr(
        op.sym_name.data, op.binding.value.data, op.access.data, op.logical_shape,
        dtype_name(op.result.type.element_type),
        # a captured table: vx.run passes this read buffer itself
        op.attributes.get(Captures.ATTR),
    )


class LowerItemIndex(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: vyre.ItemIndexOp, rewriter: PatternRewriter):
        rewriter.replace(op, gpu.GlobalIdOp(gpu.DimensionAttr(gpu.DimensionEnum.X)))


class LowerLaneIndex(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: vyre.LaneIndexOp, rewriter: PatternRewriter):
        rewriter.replace(op, gpu.ThreadIdOp(gpu.DimensionAttr(gpu.DimensionEnum.X)))


class LowerKernel(RewritePattern):
    """vyre.kernel -> gpu.module { gpu.func kernel }, buffers -> arguments,
    scratch -> workgroup memory."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: vyre.KernelOp, rewriter: PatternRewriter):
        leftover = next(
            (
                inner
                for inner in op.walk()
                if isinstance(inner, vyre.TiledOnlineSoftmaxOp | vyre.YieldOp)
                or type(inner) in vyre.STABILITY_OPS
            ),
            None,
        )
        if leftover is not None:
            raise pass_error(
                leftover,
                f"convert-vyre-to-gpu found {leftover.name} in kernel "
                f"@{op.sym_name.data}; run vyre-inline-fragments and "
                f"vyre-expand-stability first (or the vyre-to-gpu pipeline)",
            )
        buffers = sorted(op.buffers, key=lambda b: b.binding.value.data)
        name = op.sym_name.data
        lanes = op.lanes
        items = op.items
        func = gpu.FuncOp(
            name,
            ([b.result.type for b in buffers], []),
            kernel=True,
        )
        launch = LaunchAttr(
            items, (lanes, 1, 1), (-(-items // lanes), 1, 1),
            [_buffer_description(b) for b in buffers], op.attributes.get(SKELETON_ATTR),
            op.attributes.get(ACCUMULATOR_ATTR),
        )
        func.attributes.update({"gpu.kernel": UnitAttr(), LAUNCH_ATTR: launch})
        entry = func.body.block
        for buffer, arg in zip(buffers, entry.args, strict=True):
            arg.name_hint = buffer.sym_name.data
            rewriter.replace_all_uses_with(buffer.result, arg)
            rewriter.erase(buffer)
        for scratch in op.scratch_arrays:
            shape = scratch.result.type.get_shape()
            alloc = memref.AllocOp(
                [], [], MemRefType(scratch.result.type.element_type, shape,
                                   memory_space=IntegerAttr(WORKGROUP_MEMORY_SPACE, i64))
            )
            alloc.memref.name_hint = scratch.sym_name.data
            if SCRATCH_ATTR in scratch.attributes:  # one of the skeleton's
                alloc.attributes[SCRATCH_ATTR] = scratch.attributes[SCRATCH_ATTR]
            rewriter.insert(alloc, InsertPoint.at_end(entry))
            rewriter.replace_all_uses_with(scratch.result, alloc.memref)
            rewriter.erase(scratch)
        rewriter.inline_block(op.body.block, InsertPoint.at_end(entry))
        rewriter.insert(gpu.ReturnOp([]), InsertPoint.at_end(entry))
        module = gpu.ModuleOp(StringAttr(name), Region(Block([func])))
        rewriter.replace(op, module, [])


@dataclass(frozen=True)
class ConvertVyreToGpuPass(ModulePass):
    """Lower vyre.kernel ops (after fragment inlining and stability expansion)
    to gpu.module/gpu.func kernels over memref buffers."""

    name = "convert-vyre-to-gpu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        walk_once(op, LowerItemIndex(), LowerLaneIndex())
        walk_once(op, LowerKernel())
        if any(isinstance(inner, gpu.ModuleOp) for inner in op.body.block.ops):
            op.attributes["gpu.container_module"] = UnitAttr()
