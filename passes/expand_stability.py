"""vyre-expand-stability: the stability ops become arith/math select chains.

Each pattern computes its SEMANTICS.md definition exactly, with
ordered/unordered comparisons, so NaN passes through where the definition
says (an ordered compare is false on NaN, so a select keeps NaN's side):

    isnan(v)     = cmpf uno v, v
    isfinite(v)  = cmpf one |v|, +inf        (false for inf and NaN)
    isinf(v)     = cmpf oeq |v|, +inf        (false for NaN)
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import math
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import MIN_POSITIVE
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.walk import walk_once

INF = float("inf")


def is_nan(b: IRBuilder, v: SSAValue) -> SSAValue:
    return b.cmpf(v, v, "uno")


def is_finite(b: IRBuilder, v: SSAValue) -> SSAValue:
    return b.cmpf(b.absf(v), b.f32(INF), "one")


def is_infinite(b: IRBuilder, v: SSAValue) -> SSAValue:
    return b.cmpf(b.absf(v), b.f32(INF), "oeq")


def nan_passes(b: IRBuilder, v: SSAValue, otherwise: SSAValue) -> SSAValue:
    """`v if isnan(v) else otherwise`"""
    return b.select(is_nan(b, v), v, otherwise)


class ExpandBoundedScore(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: vyre.BoundedScoreOp, rewriter: PatternRewriter):
        b = IRBuilder(rewriter)
        v = op.input
        # Only +-inf is replaced: NaN is not infinite, so it passes.
        floor = b.f32(op.floor)
        rewriter.replace(op, [], [b.select(is_infinite(b, v), floor, v)])


class ExpandBoundedExpArg(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: vyre.BoundedExpArgOp, rewriter: PatternRewriter):
        if op.nonpositive is not None and self.exponents_only(op, rewriter):
            return
        b = IRBuilder(rewriter)
        v = op.input
        floor = b.f32(op.floor)
        # The lower bound, -inf included; +inf passes.  NaN is passed
        # explicitly: the H200's compiler turns a compare-and-select clamp
        # into a max, which drops NaN (tools/gpu_check.py's NaN/inf cases).
        raised = nan_passes(b, v, b.select(b.cmpf(v, floor, "olt"), floor, v))
        if op.nonpositive is not None:  # nothing above 0 to bound
            rewriter.replace(op, [], [raised])
            return
        # Above 0 (NaN is not): +inf is not finite, so -80; the rest 0.
        zero = b.f32(0.0)
        capped = b.select(b.cmpf(v, b.f32(INF), "oeq"), floor, zero)
        rewriter.replace(op, [], [b.select(b.cmpf(v, zero, "ogt"), capped, raised)])

    @staticmethod
    def exponents_only(op: vyre.BoundedExpArgOp, rewriter: PatternRewriter) -> bool:
        """Where every use of a `nonpositive` argument is an exponent (the
        recurrence's weights and rescales), each becomes
        `select(v < floor, exp(floor), exp(v))`: the exponent of the same
        value, with one compare and select instead of the clamp's and the
        NaN test's (NaN fails the compare, and exp(NaN) is NaN).  False,
        with nothing changed, where some use is not an exponent."""
        uses = [use.operation for use in op.results[0].uses]
        if not uses or not all(isinstance(u, (math.ExpOp, math.Exp2Op)) for u in uses):
            return False
        v, b = op.input, IRBuilder(rewriter)
        for exp in uses:
            rewriter.insertion_point = InsertPoint.before(exp)
            floor = b.f32(op.floor)
            low = b.cmpf(v, floor, "olt")
            at_floor, at_v = (b.emit(type(exp)(x)).results[0] for x in (floor, v))
            rewriter.replace(exp, [], [b.select(low, at_floor, at_v)])
        rewriter.erase(op)
        return True


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
