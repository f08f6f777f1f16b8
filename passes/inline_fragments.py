"""vyre-inline-fragments: expand `vyre.tiled_online_softmax` into scf loops.

This file is the one place in the repository where the online-softmax
recurrence (tile max, rescale, tile sum, `l` update, the weight of a key,
finalisation) is written.  The two fragment regions are spliced in where
SEMANTICS.md puts them, their block arguments replaced by the loop values;
`vyre.tile_weight` in the update region becomes the weight formula.  The
`prologue` hook goes before the tile loop (after o_acc is zeroed), the
`epilogue` hook after it (before the output is written).  With
`kv_splits`, each of an item's invocations runs the recurrence over its own
run of tiles and `SplitMerge` combines their partial results in workgroup
memory; with `partials`, they are stored for a `vyre.merge_splits` kernel,
which this pass expands too (`Partials.merge` is the one merge of both).
With `dim_parts`, an item's invocations each load, keep and write their
own dims of the row (`loop_over_part_dims`); the fragments were rewritten
for that by vyre-split-head-dim.

With `kv_lens`, an item's (or a split's) tiles that end before its
run-time length run in a loop of a run-time trip count whose body has no
branch and a constant tile length (later passes unroll its key loops
completely), and the tile that the length cuts, if any, runs after it over
its run-time length: the order of the tiles, and so every sum, is the one
of a loop over all of them.  A seq_len that is not a multiple of tile_size
runs the same way, its whole tiles' count and its last tile's length
constants.

With a `mask` region the tile loop branches on the query block's class of
each tile (from the compile-time `tile_classes` table): empty tiles are
skipped (m and l pass through), full tiles run exactly the unmasked code,
partial tiles evaluate the mask per key, and a masked key is left out of
the tile max (the max is not updated), and its weight is exactly 0.0 (an
`arith.select`, not a clamped exponent), in the tile sum and in the update.
A key whose stored score is -inf (a score_mod's way to drop it) is dropped
the same way in every tile: it never raises the max (-inf > max is false)
and its weight is exactly 0.0; the check is left out where every stored
score went through vyre.bounded_score, which never gives -inf.

A key's weight is computed once, in the tile-sum loop, and stored over its
score, where `vyre.tile_weight` loads it: an update that weighs every key
once per output dimension then costs a load, not an exponent.  An update
region that reads `%score_tile` itself gets the scores, and the weights
are recomputed for it instead.

With `heavy_first`, a masked kernel's workgroups are renumbered so that
each head's query blocks with the most tiles start first
(vyre_xdsl.workgroup_order): every workgroup computes what it computed
before, in another order on the GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from xdsl.context import Context
from xdsl.dialects import gpu, scf
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import Block, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import F32_MIN
from vyre_xdsl.dialects.launch import record_skeleton
from vyre_xdsl.dim_split import loop_over_part_dims
from vyre_xdsl.errors import VyreError, pass_error
from vyre_xdsl.index_forms import known_multiple
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.loop_bounds import MAX_TRIPS_ATTR
from vyre_xdsl.numerics import pairwise_total, partial_weight_scale
from vyre_xdsl.query_blocks import BlockRange, block_bounds, block_ranges, period_of
from vyre_xdsl.recurrence import (
    final_denominator,
    final_value,
    max_step,
    next_denominator,
    rescale_of,
    running_max,
    score_weight,
)
from vyre_xdsl.row_widening import RowOffsets, discard, widen_rows
from vyre_xdsl.value_range import scores_may_be_minus_inf
from vyre_xdsl.walk import walk_once
from vyre_xdsl.workgroup_order import heavy_first_order


def tile_weight(
    b: IRBuilder,
    score_tile: SSAValue,
    lane: SSAValue,
    j: SSAValue,
    m_new: SSAValue,
    score_stride: int,
    keep: SSAValue | None = None,
    exp2: bool = False,
    drop_minus_inf: bool = False,
    scale: float = 1.0,
) -> SSAValue:
    """The weight (recurrence.score_weight) of key j of the tile, whose
    score the lane's slice of `score_tile` holds."""
    s = b.load(score_tile, b.flat_index(lane, score_stride, j))
    return score_weight(b, s, m_new, exp2, drop_minus_inf, scale, keep)


def weight_scale(op: vyre.TiledOnlineSoftmaxOp) -> float:
    """The scale of every weight: 1, or with kv splits the power of two that
    keeps each split's partial from overflowing (numerics.partial_weight_scale;
    the merge's lse takes it out again)."""
    return partial_weight_scale(op.shape()["seq_len"]) if op.splits > 1 else 1.0


def mark_tile_loops(tile_len: SSAValue, tile_size: int) -> None:
    """Record on every loop up to `tile_len` (a tile's length, the last tile
    possibly shorter) that it runs at most `tile_size` times, so that
    vyre-unroll-jam does not jam more iterations than a tile has."""
    for use in tile_len.uses:
        loop = use.operation
        if isinstance(loop, scf.ForOp) and loop.ub is tile_len:
            loop.attributes[MAX_TRIPS_ATTR] = IntegerAttr(tile_size, i64)


