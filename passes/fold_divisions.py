"""vyre-fold-divisions: `(x + c) / d` and `(x + c) % d` where `x` is a known
multiple and `c` a small constant.

After vyre-unroll-jam every key of a tile has its own constant offset `c`
from the tile's start `x` (a multiple of the tile size), and a paged cache
finds key `x + c` at page `block_table[(x + c) / page_size]`, slot
`(x + c) % page_size`: one lookup of the block table per key.  Where the
tile lies inside one page, every key's page is the tile's, so the lookups
are one load that CSE keeps once, and the slots are the tile's slot plus
`c`.

For an index `x` that is provably a multiple of `m` (index_forms'
known_multiple), a constant divisor `d` and a constant `0 <= c < g` with
`g = gcd(m, d)`: `x % d` is a multiple of `g` at most `d - g`, so
`x % d + c < d`, and

    (x + c) / d  ->  x / d
    (x + c) % d  ->  x - (x / d) * d + c

for `arith.divui` and `arith.remui` on `index`.  Integer identities: every
result is bit-identical.  Anything else is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from vyre_xdsl.index_forms import known_multiple, linear_index
from vyre_xdsl.loop_bounds import constant_index


def within_a_block(dividend: SSAValue, divisor: SSAValue) -> tuple[SSAValue, SSAValue] | None:
    """(x, c) for a `dividend` x + c whose quotient by the constant
    `divisor` is x's (see the module docstring); None otherwise."""
    d = constant_index(divisor)
    add = dividend.owner
    if not d or d < 0 or not isinstance(add, arith.AddiOp):
        return None
    for x, offset in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
        c = linear_index(offset)  # a constant, perhaps a sum of constants (unrolled copies)
        if not c.terms and 0 <= c.constant < gcd(known_multiple(x), d):
            return x, offset
    return None


class FoldDivision(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: arith.DivUIOp, rewriter: PatternRewriter) -> None:
        if isinstance(op.result.type, IndexType) and (
            found := within_a_block(op.lhs, op.rhs)
        ):
            rewriter.replace(op, arith.DivUIOp(found[0], op.rhs))


class FoldRemainder(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: arith.RemUIOp, rewriter: PatternRewriter) -> None:
        if isinstance(op.result.type, IndexType) and (
            found := within_a_block(op.lhs, op.rhs)
        ):
            x, offset = found
            # x - (x / d) * d: xDSL's remui has unknown effects, and its
            # quotient is the division's above, so CSE keeps one of each
            # and one load of what they address
            quotient = arith.DivUIOp(x, op.rhs)
            multiple = arith.MuliOp(quotient, op.rhs)
            remainder = arith.SubiOp(x, multiple)
            rewriter.replace(
                op, [quotient, multiple, remainder, arith.AddiOp(remainder, offset)]
            )


@dataclass(frozen=True)
class FoldDivisionsPass(ModulePass):
    name = "vyre-fold-divisions"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FoldDivision(), FoldRemainder()])
        ).rewrite_module(op)
