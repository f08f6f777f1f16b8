"""vyre-tensor-cores{pieces=N}: FlashAttention-2 in f32 on bf16 matrix
units, each operand split into N bf16 parts and the products of parts i
and j with i + j < N summed.  The interpreter runs it against float64
attention within SPLIT_TOLERANCE (three parts keep f32's 24 bits, two
keep 16); NaN and infinities land where the f32 oracle puts them;
mlir-opt-22 verifies the lowered IR and MLIR's SPIR-V deserialiser the
emitted module.  The H200 runs it through tools/gpu_check.py (`--match
f32`)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import vyre_xdsl as vx
from requirements import assert_mlir_opt_accepts, needs_mlir_opt
from test_mma import _mlir_verifies_spirv, needs_mlir_translate
from vyre_xdsl.device import H200
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import program_info
from vyre_xdsl.mma_elements import SPLIT_TOLERANCE
from vyre_xdsl.passes.tensor_cores import Tiling, problem
from vyre_xdsl.spirv import emit_spirv_module

SHAPE = dict(seq_len=128, head_dim=32, num_heads=2)
STAGED = "stage=true registers=true"


def _pipeline(options: str, level: str = "exact") -> str:
    return (f"vyre-tensor-cores{{device=h200 force=true {STAGED} {options}}},"
            f"vyre-to-gpu{{optimize={level}}}")


def _run(options: str, level: str = "exact", shape=SHAPE, place=None):
    module = vx.flash_attention_2(tile_size=16, **shape)
    lowered = vx.lower_to_gpu(module, optimize=_pipeline(options, level))
    rng = np.random.default_rng(1)
    inputs = {b.name: rng.standard_normal(b.shape).astype(np.float32)
              for b in program_info(lowered).inputs}
    if place:
        place(inputs)
    return lowered, inputs, vx.run(lowered, inputs)["out"]


def _exact(inputs, shape) -> np.ndarray:
    """Attention in float64 (no score_mod, no mask)."""
    heads, kv_heads = shape["num_heads"], shape.get("num_kv_heads", shape["num_heads"])
    q = inputs["q"].astype(np.float64).reshape(heads, shape["seq_len"], -1)
    k, v = (inputs[n].astype(np.float64).reshape(kv_heads, shape["seq_len"], -1) for n in "kv")
    k, v = (np.repeat(x, heads // kv_heads, axis=0) for x in (k, v))
    s = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p @ v) / p.sum(-1, keepdims=True)


def _error(got, want) -> float:
    return float(np.abs(got.reshape(want.shape) - want).max() / np.abs(want).max())


@pytest.mark.parametrize("options, level, shape", [
    ("pieces=3", "exact", SHAPE),
    ("pieces=3 row_tiles=2", "none", SHAPE),
    ("pieces=3 keys=32", "default", dict(SHAPE, num_heads=4, num_kv_heads=2)),
    ("pieces=2 prefetch=true keys=32", "exact", SHAPE),
    ("pieces=2 row_tiles=2", "exact", SHAPE),
])
def test_split_operands_match_float64_attention_within_the_tolerance(options, level, shape):
    lowered, inputs, got = _run(options, level, shape)
    assert "gpu.subgroup_mma_compute" in str(lowered)
    pieces = int(re.search(r"pieces=(\d)", options).group(1))
    assert _error(got, _exact(inputs, shape)) <= SPLIT_TOLERANCE[pieces]


def test_three_parts_are_about_as_close_as_the_f32_oracle_and_two_are_not():
    """Three parts keep every bit of an f32 operand: within a few times the
    f32 oracle's own error; two keep 16 bits, tens of times more."""
    _, inputs, three = _run("pieces=3")
    _, _, two = _run("pieces=2")
    exact = _exact(inputs, SHAPE)
    oracle = np.asarray(vx.reference.flash_attention_2(inputs["q"], inputs["k"], inputs["v"],
                                                       tile_size=16))
    own = _error(oracle, exact)
    assert _error(three, exact) <= 2 * own
    assert _error(two, exact) >= 8 * own


