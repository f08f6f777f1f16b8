"""The online-softmax recurrence's formulas, for the expansions of the
skeleton: vyre-inline-fragments (a row a lane) and vyre-tensor-cores (a
subgroup's rows on matrix units) compose them; neither writes its own.

Per tile, with the running max m and denominator l of a row:

    tile_max = max over the tile's kept scores (`max_step`)
    m_new    = max(tile_max, m)                    (`running_max`)
    rescale  = exp(bounded_exp_arg(m - m_new))     (`rescale_of`)
    w_j      = exp(bounded_exp_arg(s_j - m_new))   (`score_weight`)
    l_new    = rescale * l + sum_j w_j             (`next_denominator`)

and at the end `out = flush_tiny(o / positive_denominator(l))` (`final_value`
of `final_denominator`).
"""

from __future__ import annotations

import math

from xdsl.ir import SSAValue

from vyre_xdsl.ir_builder import IRBuilder


def max_step(b: IRBuilder, s: SSAValue, tile_max: SSAValue) -> SSAValue:
    """The tile max after score `s` (or after another lane's tile max).
    SEMANTICS.md keeps a NaN max; none arises, so that test is left out:
    every max starts at F32_MIN and a NaN `s` never replaces it (ogt)."""
    return b.select(b.cmpf(s, tile_max, "ogt"), s, tile_max)


def running_max(b: IRBuilder, tile_max: SSAValue, m: SSAValue) -> SSAValue:
    return b.select(b.cmpf(tile_max, m, "ogt"), tile_max, m, "m_new")


def rescale_of(b: IRBuilder, m: SSAValue, m_new: SSAValue, exp2: bool) -> SSAValue:
    """`m_new` is a running_max over `m` (a tile's, or the splits' in a merge)."""
    exp = b.exp2 if exp2 else b.exp
    # m <= m_new: the argument is <= 0, -inf or NaN
    return exp(b.bounded_exp_arg(b.subf(m, m_new), nonpositive=True, log2=exp2), "rescale")


def score_weight(
    b: IRBuilder, s: SSAValue, m_new: SSAValue, exp2: bool = False,
    drop_minus_inf: bool = False, scale: float = 1.0, keep: SSAValue | None = None,
) -> SSAValue:
    """The weight of score `s`: `exp(bounded_exp_arg(s - m_new))` (times
    `scale`), or exactly 0.0 where the mask does not `keep` the key, and,
    with `drop_minus_inf`, where `s` is -inf (a score_mod's way to drop a
    key: SEMANTICS.md; such a score never raises the tile max either).
    `m_new` is at least every kept score that is not NaN (their max_step)."""
    exp = b.exp2 if exp2 else b.exp
    # s <= m_new for a kept s (a non-kept key's weight is replaced by 0.0)
    weight = exp(b.bounded_exp_arg(b.subf(s, m_new), nonpositive=True, log2=exp2))
    if scale != 1.0:
        weight = b.mulf(weight, b.f32(scale))
    if drop_minus_inf:
        weight = b.select(b.cmpf(s, b.f32(-math.inf), "oeq"), b.f32(0.0), weight)
    if keep is None:
        return weight
    return b.select(keep, weight, b.f32(0.0))


def next_accumulator(b: IRBuilder, rescale: SSAValue, acc: SSAValue, tile_sum: SSAValue,
                     hint: str | None = None) -> SSAValue:
    """A running sum (the denominator, an element of O) after a tile: its
    value rescaled to the row's new max, plus the tile's sum."""
    return b.addf(b.mulf(rescale, acc), tile_sum, hint)


def next_denominator(
    b: IRBuilder, rescale: SSAValue, l: SSAValue, tile_sum: SSAValue  # noqa: E741
) -> SSAValue:
    return next_accumulator(b, rescale, l, tile_sum, "l_new")


def final_denominator(b: IRBuilder, l: SSAValue) -> SSAValue:  # noqa: E741
    """What a row's outputs are divided by, from its final `l` (computed
    once a row, not once an element)."""
    return b.positive_denominator(l)


def final_value(b: IRBuilder, o: SSAValue, denominator: SSAValue) -> SSAValue:
    """An output element from its accumulator `o` and the row's
    `denominator` (final_denominator)."""
    return b.flush_tiny(b.divf(o, denominator))
