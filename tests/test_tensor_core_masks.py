"""vyre-tensor-cores with a mask: tiles the mask empties are skipped, full
ones run without mask code, partial ones give a dropped key's score -inf
(weight exactly 0); where a partial tile's values hold an infinity or a
NaN, they are cleared in workgroup memory before P V and added back, on
the lanes, for the keys the mask keeps, so a dropped key adds nothing even
against an infinite value, as in the oracle.  The interpreter runs it
against the oracle (NaN and infinities where the oracle puts them), the
plan takes masked kernels onto the matrix units, mlir-opt-22 verifies the
lowered IR and MLIR the SPIR-V; the H200 runs it through
tools/gpu_check.py (`--match causal`)."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import vyre_xdsl as vx
from requirements import assert_mlir_opt_accepts, needs_mlir_opt
from test_mma import _mlir_verifies_spirv, needs_mlir_translate
from vyre_xdsl import tuning
from vyre_xdsl.device import H200
from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import program_info
from vyre_xdsl.mma_elements import MATRIX_TOLERANCE, SPLIT_TOLERANCE
from vyre_xdsl.mma_layout import AccumulatorLayout
from vyre_xdsl.passes.tensor_cores import Tiling, problem
from vyre_xdsl.query_blocks import retiled_classes
from vyre_xdsl.spirv import emit_spirv_module


def _causal(q, k):
    return q >= k


def _window(q, k):
    return (q - k < 24) & (k - q < 24)


def _late_rows(q, k):  # rows before 40 keep no key: they output 0
    return q >= 40


def _softcap(score, q, k):
    return 20.0 * vx.tanh(score / 20.0)


HOST = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
BASE = "device=h200 force=true stage=true"
CASES = {
    "bf16_causal_prefetched": ("bf16", _causal, "keys=32 prefetch=true registers=true", "exact",
                               dict(seq_len=256, head_dim=32, num_heads=2)),
    "f16_window_registers": ("f16", _window, "registers=true", "exact",
                             dict(seq_len=128, head_dim=16, num_heads=2)),
    "f16_late_rows": ("f16", _late_rows, "", "exact", dict(seq_len=64, head_dim=16, num_heads=2)),
    "f16_causal_gqa_batch": ("f16", _causal, "row_tiles=2", "none",
                             dict(seq_len=128, head_dim=16, num_heads=4, num_kv_heads=2,
                                  batch=2)),
    "bf16_causal_softcap_default": ("bf16", _causal, "registers=true",
                                    "default device=h200",
                                    dict(seq_len=128, head_dim=16, num_heads=2,
                                         score_mod=_softcap)),
    "f32_causal_three_parts": ("f32", _causal, "registers=true pieces=3", "exact",
                               dict(seq_len=128, head_dim=16, num_heads=2)),
    "f32_window_two_parts": ("f32", _window, "keys=32 prefetch=true registers=true pieces=2",
                             "exact", dict(seq_len=256, head_dim=32)),
}


def _lowered(dtype, mask, options, level, shape):
    module = vx.flash_attention_2(tile_size=16, dtype=dtype, mask_mod=mask, **shape)
    return vx.lower_to_gpu(module, optimize=(
        f"vyre-tensor-cores{{{BASE} {options}}},vyre-to-gpu{{optimize={level}}}"))


def _inputs(lowered, dtype, non_finite: bool):
    rng = np.random.default_rng(3)
    inputs = {b.name: rng.standard_normal(b.shape).astype(HOST[dtype])
              for b in program_info(lowered).inputs}
    if non_finite:  # values that rows before them drop and rows after keep
        v = inputs["v"].reshape(-1, inputs["v"].shape[-1])
        v[5, 3], v[40, 2], v[-30, 7] = np.inf, -np.inf, np.nan
        v[-30, 8], v[-29, 8] = np.inf, -np.inf
    return inputs


def _oracle(dtype, mask, shape, inputs) -> np.ndarray:
    return np.asarray(vx.reference.flash_attention_2(
        inputs["q"], inputs["k"], inputs["v"], tile_size=16, dtype=dtype, mask_mod=mask,
        score_mod=shape.get("score_mod")), np.float32)


@pytest.mark.parametrize("non_finite", [False, True], ids=["finite", "inf_nan_values"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_masked_kernels_match_the_oracle(case, non_finite):
    dtype, mask, options, level, shape = CASES[case]
    lowered = _lowered(dtype, mask, options, level, shape)
    assert "gpu.subgroup_mma_compute" in str(lowered)
    inputs = _inputs(lowered, dtype, non_finite)
    got = vx.run(lowered, inputs)["out"].astype(np.float32)
    want = _oracle(dtype, mask, shape, inputs).reshape(got.shape)
    for where in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(where(got), where(want))
    finite = np.isfinite(want)
    assert (~finite).any() == non_finite
    pieces = re.search(r"pieces=(\d)", options)
    tolerance = SPLIT_TOLERANCE[int(pieces.group(1))] if pieces else MATRIX_TOLERANCE[dtype]
    error = np.abs(got[finite] - want[finite]).max() / np.abs(want[finite]).max()
    assert error <= tolerance
    if mask is _late_rows:  # rows that keep no key
        assert not got.reshape(2, 64, 16)[:, :40].any()


def test_without_clearing_a_dropped_keys_infinite_value_would_give_nan():
    """The clearing is what keeps the rows before an infinite value finite:
    P V on the matrix unit alone multiplies their weight 0 by it."""
    dtype, mask, options, level, shape = CASES["f16_late_rows"]
    lowered = _lowered(dtype, mask, options, level, shape)
    inputs = _inputs(lowered, dtype, True)
    out = vx.run(lowered, inputs)["out"].astype(np.float32).reshape(2, 64, 16)
    assert not out[0, :40].any()  # v[5] is infinite; rows 0-39 drop every key
    assert np.isposinf(out[0, 40:, 3]).all()  # ... the rows from 40 keep key 5


def test_a_workgroup_runs_only_the_tiles_its_rows_keep_keys_in():
    """Under a causal mask the workgroup of rows r..r+63 computes tiles 0
    to (r + 63) / 32: the tile loop's upper bound is chosen per workgroup
    (from the mask's classes), and its lower bound is 0 for all."""
    from xdsl.context import Context
    from xdsl.dialects import arith, scf

    from vyre_xdsl.dialects.gpu_mma import SubgroupMmaComputeOp
    from vyre_xdsl.passes.tensor_cores import TensorCoresPass

    module = vx.flash_attention_2(seq_len=256, head_dim=32, num_heads=2, tile_size=16,
                                  dtype="bf16", mask_mod=_causal)
    TensorCoresPass(device="h200", force=True, stage=True, keys=32, prefetch=True,
                    registers=True).apply(Context(), module)
    (loop,) = [op for op in module.walk() if isinstance(op, scf.ForOp)
               and any(isinstance(o, SubgroupMmaComputeOp) for o in op.body.walk())]
    assert isinstance(loop.lb.owner, arith.ConstantOp) and loop.lb.owner.value.value.data == 0
    upper = loop.ub.owner
    assert isinstance(upper, arith.SelectOp)  # a chain over the workgroup's rows
    chain = set()
    while isinstance(upper, arith.SelectOp):
        chain.add(upper.lhs.owner.value.value.data)
        upper = upper.rhs.owner
    chain.add(upper.value.value.data)
    assert chain == {2, 4, 6, 8}  # 64 rows a workgroup, tiles of 32 keys


def test_a_rarely_taken_paths_loops_stay_rolled():
    """Without the mask's rolled loops the unrolling copies the path that
    adds infinite values back into every element a lane holds."""
    dtype, mask, options, level, shape = CASES["bf16_causal_prefetched"]
    text = str(_lowered(dtype, mask, options, "exact", shape))
    assert text.count("vyre.rolled") == 8  # a loop over the keys for each of a lane's elements


@pytest.mark.parametrize("tile_size, keys, want", [
    (64, 16, [[2, 2, 2, 2, 1, 1, 1, 1]]),  # a tile's parts take its class
    (16, 32, [[0, 2, 2, 2]]),  # a tile of two takes their merged class
    (16, 16, [[0, 0, 2, 1, 1, 2, 2, 0]]),
])
def test_tile_classes_for_the_tilings_tiles(tile_size, keys, want):
    table = {64: [[2, 1]], 16: [[0, 0, 2, 1, 1, 2, 2, 0]]}[tile_size]
    assert retiled_classes(table, tile_size, keys, 128) == want


def test_retiled_classes_refuse_sizes_that_do_not_divide():
    assert retiled_classes([[1, 2, 0]], 48, 32, 144) is None


def _skeleton(**kwargs):
    module = vx.flash_attention_2(seq_len=128, head_dim=16, tile_size=16, **kwargs)
    return next(op for op in module.walk() if isinstance(op, vyre.TiledOnlineSoftmaxOp))


def test_a_mask_needs_staged_tiles():
    skeleton = _skeleton(dtype="f16", mask_mod=_causal)
    assert "a mask needs staged tiles (stage=true)" in problem(skeleton, H200, Tiling())
    assert problem(skeleton, H200, Tiling(stage=True)) is None


def test_a_mask_needs_a_layout_a_lane_can_place_its_elements_by():
    layout = H200.accumulator_layout
    positions = list(layout.positions())
    # two lanes' shares swapped: no longer a sum over the lane's bits
    share = layout.length
    positions[5 * share:6 * share], positions[6 * share:7 * share] = (
        positions[6 * share:7 * share], positions[5 * share:6 * share])
    swapped = AccumulatorLayout.from_positions(positions, layout.lanes)
    assert swapped.problem() is None and swapped.lane_bits is None
    device = replace(H200, accumulator_layout=swapped)
    reason = problem(_skeleton(dtype="f16", mask_mod=_causal), device, Tiling(stage=True))
    assert "does not place a lane's elements by the bits of its index" in reason
    assert layout.lane_bits == ((0, 0, 1, 2, 4), (2, 4, 0, 0, 0))


def test_a_mask_with_a_score_mod_that_drops_keys_is_refused():
    def drops(score, q, k):
        return vx.where(score < -1.0, -math.inf, score)

    reason = problem(_skeleton(dtype="f16", mask_mod=_causal, score_mod=drops), H200,
                     Tiling(stage=True))
    assert "scores that may be -inf" in reason


def test_the_refusal_names_the_fix():
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype="f16",
                                  mask_mod=_causal)
    with pytest.raises(VyreError, match=re.escape("a mask needs staged tiles (stage=true)")):
        vx.lower_to_gpu(module, optimize=(
            "vyre-tensor-cores{device=h200 force=true},vyre-to-gpu{optimize=exact}"))