def test_the_products_are_the_pairs_of_parts_below_the_count():
    assert Tiling(pieces=1).pairs == [(0, 0)]
    assert Tiling(pieces=2).pairs == [(0, 1), (1, 0), (0, 0)]
    assert Tiling(pieces=3).pairs == [(0, 2), (1, 1), (2, 0), (0, 1), (1, 0), (0, 0)]
    lowered, _, _ = _run("pieces=3")
    # per 16 keys: S over head_dim 32 (2 blocks) and P V over 32 (2 blocks), 6 products each
    assert str(lowered).count("gpu.subgroup_mma_compute") == 4 * 6


def _non_finite(case: str):
    def place(inputs):
        q, k, v = (inputs[n].reshape(-1, SHAPE["head_dim"]) for n in "qkv")
        if case == "nan_query_inf_keys":
            q[5, 3], k[7, 1], k[130, 4] = np.nan, np.inf, -np.inf
        elif case == "inf_values_under_exact_weights":
            # weights that bf16 holds exactly (their later parts 0) times inf
            q[:] = 0.0
            v[9, 4], v[200, 7] = np.inf, -np.inf
        else:  # a negative query element exact in bf16, an infinite key element
            q[3, 0], k[12, 0] = -1.5, np.inf
            v[40, 2] = np.inf
    return place


@pytest.mark.parametrize("case", ["nan_query_inf_keys", "inf_values_under_exact_weights",
                                  "negative_exact_query_inf_key"])
def test_nan_and_inf_land_where_the_oracle_puts_them(case):
    """A part that is 0 takes the smallest normal with its value's sign, so
    an infinite operand times it is the infinity the first part gives."""
    _, inputs, got = _run("pieces=3", place=_non_finite(case))
    want = np.asarray(vx.reference.flash_attention_2(inputs["q"], inputs["k"], inputs["v"],
                                                     tile_size=16)).reshape(got.shape)
    assert np.isnan(want).any() or np.isinf(want).any()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    assert np.isfinite(got[finite]).all()
    assert np.abs(got[finite] - want[finite]).max() / np.abs(want[finite]).max() \
        <= SPLIT_TOLERANCE[3]


def _skeleton(**kwargs):
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, **kwargs)
    (skeleton,) = [op for op in module.walk() if op.name == "vyre.tiled_online_softmax"]
    return skeleton


@pytest.mark.parametrize("kwargs, tiling, reason", [
    ({}, Tiling(), "not q f32, k f32, v f32, out f32 (f32 ones run split into bf16 parts"),
    ({}, Tiling(pieces=4, stage=True, registers=True), "split into 2 or 3 bf16 parts, not 4"),
    ({}, Tiling(pieces=3, registers=True), "need staged K and V tiles"),
    ({}, Tiling(pieces=3, stage=True), "need staged K and V tiles"),
    ({}, Tiling(pieces=3, stage=True, registers=True, skip_rescale=True), "no skip_rescale"),
    ({"dtype": "bf16"}, Tiling(pieces=2, stage=True, registers=True),
     "pieces=2 splits f32 operands, not q bf16"),
])
def test_what_cannot_be_split_is_refused_with_the_reason(kwargs, tiling, reason):
    assert reason in problem(_skeleton(**kwargs), H200, tiling)


def test_a_device_without_bf16_matrices_cannot_split():
    from dataclasses import replace

    no_bf16 = replace(H200, bfloat16_matrix_shapes=())
    assert "no 16x16x16 bf16 cooperative matrices" in problem(
        _skeleton(), no_bf16, Tiling(pieces=3, stage=True, registers=True))


def test_the_pass_option_refuses_with_the_reason():
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16)
    with pytest.raises(VyreError, match="split into 2 or 3 bf16 parts, not 5"):
        vx.lower_to_gpu(module, optimize=_pipeline("pieces=5"))


