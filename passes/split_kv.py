"""vyre-split-kv: split each item's key tiles over several invocations
(flash-decoding), so that a kernel with few items still fills the GPU.

The seed's layout runs one invocation per item: MLA decode of one token
has `num_heads` (16) invocations for a whole GPU, and FlashAttention-2 with
one head of 4096 rows fills 64 workgroups.  With `kv_splits P`, invocation
`item * P + s` runs the recurrence over the s-th of P runs of tiles and the
P partial (m, l, o_acc) are merged in workgroup memory
(inline_fragments.SplitMerge); the kernel runs `item_count * P`
invocations.  The merge rescales and adds partial sums in another order
than one pass over all tiles would, so results match the oracle within a
tolerance (docs/performance.md), and `reference.*(kv_splits=P)` reproduces
them exactly.

`splits=0` (the default) chooses P: the smallest power of two that gives at
least `target_invocations` invocations (4096: 64 workgroups; measured on
the H200, FA2 with 4096 rows ran 10% faster split 8 ways at head_dim 64
and 35% slower at 128, MLA decode's 16 heads 15 times faster split 64
ways), at most the workgroup size and the tile count, and with every
workgroup full (the merge has a barrier).  A kernel that already has that
many items, or has a mask (its tile skipping is decided per block of
items), is left alone.  `splits=N` forces P = N and reports why a kernel
cannot take it.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import VyreError, pass_error

TARGET_INVOCATIONS = 4096


def valid_splits(op: vyre.TiledOnlineSoftmaxOp, lanes: int, splits: int) -> str | None:
    """Why `op` cannot be split `splits` ways, or None if it can."""
    shape = op.shape()
    if op.has_mask:
        return "it has a mask region (tile skipping is decided per block of items)"
    if splits < 2 or lanes % splits:
        return f"the split count must divide the workgroup size ({lanes}) and be >= 2"
    if splits > shape["tile_count"]:
        return f"there are only {shape['tile_count']} tiles"
    if (shape["item_count"] * splits) % lanes:
        return (
            f"item_count * splits = {shape['item_count'] * splits} is not a multiple "
            f"of the workgroup size ({lanes})"
        )
    return None


def automatic_splits(op: vyre.TiledOnlineSoftmaxOp, lanes: int, target: int) -> int:
    """The smallest valid power of two reaching `target` invocations (the
    largest valid one below it if none does); 1 for no split."""
    items = op.shape()["item_count"]
    if items >= target:
        return 1
    chosen, splits = 1, 2
    while splits <= lanes:
        if valid_splits(op, lanes, splits) is None:
            chosen = splits
            if items * splits >= target:
                break
        splits *= 2
    return chosen


@dataclass(frozen=True)
class SplitKvPass(ModulePass):
    """Give each item `splits` invocations over its key tiles (0: choose),
    merged in workgroup memory (flash-decoding)."""

    name = "vyre-split-kv"

    splits: int = 0
    target_invocations: int = TARGET_INVOCATIONS

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.splits < 0 or self.splits == 1:
            raise VyreError(
                f"vyre-split-kv: splits must be 0 (choose) or >= 2, got {self.splits}"
            )
        for skeleton in [s for s in op.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]:
            if skeleton.splits > 1:
                continue  # already split
            kernel = skeleton.parent_op()
            assert isinstance(kernel, vyre.KernelOp)
            lanes = kernel.workgroup_size.value.data
            splits = self.splits
            if splits == 0:
                splits = automatic_splits(skeleton, lanes, self.target_invocations)
                if splits == 1:
                    continue
            elif (reason := valid_splits(skeleton, lanes, splits)) is not None:
                raise pass_error(
                    skeleton,
                    f"vyre-split-kv: kernel @{kernel.sym_name.data} cannot be split "
                    f"{splits} ways: {reason}",
                )
            skeleton.properties["kv_splits"] = IntegerAttr(splits, i64)
            items = skeleton.shape()["item_count"] * splits
            kernel.properties["item_count"] = IntegerAttr(items, i64)