@pytest.mark.parametrize("dtype, parts, dims, mask", [
    ("bf16", 0, 64, _causal), ("f16", 0, 128, _causal), ("bf16", 0, 64, _window),
    ("f32", 3, 64, _causal), ("f32", 2, 128, _causal),
])
def test_the_plan_takes_masked_kernels_onto_the_matrix_units(dtype, parts, dims, mask):
    skeleton = _skeleton_at(dtype, dims, mask)
    tiling = tuning.tensor_core_tiling(skeleton, H200, parts)
    assert tiling is not None and tiling.stage


def _skeleton_at(dtype, dims, mask):
    module = vx.flash_attention_2(seq_len=4096, head_dim=dims, num_heads=32, dtype=dtype,
                                  mask_mod=mask)
    return next(op for op in module.walk() if isinstance(op, vyre.TiledOnlineSoftmaxOp))


def test_f32_masks_stay_on_the_lanes_without_f32_parts():
    assert tuning.tensor_core_tiling(_skeleton_at("f32", 64, _causal), H200) is None


@needs_mlir_opt
@pytest.mark.parametrize("level", ["none", "exact", "default device=h200"])
def test_mlir_opt_accepts_the_masked_expansion(level):
    dtype, mask, options, _, shape = CASES["bf16_causal_prefetched"]
    module = vx.flash_attention_2(tile_size=16, dtype="f16", mask_mod=mask,
                                  **{k: v for k, v in shape.items()})
    lowered = vx.lower_to_gpu(module, optimize=(
        f"vyre-tensor-cores{{{BASE} {options}}},vyre-to-gpu{{optimize={level}}}"))
    assert_mlir_opt_accepts(lowered)


@needs_mlir_translate
@needs_mlir_opt
def test_mlir_verifies_the_masked_kernels_spirv(tmp_path):
    dtype, mask, options, level, shape = CASES["bf16_causal_prefetched"]
    spirv = emit_spirv_module(_lowered(dtype, mask, options, level, shape))
    text = _mlir_verifies_spirv(spirv.binary, tmp_path)
    assert "spirv.KHR.CooperativeMatrixMulAdd" in text