@needs_mlir_opt
@pytest.mark.parametrize("level", ["none", "exact", "default device=h200"])
def test_mlir_opt_accepts_the_split_kernel(level):
    module = vx.flash_attention_2(tile_size=16, **SHAPE)
    printed = assert_mlir_opt_accepts(vx.lower_to_gpu(
        module, optimize=_pipeline("pieces=3 prefetch=true keys=32", level)))
    # f32 blocks of q, k and v loaded as accumulators and split into bf16 parts
    assert re.search(r'memref<\d+xf32.*> -> !gpu.mma_matrix<16x16xf32, "COp">', printed)
    assert "arith.truncf" in printed


@needs_mlir_translate
@needs_mlir_opt
def test_spirv_of_the_split_kernel_verifies_in_mlir(tmp_path):
    """f32 blocks loaded as accumulators, split, inserted into bf16 A
    operands and stored to bf16 staged tiles."""
    module = vx.flash_attention_2(tile_size=16, **SHAPE)
    spirv = emit_spirv_module(vx.lower_to_gpu(module, optimize=_pipeline("pieces=3")))
    text = _mlir_verifies_spirv(spirv.binary, tmp_path)
    assert "!spirv.coopmatrix<16x16xbf16, Subgroup, MatrixA>" in text
    assert "!spirv.coopmatrix<16x16xf32, Subgroup, MatrixAcc>" in text


def _plan(parts: int, **shape):
    from vyre_xdsl.dialects.plan import TENSOR_CORES_ATTR
    from vyre_xdsl.tuning import record_plans

    module = vx.flash_attention_2(**shape)
    record_plans(module, H200, parts)
    (skeleton,) = [op for op in module.walk() if op.name == "vyre.tiled_online_softmax"]
    attr = skeleton.attributes.get(TENSOR_CORES_ATTR)
    return None if attr is None else Tiling.of(attr)


@pytest.mark.parametrize("parts, shape, pieces", [
    (0, dict(seq_len=4096, head_dim=64, num_heads=32), None),
    (3, dict(seq_len=4096, head_dim=64, num_heads=32), 3),
    (2, dict(seq_len=4096, head_dim=64, num_heads=32), 2),
    (3, dict(seq_len=1024, head_dim=64, num_heads=32, batch=4), 3),
    # slower than the lanes there (docs/performance.md, "Sixteenth session")
    (3, dict(seq_len=4096, head_dim=128, num_heads=32), None),
    (2, dict(seq_len=4096, head_dim=128, num_heads=32), 2),
    (3, dict(seq_len=4096, head_dim=64, num_heads=1), None),
    # a mask too (its partial tiles masked: tests/test_tensor_core_masks.py)
    (3, dict(seq_len=4096, head_dim=64, num_heads=32, mask_mod=lambda q, k: k <= q), 3),
])
def test_the_plan_splits_f32_only_when_asked_and_where_it_was_faster(parts, shape, pieces):
    tiling = _plan(parts, **shape)
    assert (tiling and tiling.pieces) == pieces
    if tiling:
        assert (tiling.keys, tiling.row_tiles, tiling.stage, tiling.registers) == (16, 2, True,
                                                                                   True)
        assert tiling.prefetch == (pieces == 2)
        # the tile loop rolled without a mask: 4% (three parts) and 22% (two
        # at 128 dims) faster, 1% slower causal (docs/performance.md)
        assert tiling.rolled == ("mask_mod" not in shape)


def test_the_recorded_tiling_keeps_its_parts_through_the_printed_plan():
    from xdsl.parser import Parser

    from vyre_xdsl.passes.plan import PlanPass

    module = vx.flash_attention_2(seq_len=4096, head_dim=64, num_heads=32)
    ctx = vx.make_context()
    PlanPass(device="h200", f32_parts=3).apply(ctx, module)
    text = str(module)
    assert "skip_rescale = false, rolled = true, pieces = 3, unroll = 1>" in text
    assert str(Parser(ctx, text).parse_module()) == text


@pytest.mark.parametrize("pipeline", ["vyre-to-gpu{device=h200 f32_parts=1}",
                                      "vyre-plan{device=h200 f32_parts=4}"])
