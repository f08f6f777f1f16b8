"""Checks that several test modules share."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl.errors import VyreError


def assert_bad_paged_inputs_refused(module, inputs: dict[str, np.ndarray]) -> None:
    """vx.run refuses a paged kernel's kv_lens and block_table of the wrong
    dtype or size, or a missing kv_lens, naming the input."""
    for name, bad, match in [
        ("kv_lens", inputs["kv_lens"].astype(np.float32), r"'kv_lens' has dtype float32"),
        ("kv_lens", inputs["kv_lens"].astype(np.int64), r"'kv_lens' has dtype int64"),
        ("kv_lens", np.zeros(4, np.int32), r"'kv_lens' has 4 elements"),
        ("block_table", inputs["block_table"][:, :2].copy(), r"'block_table' has 6 elements"),
        ("block_table", inputs["block_table"].astype(np.float32), r"'block_table' has dtype"),
    ]:
        with pytest.raises(VyreError, match=match):
            vx.run(module, dict(inputs, **{name: bad}))
    with pytest.raises(VyreError, match="missing input 'kv_lens'"):
        vx.run(module, {n: a for n, a in inputs.items() if n != "kv_lens"})
