"""vyre-block-rows: several items per invocation, bit-identical to one.

Every case compiles the same pipeline with and without the rows, runs both
on the interpreter and on lavapipe, and requires the same bits; the rows
must also share what they share (one load of a key for all of them)."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl import tuning
from vyre_xdsl.device import device_profile
from vyre_xdsl.errors import VyreError
from tests.requirements import assert_mlir_opt_accepts, needs_mlir_opt, needs_vulkan

BACKENDS = ["interpreter", pytest.param("vulkan", marks=needs_vulkan)]


def _causal(q, k):
    return q >= k


def _softcap(score, q, k):
    return 4.0 * vx.tanh(score / 4.0)


CASES = {
    # name: (builder, pipeline before the lowering, rows)
    "fa2": (lambda: vx.flash_attention_2(seq_len=128, head_dim=8, tile_size=16), "", 2),
    "fa2_four_rows_exp2": (lambda: vx.flash_attention_2(seq_len=128, head_dim=4, tile_size=32),
                           "vyre-use-exp2", 4),
    "causal_tile_classes": (lambda: vx.flash_attention_2(
        seq_len=256, head_dim=4, tile_size=32, mask_mod=_causal), "", 2),
    "gqa_bottom_right_softcap": (lambda: vx.flash_attention_2(
        seq_len=32, kv_len=80, num_heads=4, num_kv_heads=2, head_dim=4, tile_size=16,
        score_mod=_softcap, mask_mod=_causal), "", 4),
    "gqa_decode_workgroup_merge": (lambda: vx.flash_attention_2(
        seq_len=1, kv_len=128, batch=8, num_heads=8, num_kv_heads=2, head_dim=8, tile_size=16),
        "vyre-split-kv{splits=4 merge=workgroup}", 4),
    "split_dims_kernel_merge": (lambda: vx.flash_attention_2(
        seq_len=64, head_dim=16, num_heads=2, tile_size=16),
        "vyre-split-kv{splits=2 merge=kernel},vyre-split-head-dim{parts=2}", 2),
    "ragged_paged_lse": (lambda: vx.flash_attention_2(
        seq_len=4, kv_len=40, batch=2, num_heads=2, head_dim=4, tile_size=8,
        kv_lens=True, page_size=8, num_pages=12, return_lse=True), "", 4),
    "staged": (lambda: vx.flash_attention_2(seq_len=128, head_dim=8, tile_size=16),
               "vyre-stage-kv-tiles", 2),
    "bf16_v_head_dim": (lambda: vx.flash_attention_2(
        seq_len=64, head_dim=8, v_head_dim=4, num_heads=2, tile_size=16, dtype="bf16"), "", 2),
    "mla_paged_ragged_bf16": (lambda: vx.mla_decode(
        seq_len=48, num_heads=8, head_dim=8, kv_lora_rank=16, qk_rope_head_dim=4,
        tile_size=16, batch=2, kv_lens=True, page_size=16, num_pages=8, dtype="bf16"),
        "vyre-absorb-mla{kernels=3}", 4),
    "mla_batch": (lambda: vx.mla_decode(seq_len=64, num_heads=16, head_dim=8, kv_lora_rank=16,
                                        qk_rope_head_dim=4, tile_size=16, batch=4),
                  "vyre-absorb-mla{kernels=3},vyre-split-kv{splits=4 merge=workgroup}", 4),
}


def _lowered(build, before: str, rows: int, level: str = "exact"):
    passes = [p for p in (before, f"vyre-block-rows{{rows={rows}}}" if rows > 1 else "") if p]
    passes.append(f"vyre-to-gpu{{optimize={level}}}")
    return vx.lower_to_gpu(build(), optimize=",".join(passes))


def _inputs(lowered, rng):
    from vyre_xdsl.kernel_info import program_info

    arrays = {}
    for buffer in program_info(lowered).inputs:
        if buffer.dtype == "i32":
            high = {"block_table": 8, "kv_lens": 49}.get(buffer.name, 41)
            arrays[buffer.name] = rng.integers(0, high, buffer.shape).astype(np.int32)
        else:
            values = rng.standard_normal(buffer.shape).astype(np.float32)
            arrays[buffer.name] = values.astype(buffer.numpy_dtype)
    return arrays


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_rows_are_bit_identical_to_one_row_each(case, backend):
    build, before, rows = CASES[case]
    one = _lowered(build, before, 1)
    wide = _lowered(build, before, rows)
    inputs = _inputs(one, np.random.default_rng(7))
    expected = vx.run(one, inputs, backend=backend)
    got = vx.run(wide, inputs, backend=backend)
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=f"{case}: {name}")
        assert np.isfinite(value).any()


def _loads_of(lowered, buffer: str) -> int:
    return str(lowered).count(f"memref.load %{buffer}[") + str(lowered).count(
        f"vector.load %{buffer}[")


def test_rows_share_the_loads_of_their_keys_and_values():
    build = lambda: vx.flash_attention_2(seq_len=128, head_dim=8, tile_size=16)  # noqa: E731
    one, wide = _lowered(build, "", 1), _lowered(build, "", 4)
    for buffer in ("k", "v"):
        assert _loads_of(wide, buffer) == _loads_of(one, buffer) > 0
    assert _loads_of(wide, "q") == 4 * _loads_of(one, "q")


def test_shared_staged_tile_is_not_copied_per_row():
    build = lambda: vx.flash_attention_2(seq_len=128, head_dim=8, tile_size=16)  # noqa: E731
    wide = str(_lowered(build, "vyre-stage-kv-tiles", 2))
    assert "q_scratch_row1" in wide and "o_acc_row1" in wide
    assert "kv_tile_row1" not in wide


def test_plan_gives_long_rows_over_lanes_two_rows_on_large_grids():
    h200 = device_profile("h200")
    long_rows = vx.flash_attention_2(seq_len=4096, head_dim=128, num_heads=32)
    (plan,) = tuning.module_plans(long_rows, h200).values()
    assert (plan.dim_parts, plan.rows) == (2, tuning.LONG_ROW_BLOCK)
    for other in (vx.flash_attention_2(seq_len=4096, head_dim=64, num_heads=32),
                  vx.flash_attention_2(seq_len=4096, head_dim=128, num_heads=1),
                  vx.flash_attention_2(seq_len=4096, head_dim=128, num_heads=32,
                                       mask_mod=_causal)):
        (plan,) = tuning.module_plans(other, h200).values()
        assert plan.rows == 1


def test_rows_that_do_not_divide_the_items_are_refused():
    with pytest.raises(VyreError, match=r"cannot run 3 rows a lane: rows \(3\) must divide"):
        _lowered(lambda: vx.flash_attention_2(seq_len=128, head_dim=8), "", 3)


def test_rows_that_leave_a_workgroup_merge_lanes_short_are_refused():
    gqa = lambda: vx.flash_attention_2(  # noqa: E731
        seq_len=1, kv_len=128, batch=2, num_heads=8, num_kv_heads=2, head_dim=8, tile_size=16)
    with pytest.raises(VyreError, match="16 invocations do not fill workgroups of 64"):
        _lowered(gqa, "vyre-split-kv{splits=4 merge=workgroup}", 4)


def _random_case(rng):
    """A FlashAttention-2 module, a pipeline before the lowering and a row
    count that divides its items, drawn from shapes, masks, score mods,
    GQA, bottom-right queries and the other vyre-level rewrites."""
    heads = int(rng.choice([1, 2, 4]))
    kv_heads = int(rng.choice([h for h in (1, 2, 4) if heads % h == 0]))
    seq = int(rng.choice([8, 16, 24, 32, 64]))
    kv_len = seq + int(rng.choice([0, 0, 8, 17]))
    head_dim = int(rng.choice([1, 3, 4, 8, 16]))
    tile = int(rng.choice([4, 8, 16]))
    mask = [None, _causal, lambda q, k: k + 8 > q][int(rng.integers(3))]
    score = [None, _softcap][int(rng.integers(2))]
    items = heads * seq
    rows = int(rng.choice([r for r in (2, 4, 8) if items % r == 0]))
    passes = []
    if head_dim % 8 == 0 and rng.random() < 0.5:
        passes.append("vyre-split-head-dim{parts=2}")
    elif mask is None and -(-kv_len // tile) >= 2 and rng.random() < 0.5:
        passes.insert(0, "vyre-split-kv{splits=2 merge=kernel}")
    if rng.random() < 0.5:
        passes.insert(0, "vyre-stage-kv-tiles")

    def build():
        return vx.flash_attention_2(
            seq_len=seq, kv_len=kv_len, num_heads=heads, num_kv_heads=kv_heads,
            head_dim=head_dim, tile_size=tile, mask_mod=mask, score_mod=score)

    return build, ",".join(passes), rows


@pytest.mark.parametrize("seed", range(12))
def test_random_kernels_are_bit_identical_with_rows(seed, fuzz_stats):
    build, before, rows = _random_case(np.random.default_rng(1000 + seed))
    one = _lowered(build, before, 1)
    wide = _lowered(build, before, rows)
    inputs = _inputs(one, np.random.default_rng(seed))
    expected = vx.run(one, inputs, backend="interpreter")["out"]
    got = vx.run(wide, inputs, backend="interpreter")["out"]
    np.testing.assert_array_equal(got, expected, err_msg=f"{before} rows={rows}")
    fuzz_stats["block rows: random kernels bit-identical"] += 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_given_before_the_default_are_kept_and_not_split(backend):
    """`vyre-block-rows{rows=2},vyre-to-gpu` (default): the plan keeps the
    rows and leaves the kernel unsplit, and the result is the default's."""
    gqa = lambda: vx.flash_attention_2(  # noqa: E731
        seq_len=1, kv_len=256, batch=2, num_heads=8, num_kv_heads=2, head_dim=8, tile_size=16)
    forced = vx.lower_to_gpu(gqa(), optimize="vyre-block-rows{rows=4},vyre-to-gpu")
    assert "kv_splits = 1," in str(forced) and "o_acc_row3" in str(forced)
    default = vx.lower_to_gpu(gqa())
    inputs = _inputs(default, np.random.default_rng(3))
    got = vx.run(forced, inputs, backend=backend)["out"]
    want = vx.reference.flash_attention_2(
        inputs["q"], inputs["k"], inputs["v"], tile_size=16)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=0,
                               atol=1e-5 * np.abs(want).max())