def test_other_part_counts_are_refused(pipeline):
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16)
    with pytest.raises(VyreError, match="f32_parts must be 0 .f32 on the lanes., 2 or 3"):
        vx.lower_to_gpu(module, optimize=pipeline)


@needs_mlir_opt
def test_mlir_opt_accepts_the_default_plan_with_split_f32():
    module = vx.flash_attention_2(seq_len=4096, head_dim=64, num_heads=32)
    printed = assert_mlir_opt_accepts(vx.lower_to_gpu(
        module, optimize="vyre-to-gpu{device=h200 f32_parts=3}"))
    assert printed.count("gpu.subgroup_mma_compute") == 96


def test_a_soft_cap_runs_split_within_the_tolerance():
    """A score_mod that never drops a key (a soft-cap) qualifies: it runs on
    each lane's elements of S, as with 16-bit operands."""
    def cap(score, q, k):
        return 20.0 * vx.tanh(score / 20.0)

    module = vx.flash_attention_2(tile_size=16, score_mod=cap, **SHAPE)
    lowered = vx.lower_to_gpu(module, optimize=_pipeline("pieces=3 row_tiles=2"))
    assert "gpu.subgroup_mma_compute" in str(lowered) and "math.tanh" in str(lowered)
    rng = np.random.default_rng(2)
    inputs = {b.name: 3 * rng.standard_normal(b.shape).astype(np.float32)
              for b in program_info(lowered).inputs}
    got = vx.run(lowered, inputs)["out"]
    want = np.asarray(vx.reference.flash_attention_2(inputs["q"], inputs["k"], inputs["v"],
                                                     tile_size=16, score_mod=cap))
    assert _error(got, want.astype(np.float64)) <= SPLIT_TOLERANCE[3]


def test_lower_to_gpu_and_compile_take_f32_parts():
    """The keyword is the pipeline option: the same lowered IR."""
    module = vx.flash_attention_2(seq_len=4096, head_dim=64, num_heads=32)
    by_keyword = vx.lower_to_gpu(module, device="h200", f32_parts=3)
    by_pipeline = vx.lower_to_gpu(module, optimize="vyre-to-gpu{device=h200 f32_parts=3}")
    assert str(by_keyword) == str(by_pipeline)
    assert "gpu.subgroup_mma_compute" in str(by_keyword)
    # a grid too small to split stays on the lanes: the plan's bits without it
    small = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16)
    rng = np.random.default_rng(3)
    inputs = {n: rng.standard_normal((64, 16)).astype(np.float32) for n in "qkv"}
    got = vx.compile(small, device="h200", f32_parts=3)(inputs)["out"]
    np.testing.assert_array_equal(got, vx.compile(small, device="h200")(inputs)["out"])
    # a numpy integer, as every dimension takes one
    assert str(vx.lower_to_gpu(module, device="h200", f32_parts=np.int64(3))) == str(by_keyword)


@pytest.mark.parametrize("kwargs, message", [
    (dict(f32_parts=1), "f32_parts must be 0 (f32 on the lanes), 2 or 3"),
    (dict(f32_parts=True), "f32_parts must be an int (0, 2 or 3), got bool"),
    (dict(f32_parts="3"), "f32_parts must be an int (0, 2 or 3), got str"),
    (dict(f32_parts=3, optimize="exact"), "f32_parts=3 applies to optimize='default'"),
    (dict(f32_parts=2, optimize="vyre-to-gpu{device=h200}"),
     "name it there: 'vyre-to-gpu{f32_parts=2}'"),
])
def test_bad_f32_parts_are_refused_with_the_fix(kwargs, message):
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16)
    with pytest.raises(VyreError, match=re.escape(message)):
        vx.lower_to_gpu(module, **kwargs)


def test_a_lowered_module_refuses_f32_parts():
    lowered = vx.lower_to_gpu(vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16))
    with pytest.raises(VyreError, match="f32_parts=3 applies to vyre IR"):
        vx.compile(lowered, f32_parts=3)
