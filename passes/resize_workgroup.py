"""vyre-resize-workgroup{size=N}: run a kernel in workgroups of N lanes.

The seed's kernels run 64 lanes per workgroup, and a workgroup runs on one
SM.  Smaller workgroups spread a small grid over more SMs (one head of 4096
rows is 64 workgroups of 64 on an H200's 132 SMs, 128 of 32); larger ones
share each staged K/V tile among more rows.  A lane still computes one
item with the same code, so results are bit-identical; only what the lanes
of a workgroup share changes:

- the per-lane scratch arrays (`lane * stride + offset`) are resized to
  `N * stride`;
- a mask's `tile_classes`, kept per block of `workgroup_size` items, are
  recomputed for blocks of N: a tile is empty (or full) for a new block
  where it was for every old block the new one overlaps, else partial (a
  partial tile is evaluated key by key, which is always exact).

N must divide or be a multiple of the workgroup size.  Runs on vyre IR,
before vyre-split-kv (a split kernel merges its partials within a
workgroup).  Smaller workgroups leave each staged tile fewer rows to
serve, larger ones share it among more (docs/performance.md).

`size=0` (the default) takes the size from the skeleton's `#vyre.plan`
(vyre-plan), or, without one, asks the tuning
(`vyre_xdsl.tuning.workgroup_lanes`: more lanes for a kernel of one
unsplit skeleton on a large grid); any other kernel is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, f32, i64
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from vyre_xdsl import tuning
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.plan import plan_of
from vyre_xdsl.errors import pass_error
from vyre_xdsl.query_blocks import resized_classes, set_classes
from vyre_xdsl.scratch_forms import scratch_name

# Each fragment region's block arguments that are the skeleton's scratch.
_SCRATCH_ARGS = ("q_scratch", "score_tile", "o_acc")


def resize(kernel: vyre.KernelOp, size: int) -> None:
    """Give `kernel` workgroups of `size` lanes (a divisor or a multiple of
    its own)."""
    lanes = kernel.lanes
    resized: dict[str, MemRefType] = {}
    for scratch in [op for op in kernel.body.walk() if isinstance(op, vyre.ScratchOp)]:
        (count,) = scratch.result.type.get_shape()
        new_type = MemRefType(f32, [count // lanes * size])
        resized[scratch.sym_name.data] = new_type
        _retype(scratch.result, new_type)
    for skeleton in [op for op in kernel.body.walk() if isinstance(op, vyre.TiledOnlineSoftmaxOp)]:
        for region, _ in skeleton.named_regions():
            for name in _SCRATCH_ARGS:
                if name in vyre.REGION_ARGS[region]:
                    arg = skeleton.region_arg(region, name)
                    _retype(arg, resized[scratch_name(skeleton, name)])
        if skeleton.tile_classes is not None:
            items, rows = skeleton.shape()["item_count"], skeleton.rows
            set_classes(skeleton, resized_classes(
                skeleton.tile_class_table(), skeleton.block_items, size * rows, items
            ))
    kernel.properties["workgroup_size"] = IntegerAttr(size, i64)


def _retype(value, new_type: MemRefType) -> None:
    name = value.name_hint
    Rewriter.replace_value_with_new_type(value, new_type).name_hint = name


def automatic_size(kernel: vyre.KernelOp) -> int | None:
    """The lanes the recorded plan of `kernel`'s skeleton gives it, else the
    tuning's choice; None to keep its workgroups."""
    plans = [plan_of(s) for s in kernel.body.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]
    if len(plans) == 1 and plans[0] is not None:
        return plans[0].lanes
    return tuning.workgroup_lanes(kernel)


@dataclass(frozen=True)
class ResizeWorkgroupPass(ModulePass):
    """Run kernels in workgroups of `size` lanes (0: choose); bit-identical."""

    name = "vyre-resize-workgroup"

    size: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in [k for k in op.walk() if isinstance(k, vyre.KernelOp)]:
            skeletons = [s for s in kernel.body.walk()
                         if isinstance(s, vyre.TiledOnlineSoftmaxOp)]
            lanes = kernel.lanes
            if self.size == 0:
                size = automatic_size(kernel)
                if size is not None and size != lanes:
                    resize(kernel, size)
                continue
            if any(s.splits > 1 for s in skeletons):
                raise pass_error(
                    kernel,
                    f"vyre-resize-workgroup: kernel @{kernel.sym_name.data} is split "
                    f"(vyre-split-kv); resize it before splitting",
                )
            size = self.size
            if size < 1 or (lanes % size and size % lanes):
                raise pass_error(
                    kernel,
                    f"vyre-resize-workgroup: size {size} must be a positive divisor or "
                    f"multiple of the workgroup size {lanes} of @{kernel.sym_name.data}",
                )
            if size != lanes:
                resize(kernel, size)
