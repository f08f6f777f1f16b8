"""What splitting an item's key tiles over invocations (vyre-split-kv,
flash-decoding) requires: vyre-split-kv checks a split it is asked for
against `valid_splits`, and the tuning (vyre_xdsl.tuning) only chooses
splits that pass it."""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl.dialects import vyre


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
    tile_count: int | None = None,
) -> str | None:
    """Why `op` cannot be split `splits` ways (merged in workgroup memory,
    or `in_kernel`), or None if it can; `shared_memory_bytes` bounds the
    workgroup memory of a merge in the workgroup (0: unbounded);
    `tile_count` is the op's unless given (the tuning asks before
    retiling)."""
    shape = op.shape()
    tiles = shape["tile_count"] if tile_count is None else tile_count
    if op.has_mask:
        return "it has a mask region (tile skipping is decided per block of items)"
    if op.parts > 1:
        return "its head dims are split (vyre-split-head-dim); split its tiles first"
    if splits < 2:
        return "the split count must be >= 2"
    if splits > tiles:
        return f"there are only {tiles} tiles"
    if in_kernel:
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


def merge_teams_problem(splits: int, columns: int, lanes: int, teams: int) -> str | None:
    """Why a merge kernel of `lanes` lanes a workgroup over `columns`
    columns cannot merge `splits` splits in `teams` teams (each a run of
    splits / teams, a workgroup holding every team of lanes / teams
    columns); None if it can."""
    if teams > 1 and (splits % teams or lanes % teams or columns % (lanes // teams)):
        return (f"they must divide its {splits} splits and its workgroup of {lanes} lanes, "
                f"and lanes / teams its {columns} columns")
    return None


def merge_in_kernel(
    module: ModuleOp, kernel: vyre.KernelOp, op: vyre.TiledOnlineSoftmaxOp, splits: int,
    dims: int = 1, teams: int = 1,
) -> None:
    """Give `op` partial buffers and the kernel after `kernel` that merges
    them (`vyre.merge_splits`, `dims` of an item's dims an invocation, in
    `teams` of invocations);
    `kernel` then no longer writes the output, nor the log-sum-exp, which
    the merge writes."""
    shape = op.shape()
    items, head_dim = shape["item_count"], op.v_dim  # the partial rows are value rows
    name = kernel.sym_name.data
    out = op.out.owner
    assert isinstance(out, vyre.BufferOp)
    lse = op.lse.owner if op.lse is not None else None
    assert lse is None or isinstance(lse, vyre.BufferOp)
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
        vyre.BufferOp(buffer, next_binding + i, "temp", extents)
        for i, (buffer, extents) in enumerate(declarations)
    ]
    Rewriter.insert_op(partials, InsertPoint.before(out))
    split_m, split_l, split_o = (p.result for p in partials)
    op.set_partials(split_o, split_m, split_l)
    for written in (out, lse):
        if written is not None and not written.result.uses:
            Rewriter.erase_op(written)

    merge = vyre.KernelOp(f"{name}_merge", items * head_dim // dims * teams, kernel.lanes)
    copies = [p.clone() for p in partials] + [out.clone()]
    lse_copy = [lse.clone()] if lse is not None else []
    merge.body.block.add_ops(copies + lse_copy)
    merge.body.block.add_op(
        vyre.MergeSplitsOp(
            *(c.result for c in copies), *(c.result for c in lse_copy),
            item_count=items, splits=splits, head_dim=head_dim,
            keys=shape["seq_len"] if lse is not None else None, exp2=op.exp2 is not None,
            dims=dims, teams=teams,
        )
    )
    Rewriter.insert_op(merge, InsertPoint.after(kernel))
