"""convert-vyre-to-gpu: a `vyre.kernel` becomes a `gpu.func` kernel.

Buffers become the kernel's memref arguments (argument i = binding i), scratch
arrays become workgroup memory (`memref.alloc` in memory space 3), item and
lane come from `gpu.global_id x` / `gpu.thread_id x`.  What a runtime needs to
launch it is recorded on the `gpu.func` (docs/lowered-ir.md): the buffers'
names, bindings, access and shapes, the item count, workgroup and grid size.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import gpu, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i32,
    i64,
)
from xdsl.ir import Block, Region
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import pass_error
from vyre_xdsl.kernel_info import (
    BUFFERS_ATTR,
    GRID_SIZE_ATTR,
    ITEM_COUNT_ATTR,
    WORKGROUP_SIZE_ATTR,
)

WORKGROUP_MEMORY_SPACE = IntegerAttr(3, i64)


CAPTURED_ATTR = "vyre.captured"  # a captured table's data on its vyre.buffer


def _buffer_description(op: vyre.BufferOp) -> DictionaryAttr:
    fields = {
        "name": op.sym_name,
        "binding": IntegerAttr(op.binding.value.data, i32),
        "access": op.access,
        "shape": DenseArrayBase.from_list(i64, list(op.logical_shape)),
    }
    if CAPTURED_ATTR in op.attributes:  # vx.run passes this read buffer itself
        fields["data"] = op.attributes[CAPTURED_ATTR]
    return DictionaryAttr(fields)


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
        lanes = op.workgroup_size.value.data
        items = op.item_count.value.data
        func = gpu.FuncOp(
            name,
            ([b.result.type for b in buffers], []),
            kernel=True,
        )
        func.attributes.update(
            {
                "gpu.kernel": UnitAttr(),
                ITEM_COUNT_ATTR: IntegerAttr(items, i64),
                WORKGROUP_SIZE_ATTR: DenseArrayBase.from_list(i32, [lanes, 1, 1]),
                GRID_SIZE_ATTR: DenseArrayBase.from_list(i32, [-(-items // lanes), 1, 1]),
                BUFFERS_ATTR: ArrayAttr([_buffer_description(b) for b in buffers]),
            }
        )
        entry = func.body.block
        for buffer, arg in zip(buffers, entry.args, strict=True):
            arg.name_hint = buffer.sym_name.data
            rewriter.replace_all_uses_with(buffer.result, arg)
            rewriter.erase(buffer)
        for scratch in op.scratch_arrays:
            shape = scratch.result.type.get_shape()
            alloc = memref.AllocOp(
                [], [], MemRefType(scratch.result.type.element_type, shape,
                                   memory_space=WORKGROUP_MEMORY_SPACE)
            )
            alloc.memref.name_hint = scratch.sym_name.data
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
        PatternRewriteWalker(
            GreedyRewritePatternApplier([LowerItemIndex(), LowerLaneIndex()]),
            apply_recursively=False,
        ).rewrite_module(op)
        PatternRewriteWalker(LowerKernel(), apply_recursively=False).rewrite_module(op)
        if any(isinstance(inner, gpu.ModuleOp) for inner in op.body.block.ops):
            op.attributes["gpu.container_module"] = UnitAttr()
