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

`merge=kernel` leaves the merge to a kernel of its own instead
(flash-decoding across workgroups): the split kernel stores each
invocation's partial (m, l, o_acc) in `temp` buffers (the skeleton's
`partials`), and a kernel `@<name>_merge` inserted after it runs
`vyre.merge_splits`, one invocation per output element.  P is then bounded
by the tile count only, not by the workgroup.  The merge's order of
operations is the workgroup merge's, so both give the same bits.

`splits=0` (the default) chooses P: the smallest power of two that gives at
least `target_invocations` invocations (4096: 64 workgroups; measured on
the H200, FA2 with 4096 rows ran 10% faster split 8 ways at head_dim 64
and 35% slower at 128, MLA decode's 16 heads 15 times faster split 64
ways), at most the workgroup size and the tile count, and with every
workgroup full (the merge has a barrier).  `merge=auto` (the default)
merges in a kernel where an item has too few workgroup lanes to reach the
target (item_count * workgroup size < target: MLA decode's 16 heads) or a
merge in the workgroup would not fit `shared_memory_bytes` (rows of 256
dims, MLA's latent rows of 512), and the op has no prologue or epilogue
(every split would repeat them), and then P is bounded by the tile count
only.  A kernel that already has
enough items, or has a mask (its tile skipping is decided per block of
items), is left alone.  `splits=N` forces P = N and reports why a kernel
cannot take it.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import VyreError, pass_error

TARGET_INVOCATIONS = 4096
MERGES = ("auto", "workgroup", "kernel")


def workgroup_merge_bytes(op: vyre.TiledOnlineSoftmaxOp, lanes: int) -> int:
    """The workgroup memory a merge in the workgroup takes: every lane's
    partial m, l and o_acc (inline_fragments.SplitMerge)."""
    return 4 * lanes * (op.v_dim + 2)


def valid_splits(
    op: vyre.TiledOnlineSoftmaxOp,
    lanes: int,
    splits: int,
    in_kernel: bool = False,
    shared_memory_bytes: int = 0,
) -> str | None:
    """Why `op` cannot be split `splits` ways (merged in workgroup memory,
    or `in_kernel`), or None if it can; `shared_memory_bytes` bounds the
    workgroup memory of a merge in the workgroup (0: unbounded)."""
    shape = op.shape()
    if op.has_mask:
        return "it has a mask region (tile skipping is decided per block of items)"
    if op.parts > 1:
        return "its head dims are split (vyre-split-head-dim); split its tiles first"
    if splits < 2:
        return "the split count must be >= 2"
    if splits > shape["tile_count"]:
        return f"there are only {shape['tile_count']} tiles"
    if in_kernel:
        if op.lse is not None:
            return "it writes the log-sum-exp, which a merge kernel does not (merge=workgroup)"
        return None
    if shared_memory_bytes and workgroup_merge_bytes(op, lanes) > shared_memory_bytes:
        return (
            f"a merge in the workgroup needs {workgroup_merge_bytes(op, lanes)} bytes of "
            f"workgroup memory, more than the device's {shared_memory_bytes} "
            f"(merge=kernel has no such bound)"
        )
    if lanes % splits:
        return (
            f"the split count must divide the workgroup size ({lanes}) for a merge "
            f"in the workgroup (merge=kernel has no such bound)"
        )
    if (shape["item_count"] * splits) % lanes:
        return (
            f"item_count * splits = {shape['item_count'] * splits} is not a multiple "
            f"of the workgroup size ({lanes})"
        )
    return None


def automatic_splits(
    op: vyre.TiledOnlineSoftmaxOp,
    lanes: int,
    target: int,
    in_kernel: bool = False,
    shared_memory_bytes: int = 0,
) -> int:
    """The smallest valid power of two reaching `target` invocations (the
    largest valid one below it if none does); 1 for no split."""
    shape = op.shape()
    items = shape["item_count"]
    if items >= target:
        return 1
    chosen, splits = 1, 2
    while splits <= (shape["tile_count"] if in_kernel else lanes):
        if valid_splits(op, lanes, splits, in_kernel, shared_memory_bytes) is None:
            chosen = splits
            if items * splits >= target:
                break
        splits *= 2
    return chosen


def has_hooks(op: vyre.TiledOnlineSoftmaxOp) -> bool:
    """Whether the prologue or epilogue does anything (each split runs them)."""
    return any(len(hook.block.ops) > 1 for hook in (op.prologue, op.epilogue))


def merges_in_kernel(
    op: vyre.TiledOnlineSoftmaxOp, lanes: int, target: int, shared_memory_bytes: int = 0
) -> bool:
    """Whether `merge=auto` merges `op`'s splits in a kernel: it has too
    few items to reach `target` invocations with a workgroup's worth of
    splits each, or a merge in the workgroup would not fit
    `shared_memory_bytes`; and no hooks for every split to repeat and no
    mask (which is never split)."""
    if op.has_mask or has_hooks(op) or op.lse is not None:
        return False
    items = op.shape()["item_count"]
    if items >= target:
        return False  # not split at all
    too_big = bool(shared_memory_bytes) and workgroup_merge_bytes(op, lanes) > shared_memory_bytes
    return items * lanes < target or too_big


def automatic_split(
    op: vyre.TiledOnlineSoftmaxOp,
    lanes: int,
    target: int,
    merge: str,
    shared_memory_bytes: int = 0,
) -> tuple[int, bool]:
    """(P, whether a kernel merges) for `merge` (auto, workgroup or
    kernel); P = 1 for no split."""
    in_kernel = merge == "kernel" or (
        merge == "auto" and merges_in_kernel(op, lanes, target, shared_memory_bytes)
    )
    splits = automatic_splits(op, lanes, target, in_kernel, shared_memory_bytes)
    return splits, in_kernel and splits > 1


def merge_in_kernel(
    module: ModuleOp, kernel: vyre.KernelOp, op: vyre.TiledOnlineSoftmaxOp, splits: int
) -> None:
    """Give `op` partial buffers and the kernel after `kernel` that merges
    them (`vyre.merge_splits`); `kernel` then no longer writes the output."""
    shape = op.shape()
    items, head_dim = shape["item_count"], op.v_dim  # the partial rows are value rows
    name = kernel.sym_name.data
    out = op.out.owner
    assert isinstance(out, vyre.BufferOp)
    next_binding = 1 + max(
        b.binding.value.data
        for k in module.body.block.ops
        if isinstance(k, vyre.KernelOp)
        for b in k.buffers
    )
    declarations = [
        (f"{name}_split_m", [items, splits]),
        (f"{name}_split_l", [items, splits]),
        (f"{name}_split_o", [items, splits, head_dim]),
    ]
    partials = [
        vyre.BufferOp(buffer, next_binding + i, "temp", dims)
        for i, (buffer, dims) in enumerate(declarations)
    ]
    Rewriter.insert_op(partials, InsertPoint.before(out))
    split_m, split_l, split_o = (p.result for p in partials)
    op.set_partials(split_o, split_m, split_l)
    if not out.result.uses:
        Rewriter.erase_op(out)

    merge = vyre.KernelOp(f"{name}_merge", items * head_dim, kernel.workgroup_size.value.data)
    copies = [p.clone() for p in partials] + [out.clone()]
    merge.body.block.add_ops(copies)
    merge.body.block.add_op(
        vyre.MergeSplitsOp(
            *(c.result for c in copies),
            item_count=items, splits=splits, head_dim=head_dim, exp2=op.exp2 is not None,
        )
    )
    Rewriter.insert_op(merge, InsertPoint.after(kernel))


@dataclass(frozen=True)
class SplitKvPass(ModulePass):
    """Give each item `splits` invocations over its key tiles (0: choose),
    merged in workgroup memory or by a kernel of its own (`merge`:
    auto | workgroup | kernel; flash-decoding)."""

    name = "vyre-split-kv"

    splits: int = 0
    target_invocations: int = TARGET_INVOCATIONS
    merge: str = "auto"
    # the device's workgroup memory, which a merge in the workgroup must fit
    # (0: unbounded; vyre-to-gpu passes its device profile's)
    shared_memory_bytes: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.splits < 0 or self.splits == 1:
            raise VyreError(
                f"vyre-split-kv: splits must be 0 (choose) or >= 2, got {self.splits}"
            )
        if self.merge not in MERGES:
            raise VyreError(
                f"vyre-split-kv: merge must be one of {', '.join(MERGES)}, got "
                f"{self.merge!r}"
            )
        for skeleton in [s for s in op.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]:
            if skeleton.splits > 1:
                continue  # already split
            kernel = skeleton.parent_op()
            assert isinstance(kernel, vyre.KernelOp)
            lanes = kernel.workgroup_size.value.data
            splits, in_kernel = self.splits, self.merge == "kernel"
            if splits == 0:
                splits, in_kernel = automatic_split(
                    skeleton, lanes, self.target_invocations, self.merge,
                    self.shared_memory_bytes,
                )
                if splits == 1:
                    continue
            elif (
                reason := valid_splits(
                    skeleton, lanes, splits, in_kernel, self.shared_memory_bytes
                )
            ) is not None:
                raise pass_error(
                    skeleton,
                    f"vyre-split-kv: kernel @{kernel.sym_name.data} cannot be split "
                    f"{splits} ways: {reason}",
                )
            skeleton.properties["kv_splits"] = IntegerAttr(splits, i64)
            items = skeleton.shape()["item_count"] * splits
            kernel.properties["item_count"] = IntegerAttr(items, i64)
            if in_kernel:
                merge_in_kernel(op, kernel, skeleton, splits)
