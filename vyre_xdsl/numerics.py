"""Numeric choices shared by the kernels and the oracle."""

from __future__ import annotations

import math


def partial_weight_scale(keys: int) -> float:
    """The power of two, 2^-ceil(log2(keys)), that scales every softmax
    weight of a kernel split over keys (vyre-split-kv).  A split's partial
    accumulates against its own maximum, so its weights can be near 1
    where the un-split recurrence gives the same keys tiny weights; with
    the scale, a partial's l and o stay below `keys * 2^-e <= 1` times the
    largest |value| and cannot overflow.  Scaling by a power of two is
    exact for normal floats, and o / l does not see it."""
    return 2.0 ** -math.ceil(math.log2(max(keys, 1)))
