"""Heavy-first workgroup order for masked kernels.

Under a causal mask the query block of row r computes about r / tile_size
tiles, so the workgroups of one head range from one tile to all of them.
A GPU starts workgroups roughly in the order of their index; in the
natural order the heaviest blocks of the last heads start last and the
run ends on a few busy SMs.  Starting every head's heaviest block first
(longest job first) fills that tail with the short ones, as FlashAttention
schedules its causal grid.  Each workgroup computes exactly what it
computed before, so results are bit-identical; only the order changes.

`heavy_first_order` reads the work of each workgroup from the mask's
compile-time tile table (its BlockRange per query block) and returns the
permutation that vyre-inline-fragments (and vyre-tensor-cores, whose
query blocks are its workgroups) applies to the workgroup index
(`HeavyFirst.emit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm
from typing import Protocol

from xdsl.ir import SSAValue

from vyre_xdsl.ir_builder import IRBuilder


class _Range(Protocol):
    lo: int
    hi: int


# Beyond this many workgroups in one period of the table the order is not
# worth its select chain (and the work list its build time).
MAX_PERIOD_WORKGROUPS = 4096


@dataclass(frozen=True)
class HeavyFirst:
    """Workgroup `w` runs the work of workgroup `repeat * period +
    order[rank]`, where rank, repeat = divmod(w, repeats): rank 0 of every
    repeat (every head) first, the heaviest of a period at rank 0."""

    order: tuple[int, ...]  # a period's workgroups, heaviest first
    repeats: int  # how many times the period repeats over the grid

    @property
    def period(self) -> int:
        return len(self.order)

    def workgroup(self, w: int) -> int:
        """The workgroup whose work workgroup `w` runs (the permutation)."""
        rank, repeat = divmod(w, self.repeats)
        return repeat * self.period + self.order[rank]

    def emit(self, b: IRBuilder, workgroup: SSAValue) -> SSAValue:
        """`workgroup(workgroup)` computed at run time (a select chain over
        the ranks)."""
        repeats = b.index(self.repeats)
        rank = b.divui(workgroup, repeats, "rank")
        repeat = b.remui(workgroup, repeats, "repeat")
        block = b.index(self.order[0])
        for r, w in enumerate(self.order[1:], start=1):
            block = b.select(b.cmpi(rank, b.index(r), "eq"), b.index(w), block)
        return b.addi(b.muli(repeat, b.index(self.period)), block, "heavy_first")


def heavy_first_order(
    ranges: list[_Range], block_items: int, items: int, lanes_per_item: int, lanes: int
) -> HeavyFirst | None:
    """The heavy-first permutation of a kernel of `items` items, each over
    `lanes_per_item` lanes, in workgroups of `lanes`, whose query block b
    (`block_items` items) computes the tiles ranges[b % len(ranges)]; None
    where the order would change nothing: every workgroup has the same
    work, the heaviest already come first, or the table does not repeat
    over whole workgroups."""
    if not ranges or lanes < 1:
        return None
    invocations = items * lanes_per_item
    period_invocations = lcm(len(ranges) * block_items * lanes_per_item, lanes)
    if invocations % lanes or invocations % period_invocations:
        return None
    period = period_invocations // lanes
    if not 1 < period <= MAX_PERIOD_WORKGROUPS:
        return None
    work = []
    for w in range(period):
        first = w * lanes // lanes_per_item
        last = ((w + 1) * lanes - 1) // lanes_per_item
        blocks = range(first // block_items, last // block_items + 1)
        work.append(max(ranges[b % len(ranges)].hi - ranges[b % len(ranges)].lo
                        for b in blocks))
    order = tuple(sorted(range(period), key=lambda w: -work[w]))
    if order == tuple(range(period)):
        return None
    return HeavyFirst(order, invocations // lanes // period)