def update_reads_scores(op: vyre.TiledOnlineSoftmaxOp) -> bool:
    """Whether the update region loads %score_tile itself (then the tile
    must still hold the scores when it runs)."""
    score_tile = op.region_arg("update", "score_tile")
    return score_tile.first_use is not None


def expand_tile_weights(
    op: vyre.TiledOnlineSoftmaxOp, update: Region, masked: bool, stored: bool
) -> None:
    """Replace every vyre.tile_weight in (a copy of) the update region by
    the stored weight (`stored`) or the weight formula, over that region's
    own block arguments."""
    args = dict(zip(vyre.UPDATE_ARGS, update.block.args, strict=True))
    stride = op.scores_per_lane
    drop_minus_inf = scores_may_be_minus_inf(op)
    for weight_op in [w for w in update.walk() if isinstance(w, vyre.TileWeightOp)]:
        b = IRBuilder(InsertPoint.before(weight_op))
        keep = None
        if stored:
            index = b.flat_index(args["lane"], stride, weight_op.j)
            weight = b.load(args["score_tile"], index)
            weight.name_hint = "weight"
        elif masked:
            assert op.mask is not None
            kv_idx = b.addi(args["tile_start"], weight_op.j, "kv_idx")
            (keep,) = b.splice(op.mask, [args["item"], args["lane"], kv_idx])
        if not stored:
            weight = tile_weight(
                b, args["score_tile"], args["lane"], weight_op.j, args["m_new"],
                stride, keep, exp2=op.exp2 is not None, drop_minus_inf=drop_minus_inf,
                scale=weight_scale(op),
            )
        weight_op.result.replace_all_uses_with(weight)
        weight_op.detach()
        weight_op.erase()


@dataclass(frozen=True)
class Partials:
    """Where the `splits` partial (m, l, o_acc) of one item are, as loads
    `m_of(b, s)`, `l_of(b, s)` and `o_of(b, s, d)`, and their merge
    (flash-decoding), written once for the merge in workgroup memory and
    the one in a kernel of its own:

        m* = max over s of m_s                 (in split order)
        c_s = exp(bounded_exp_arg(m_s - m*))
        out[d] = flush_tiny((sum over s of c_s * o_s[d])
                            / positive_denominator(sum over s of c_s * l_s))

    (a merge kernel's teams take each max and sum over a run of splits,
    `run_max` and `run_sum`, and combine the runs: ExpandMergeSplits)"""

    splits: int
    m_of: Callable[[IRBuilder, SSAValue], SSAValue]
    l_of: Callable[[IRBuilder, SSAValue], SSAValue]
    o_of: Callable[[IRBuilder, SSAValue, SSAValue], SSAValue]
    exp2: bool

    @staticmethod
    def in_rows(
        splits: int, m: SSAValue, l: SSAValue, o: SSAValue, head_dim: int,  # noqa: E741
        row: Callable[[IRBuilder, SSAValue], SSAValue], exp2: bool,
    ) -> Partials:
        """Split s's partial at `row(b, s)` of arrays m and l, and of o
        (rows of head_dim)."""
        return Partials(
            splits,
            lambda b, s: b.load(m, row(b, s)),
            lambda b, s: b.load(l, row(b, s)),
            lambda b, s, d: b.load(o, b.flat_index(row(b, s), head_dim, d)),
            exp2,
        )

    def merge(
        self, b: IRBuilder
    ) -> tuple[Callable[[IRBuilder, SSAValue], SSAValue], SSAValue, SSAValue]:
        """Emit m* and the denominator; return `out_of(b, d)`, which emits
        out[d], and the merged m and l."""
        m_max = self.run_max(b)
        m_max.name_hint = "m_max"
        l_total = self.run_sum(b, m_max, self.l_of, "sum_s")
        denom = final_denominator(b, l_total)

        def out_of(b: IRBuilder, d) -> SSAValue:
            o = self.run_sum(b, m_max, lambda b, s: self.o_of(b, s, d), "o_s")
            return final_value(b, o, denom)

        return out_of, m_max, l_total

    def run_splits(self, b: IRBuilder, body, init: SSAValue, hint: str, team=None,
                   teams: int = 1) -> SSAValue:
        """`body(b, s, acc) -> acc` over run `team` of `teams` runs of
        neighbouring splits, in order (every split where `teams` is 1), from
        `init`."""
        run = self.splits // teams
        first = None if teams == 1 else b.muli(team, b.index(run), "first_split")

        def step(b: IRBuilder, k, acc):
            s = k if first is None else b.addi(first, k, "split")
            return [body(b, s, acc[0])]

        (total,) = b.loop(0, run, step, [init], hint=hint)
        return total

    def run_max(self, b: IRBuilder, team=None, teams: int = 1) -> SSAValue:
        """The running max of the run's m (the splits' combine as the
        tiles' do)."""
        return self.run_splits(b, lambda b, s, acc: running_max(b, self.m_of(b, s), acc),
                               b.f32(F32_MIN), "max_s", team, teams)

    def run_sum(self, b: IRBuilder, m_max: SSAValue, value_of, hint: str, team=None,
                teams: int = 1) -> SSAValue:
        """The sum over the run of each split's `value_of(b, s)` rescaled
        from its own max to `m_max`."""
        def step(b: IRBuilder, s, acc):
            weight = rescale_of(b, self.m_of(b, s), m_max, self.exp2)
            return b.addf(acc, b.mulf(weight, value_of(b, s)))

        return self.run_splits(b, step, b.f32(0.0), hint, team, teams)


