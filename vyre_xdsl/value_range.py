"""What an f32 SSA value can be: an interval [lo, hi] that holds every
value but NaN, read from the ops that compute it.

A builder asks it whether a traced modifier can produce an infinity; a
score_mod that cannot return -inf (a soft-cap: `c * tanh(s / c)`) drops no
key, so its kernel needs no test for dropped keys (`scores_may_be_minus_inf`
asks the same of a skeleton's stored scores).  The answer is sound or
unknown, never wrong: ops not listed here, and block arguments, give
(-inf, inf).  Bounds are computed in float64 with a margin, and a bound
past the largest f32 becomes infinite (the f32 op may overflow).
"""

from __future__ import annotations

import math

from xdsl.dialects import arith, memref
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import FloatAttr
from xdsl.ir import SSAValue

from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import F32_MAX, MIN_POSITIVE

Interval = tuple[float, float]
UNKNOWN: Interval = (-math.inf, math.inf)
EMPTY: Interval = (math.inf, -math.inf)  # only NaN
# float64 bound arithmetic, and devices' transcendental functions, may be
# off by a little; a bound is widened by this much (relative) plus a bit
MARGIN = 1e-6
# how far a device's tanh may stray past +-1 (approximate math)
TANH_SLACK = 1e-3
DEPTH = 64  # ops followed back from a value
# the ops whose result's interval follows from their operands'
READ = (arith.SelectOp, xmath.TanhOp, vyre.BoundedExpArgOp, xmath.ExpOp, xmath.Exp2Op,
        arith.NegfOp, xmath.AbsFOp, arith.AddfOp, arith.SubfOp, arith.MulfOp, arith.DivfOp)


def bounds(value: SSAValue, depth: int = DEPTH) -> Interval:
    """[lo, hi] holding every non-NaN value `value` can take (inclusive;
    an infinite bound means that infinity may occur)."""
    return _bounds(value, depth, {})


def _bounds(value: SSAValue, depth: int, seen: dict) -> Interval:
    # each value once a depth: `x = x * x` twenty times is a DAG of 20 ops
    # but a tree of 2**20 paths (s ** 2**20 took 15 s, s ** 2**31 hung)
    key = (value, depth)
    if key not in seen:
        seen[key] = _interval(value, depth, seen)
    return seen[key]


def _interval(value: SSAValue, depth: int, seen: dict) -> Interval:
    if depth == 0:
        return UNKNOWN
    op = value.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, FloatAttr):
        c = op.value.value.data
        return EMPTY if math.isnan(c) else (c, c)
    if not isinstance(op, READ):  # its operands (a load's indices, say) tell nothing
        return UNKNOWN
    operands = [_bounds(v, depth - 1, seen) for v in getattr(op, "operands", ())]
    if isinstance(op, arith.SelectOp):  # either branch; an always-NaN one adds no number
        branches = [b for b in operands[1:] if b[0] <= b[1]]
        if not branches:
            return EMPTY
        return (min(lo for lo, _ in branches), max(hi for _, hi in branches))
    if any(lo > hi for lo, hi in operands):
        return EMPTY  # an operand is always NaN, so is the result
    if isinstance(op, xmath.TanhOp):
        lo, hi = operands[0]
        return _widen((math.tanh(lo) - TANH_SLACK, math.tanh(hi) + TANH_SLACK))
    if isinstance(op, vyre.BoundedExpArgOp):  # its clamp (nonpositive: the promise)
        return (op.floor, 0.0)
    if isinstance(op, (xmath.ExpOp, xmath.Exp2Op)):
        base = math.e if isinstance(op, xmath.ExpOp) else 2.0
        lo, hi = (_power(base, x) for x in operands[0])
        # a device's exp errs relative to its result (an absolute margin
        # would take the bound below 0); one below the smallest normal
        # may flush to 0
        return (lo * (1 - MARGIN) if lo >= MIN_POSITIVE else 0.0, _widen((lo, hi))[1])
    if isinstance(op, arith.NegfOp):
        lo, hi = operands[0]
        return (-hi, -lo)
    if isinstance(op, xmath.AbsFOp):
        lo, hi = operands[0]
        low = 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))
        return (low, max(abs(lo), abs(hi)))
    if isinstance(op, (arith.AddfOp, arith.SubfOp)):
        (a, b), (c, d) = operands
        if isinstance(op, arith.SubfOp):
            c, d = -d, -c
        return _widen((a + c, b + d))
    if isinstance(op, arith.MulfOp):
        return _widen(_product(*operands))
    if isinstance(op, arith.DivfOp):
        (c, d) = operands[1]
        if c != d or c == 0.0 or not math.isfinite(c):
            return UNKNOWN  # only a constant divisor
        return _widen(_product(operands[0], (1.0 / c, 1.0 / c)))
    return UNKNOWN


def never_infinite(value: SSAValue, sign: int = -1) -> bool:
    """Whether `value` is never -inf (sign -1) or +inf (sign 1)."""
    lo, hi = bounds(value)
    return lo > -math.inf if sign < 0 else hi < math.inf


def _product(x: Interval, y: Interval) -> Interval:
    if any(math.isinf(b) for b in (*x, *y)):
        return UNKNOWN  # inf * 0 and the signs of infinities: not worth it
    corners = [a * b for a in x for b in y]
    return (min(corners), max(corners))


def _power(base: float, x: float) -> float:
    if x == -math.inf:
        return 0.0
    try:
        return base ** x
    except OverflowError:
        return math.inf


def _widen(interval: Interval) -> Interval:
    """`interval` with the margin, and its bounds past the largest f32
    infinite (an f32 result there may round to infinity)."""
    lo, hi = interval
    lo, hi = lo - MARGIN * (abs(lo) + 1.0), hi + MARGIN * (abs(hi) + 1.0)
    return (-math.inf if lo < -F32_MAX else lo, math.inf if hi > F32_MAX else hi)


def is_zero_constant(value: SSAValue) -> bool:
    """`value` is an f32 constant 0 (either sign)."""
    owner = value.owner
    return (isinstance(owner, arith.ConstantOp) and isinstance(owner.value, FloatAttr)
            and owner.value.value.data == 0.0)


def scores_may_be_minus_inf(op: vyre.TiledOnlineSoftmaxOp) -> bool:
    """Whether the scores region may store -inf into %score_tile.  Scores
    that went through vyre.bounded_score (>= -80, or NaN) cannot, and are
    left without the check; anything else (a score_mod's result, a
    decoder's own score) may, and then a -inf score drops its key."""
    score_tile = op.region_arg("scores", "score_tile")
    for use in score_tile.uses:
        store = use.operation
        if isinstance(store, memref.StoreOp) and store.memref == score_tile:
            if not _bounded_below(store.value):
                return True
    return False


def _bounded_below(value: SSAValue) -> bool:
    """`value` is NaN or finite and >= some finite bound: a bounded score,
    or one times a positive finite constant (vyre-use-exp2's log2(e))."""
    owner = value.owner
    if isinstance(owner, vyre.BoundedScoreOp):
        return True
    if isinstance(owner, arith.MulfOp):
        for factor, other in ((owner.lhs, owner.rhs), (owner.rhs, owner.lhs)):
            constant = factor.owner
            if (
                isinstance(constant, arith.ConstantOp)
                and isinstance(constant.value, FloatAttr)
                and 0 < constant.value.value.data < math.inf
                and _bounded_below(other)
            ):
                return True
    return False
