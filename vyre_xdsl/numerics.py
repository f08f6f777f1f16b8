"""Numeric choices shared by the kernels and the oracle."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def partial_weight_scale(keys: int) -> float:
    """The power of two, 2^-ceil(log2(keys)), that scales every softmax
    weight of a kernel split over keys (vyre-split-kv).  A split's partial
    accumulates against its own maximum, so its weights can be near 1
    where the un-split recurrence gives the same keys tiny weights; with
    the scale, a partial's l and o stay below `keys * 2^-e <= 1` times the
    largest |value| and cannot overflow.  Scaling by a power of two is
    exact for normal floats, and o / l does not see it."""
    return 2.0 ** -math.ceil(math.log2(max(keys, 1)))


def pairwise_total(values: Sequence[T], add: Callable[[T, T], T]) -> T:
    """values[0] + values[1] + ... added pairwise: neighbours first, then
    the pairs' sums, ... (lane 0 of a butterfly over len(values) lanes, a
    power of two).  The kernels and the oracle add parts in this order: a
    row's parts over lanes (vyre-split-head-dim) and the runs of a merge
    kernel's splits (vyre.merge_splits `teams`)."""
    if not values or len(values) & (len(values) - 1):
        raise ValueError(f"pairwise_total adds a power of two of values, got {len(values)}")
    while len(values) > 1:
        values = [add(values[i], values[i + 1]) for i in range(0, len(values), 2)]
    return values[0]
