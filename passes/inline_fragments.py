"""vyre-inline-fragments: expand `vyre.tiled_online_softmax` into scf loops.

This file is the one place in the repository where the online-softmax
recurrence (tile max, rescale, tile sum, `l` update, finalisation) is written.
The two fragment regions are spliced in where SEMANTICS.md puts them, their
block arguments replaced by the loop values.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from vyre_xdsl.dialects import vyre
from vyre_xdsl.ir_builder import IRBuilder

F32_MIN = -3.4028234663852886e38  # the most negative finite f32, not -inf


def splice_fragment(
    b: IRBuilder, rewriter: PatternRewriter, region: Region, args: list[SSAValue]
) -> None:
    """Move the fragment's ops to `b`'s insertion point, its block arguments
    replaced by `args`, dropping its `vyre.yield`."""
    block = region.block
    terminator = block.last_op
    assert isinstance(terminator, vyre.YieldOp)
    rewriter.erase(terminator)
    rewriter.inline_block(block, b.builder.insertion_point, args)


class ExpandSkeleton(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: vyre.TiledOnlineSoftmaxOp, rewriter: PatternRewriter
    ) -> None:
        shape = op.shape()
        head_dim, tile_size = shape["head_dim"], shape["tile_size"]
        b = IRBuilder(InsertPoint.before(op))
        item = b.emit(vyre.ItemIndexOp()).results[0]
        lane = b.emit(vyre.LaneIndexOp()).results[0]
        in_range = b.cmpi(item, b.index(shape["item_count"]), "ult")

        def score_index(b: IRBuilder, j) -> SSAValue:
            return b.flat_index(lane, tile_size, j)

        def per_item(b: IRBuilder) -> None:
            def load_query(b: IRBuilder, d, _):
                value = b.load(op.q, b.flat_index(item, head_dim, d))
                b.store(value, op.q_scratch, b.flat_index(lane, head_dim, d))
                return []

            b.loop(0, head_dim, load_query, hint="load_d")
            m0, l0 = b.f32(F32_MIN), b.f32(0.0)

            def zero_accumulator(b: IRBuilder, d, _):
                b.store(b.f32(0.0), op.o_acc, b.flat_index(lane, head_dim, d))
                return []

            b.loop(0, head_dim, zero_accumulator, hint="zero_d")
            (_, l_final) = b.loop(
                0, shape["tile_count"], one_tile, [m0, l0], hint="tile_idx"
            )
            denom = b.positive_denominator(l_final)

            def write_output(b: IRBuilder, d, _):
                o = b.load(op.o_acc, b.flat_index(lane, head_dim, d))
                b.store(b.flush_tiny(b.divf(o, denom)), op.out, b.flat_index(item, head_dim, d))
                return []

            b.loop(0, head_dim, write_output, hint="final_d")

        def one_tile(b: IRBuilder, tile_idx, carried):
            m, l = carried
            m.name_hint, l.name_hint = "m", "l"
            tile_start = b.muli(tile_idx, b.index(tile_size), "tile_start")
            tile_end = b.minui(
                b.addi(tile_start, b.index(tile_size)), b.index(shape["seq_len"]), "tile_end"
            )
            tile_len = b.subi(tile_end, tile_start, "tile_len")
            splice_fragment(
                b, rewriter, op.scores, [item, lane, tile_start, tile_len, op.q_scratch, op.score_tile]
            )

            def max_step(b: IRBuilder, j, acc):
                tile_max = acc[0]
                s = b.load(op.score_tile, score_index(b, j))
                bigger = b.select(b.cmpf(s, tile_max, "ogt"), s, tile_max)
                return [b.select(b.cmpf(tile_max, tile_max, "uno"), tile_max, bigger)]

            (tile_max,) = b.loop(0, tile_len, max_step, [b.f32(F32_MIN)], hint="max_j")
            tile_max.name_hint = "tile_max"
            m_new = b.select(b.cmpf(tile_max, m, "ogt"), tile_max, m, "m_new")
            rescale = b.exp(b.bounded_exp_arg(b.subf(m, m_new)), "rescale")

            def sum_step(b: IRBuilder, j, acc):
                s = b.load(op.score_tile, score_index(b, j))
                return [b.addf(acc[0], b.exp(b.bounded_exp_arg(b.subf(s, m_new))))]

            (tile_sum,) = b.loop(0, tile_len, sum_step, [b.f32(0.0)], hint="sum_j")
            tile_sum.name_hint = "tile_sum"
            l_new = b.addf(b.mulf(rescale, l), tile_sum, "l_new")
            splice_fragment(
                b,
                rewriter,
                op.update,
                [item, lane, tile_start, tile_len, m_new, rescale, op.score_tile, op.o_acc],
            )
            return [m_new, l_new]

        b.if_then(in_range, per_item)
        rewriter.erase(op)


@dataclass(frozen=True)
class InlineFragmentsPass(ModulePass):
    """Expand every vyre.tiled_online_softmax into the scf loop nest of the
    recurrence, with its `scores` and `update` fragments spliced in."""

    name = "vyre-inline-fragments"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ExpandSkeleton(), apply_recursively=False).rewrite_module(op)
