"""vyre-block-product: a tile's products as register blocks on a
workgroup's lanes.

Every score, weight, sum and comparison of the expansion is the per-lane
expansion's with tiles of the same size, so the interpreter and lavapipe
give the same bits as `vyre-retile{tile_size=T}` at the exact level;
mlir-opt-22 accepts the lowered IR; the plan takes it on small grids of
devices with shuffles.  The H200 runs it through tools/gpu_check.py
(`--match block`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import vyre_xdsl as vx
from requirements import assert_mlir_opt_accepts, needs_mlir_opt, needs_vulkan
from vyre_xdsl.device import GENERIC, H200, LAVAPIPE
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.plan import BLOCK_PRODUCT_ATTR, PLAN_ATTR
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import program_info
from vyre_xdsl.passes.block_product import Blocking, problem
from vyre_xdsl.tuning import block_blocking, record_plans


def _softcap(score, q, k):
    return 20.0 * vx.tanh(score / 20.0)


def _drops_low_scores(score, q, k):
    return vx.where(score < -1.0, -math.inf, score)


# (builder arguments, blocking as lanes/key_lanes/rows/keys)
CASES = {
    "one_head": (dict(seq_len=64, head_dim=32), (16, 4, 2, 4)),
    "gqa_batch": (dict(seq_len=64, head_dim=16, num_heads=4, num_kv_heads=2, batch=2),
                  (16, 4, 2, 2)),
    "longer_keys_v_dims": (dict(seq_len=32, kv_len=96, head_dim=16, v_head_dim=32),
                           (32, 8, 2, 2)),
    "soft_cap": (dict(seq_len=64, head_dim=32, num_heads=2, score_mod=_softcap),
                 (32, 8, 2, 4)),
    "f16": (dict(seq_len=64, head_dim=32, dtype="f16"), (16, 4, 2, 4)),
    "partial_copies": (dict(seq_len=48, head_dim=12, v_head_dim=16), (8, 4, 1, 4)),
}


def _blocked(kwargs: dict, blocking: tuple[int, ...], pre: str = "") -> str:
    lanes, key_lanes, rows, keys = blocking
    return (f"{pre}vyre-block-product{{lanes={lanes} key_lanes={key_lanes} rows={rows} "
            f"keys={keys} force=true}},vyre-to-gpu{{optimize=exact}}")


def _per_lane(blocking: tuple[int, ...], pre: str = "") -> str:
    return f"{pre}vyre-retile{{tile_size={blocking[1] * blocking[3]}}},vyre-to-gpu{{optimize=exact}}"


def _inputs(module, dtype=np.float32, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {b.name: rng.standard_normal(b.shape).astype(dtype)
            for b in program_info(module).inputs}


def _same_bits(case: str, backend: str, pre: str = "") -> None:
    kwargs, blocking = CASES[case]
    blocked = vx.lower_to_gpu(vx.flash_attention_2(**kwargs), optimize=_blocked(kwargs, blocking, pre))
    assert "block_key_tile" in str(blocked)
    per_lane = vx.lower_to_gpu(vx.flash_attention_2(**kwargs), optimize=_per_lane(blocking, pre))
    inputs = _inputs(blocked, np.float16 if kwargs.get("dtype") == "f16" else np.float32)
    got = vx.run(blocked, inputs, backend=backend)["out"]
    want = vx.run(per_lane, inputs, backend=backend)["out"]
    np.testing.assert_array_equal(got, want)
    oracle = vx.reference.flash_attention_2(
        inputs["q"], inputs["k"], inputs["v"], dtype=kwargs.get("dtype", "f32"),
        score_mod=kwargs.get("score_mod"))
    np.testing.assert_allclose(np.asarray(got, np.float32),
                               np.asarray(oracle, np.float32).reshape(got.shape), atol=2e-3)


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreter_gives_the_bits_of_a_lane_a_row(case):
    _same_bits(case, "interpreter")


@needs_vulkan
@pytest.mark.parametrize("case", ["one_head", "gqa_batch", "soft_cap", "f16", "partial_copies"])
def test_vulkan_gives_the_bits_of_a_lane_a_row(case):
    _same_bits(case, "vulkan")


def test_exp2_is_followed():
    """vyre-use-exp2 first: the scores carry log2(e), the recurrence exp2."""
    _same_bits("one_head", "interpreter", pre="vyre-use-exp2,")


def test_nan_and_inf_land_where_a_lane_a_row_puts_them():
    kwargs, blocking = CASES["one_head"]
    blocked = vx.lower_to_gpu(vx.flash_attention_2(**kwargs), optimize=_blocked(kwargs, blocking))
    per_lane = vx.lower_to_gpu(vx.flash_attention_2(**kwargs), optimize=_per_lane(blocking))
    inputs = _inputs(blocked)
    q, k, v = (inputs[n].reshape(-1, kwargs["head_dim"]) for n in "qkv")
    q[5, 3], k[7, 1], v[9, 4], v[40, 2] = np.nan, np.inf, -np.inf, np.inf
    got = vx.run(blocked, inputs)["out"]
    want = vx.run(per_lane, inputs)["out"]
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got).any() and np.isfinite(got).any()


@needs_mlir_opt
def test_mlir_opt_accepts_the_lowered_blocks():
    kwargs, blocking = CASES["soft_cap"]
    lowered = vx.lower_to_gpu(vx.flash_attention_2(**kwargs), optimize=_blocked(kwargs, blocking))
    printed = assert_mlir_opt_accepts(lowered)
    assert "gpu.shuffle" in printed and "vector.load" in printed


@needs_mlir_opt
@pytest.mark.parametrize("optimize", [
    "vyre-block-product{lanes=16 key_lanes=4 rows=2 keys=4 force=true},vyre-to-gpu{optimize=none}",
    "default",
])
def test_mlir_opt_accepts_the_blocks_at_none_and_default(optimize):
    """Unoptimised, and the H200's default plan (which takes the blocks for
    one head of 2048 rows)."""
    module = vx.flash_attention_2(seq_len=64 if optimize != "default" else 2048, head_dim=32)
    lowered = vx.lower_to_gpu(module, optimize=optimize,
                              **({"device": "h200"} if optimize == "default" else {}))
    assert "block_key_tile" in str(lowered)
    assert "gpu.shuffle" in assert_mlir_opt_accepts(lowered)


def _skeleton(**kwargs) -> vyre.TiledOnlineSoftmaxOp:
    module = vx.flash_attention_2(**kwargs)
    return next(s for s in module.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp))


@pytest.mark.parametrize("kwargs, reason", [
    (dict(seq_len=64, head_dim=32, mask_mod=lambda q, kv: kv <= q), "it has a mask"),
    (dict(seq_len=64, head_dim=32, score_mod=_drops_low_scores), "may be -inf"),
    (dict(seq_len=64, head_dim=32, return_lse=True), "log-sum-exp"),
    (dict(seq_len=48, head_dim=32), "the keys (seq_len) (48) is not a multiple of 32"),
    (dict(seq_len=64, head_dim=32, v_head_dim=48), "v_head_dim (48) is not a multiple of 32"),
    (dict(seq_len=64, head_dim=30), "head_dim (30) is not a multiple of 4"),
    (dict(seq_len=16, kv_len=64, head_dim=32), "item_count (16) is not a multiple of 32"),
])
def test_what_does_not_qualify_says_why(kwargs, reason):
    assert reason in problem(_skeleton(**kwargs), Blocking(lanes=128, key_lanes=8, rows=2, keys=4))


def test_a_workgroup_whose_rows_read_different_keys_does_not_qualify():
    """Rows of two heads in one workgroup: each reads its own keys."""
    op = _skeleton(seq_len=32, head_dim=32, num_heads=2)
    assert "read different rows" in problem(op, Blocking(lanes=128, key_lanes=4, rows=2, keys=8))


def test_forced_on_a_skeleton_that_does_not_qualify_is_an_error():
    module = vx.flash_attention_2(seq_len=64, head_dim=32, mask_mod=lambda q, kv: kv <= q)
    with pytest.raises(VyreError, match="cannot be expanded into register blocks: it has a mask"):
        vx.lower_to_gpu(module, optimize="vyre-block-product{force=true},vyre-to-gpu{optimize=exact}")


@pytest.mark.parametrize("kwargs, device, expected", [
    # one head of 4096 rows of 64 dims on the H200: 2 rows x 4 keys a lane
    (dict(seq_len=4096, head_dim=64), H200, Blocking(128, 8, 2, 4)),
    # ... of 1024 rows: the blocking that still gives 64 workgroups
    (dict(seq_len=1024, head_dim=64), H200, Blocking(128, 16, 2, 2)),
    (dict(seq_len=4096, head_dim=128), H200, Blocking(128, 16, 2, 2)),
    # two heads or more: a lane a row was as fast or faster
    (dict(seq_len=4096, head_dim=64, num_heads=2), H200, None),
    # no shuffles
    (dict(seq_len=4096, head_dim=64), GENERIC, None),
    # lavapipe's subgroups of 8 lanes, 32 KiB: 8 lanes a row at 64 dims only
    (dict(seq_len=4096, head_dim=64), LAVAPIPE, Blocking(128, 8, 2, 4)),
    (dict(seq_len=4096, head_dim=128), LAVAPIPE, None),
    # a mask keeps a lane a row
    (dict(seq_len=4096, head_dim=64, mask_mod=lambda q, kv: kv <= q), H200, None),
])
def test_the_plan_takes_register_blocks_on_small_grids(kwargs, device, expected):
    assert block_blocking(_skeleton(**kwargs), device) == expected


def test_the_plan_records_the_blocking_instead_of_a_plan():
    module = vx.flash_attention_2(seq_len=4096, head_dim=64)
    record_plans(module, H200)
    op = next(s for s in module.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp))
    assert Blocking.of(op.attributes[BLOCK_PRODUCT_ATTR]) == Blocking(128, 8, 2, 4)
    assert PLAN_ATTR not in op.attributes
    # recorded again for a device without shuffles: a plan, no blocking
    record_plans(module, GENERIC)
    assert BLOCK_PRODUCT_ATTR not in op.attributes and PLAN_ATTR in op.attributes


@needs_vulkan
def test_default_on_lavapipe_matches_the_oracle():
    """The default lowering for lavapipe's profile takes the blocks for one
    head of 2048 rows (64 workgroups); lavapipe runs that kernel within the
    fp32 tolerance of the oracle."""
    module = vx.flash_attention_2(seq_len=2048, head_dim=64)
    lowered = vx.lower_to_gpu(module, optimize="default", device="lavapipe")
    assert "block_key_tile" in str(lowered)
    inputs = _inputs(lowered)
    got = vx.run(lowered, inputs, backend="vulkan")["out"]
    want = vx.reference.flash_attention_2(inputs["q"], inputs["k"], inputs["v"])
    np.testing.assert_allclose(got, np.asarray(want).reshape(got.shape), atol=1e-5)


def test_too_few_rows_for_the_workgroups_keep_a_lane_a_row():
    """Below 64 workgroups of blocks (not measured) the plan keeps a lane a row."""
    assert block_blocking(_skeleton(seq_len=512, head_dim=64), H200) is None
