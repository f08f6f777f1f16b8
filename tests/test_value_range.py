"""vyre_xdsl.value_range: the interval of an f32 value from the ops that
compute it, sound (it holds every non-NaN value) or unknown."""

from __future__ import annotations

import math

import pytest
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import FloatAttr, f32
from xdsl.ir import Block

from vyre_xdsl.value_range import UNKNOWN, bounds, never_infinite


class _Ops:
    """Ops appended to a block whose argument is an unknown f32."""

    def __init__(self):
        self.block = Block(arg_types=[f32])
        self.arg = self.block.args[0]

    def __call__(self, op):
        self.block.add_op(op)
        return op.results[0]

    def c(self, value: float):
        return self(arith.ConstantOp(FloatAttr(value, f32)))


@pytest.fixture
def ops():
    return _Ops()


def _soft_cap(ops, cap: float):
    return ops(arith.MulfOp(ops.c(cap), ops(xmath.TanhOp(ops(arith.DivfOp(ops.arg, ops.c(cap)))))))


def test_a_soft_cap_is_finite_and_a_score_is_not(ops):
    lo, hi = bounds(_soft_cap(ops, 30.0))
    assert -30.1 < lo <= -30.0 and 30.0 <= hi < 30.1
    assert never_infinite(_soft_cap(ops, 30.0)) and never_infinite(_soft_cap(ops, 30.0), 1)
    assert bounds(ops.arg) == UNKNOWN and not never_infinite(ops.arg)
    assert not never_infinite(ops(arith.MulfOp(ops.arg, ops.c(2.0))))


def test_bounds_past_the_largest_f32_may_overflow(ops):
    huge = ops(arith.MulfOp(ops.c(3e38), _soft_cap(ops, 30.0)))
    assert bounds(huge) == UNKNOWN
    near = ops(arith.AddfOp(ops.c(3.4e38), ops.c(3.4e38)))
    assert bounds(near)[1] == math.inf and never_infinite(near)


@pytest.mark.parametrize("make, want", [
    (lambda o: o.c(math.nan), (math.inf, -math.inf)),  # only NaN
    (lambda o: o(arith.DivfOp(_soft_cap(o, 1.0), o.c(0.0))), UNKNOWN),
    (lambda o: o(arith.SubfOp(o.c(1.0), o.c(4.0))), (-3.0, -3.0)),
    (lambda o: o(xmath.AbsFOp(o(arith.NegfOp(o.c(2.0))))), (2.0, 2.0)),
    (lambda o: o(xmath.ExpOp(o(xmath.TanhOp(o.arg)))), (math.exp(-1), math.e)),
    # past the largest f32: the result may be +inf
    (lambda o: o(xmath.ExpOp(o.c(100.0))), (math.exp(100), math.inf)),
    (lambda o: o(xmath.Exp2Op(o.c(200.0))), (2.0 ** 200, math.inf)),
])
def test_each_op_bounds_its_result(ops, make, want):
    lo, hi = bounds(make(ops))
    for got, expected in ((lo, want[0]), (hi, want[1])):
        assert got == pytest.approx(expected, rel=1e-2, abs=2e-3) or got == expected


def test_a_select_is_the_union_of_its_sides(ops):
    cond = ops(arith.CmpfOp(ops.arg, ops.c(0.0), "olt"))
    picked = ops(arith.SelectOp(cond, ops.c(-2.0), ops.c(5.0)))
    lo, hi = bounds(picked)
    assert lo == pytest.approx(-2.0) and hi == pytest.approx(5.0)
    assert not never_infinite(ops(arith.SelectOp(cond, ops.c(-math.inf), ops.c(5.0))))


def test_a_value_used_twice_is_bounded_once(ops):
    """`x = x * x` forty times: a DAG of 40 ops, a tree of 2**40 paths; each
    value was bounded once a path (a score_mod `s ** 2**20` took 15 s to
    build, `s ** 2**31` never finished)."""
    import time

    x = _soft_cap(ops, 1.0)
    for _ in range(40):
        x = ops(arith.MulfOp(x, x))
    start = time.perf_counter()
    lo, hi = bounds(x)
    assert time.perf_counter() - start < 5
    assert lo <= hi  # the margins compound to infinity: sound, if unknown


def test_a_weight_is_at_least_exp_of_the_score_floor(ops):
    """exp(bounded_exp_arg(x)) is in [exp(-80), 1] (its bound relative, not
    below 0): a bf16 weight never rounds below the smallest normal.  exp of
    a value below log(smallest normal) may flush to 0."""
    from vyre_xdsl.dialects import vyre
    from vyre_xdsl.dialects.constants import MIN_POSITIVE, SCORE_FLOOR

    weight = ops(xmath.ExpOp(ops(vyre.BoundedExpArgOp(ops.arg))))
    lo, hi = bounds(weight)
    assert MIN_POSITIVE < lo <= math.exp(SCORE_FLOOR) and 1.0 <= hi < 1.0001
    assert bounds(ops(xmath.ExpOp(ops.c(-100.0))))[0] == 0.0
