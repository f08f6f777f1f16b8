"""vyre-expand-stability: the stability ops become arith/math select chains.

Each pattern spells out its SEMANTICS.md definition with ordered/unordered
comparisons, so NaN passes through exactly where the definition says:

    isnan(v)     = cmpf uno v, v
    isfinite(v)  = cmpf one |v|, +inf        (false for inf and NaN)
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import MIN_POSITIVE, SCORE_FLOOR
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.walk import walk_once

INF = float("inf")


def is_nan(b: IRBuilder, v: SSAValue) -> SSAValue:
    return b.cmpf(v, v, "uno")


def is_finite(b: IRBuilder, v: SSAValue) -> SSAValue:
    return b.cmpf(b.absf(v), b.f32(INF), "one")


def finite_or(b: IRBuilder, v: SSAValue, fallback: float) -> SSAValue:
    return b.select(is_finite(b, v), v, b.f32(fallback))


def nan_passes(b: IRBuilder, v: SSAValue, otherwise: SSAValue) -> SSAValue:
    """`v if isnan(v) else otherwise`"""
    return b.select(is_nan(b, v), v, otherwise)


class ExpandBoundedScore(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: vyre.BoundedScoreOp, rewriter: PatternRewriter):
        b = IRBuilder(rewriter)
        v = op.input
        rewriter.replace(op, [], [nan_passes(b, v, finite_or(b, v, SCORE_FLOOR))])


class ExpandBoundedExpArg(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: vyre.BoundedExpArgOp, rewriter: PatternRewriter):
        b = IRBuilder(rewriter)
        v = op.input
        finite = finite_or(b, v, SCORE_FLOOR)
        zero, floor = b.f32(0.0), b.f32(SCORE_FLOOR)
        # Upper bound first (> 0 -> 0), then lower (< -80 -> -80).
        capped = b.select(b.cmpf(finite, zero, "ogt"), zero, finite)
        clamped = b.select(b.cmpf(capped, floor, "olt"), floor, capped)
        rewriter.replace(op, [], [nan_passes(b, v, clamped)])


class ExpandPositiveDenominator(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: vyre.PositiveDenominatorOp, rewriter: PatternRewriter
    ):
        b = IRBuilder(rewriter)
        v = op.input
        tiny = b.f32(MIN_POSITIVE)
        usable = b.andi(is_finite(b, v), b.cmpf(v, tiny, "ogt"))
        rewriter.replace(op, [], [nan_passes(b, v, b.select(usable, v, tiny))])


class ExpandFlushTiny(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: vyre.FlushTinyOp, rewriter: PatternRewriter):
        b = IRBuilder(rewriter)
        v = op.input
        # ole is false on NaN, so NaN passes through untouched.
        tiny = b.cmpf(b.absf(v), b.f32(MIN_POSITIVE), "ole")
        rewriter.replace(op, [], [b.select(tiny, b.f32(0.0), v)])


@dataclass(frozen=True)
class ExpandStabilityPass(ModulePass):
    """Rewrite vyre.bounded_score, vyre.bounded_exp_arg,
    vyre.positive_denominator and vyre.flush_tiny into arith/math ops."""

    name = "vyre-expand-stability"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        walk_once(
            op,
            ExpandBoundedScore(),
            ExpandBoundedExpArg(),
            ExpandPositiveDenominator(),
            ExpandFlushTiny(),
        )