@dataclass(frozen=True)
class SplitMerge:
    """Workgroup arrays where the `splits` invocations of an item leave their
    partial (m, l, o_acc), and their merge (`Partials.merge`) after a
    barrier.  Invocation s of an item writes the output dims d = s,
    s + splits, ..."""

    m: SSAValue
    l: SSAValue
    o: SSAValue

    @staticmethod
    def declare(b: IRBuilder, lanes: int, head_dim: int) -> SplitMerge:
        arrays = [
            b.emit(vyre.ScratchOp(name, size)).results[0]
            for name, size in (
                ("split_m", lanes), ("split_l", lanes), ("split_o", lanes * head_dim)
            )
        ]
        return SplitMerge(*arrays)

    def combine(self, b: IRBuilder, op, item, lane, split, splits, m_part, l_part) -> None:
        head_dim = op.v_dim  # the partial rows are value rows
        b.store(m_part, self.m, lane)
        b.store(l_part, self.l, lane)

        def publish(b: IRBuilder, d, _):
            index = b.flat_index(lane, head_dim, d)
            b.store(b.load(op.o_acc, index), self.o, index)
            return []

        b.loop(0, head_dim, publish, hint="publish_d")
        b.emit(gpu.BarrierOp())  # every split's partial is in place
        first = b.subi(lane, split, "first_split")

        def split_lane(b: IRBuilder, s) -> SSAValue:
            return b.addi(first, s)

        out_of, m_total, l_total = Partials.in_rows(
            splits, self.m, self.l, self.o, head_dim, split_lane, op.exp2 is not None
        ).merge(b)
        if op.lse is not None:
            b.if_then(
                b.cmpi(split, b.index(0), "eq"),
                lambda b: write_lse(b, op.lse, op.exp2 is not None, item, m_total, l_total,
                                    1.0 / weight_scale(op)),
            )

        def write_dim(b: IRBuilder, d) -> None:
            b.store(out_of(b, d), op.out, b.flat_index(item, head_dim, d))

        def own_dims(b: IRBuilder, c, _):
            d = b.addi(b.muli(c, b.index(splits)), split, "d")
            if head_dim % splits == 0:
                write_dim(b, d)
            else:
                b.if_then(b.cmpi(d, b.index(head_dim), "ult"), lambda b: write_dim(b, d))
            return []

        b.loop(0, -(-head_dim // splits), own_dims, hint="final_c")


LN_2 = float(np.float32(math.log(2.0)))


def write_lse(
    b: IRBuilder, lse: SSAValue, exp2: bool, item, m: SSAValue, l: SSAValue,  # noqa: E741
    unscale: float = 1.0,
) -> None:
    """lse[item] = m + log(l), the log of the softmax denominator (-inf
    where every key was dropped: l = 0); with scores in log2 units (exp2)
    m * ln 2 + log(l); `unscale` undoes the weights' `weight_scale` in l."""
    if unscale != 1.0:
        l = b.mulf(l, b.f32(unscale))  # noqa: E741
    if exp2:
        m = b.mulf(m, b.f32(LN_2))
    # log is undefined at 0 in SPIR-V's GLSL.std.450: choose -inf explicitly
    value = b.select(b.cmpf(l, b.f32(0.0), "oeq"), b.f32(-math.inf), b.addf(m, b.log(l)))
    b.store(value, lse, item)


def leave_partials(b: IRBuilder, op, split_row, lane, part, m_part, l_part) -> None:
    """Store this invocation's partial (m, l, o_acc) for a vyre.merge_splits
    kernel: m and l at `split_row`, o_acc as row `split_row` of out.  With
    dim_parts, each part stores its own dims of the row, and part 0 m and
    l (every part has the same)."""
    head_dim, parts = op.v_dim, op.parts
    m_buffer, l_buffer = op.partials

    def store_m_l(b: IRBuilder) -> None:
        b.store(m_part, m_buffer, split_row)
        b.store(l_part, l_buffer, split_row)

    if part is None:
        store_m_l(b)
    else:
        b.if_then(b.cmpi(part, b.index(0), "eq"), store_m_l)

    def publish(b: IRBuilder, d, slot, _):
        o = b.load(op.o_acc, b.flat_index(lane, head_dim // parts, slot))
        b.store(o, op.out, b.flat_index(split_row, head_dim, d))
        return []

    loop_over_part_dims(b, head_dim, parts, part, publish, hint="publish_d", chunk=op.chunk)


class ExpandMergeSplits(RewritePattern):
    """vyre.merge_splits -> the merge of `dims` of an item's dims (head_dim
    / dims apart, so that neighbouring invocations read neighbouring
    elements) per invocation, or per team of invocations (`teams`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: vyre.MergeSplitsOp, rewriter: PatternRewriter) -> None:
        b = IRBuilder(InsertPoint.before(op))
        if op.team_count == 1:
            self.alone(b, op)
        else:
            TeamMerge.of(b, op).emit(b)
        rewriter.erase(op)

    @staticmethod
    def alone(b: IRBuilder, op: vyre.MergeSplitsOp) -> None:
        """Each invocation merges its column over every split."""
        head_dim, dims = op.shape()["head_dim"], op.dims_each
        apart = head_dim // dims
        invocation = b.emit(vyre.ItemIndexOp()).results[0]
        invocation.name_hint = "invocation"
        item = b.divui(invocation, b.index(apart), "item")
        first = b.remui(invocation, b.index(apart), "d")

        def merge_one(b: IRBuilder) -> None:
            out_of, m_total, l_total = merge_partials(op, item).merge(b)
            if op.lse is not None:  # as the workgroup merge writes it
                b.if_then(b.cmpi(first, b.index(0), "eq"),
                          lambda b: write_merged_lse(b, op, item, m_total, l_total))

            def one_dim(b: IRBuilder, k, _):
                d = b.addi(first, b.muli(k, b.index(apart)), "d")
                b.store(out_of(b, d), op.out, b.flat_index(item, head_dim, d))
                return []

            if dims == 1:
                b.store(out_of(b, first), op.out, invocation)
            else:
                b.loop(0, dims, one_dim, hint="merge_d")

        kernel = op.parent_op()
        assert isinstance(kernel, vyre.KernelOp)
        invocations = op.columns
        if invocations % kernel.lanes:
            b.if_then(b.cmpi(invocation, b.index(invocations), "ult"), merge_one)
        else:
            merge_one(b)


def merge_partials(op: vyre.MergeSplitsOp, item: SSAValue) -> Partials:
    """The merge's partials of `item`: rows item * splits + s."""
    shape = op.shape()

    def row(b: IRBuilder, s) -> SSAValue:
        return b.addi(b.muli(item, b.index(shape["splits"])), s, "row")

    return Partials.in_rows(shape["splits"], op.m, op.l, op.o, shape["head_dim"], row,
                            op.exp2 is not None)


def write_merged_lse(b: IRBuilder, op: vyre.MergeSplitsOp, item, m: SSAValue,
                     l: SSAValue) -> None:  # noqa: E741
    """lse[item] from the merged m and l, undoing the split skeleton's
    weight scale."""
    unscale = 1.0 / partial_weight_scale(op.keys.value.data)
    write_lse(b, op.lse, op.exp2 is not None, item, m, l, unscale)


@dataclass(frozen=True)
class TeamMerge:
    """A merge kernel's workgroup as `teams` teams of `width` lanes: lane
    `team * width + j` merges run `team` of neighbouring splits of column
    `workgroup * width + j` (its item and first dim); the teams' maxima
    meet in `maxima`, their sums in `sums` (l, then each of `dims` dims'
    o), and team 0 adds them pairwise and writes the column."""

    op: vyre.MergeSplitsOp
    teams: int
    width: int
    lane: SSAValue
    team: SSAValue
    column_lane: SSAValue
    item: SSAValue
    first: SSAValue
    maxima: SSAValue
    sums: SSAValue

    @staticmethod
    def of(b: IRBuilder, op: vyre.MergeSplitsOp) -> TeamMerge:
        kernel = op.parent_op()
        assert isinstance(kernel, vyre.KernelOp)
        lanes, teams = kernel.lanes, op.team_count
        width = lanes // teams
        invocation = b.emit(vyre.ItemIndexOp()).results[0]
        lane = b.emit(vyre.LaneIndexOp()).results[0]
        team = b.divui(lane, b.index(width), "team")
        j = b.remui(lane, b.index(width), "column_lane")
        column = b.addi(b.muli(b.divui(invocation, b.index(lanes)), b.index(width)), j,
                        "column")
        apart = op.shape()["head_dim"] // op.dims_each
        item = b.divui(column, b.index(apart), "item")
        first = b.remui(column, b.index(apart), "d")
        maxima = b.emit(vyre.ScratchOp("merge_max", lanes)).results[0]
        sums = b.emit(vyre.ScratchOp("merge_sum", lanes * (1 + op.dims_each))).results[0]
        return TeamMerge(op, teams, width, lane, team, j, item, first, maxima, sums)

    def at(self, b: IRBuilder, slot: int, team: int | SSAValue) -> SSAValue:
        """Where a team's value of slot `slot` (l, then each dim's o) of this
        lane's column is."""
        start = slot * self.teams * self.width
        if isinstance(team, int):
            return b.addi(b.index(start + team * self.width), self.column_lane)
        return b.addi(b.index(start), b.addi(b.muli(team, b.index(self.width)),
                                             self.column_lane))

    def emit(self, b: IRBuilder) -> None:
        op, teams = self.op, self.teams
        head_dim, dims = op.shape()["head_dim"], op.dims_each
        apart = head_dim // dims
        partials = merge_partials(op, self.item)
        b.store(partials.run_max(b, self.team, teams), self.maxima, self.lane)
        b.emit(gpu.BarrierOp())  # every team's max in place
        m_max = b.f32(F32_MIN)
        for t in range(teams):  # in team order, as the oracle takes them
            m_max = running_max(b, b.load(self.maxima, self.at(b, 0, t)), m_max)
        m_max.name_hint = "m_max"
        dim_of = [self.first] + [b.addi(self.first, b.index(k * apart), "d")
                                 for k in range(1, dims)]
        values = [partials.l_of] + [
            lambda b, s, d=d: partials.o_of(b, s, d) for d in dim_of]
        for slot, value_of in enumerate(values):
            total = partials.run_sum(b, m_max, value_of, "o_s" if slot else "sum_s",
                                     self.team, teams)
            b.store(total, self.sums, self.at(b, slot, self.team))
        b.emit(gpu.BarrierOp())  # every team's sums in place

        def write(b: IRBuilder) -> None:
            def total(b: IRBuilder, slot: int) -> SSAValue:
                return pairwise_total([b.load(self.sums, self.at(b, slot, t))
                                       for t in range(teams)], b.addf)

            l_total = total(b, 0)
            denom = final_denominator(b, l_total)
            if op.lse is not None:
                b.if_then(b.cmpi(self.first, b.index(0), "eq"),
                          lambda b: write_merged_lse(b, op, self.item, m_max, l_total))
            for k, d in enumerate(dim_of):
                b.store(final_value(b, total(b, 1 + k), denom), op.out,
                        b.flat_index(self.item, head_dim, d))

        b.if_then(b.cmpi(self.team, b.index(0), "eq"), write)


class SkeletonExpansion:
    """The scf loop nest of one vyre.tiled_online_softmax, emitted before it
    by `emit`: what the skeleton fixes (indices, tile bounds, the split and
    its merge) as fields, and each level of the recurrence as a method."""

    def __init__(
        self, op: vyre.TiledOnlineSoftmaxOp, b: IRBuilder, heavy_first: bool = False
    ) -> None:
        self.op, self.shape = op, op.shape()
        self.lanes = op.lanes
        self.splits, self.parts = op.splits, op.parts
        tile_count = self.shape["tile_count"]
        if not op.has_mask:
            self.ranges = []
        elif op.tile_classes is None:  # every tile partial, for every block
            self.ranges = [BlockRange(0, tile_count, 0, 0)]
        else:
            self.ranges = block_ranges(op.tile_class_table())
        in_workgroup = self.splits > 1 and not op.merges_in_kernel
        self.merge = SplitMerge.declare(b, self.lanes, op.v_dim) if in_workgroup else None
        item = b.emit(vyre.ItemIndexOp()).results[0]
        self.lane = b.emit(vyre.LaneIndexOp()).results[0]
        if heavy_first:
            item = self.heavy_first(b, item)
        self.part = self.split = self.invocation = None
        if self.parts > 1:  # invocation (item * splits + split) * parts + part
            self.invocation = item
            item = b.divui(item, b.index(self.parts), "item")
            self.part = b.remui(self.invocation, b.index(self.parts), "part")
        if self.splits > 1:  # invocation item * splits + split (with parts: its row)
            self.invocation = item
            item = b.divui(item, b.index(self.splits), "item")
            self.split = b.remui(self.invocation, b.index(self.splits), "split")
        self.item = item
        self.lane_dims = self.shape["head_dim"] // self.parts  # a lane's slice of q_scratch
        self.lane_v_dims = op.v_dim // self.parts  # ... and of o_acc
        self.store_weights = not update_reads_scores(op)
        self.drop_minus_inf = scores_may_be_minus_inf(op)
        self.score_stride = op.scores_per_lane
        # With kv_lens: this item's key count L (clamped to [0, seq_len]) and
        # tile count ceil(L / tile_size), read at run time; where seq_len is
        # not a multiple of tile_size, the same as constants (`static_cut`).
        self.ragged: dict[str, SSAValue] = {}
        self.static_cut = not op.ragged and self.shape["seq_len"] % self.shape["tile_size"] > 0

    def heavy_first(self, b: IRBuilder, invocation: SSAValue) -> SSAValue:
        """`invocation` with its workgroup permuted so that every head's
        heaviest query blocks start first (vyre_xdsl.workgroup_order)."""
        ranges = self.ranges[: period_of(self.ranges)]
        order = heavy_first_order(ranges, self.op.block_items, self.shape["item_count"],
                                  self.op.lanes_per_item, self.lanes)
        if order is None:
            return invocation
        lanes = b.index(self.lanes)
        heavy = order.emit(b, b.divui(invocation, lanes, "workgroup"))
        return b.addi(b.muli(heavy, lanes), b.remui(invocation, lanes), "invocation")

    def emit(self, b: IRBuilder) -> None:
        op, lanes = self.op, self.lanes
        body = self.per_item if op.rows == 1 else self.per_rows
        groups = self.shape["item_count"] // op.rows
        if (groups * op.lanes_per_item) % lanes:
            in_range = b.cmpi(self.item, b.index(groups), "ult")
            b.if_then(in_range, body)
        else:
            # Every lane of every workgroup is an item: no guard, so that
            # fragments may synchronise the workgroup (vyre-stage-kv-tiles).
            body(b)

    def per_rows(self, b: IRBuilder) -> None:
        """`per_item` for the `rows_per_lane` items `group * R + r`, emitted
        once and widened (vyre_xdsl.row_widening): what the rows share is
        computed and loaded once."""
        rows = self.op.rows
        base = b.muli(self.item, b.index(rows), "rows_base")
        source = Block()
        row_b = IRBuilder(InsertPoint.at_end(source))
        self.item = row_b.addi(base, row_b.index(0), "item")
        self.per_item(row_b)
        offsets = RowOffsets(base, known_multiple(base), tuple(range(rows)))
        widened = widen_rows(
            source, rows, {self.item: offsets}, lambda array: row_copies(array, rows)
        )
        discard(source)
        for inner in list(widened.ops):
            inner.detach()
            b.emit(inner)

    def score_index(self, b: IRBuilder, j) -> SSAValue:
        return b.flat_index(self.lane, self.score_stride, j)

    def keep(self, b: IRBuilder, tile_start: SSAValue, j: SSAValue) -> SSAValue:
        assert self.op.mask is not None
        kv_idx = b.addi(tile_start, j, "kv_idx")
        return b.splice(self.op.mask, [self.item, self.lane, kv_idx])[0]

    def block_bounds(self, b: IRBuilder) -> dict[str, SSAValue]:
        """lo/hi/flo/fhi of this lane's query block."""
        key = b.divui(self.item, b.index(self.op.block_items), "query_block")
        return block_bounds(b, self.ranges, key)

    def read_length(self, b: IRBuilder) -> None:
        op, tile_size = self.op, self.shape["tile_size"]
        seq = b.divui(self.item, b.index(op.seq_items), "seq")
        length = b.load_clamped_index(op.kv_lens, seq, self.shape["seq_len"])
        length.name_hint = "kv_len"
        self.ragged["len"] = length
        self.ragged["whole"] = b.divui(length, b.index(tile_size), "whole_tiles")
        self.ragged["tiles"] = b.divui(
            b.addi(length, b.index(tile_size - 1)), b.index(tile_size), "tiles"
        )

    def per_item(self, b: IRBuilder) -> None:
        op, item, lane, part = self.op, self.item, self.lane, self.part
        head_dim, v_dim, parts = self.shape["head_dim"], op.v_dim, self.parts
        if op.ragged:
            self.read_length(b)
        elif self.static_cut:
            seq_len, tile_size = self.shape["seq_len"], self.shape["tile_size"]
            self.ragged = {"len": b.index(seq_len), "whole": b.index(seq_len // tile_size),
                           "tiles": b.index(self.shape["tile_count"])}

        def load_query(b: IRBuilder, d, slot, _):
            value = b.load(op.q, b.flat_index(item, head_dim, d))
            b.store(value, op.q_scratch, b.flat_index(lane, self.lane_dims, slot))
            return []

        loop_over_part_dims(b, head_dim, parts, part, load_query, hint="load_d",
                            chunk=op.chunk)
        m0, l0 = b.f32(F32_MIN), b.f32(0.0)

        def zero_accumulator(b: IRBuilder, d, _):
            b.store(b.f32(0.0), op.o_acc, b.flat_index(lane, self.lane_v_dims, d))
            return []

        b.loop(0, self.lane_v_dims, zero_accumulator, hint="zero_d")
        b.splice(op.prologue, [item, lane, op.q_scratch, op.o_acc])
        if op.has_mask:
            bounds = self.block_bounds(b)
            body = lambda b, t, carried, cut=False: self.masked_tile(  # noqa: E731
                b, t, carried, bounds, cut
            )
        else:
            body = self.one_tile
        if self.splits > 1:
            m_part, l_part = self.split_tiles(b, body, [m0, l0])
            b.splice(op.epilogue, [item, lane, op.o_acc])
            if op.merges_in_kernel:
                split_row = self.invocation
                if op.rows > 1:  # the invocation has rows; each row its split row
                    split_row = b.addi(b.muli(item, b.index(self.splits)), self.split)
                leave_partials(b, op, split_row, lane, part, m_part, l_part)
                return
            assert self.merge is not None
            self.merge.combine(b, op, item, lane, self.split, self.splits, m_part, l_part)
            return
        if self.ragged:
            m_final, l_final = self.ragged_tiles(b, body, [m0, l0], None, self.shape["tile_count"])
        else:
            (m_final, l_final) = b.loop(
                0, self.shape["tile_count"], body, [m0, l0], hint="tile_idx"
            )
        b.splice(op.epilogue, [item, lane, op.o_acc])
        denom = final_denominator(b, l_final)

        def write_output(b: IRBuilder, d, slot, _):
            o = b.load(op.o_acc, b.flat_index(lane, self.lane_v_dims, slot))
            b.store(final_value(b, o, denom), op.out, b.flat_index(item, v_dim, d))
            return []

        loop_over_part_dims(b, v_dim, parts, part, write_output, hint="final_d",
                            chunk=op.chunk)
        if op.lse is not None:
            exp2 = op.exp2 is not None
            if part is None:
                write_lse(b, op.lse, exp2, item, m_final, l_final)
            else:  # every part has the same m and l
                b.if_then(b.cmpi(part, b.index(0), "eq"),
                          lambda b: write_lse(b, op.lse, exp2, item, m_final, l_final))

    def split_tiles(self, b: IRBuilder, body, carried) -> list[SSAValue]:
        """This invocation's run of ceil(tile_count / splits) tiles."""
        tile_count, splits, ragged = self.shape["tile_count"], self.splits, self.ragged
        per_split = -(-tile_count // splits)
        first = b.muli(self.split, b.index(per_split), "first_tile")
        if ragged:
            return self.ragged_tiles(b, body, carried, first, per_split)

        def tile_of_split(b: IRBuilder, i, carried):
            tile_idx = b.addi(first, i, "tile_idx")
            if tile_count % splits == 0:
                return body(b, tile_idx, carried)
            return b.if_else(
                b.cmpi(tile_idx, b.index(tile_count), "ult"),
                lambda b: body(b, tile_idx, carried),
                lambda b: list(carried),
            )

        return b.loop(0, per_split, tile_of_split, carried, hint="split_tile")

    def ragged_tiles(self, b: IRBuilder, body, carried, first, span: int) -> list[SSAValue]:
        """With kv_lens, the item's tiles from `first` (None: 0) up to `span`
        of them: those that end before its run-time length in a loop whose
        body has no branch and a constant tile length, then the tile that
        length cuts, if it lies in the span.  The order of the tiles is kept."""
        whole, tiles = self.ragged["whole"], self.ragged["tiles"]
        if first is None:
            count, end, hint = whole, tiles, "tile_idx"
        else:
            past = b.addi(first, b.index(span))
            count = b.subi(b.maxui(b.minui(whole, past), first), first, "whole_in_split")
            end, hint = b.minui(tiles, past), "split_tile"

        def whole_tile(b: IRBuilder, i, carried):
            tile_idx = i if first is None else b.addi(first, i, "tile_idx")
            return body(b, tile_idx, carried)

        # at most `span` trips (vyre.max_trips: loop_bounds' limit, unroll-jam's factor)
        carried = b.loop(0, count, whole_tile, carried, hint=hint,
                         attributes={MAX_TRIPS_ATTR: IntegerAttr(span, i64)})
        carried[0].name_hint, carried[1].name_hint = "m_whole", "l_whole"
        last = count if first is None else b.addi(first, count, "cut_tile")
        return b.if_else(
            b.cmpi(last, end, "ult"),
            lambda b: body(b, last, carried, cut=True),
            lambda b: list(carried),
        )

    def masked_tile(self, b: IRBuilder, tile_idx, carried, bounds, cut=False):
        """Skip empty tiles, run full ones without mask code, mask the rest."""
        m, l = carried  # noqa: E741
        ranges, tile_count = self.ranges, self.shape["tile_count"]
        all_computed = all(r.lo == 0 and r.hi == tile_count for r in ranges)
        any_full = any(r.fhi > r.flo for r in ranges)
        any_partial = any(r.hi - r.lo > r.fhi - r.flo for r in ranges)

        def within(b: IRBuilder, lo: str, hi: str) -> SSAValue:
            return b.andi(
                b.cmpi(tile_idx, bounds[lo], "uge"), b.cmpi(tile_idx, bounds[hi], "ult")
            )

        def full(b: IRBuilder):
            return self.one_tile(b, tile_idx, carried, masked=False, cut=cut)

        def partial(b: IRBuilder):
            return self.one_tile(b, tile_idx, carried, masked=True, cut=cut)

        def computed(b: IRBuilder):
            if any_full and any_partial:
                return b.if_else(within(b, "flo", "fhi"), full, partial)
            return full(b) if any_full else partial(b)

        if all_computed:
            return computed(b)
        return b.if_else(within(b, "lo", "hi"), computed, lambda b: [m, l])

    def one_tile(self, b: IRBuilder, tile_idx, carried, masked=False, cut=False):
        """A tile's scores, max, weights and update; `cut`: the tile that an
        item's run-time length (kv_lens) ends, over that length."""
        m, l = carried  # noqa: E741
        m.name_hint, l.name_hint = m.name_hint or "m", l.name_hint or "l"
        tile_size = self.shape["tile_size"]
        tile_start = b.muli(tile_idx, b.index(tile_size), "tile_start")
        end = self.ragged["len"] if cut else None
        if end is None or self.static_cut:
            # A whole tile, or the last of a seq_len that is not a multiple
            # of tile_size: a constant length lets later passes unroll the
            # loops over a tile completely.
            tile_len = b.index(self.shape["seq_len"] % tile_size if cut else tile_size)
        else:
            tile_end = b.minui(b.addi(tile_start, b.index(tile_size)), end, "tile_end")
            tile_len = b.subi(tile_end, tile_start, "tile_len")
        return self.tile_body(b, tile_start, tile_len, m, l, masked)

    def tile_body(self, b: IRBuilder, tile_start, tile_len, m, l, masked):  # noqa: E741
        op, item, lane = self.op, self.item, self.lane
        scores_args = [item, lane, tile_start, tile_len, op.q_scratch, op.score_tile]
        b.splice(op.scores, scores_args)

        def tile_max_step(b: IRBuilder, j, acc):
            tile_max = acc[0]
            s = b.load(op.score_tile, self.score_index(b, j))
            next_max = max_step(b, s, tile_max)
            if masked:  # a masked key leaves the max alone
                next_max = b.select(self.keep(b, tile_start, j), next_max, tile_max)
            return [next_max]

        (tile_max,) = b.loop(0, tile_len, tile_max_step, [b.f32(F32_MIN)], hint="max_j")
        tile_max.name_hint = "tile_max"
        m_new = running_max(b, tile_max, m)
        rescale = rescale_of(b, m, m_new, op.exp2 is not None)

        def sum_step(b: IRBuilder, j, acc):
            kept = self.keep(b, tile_start, j) if masked else None
            weight = tile_weight(
                b, op.score_tile, lane, j, m_new, self.score_stride, kept,
                op.exp2 is not None, self.drop_minus_inf, weight_scale(op),
            )
            if self.store_weights:
                b.store(weight, op.score_tile, self.score_index(b, j))
            return [b.addf(acc[0], weight)]

        (tile_sum,) = b.loop(0, tile_len, sum_step, [b.f32(0.0)], hint="sum_j")
        tile_sum.name_hint = "tile_sum"
        l_new = next_denominator(b, rescale, l, tile_sum)
        update_args = [item, lane, tile_start, tile_len, m_new, rescale, op.score_tile, op.o_acc]
        update = op.update.clone()
        expand_tile_weights(op, update, masked, self.store_weights)
        b.splice(update, update_args)
        update.drop_all_references()  # its ops must not stay users of the kernel's values
        mark_tile_loops(tile_len, self.shape["tile_size"])
        return [m_new, l_new]


def row_copies(array: SSAValue, rows: int) -> tuple[SSAValue, ...]:
    """`array` (a vyre.scratch) and `rows - 1` copies declared beside it,
    `<name>_row<r>`: one array per row."""
    declared = array.owner
    copies = [array]
    for r in range(1, rows):
        copy = declared.clone()
        name = f"{declared.sym_name.data}_row{r}"
        copy.properties["sym_name"] = StringAttr(name)
        copy.results[0].name_hint = name
        Rewriter.insert_op(copy, InsertPoint.after(copies[-1].owner))
        copies.append(copy.results[0])
    return tuple(copies)


@dataclass
class ExpandSkeleton(RewritePattern):
    heavy_first: bool = False

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: vyre.TiledOnlineSoftmaxOp, rewriter: PatternRewriter
    ) -> None:
        record_skeleton(op)  # convert-vyre-to-gpu records it in the launch
        b = IRBuilder(InsertPoint.before(op))
        try:
            SkeletonExpansion(op, b, self.heavy_first).emit(b)
        except VyreError as error:  # the fragments do not allow rows_per_lane
            raise pass_error(op, f"vyre-inline-fragments: {error}") from None
        rewriter.erase(op)


@dataclass(frozen=True)
class InlineFragmentsPass(ModulePass):
    """Expand every vyre.tiled_online_softmax into the scf loop nest of the
    recurrence, with its fragments and hooks spliced in, and every
    vyre.merge_splits into the merge of split partials; with `heavy_first`,
    a masked kernel's workgroups start with every head's heaviest query
    blocks (vyre_xdsl.workgroup_order; bit-identical results)."""

    name = "vyre-inline-fragments"

    heavy_first: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        walk_once(op, ExpandSkeleton(self.heavy_first), ExpandMergeSplits())
