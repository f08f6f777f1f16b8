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
`vyre.merge_splits`, which also writes the log-sum-exp where the skeleton
did.  P is then bounded by the tile
count only, not by the workgroup.  Each invocation of the merge merges
`merge_dims` of an item's dims (0, the default: vyre_xdsl.tuning.merge_dims,
up to 8 while the kernel keeps enough invocations), combining the splits'
m and l once for them.  The merge's order of
operations is the workgroup merge's, so both give the same bits, unless
`merge_teams` T > 1 (0, the default: vyre_xdsl.tuning.merge_teams, more
than one only for many splits): T invocations then merge a column
together, each over a run of splits / T neighbouring splits, and their
sums are added pairwise
(vyre.merge_splits `teams`; the oracle's `merge_teams`).

`splits=0` (the default) takes P and the merge from the skeleton's
`#vyre.plan` (vyre-plan), or, without one, asks the tuning
(`vyre_xdsl.tuning.kv_split`, for `target_invocations`, `merge` and
`shared_memory_bytes`): the smallest power of two that gives at least
`target_invocations` invocations, at most the workgroup size and the tile
count, and with every workgroup full (the merge has a barrier); splits that
a kernel merges go further for short decode rows
(`vyre_xdsl.tuning.wanted_splits`).
`merge=auto` (the default) merges in a kernel where an item has too few
workgroup lanes to reach the target or a merge in the workgroup would not
fit `shared_memory_bytes`, and the op has no prologue or epilogue (every
split would repeat them), and then P is bounded by the tile count only.  A
kernel that already has enough items, or has a mask (its tile skipping is
decided per block of items), is left alone.  `splits=N` forces P = N and
reports why a kernel cannot take it (`vyre_xdsl.kv_split.valid_splits`).
Why these choices: docs/performance.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from vyre_xdsl import tuning
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.plan import MergeKind, plan_of
from vyre_xdsl.errors import VyreError, pass_error
from vyre_xdsl.kv_split import merge_in_kernel, merge_teams_problem, valid_splits

MERGES = ("auto", "workgroup", "kernel")


@dataclass(frozen=True)
class SplitKvPass(ModulePass):
    """Give each item `splits` invocations over its key tiles (0: the
    recorded plan's, else the tuning's), merged in workgroup memory or by a
    kernel of its own (`merge`: auto | workgroup | kernel; flash-decoding)."""

    name = "vyre-split-kv"

    splits: int = 0
    target_invocations: int = tuning.TARGET_INVOCATIONS
    merge: str = "auto"
    # the device's workgroup memory, which a merge in the workgroup must fit
    # (0: unbounded; vyre-to-gpu passes its device profile's)
    shared_memory_bytes: int = 0
    # dims each invocation of a merge kernel merges (0: the tuning's)
    merge_dims: int = 0
    # teams of invocations that merge a column together (0: the tuning's)
    merge_teams: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.splits < 0 or self.splits == 1:
            raise VyreError(
                f"vyre-split-kv: splits must be 0 (choose) or >= 2, got {self.splits}"
            )
        if self.target_invocations < 1:
            raise VyreError(
                f"vyre-split-kv: target_invocations must be >= 1 (the invocations "
                f"to reach by splitting), got {self.target_invocations}"
            )
        if self.merge_dims < 0:
            raise VyreError(
                f"vyre-split-kv: merge_dims must be 0 (choose) or positive, got "
                f"{self.merge_dims}"
            )
        if self.merge_teams < 0 or self.merge_teams & (self.merge_teams - 1):
            raise VyreError(
                f"vyre-split-kv: merge_teams must be 0 (choose) or a power of two, got "
                f"{self.merge_teams}"
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
            lanes = kernel.lanes
            splits, in_kernel, teams = self.splits, self.merge == "kernel", self.merge_teams
            if splits == 0:
                splits, in_kernel, planned = self.chosen(skeleton, lanes)
                teams = teams or planned
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
            if in_kernel and self.merge_dims and skeleton.v_dim % self.merge_dims:
                raise pass_error(
                    skeleton,
                    f"vyre-split-kv: the merge kernel of @{kernel.sym_name.data} cannot merge "
                    f"{self.merge_dims} dims an invocation: its rows have {skeleton.v_dim}; "
                    f"give merge_dims a divisor of {skeleton.v_dim} (or 0 to choose)",
                )
            skeleton.properties["kv_splits"] = IntegerAttr(splits, i64)
            kernel.properties["item_count"] = IntegerAttr(kernel.items * splits, i64)
            if in_kernel:
                dims = self.dims_of(skeleton)
                merge_in_kernel(op, kernel, skeleton, splits, dims,
                                self.teams_of(skeleton, kernel, splits, dims, teams))

    def dims_of(self, skeleton: vyre.TiledOnlineSoftmaxOp) -> int:
        """The dims each invocation of the merge kernel merges (`merge_dims`,
        0: the tuning's)."""
        if self.merge_dims:
            return self.merge_dims
        return tuning.merge_dims(skeleton.shape()["item_count"], skeleton.v_dim)

    @staticmethod
    def teams_of(skeleton: vyre.TiledOnlineSoftmaxOp, kernel: vyre.KernelOp, splits: int,
                 dims: int, teams: int) -> int:
        """The teams of the merge kernel's invocations (`teams`: asked for or
        planned; 0: the tuning's), checked against the splits and the
        workgroup."""
        columns = skeleton.shape()["item_count"] * skeleton.v_dim // dims
        lanes = kernel.lanes
        if not teams:
            return tuning.skeleton_merge_teams(skeleton, splits, lanes, dims)
        if (reason := merge_teams_problem(splits, columns, lanes, teams)) is not None:
            raise pass_error(
                skeleton,
                f"vyre-split-kv: the merge kernel of @{kernel.sym_name.data} cannot merge in "
                f"{teams} teams: {reason}; give merge_teams a power of two that does (or 0 to "
                f"choose)",
            )
        return teams

    def chosen(self, skeleton: vyre.TiledOnlineSoftmaxOp,
               lanes: int) -> tuple[int, bool, int]:
        """(P, whether a kernel merges, its teams or 0 to choose) for
        `splits=0`."""
        recorded = plan_of(skeleton)
        if recorded is not None:
            return (recorded.kv_splits, recorded.merge == MergeKind.KERNEL,
                    recorded.merge_teams)
        return (*tuning.kv_split(skeleton, lanes, self.target_invocations, self.merge,
                                 self.shared_memory_bytes), 0)
