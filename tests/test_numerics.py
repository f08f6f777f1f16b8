"""vyre_xdsl.numerics: the sums the kernels and the oracle add in one order."""

from __future__ import annotations

import numpy as np
import pytest

from vyre_xdsl.numerics import pairwise_total


def test_pairwise_total_adds_neighbours_first():
    # ((a + b) + (c + d)), not ((a + b) + c) + d: the orders differ in f32
    values = [np.float32(v) for v in (1.0, 2.0**-24, 2.0**-24, -1.0)]
    assert pairwise_total(values, np.add) == np.float32(2.0**-24)
    assert (values[0] + values[1] + values[2]) + values[3] == np.float32(0.0)
    calls = []
    pairwise_total(list("abcd"), lambda x, y: calls.append((x, y)) or x + y)
    assert calls == [("a", "b"), ("c", "d"), ("ab", "cd")]
    assert pairwise_total([np.float32(3.0)], np.add) == np.float32(3.0)


@pytest.mark.parametrize("count", [0, 3, 6])
def test_pairwise_total_takes_a_power_of_two_of_values(count):
    with pytest.raises(ValueError, match="a power of two of values"):
        pairwise_total([1.0] * count, lambda x, y: x + y)
