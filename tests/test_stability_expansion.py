"""vyre-expand-stability's select chains compute the oracle's stability
helpers bit for bit on special values (NaN, +-inf, +-0, around the -80
floor, tiny and huge): in the interpreter and, where there is one, on
Vulkan. `bounded_exp_arg nonpositive` is checked where its promise holds."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context

import vyre_xdsl as vx
from helpers import lowered_f32_kernel
from requirements import needs_vulkan
from vyre_xdsl import reference as ref
from vyre_xdsl.passes.expand_stability import ExpandStabilityPass

SPECIALS = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, -79.9, -80.0, -80.1, 1e-30, -1e-30,
     3.4e38, -3.4e38, 5.0, -np.nan, 1e-45, -1e-45],
    np.float32,
)
N = SPECIALS.size

BODY = f"""      %x = memref.load %x_buf[%i] : memref<{N}xf32>
      %s = vyre.bounded_score %x : f32
      memref.store %s, %score_buf[%i] : memref<{N}xf32>
      %e = vyre.bounded_exp_arg %x : f32
      memref.store %e, %exp_arg_buf[%i] : memref<{N}xf32>
      %p = vyre.bounded_exp_arg nonpositive %x : f32
      memref.store %p, %nonpositive_buf[%i] : memref<{N}xf32>"""


def expanded():
    module = vx.parse_module(lowered_f32_kernel(
        "stability", BODY, n=N, lanes=N, grid=1, inputs=("x",),
        outputs=("score", "exp_arg", "nonpositive"), arg_suffix="_buf"))
    ExpandStabilityPass().apply(Context(), module)
    assert not any(op.name.startswith("vyre.") for op in module.walk())
    return module


def assert_same_bits(got: np.ndarray, want: np.ndarray, where=slice(None)) -> None:
    """Equal as f32 bit patterns (so NaN equals the same NaN, -0.0 is not 0.0)."""
    got_bits = got.view(np.uint32)[where]
    want_bits = want.view(np.uint32)[where]
    bad = got_bits != want_bits
    assert not bad.any(), (
        f"inputs {SPECIALS[where][bad]}: got {got[where][bad]}, want {want[where][bad]}"
    )


def check(got: dict[str, np.ndarray]) -> None:
    assert_same_bits(got["score"], ref.bounded_score(SPECIALS))
    assert_same_bits(got["exp_arg"], ref.bounded_exp_arg(SPECIALS))
    # the promise: <= 0, -inf or NaN (never > 0 nor +inf)
    promised = ~(SPECIALS > 0)
    assert promised.sum() == 11
    assert_same_bits(got["nonpositive"], ref.bounded_exp_arg(SPECIALS), promised)


def test_expansions_match_the_oracle_in_the_interpreter():
    check(vx.run(expanded(), {"x": SPECIALS}))


@needs_vulkan
def test_expansions_match_the_oracle_on_vulkan():
    check(vx.run(expanded(), {"x": SPECIALS}, backend="vulkan"))


def test_nonpositive_only_bounds_below():
    """Above 0 the promise is broken and the value is not bounded above:
    the property, not the input, picks the shorter expansion."""
    got = vx.run(expanded(), {"x": SPECIALS})["nonpositive"]
    above = SPECIALS > 0
    assert_same_bits(got, SPECIALS, above)
    assert not np.array_equal(got[above], ref.bounded_exp_arg(SPECIALS)[above])


@pytest.mark.parametrize("nonpositive", [False, True])
def test_builder_sets_the_promise(nonpositive):
    from xdsl.dialects.builtin import f32
    from xdsl.utils.test_value import create_ssa_value

    from vyre_xdsl.dialects import vyre

    op = vyre.BoundedExpArgOp(create_ssa_value(f32), nonpositive)
    assert (op.nonpositive is not None) == nonpositive
