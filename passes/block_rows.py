"""vyre-block-rows{rows=N}: give each invocation N items (register blocking).

One invocation per item reads every element of a key or value tile once per
row: each load feeds one multiply-add.  With `rows_per_lane N` an
invocation runs N items, `g * N + r`, and vyre-inline-fragments emits
their recurrences side by side (vyre_xdsl.row_widening): whatever does not
depend on the item (the tile loop, a staged tile's loads, the key and value
rows that the N items share: the same head, or GQA's query heads of one
key head) is computed once and feeds N rows.  Each row keeps its own
scratch (its query row, scores and accumulator) and runs exactly its own
operations in its own order, so results are bit-identical.

The kernel then runs item_count / N invocations, and a mask's
`tile_classes` are recomputed for query blocks of workgroup_size * N items
(a block holds a workgroup's rows, so tile skipping stays uniform in the
workgroup).  N must divide item_count, and items_per_seq with kv_lens.
Runs on vyre IR, after vyre-split-kv and vyre-split-head-dim.

`rows=N` forces it; `rows=1` leaves every skeleton alone; `rows=0` (the
default) takes N from the skeleton's `#vyre.plan` (vyre-plan), or, without
one, from the tuning (`vyre_xdsl.tuning.rows_per_lane`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from vyre_xdsl import tuning
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.plan import plan_of
from vyre_xdsl.errors import pass_error
from vyre_xdsl.query_blocks import resized_classes, set_classes


def block_rows(skeleton: vyre.TiledOnlineSoftmaxOp, rows: int) -> None:
    """Give `skeleton` `rows` items per invocation (`rows_problem` is None)."""
    kernel = skeleton.parent_op()
    assert isinstance(kernel, vyre.KernelOp)
    if skeleton.tile_classes is not None:
        items, block = skeleton.shape()["item_count"], skeleton.block_items
        set_classes(skeleton, resized_classes(
            skeleton.tile_class_table(), block, block * rows, items
        ))
    skeleton.properties["rows_per_lane"] = IntegerAttr(rows, i64)
    kernel.properties["item_count"] = IntegerAttr(kernel.items // rows, i64)


@dataclass(frozen=True)
class BlockRowsPass(ModulePass):
    """Run `rows` items in each invocation of every skeleton (0: the
    recorded plan's, else the tuning's); bit-identical."""

    name = "vyre-block-rows"

    rows: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.rows < 0:
            raise pass_error(op, f"vyre-block-rows: rows must be >= 0, got {self.rows}")
        for skeleton in [s for s in op.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]:
            if skeleton.rows > 1:
                continue  # blocked already
            rows = self.rows or self.chosen(skeleton)
            if rows == 1:
                continue
            if (problem := tuning.rows_problem(skeleton, rows)) is not None:
                raise pass_error(skeleton, f"vyre-block-rows: cannot run {rows} rows a "
                                           f"lane: {problem}")
            block_rows(skeleton, rows)

    def chosen(self, skeleton: vyre.TiledOnlineSoftmaxOp) -> int:
        recorded = plan_of(skeleton)
        if recorded is not None:
            return recorded.rows
        return tuning.rows_per_lane(skeleton)