@needs_mlir_opt
@pytest.mark.parametrize("level", ["none", "exact", "default"])
def test_mlir_opt_accepts_kernels_with_rows(level):
    """Rows with a staged tile, a causal mask and kv splits merged in the
    workgroup, at every level."""
    causal = lambda: vx.flash_attention_2(  # noqa: E731
        seq_len=256, head_dim=8, tile_size=16, mask_mod=_causal)
    decode = lambda: vx.flash_attention_2(  # noqa: E731
        seq_len=1, kv_len=128, batch=8, num_heads=8, num_kv_heads=2, head_dim=8, tile_size=16)
    for build, before in ((causal, "vyre-stage-kv-tiles"),
                          (decode, "vyre-split-kv{splits=4 merge=workgroup}")):
        lowered = _lowered(build, before, 2 if build is causal else 4, level)
        assert "_row1" in str(lowered)
        assert_mlir_opt_accepts(lowered)


@needs_mlir_opt
def test_mlir_opt_accepts_the_defaults_own_rows():
    """The H200 plan gives 32 heads of 128 dims two rows a lane."""
    module = vx.flash_attention_2(seq_len=4096, head_dim=128, num_heads=32)
    lowered = vx.lower_to_gpu(module, device="h200")
    assert "o_acc_row1" in str(lowered)
    assert_mlir_opt_accepts(lowered)
