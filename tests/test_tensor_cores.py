"""vyre-tensor-cores: FlashAttention-2 in f16 on subgroup matrix ops.

The interpreter runs the expansion against the oracle within the declared
tolerance (the matrix unit's order of the dot products' sums, and the
weights read in f16 by P·V); mlir-opt-22 verifies the lowered IR, and
MLIR's SPIR-V deserialiser the emitted cooperative matrices.  The H200
runs it through tools/gpu_check.py (`--match tensor`)."""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import scf

import vyre_xdsl as vx
from requirements import assert_mlir_opt_accepts, needs_mlir_opt, needs_vulkan
from test_mma import _mlir_verifies_spirv, needs_mlir_translate
from vyre_xdsl.device import H200
from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import VyreError
from vyre_xdsl.mma_elements import MATRIX_TOLERANCE, conflict_free_stride
from vyre_xdsl.passes.tensor_cores import Tiling, problem
from vyre_xdsl.spirv import emit_spirv_module
from vyre_xdsl.spirv.spec import Capability

TOLERANCE = MATRIX_TOLERANCE["f16"]


def _softcap(score, q, k):
    return 20.0 * vx.tanh(score / 20.0)


def _drops_low_scores(score, q, k):
    return vx.where(score < -1.0, -math.inf, score)


CASES = {
    "d16": dict(seq_len=64, head_dim=16),
    "d32_gqa": dict(seq_len=64, head_dim=32, num_heads=4, num_kv_heads=2),
    "d16_v32_longer_keys": dict(seq_len=64, kv_len=128, head_dim=16, v_head_dim=32),
    "batch": dict(seq_len=64, head_dim=16, batch=2),
    # the scores fragment's epilogue (the cap) runs on each lane's elements
    "soft_cap": dict(seq_len=64, head_dim=16, num_heads=2, score_mod=_softcap),
}
PIPELINES = {
    "none": "vyre-tensor-cores{device=h200 force=true},vyre-to-gpu{optimize=none}",
    "exact": "vyre-tensor-cores{device=h200 force=true},vyre-to-gpu{optimize=exact}",
    "default_h200": "vyre-tensor-cores{device=h200 force=true},vyre-to-gpu{optimize=default device=h200}",
    "exact_keys32": "vyre-tensor-cores{device=h200 force=true keys=32},vyre-to-gpu{optimize=exact}",
    "none_keys64": "vyre-tensor-cores{device=h200 force=true keys=64},vyre-to-gpu{optimize=none}",
    "exact_staged": "vyre-tensor-cores{device=h200 force=true stage=true},vyre-to-gpu{optimize=exact}",
    "none_staged_keys32":
        "vyre-tensor-cores{device=h200 force=true stage=true keys=32},vyre-to-gpu{optimize=none}",
    "exact_registers":
        "vyre-tensor-cores{device=h200 force=true registers=true},vyre-to-gpu{optimize=exact}",
    "default_h200_staged_registers_keys32": "vyre-tensor-cores{device=h200 force=true stage=true "
        "registers=true keys=32},vyre-to-gpu{optimize=default device=h200}",
}


def _inputs(module, seed: int = 0) -> dict[str, np.ndarray]:
    from vyre_xdsl.kernel_info import program_info

    rng = np.random.default_rng(seed)
    return {b.name: rng.standard_normal(b.shape).astype(np.float16)
            for b in program_info(module).inputs}


def _oracle(kwargs: dict, inputs) -> np.ndarray:
    ref = vx.reference.flash_attention_2(
        inputs["q"], inputs["k"], inputs["v"], tile_size=16, dtype="f16",
        score_mod=kwargs.get("score_mod"))
    return np.asarray(ref, np.float32)


@pytest.mark.parametrize("level", sorted(PIPELINES))
@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreter_matches_the_oracle_within_the_tolerance(case, level):
    kwargs = CASES[case]
    module = vx.flash_attention_2(tile_size=16, dtype="f16", **kwargs)
    lowered = vx.lower_to_gpu(module, optimize=PIPELINES[level])
    assert "gpu.subgroup_mma_compute" in str(lowered)
    inputs = _inputs(lowered)
    got = vx.run(lowered, inputs)["out"].astype(np.float32)
    want = _oracle(kwargs, inputs).reshape(got.shape)
    error = np.abs(got - want).max() / np.abs(want).max()
    assert error <= TOLERANCE


LONG = dict(seq_len=128, head_dim=32, num_heads=2)


@pytest.mark.parametrize("kwargs, options", [
    (CASES["d32_gqa"], "row_tiles=2"), (CASES["d32_gqa"], "row_tiles=4 keys=32"),
    (LONG, "row_tiles=2"), (LONG, "row_tiles=2 stage=true keys=32"),
    (LONG, "stage=true keys=64"), (LONG, "stage=true prefetch=true keys=32"),
    (LONG, "row_tiles=2 stage=true prefetch=true keys=64"),
    (dict(seq_len=256, head_dim=64, num_heads=1),
     "row_tiles=4 stage=true prefetch=true registers=true"),
    (LONG, "row_tiles=2 keys=32 registers=true"),
    (LONG, "stage_q=true"),
    (dict(seq_len=256, head_dim=64, num_heads=1),
     "row_tiles=4 keys=32 stage=true prefetch=true registers=true stage_q=true"),
])
def test_row_blocks_of_a_subgroup_match_the_oracle(kwargs, options):
    """A subgroup owning 32 or 64 rows reads each K and V block once for
    all of them (staged: a workgroup's 128 or 256 rows share them)."""
    module = vx.flash_attention_2(tile_size=16, dtype="f16", **kwargs)
    pipeline = f"vyre-tensor-cores{{device=h200 force=true {options}}},vyre-to-gpu{{optimize=exact}}"
    lowered = vx.lower_to_gpu(module, optimize=pipeline)
    inputs = _inputs(lowered)
    got = vx.run(lowered, inputs)["out"].astype(np.float32)
    want = _oracle(kwargs, inputs).reshape(got.shape)
    assert np.abs(got - want).max() / np.abs(want).max() <= TOLERANCE


@pytest.mark.parametrize("width, stride", [
    (16, 24), (32, 40), (64, 72), (128, 136), (256, 264),  # even 16-byte rows: padded
    (8, 8), (24, 24), (40, 40),  # an odd number of 16 bytes apart already
    (12, 12),  # rows not 16-byte aligned: left as they are
])
def test_staged_rows_are_an_odd_number_of_16_bytes_apart(width, stride):
    assert conflict_free_stride(width) == stride


def test_padded_staged_tiles_change_no_bit_of_the_result(monkeypatch):
    """The padding moves the staged rows, not the sums: the output is
    bit-identical to the one with rows `width` apart."""
    import vyre_xdsl.passes.tensor_cores as tensor_cores

    kwargs = dict(seq_len=256, head_dim=64, num_heads=1)
    pipeline = ("vyre-tensor-cores{device=h200 force=true row_tiles=4 keys=32 stage=true "
                "prefetch=true registers=true},vyre-to-gpu{optimize=exact}")

    def run():
        lowered = vx.lower_to_gpu(vx.flash_attention_2(tile_size=16, dtype="f16", **kwargs),
                                  optimize=pipeline)
        return lowered, vx.run(lowered, _inputs(lowered))["out"]

    padded, got = run()
    assert "memref<4608xf16, 3 : i64>" in str(padded)  # 2 x 32 keys x 72
    monkeypatch.setattr(tensor_cores, "conflict_free_stride", lambda width: width)
    unpadded, want = run()
    assert "memref<4096xf16, 3 : i64>" in str(unpadded)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("options", ["", "registers=true"])
def test_rows_whose_max_stays_skip_the_rescale_and_change_no_bit(options):
    """skip_rescale: a subgroup multiplies O by its rows' rescales only
    where one is not 1.  The first 16 query rows meet their largest score
    at key 0, so their subgroup skips the rescale from the second tile on
    while the others' maxima still move: the output equals, bit for bit,
    that of the kernel that always multiplies."""
    module = vx.flash_attention_2(tile_size=16, dtype="f16", seq_len=128, head_dim=16)

    def lowered(skip: str):
        return vx.lower_to_gpu(module, optimize=(
            f"vyre-tensor-cores{{device=h200 force=true {options} skip_rescale={skip}}},"
            f"vyre-to-gpu{{optimize=exact}}"))

    skipping, always = lowered("true"), lowered("false")
    assert str(skipping).count("scf.if") > str(always).count("scf.if")
    inputs = _inputs(always, seed=3)
    inputs["q"][..., :16, :] = 2.0
    inputs["k"][..., 0, :] = 2.0  # a score of 64 against normal ones
    got = vx.run(skipping, inputs)["out"]
    np.testing.assert_array_equal(got.view(np.uint16), vx.run(always, inputs)["out"].view(np.uint16))
    np.testing.assert_allclose(got.astype(np.float32), _oracle({}, inputs), atol=TOLERANCE * 64)


@pytest.mark.parametrize("head_dim, skip", [(64, False), (128, True)])
def test_the_plan_skips_the_rescale_at_128_dims(head_dim, skip):
    """Measured: skipping it paid at 128 dims (two row blocks of 8 O
    matrices) and cost at 64 (four row blocks of 4), docs/performance.md."""
    from vyre_xdsl.tuning import tensor_core_tiling

    module = vx.flash_attention_2(seq_len=4096, head_dim=head_dim, num_heads=32, dtype="bf16")
    skeleton = next(op for op in module.walk() if isinstance(op, vyre.TiledOnlineSoftmaxOp))
    assert tensor_core_tiling(skeleton, H200).skip_rescale is skip


def test_matrix_units_false_keeps_the_h200_plan_on_the_lanes():
    """vyre-to-gpu{matrix_units=false}: the H200's plan without its
    matrices; f32 products on the lanes, one f16 rounding from the oracle."""
    kwargs = CASES["d16"]
    planned = vx.lower_to_gpu(vx.flash_attention_2(tile_size=16, dtype="f16", **kwargs),
                              optimize="default", device="h200")
    assert "gpu.subgroup_mma_compute" in str(planned)
    lanes = vx.lower_to_gpu(vx.flash_attention_2(tile_size=16, dtype="f16", **kwargs),
                            optimize="vyre-to-gpu{device=h200 matrix_units=false}")
    assert "gpu.subgroup_mma" not in str(lanes)
    inputs = _inputs(lanes)
    got = vx.run(lanes, inputs)["out"].astype(np.float32)
    want = _oracle(kwargs, inputs).reshape(got.shape)
    assert np.abs(got - want).max() / np.abs(want).max() <= 2.0 ** -10


def _bf16_plan_and_oracle(head_dim: int, seed: int, poke):
    """The default plan's bf16 kernel (on the matrix units, with exp2) for
    two heads of 128 rows on the interpreter, and the oracle, on random
    inputs that `poke` edits in place."""
    module = vx.flash_attention_2(seq_len=128, head_dim=head_dim, num_heads=2, dtype="bf16")
    lowered = vx.lower_to_gpu(module, device="h200")
    printed = str(lowered)
    assert "gpu.subgroup_mma_compute" in printed
    assert "math.exp2" in printed and "math.exp " not in printed
    rng = np.random.default_rng(seed)
    ins = {n: rng.standard_normal((2, 128, head_dim)).astype(ml_dtypes.bfloat16)
           for n in "qkv"}
    poke(ins)
    got = vx.run(lowered, ins)["out"].astype(np.float32)
    want = np.asarray(vx.reference.flash_attention_2(
        ins["q"], ins["k"], ins["v"], tile_size=16, dtype="bf16"), np.float32).reshape(got.shape)
    return got, want


@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_plan_weighs_with_exp2_and_keeps_nan_and_inf_where_the_oracle_does(head_dim):
    """The default plan runs an f16 or bf16 skeleton it puts on the matrix
    units through vyre-use-exp2 (a multiply less a score; with each
    weight's bound as one compare and select, 3-5% faster on an H100:
    docs/performance.md, "Thirty-third session"); NaN and infinities in
    the inputs come out where the oracle puts them."""
    def poke(ins):
        ins["q"][0, 7, 0] = np.nan
        ins["k"][0, 3, 0], ins["k"][1, 9, head_dim // 2] = np.inf, -np.inf
        ins["v"][0, 5, 1], ins["v"][1, 64, 2], ins["v"][1, 65, 2] = np.inf, -np.inf, np.nan

    got, want = _bf16_plan_and_oracle(head_dim, 3, poke)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    assert np.isnan(want).any() and np.isinf(want).any()
    finite = np.isfinite(want)
    assert (np.abs(got[finite] - want[finite]).max() / np.abs(want[finite]).max()
            <= MATRIX_TOLERANCE["bf16"])


def test_the_plans_exp2_keeps_the_floor_of_an_infinite_score():
    """An infinite score weighs e^-80 (SEMANTICS.md's bounded_score and
    bounded_exp_arg), with exp2 too: its floor is -80 * log2(e) there
    (`log2`), not 2^-80, which a value of 1e37 would show 1e10 times over."""
    def poke(ins):
        ins["q"][0, :, 0] = np.abs(ins["q"][0, :, 0].astype(np.float32)) + 0.5
        # head 0: key 0 is every row's max from the first tile on (so the
        # floor is e^-80 of the final max in any tiling), the last key's
        # score +inf
        ins["k"][0, 0, 0], ins["k"][0, 127, 0] = 100.0, np.inf
        ins["v"][0, 127, :] = 1e37

    got, want = _bf16_plan_and_oracle(64, 4, poke)
    assert np.isfinite(want).all() and np.abs(want[0]).min() > 10.0  # e^-80 * 1e37 shows
    assert np.abs(got - want).max() / np.abs(want).max() <= MATRIX_TOLERANCE["bf16"]


def test_the_plan_keeps_f32_on_the_lanes_and_split_f32_without_exp2():
    """exp2 changes the rounding: the lanes' f32 kernels stay bit-exact with
    the reference, and f32 split into bf16 parts keeps exp (measured only
    for f16 and bf16)."""
    module = vx.flash_attention_2(seq_len=4096, head_dim=64, num_heads=32)
    for lowered in (vx.lower_to_gpu(module, device="h200"),
                    vx.lower_to_gpu(module, optimize="vyre-to-gpu{device=h200 f32_parts=3}")):
        assert "math.exp2" not in str(lowered)
    assert "gpu.subgroup_mma_compute" in str(lowered)


def test_exp2_with_the_scale_folded_in_stays_within_the_tolerance():
    """vyre-use-exp2 first: the scores carry log2(e) and the recurrence
    takes exp2, which the expansion follows (op.exp2)."""
    module = vx.flash_attention_2(tile_size=16, dtype="f16", **LONG)
    pipeline = ("vyre-use-exp2,vyre-tensor-cores{device=h200 force=true row_tiles=2 "
                "stage=true prefetch=true keys=32},vyre-to-gpu{optimize=exact}")
    lowered = vx.lower_to_gpu(module, optimize=pipeline)
    assert "math.exp2" in str(lowered) and "math.exp " not in str(lowered)
    inputs = _inputs(lowered)
    got = vx.run(lowered, inputs)["out"].astype(np.float32)
    want = _oracle(LONG, inputs).reshape(got.shape)
    assert np.abs(got - want).max() / np.abs(want).max() <= TOLERANCE


def _place_non_finite(inputs, case: str) -> None:
    q, k, v = (inputs[n].reshape(-1, LONG["head_dim"]) for n in "qkv")
    if case == "nan_query_inf_key_and_values":
        q[5, 3], k[7, 1], v[9, 4], v[200, 4] = np.nan, np.inf, -np.inf, np.inf
    else:  # row 10's weight of key 20 is below the smallest f16, its value inf
        q[10], k[20], k[21], v[20, 4] = 4.0, -4.0, 3.0, np.inf


@pytest.mark.parametrize("case", ["nan_query_inf_key_and_values", "tiny_weight_inf_value"])
def test_nan_and_inf_land_where_the_oracle_puts_them(case):
    """A weight too small for f16 still multiplies an infinite value into
    inf (not 0 * inf = NaN): P never rounds a kept key's weight to 0."""
    module = vx.flash_attention_2(tile_size=16, dtype="f16", **LONG)
    pipeline = ("vyre-tensor-cores{device=h200 force=true row_tiles=2 stage=true "
                "prefetch=true keys=32},vyre-to-gpu{optimize=exact}")
    lowered = vx.lower_to_gpu(module, optimize=pipeline)
    inputs = _inputs(lowered)
    _place_non_finite(inputs, case)
    got = vx.run(lowered, inputs)["out"].astype(np.float32)
    want = _oracle(LONG, inputs).reshape(got.shape)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    assert np.isfinite(got[finite]).all()
    assert np.abs(got[finite] - want[finite]).max() / np.abs(want[finite]).max() <= TOLERANCE


def test_the_tolerance_catches_a_wrong_kernel():
    """Keys and values swapped: the same matrix code on the wrong rows."""
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype="f16")
    lowered = vx.lower_to_gpu(module, optimize=PIPELINES["exact"])
    inputs = _inputs(lowered)
    swapped = dict(inputs, k=inputs["v"], v=inputs["k"])
    got = vx.run(lowered, swapped)["out"].astype(np.float32)
    want = _oracle({}, inputs).reshape(got.shape)
    assert np.abs(got - want).max() / np.abs(want).max() > TOLERANCE


@needs_mlir_opt
@pytest.mark.parametrize("level", sorted(PIPELINES))
def test_mlir_opt_accepts_the_lowered_kernel(level):
    module = vx.flash_attention_2(seq_len=64, head_dim=32, num_heads=2, tile_size=16,
                                  dtype="f16")
    printed = assert_mlir_opt_accepts(vx.lower_to_gpu(module, optimize=PIPELINES[level]))
    keys = 64 if "keys64" in level else 32 if "keys32" in level else 16
    # per 16 keys: 2 for S (head_dim 32), 2 for PV (v_head_dim 32); the
    # optimisations may unroll the loop over the 64 keys' tiles
    computes = printed.count("gpu.subgroup_mma_compute")
    assert computes in (4 * keys // 16, 4 * 64 // 16)
    # the softmax on S's and O's elements in registers: a lane's 8 of each
    assert printed.count("gpu.subgroup_mma_extract_thread_local") % 8 == 0
    assert "#vyre.accumulator<lanes = 32" in printed


@needs_mlir_opt
@pytest.mark.parametrize("options, level", [
    ("row_tiles=2", "none"), ("row_tiles=4 keys=32", "exact"),
    ("row_tiles=2 stage=true prefetch=true keys=32", "none"),
    ("stage=true prefetch=true keys=32", "exact"),
    ("row_tiles=2 stage=true prefetch=true keys=32 registers=true", "exact"),
    ("row_tiles=2 stage=true prefetch=true keys=32 registers=true stage_q=true", "none"),
    ("row_tiles=2 stage=true prefetch=true keys=32 registers=true skip_rescale=true", "none"),
    ("row_tiles=2 stage=true prefetch=true keys=32 registers=true skip_rescale=true", "exact"),
    ("row_tiles=2 stage=true prefetch=true keys=32 registers=true rolled=true", "exact"),
    ("row_tiles=2 stage=true prefetch=true keys=32 registers=true rolled=true unroll=2", "exact"),
    ("stage=true prefetch=true keys=32 rolled=true unroll=3", "none"),
])
def test_mlir_opt_accepts_row_blocks_and_prefetch(options, level):
    module = vx.flash_attention_2(tile_size=16, dtype="f16", **LONG)
    pipeline = f"vyre-tensor-cores{{device=h200 force=true {options}}},vyre-to-gpu{{optimize={level}}}"
    printed = assert_mlir_opt_accepts(vx.lower_to_gpu(module, optimize=pipeline))
    assert "gpu.subgroup_mma_insert_thread_local" in printed


@needs_mlir_opt
def test_mlir_opt_accepts_a_soft_cap_on_the_matrix_units():
    module = vx.flash_attention_2(tile_size=16, dtype="f16", score_mod=_softcap, **LONG)
    printed = assert_mlir_opt_accepts(vx.lower_to_gpu(module, device="h200"))
    assert "gpu.subgroup_mma_compute" in printed and "math.tanh" in printed


@needs_mlir_opt
@pytest.mark.parametrize("shape", [LONG, dict(seq_len=512, head_dim=128, num_heads=64),
                                   # 64 dims on a grid that fills the H200: two tiles a trip
                                   dict(seq_len=512, head_dim=64, num_heads=64)])
def test_mlir_opt_accepts_what_the_default_plan_puts_on_the_matrix_units(shape):
    head_dim = shape["head_dim"]  # 128 with a grid that fills the H200: the plan's first tiling
    module = vx.flash_attention_2(tile_size=16, dtype="f16", **shape)
    printed = assert_mlir_opt_accepts(vx.lower_to_gpu(module, device="h200"))
    assert "gpu.subgroup_mma_compute" in printed
    # at 128 dims the plan skips O's rescale where no row moved: an scf.if of matrices
    assert ('scf.if' in printed and '-> (!gpu.mma_matrix<16x16xf32, "COp">' in printed) \
        == (head_dim == 128)


@needs_mlir_translate
@needs_mlir_opt
@pytest.mark.parametrize("level", ["exact", "exact_staged", "exact_registers"])
def test_spirv_cooperative_matrices_verify_in_mlir(level, tmp_path):
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype="f16")
    spirv = emit_spirv_module(vx.lower_to_gpu(module, optimize=PIPELINES[level]))
    entry = spirv.entry("flash_attention_2")
    assert Capability.CooperativeMatrixKHR in entry.capabilities
    text = _mlir_verifies_spirv(spirv.binary, tmp_path)
    assert "spirv.KHR.CooperativeMatrixMulAdd" in text
    # the softmax on the lanes' elements; weights narrowed by the device
    assert "spirv.CompositeExtract" in text and "coopmatrix" in text
    assert re.search(r"spirv.FConvert %\w+ : f32 to f16", text)


@needs_mlir_translate
@needs_mlir_opt
def test_spirv_of_the_skipped_rescale_verifies_in_mlir(tmp_path):
    """The branch around O's rescale: a selection whose phi merges
    cooperative matrices."""
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype="f16")
    spirv = emit_spirv_module(vx.lower_to_gpu(module, optimize=(
        "vyre-tensor-cores{device=h200 force=true registers=true skip_rescale=true},"
        "vyre-to-gpu{optimize=exact}")))
    text = _mlir_verifies_spirv(spirv.binary, tmp_path)
    assert "spirv.mlir.selection -> !spirv.coopmatrix<16x16xf32, Subgroup, MatrixAcc>" in text


@pytest.mark.parametrize("kwargs, reason", [
    (dict(seq_len=64, head_dim=16), "must be all f16 or all bf16, not q f32"),
    (dict(seq_len=64, head_dim=24, dtype="f16"), "head_dim (24) is not a multiple of 16"),
    (dict(seq_len=40, head_dim=16, dtype="f16"), "is not a multiple of 16"),
    # a mask runs on staged tiles only (tests/test_tensor_core_masks.py)
    (dict(seq_len=64, head_dim=16, dtype="f16", mask_mod=lambda q, k: q >= k),
     "a mask needs staged tiles (stage=true)"),
    # a score_mod that may drop a key (-inf): its weight must then add
    # exactly 0 even to an infinite value, which a matrix product cannot
    # promise (a soft-cap, which never drops one, qualifies: CASES)
    (dict(seq_len=64, head_dim=16, dtype="f16", score_mod=_drops_low_scores),
     "the weighted sum is not a sum of products"),
    (dict(seq_len=1, kv_len=64, num_heads=32, num_kv_heads=8, head_dim=16, batch=2,
          dtype="f16"), "read different rows of k"),
])
def test_kernels_that_do_not_qualify_are_refused_with_the_reason(kwargs, reason):
    module = vx.flash_attention_2(tile_size=16, **kwargs)
    with pytest.raises(VyreError, match=re.escape(reason)):
        vx.lower_to_gpu(module, optimize=PIPELINES["exact"])
    # without force the skeleton is left to the per-lane expansion
    lowered = vx.lower_to_gpu(module, optimize="vyre-tensor-cores,vyre-to-gpu{optimize=exact}")
    assert "gpu.subgroup_mma_compute" not in str(lowered)


def test_problem_is_none_for_the_builders_f16_kernel():
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype="f16")
    (skeleton,) = [op for op in module.walk() if op.name == "vyre.tiled_online_softmax"]
    assert problem(skeleton, H200) is None


def test_weights_stay_in_registers_only_where_the_operand_order_is_known():
    from dataclasses import replace

    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype="f16")
    (skeleton,) = [op for op in module.walk() if op.name == "vyre.tiled_online_softmax"]
    unknown = replace(H200, accumulator_layout=replace(H200.accumulator_layout, operand_a=None))
    assert problem(skeleton, unknown, Tiling()) is None
    assert "P cannot stay in registers" in problem(skeleton, unknown, Tiling(registers=True))


def test_keys_must_be_a_multiple_of_16():
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype="f16")
    with pytest.raises(VyreError, match="keys must be a positive multiple of 16, got 24"):
        vx.lower_to_gpu(module, optimize="vyre-tensor-cores{device=h200 keys=24},vyre-to-gpu")
    too_few = re.escape("the keys (seq_len) (64) is not a multiple of 128")
    with pytest.raises(VyreError, match=too_few):
        vx.lower_to_gpu(module, optimize="vyre-tensor-cores{device=h200 keys=128 force=true},vyre-to-gpu")


@pytest.mark.parametrize("old, new, reason", [
    # an update that forgets the rescale: replacing it by P V would be wrong
    ("%44 = arith.mulf %rescale, %43 : f32", "%44 = arith.addf %43, %43 : f32",
     "the update does not add the weighted sum to the rescaled o_acc"),
    # a score that is not q . k (k . k)
    ("%17 = arith.mulf %11, %16 : f32", "%17 = arith.mulf %16, %16 : f32",
     "the dot product is not of the query row (q_scratch) and a key row"),
    # a dot product over half the dims
    ("%4 = arith.constant 16 : index", "%4 = arith.constant 8 : index",
     "the dot product does not run over 0 .. 16"),
])
def test_fragments_that_compute_something_else_are_refused(old, new, reason):
    text = str(vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype="f16"))
    assert old in text
    module = vx.parse_module(text.replace(old, new))
    with pytest.raises(VyreError, match=re.escape(reason)):
        vx.lower_to_gpu(module, optimize=PIPELINES["exact"])


def test_staging_needs_a_workgroups_rows_to_share_their_keys():
    """Heads of 32 rows: a subgroup's 16 share their keys, a workgroup's 64
    do not, so the tiles cannot be staged once per workgroup."""
    module = vx.flash_attention_2(seq_len=32, kv_len=64, num_heads=4, head_dim=16,
                                  tile_size=16, dtype="f16")
    vx.lower_to_gpu(module, optimize=PIPELINES["exact"])
    with pytest.raises(VyreError, match="items 0 and 32 read different rows of k"):
        vx.lower_to_gpu(module, optimize=PIPELINES["exact_staged"])


def test_staged_tiles_are_read_from_workgroup_memory():
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype="f16")
    text = str(vx.lower_to_gpu(module, optimize=PIPELINES["exact_staged"]))
    assert "tc_key_tile" in text and "tc_value_tile" in text
    loads = [line for line in text.splitlines() if "subgroup_mma_load_matrix" in line]
    # the products read the staged tiles; only the lanes' copies (16 bytes
    # each, stored to workgroup memory) read k and v
    assert loads and not any("%k[" in line or "%v[" in line for line in loads)
    copies = [line for line in text.splitlines() if "%k[" in line or "%v[" in line]
    assert copies and all("vector.load" in line and "vector<8xf16>" in line
                          for line in copies)
    stores = [line for line in text.splitlines() if "vector.store" in line]
    assert stores and all("%tc_key_tile" in line or "%tc_value_tile" in line
                          for line in stores)


def _declared_type(text: str, name: str) -> str:
    """The disassembled type of the variable named `name` (its pointee's
    definition, then the definitions that one names)."""
    var = re.search(rf'OpName (%\d+) "[^"]*{name}"', text).group(1)
    pointer = re.search(rf"{var} = OpVariable (%\d+)", text).group(1)
    pointee = re.search(rf"{pointer} = OpTypePointer \w+ (%\d+)", text).group(1)
    return re.search(rf"{pointee} = (OpType\w+ %\d+)", text).group(1)


@needs_mlir_translate
@needs_mlir_opt
def test_staged_tiles_written_16_bytes_a_lane_are_arrays_of_uvec4(tmp_path):
    """Every write of a staged tile is a lane's vector.store of 8 halves and
    every read a matrix load at a multiple of 8: the SPIR-V declares the
    tile an array of uvec4s (no lane writes part of a word) and addresses
    the matrix loads' rows in them; MLIR verifies the module."""
    from vyre_xdsl.spirv.disasm import disassemble

    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype="f16")
    binary = emit_spirv_module(vx.lower_to_gpu(module, optimize=PIPELINES["exact_staged"])).binary
    text = disassemble(binary)
    for name in ("tc_key_tile", "tc_value_tile"):
        element = _declared_type(text, name).split()[1]
        assert re.search(rf"{element} = OpTypeVector %\d+ 4", text), name
    assert "spirv.KHR.CooperativeMatrixLoad" in _mlir_verifies_spirv(binary, tmp_path)


# An f16 array in workgroup memory (what holds the weights P V reads): each
# lane stores its element, and after the barrier reads its mirror's.
F16_EXCHANGE = """
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %tile = memref.alloc() : memref<32xf16, 3 : i64>
      %x = memref.load %a[%lane] : memref<32xf16>
      memref.store %x, %tile[%lane] : memref<32xf16, 3 : i64>
      "gpu.barrier"() : () -> ()
      %c31 = arith.constant 31 : index
      %other = arith.subi %c31, %lane : index
      %y = memref.load %tile[%other] : memref<32xf16, 3 : i64>
      memref.store %y, %out[%lane] : memref<32xf16>
"""


def _f16_exchange():
    from vyre_xdsl.tools.mma_kernels import TileBuffer, lowered_kernel

    buffers = (TileBuffer("a", "read", (1, 32), "f16"), TileBuffer("out", "write", (1, 32), "f16"))
    return vx.parse_module(lowered_kernel("exchange", buffers, F16_EXCHANGE))


def _f16_pattern() -> np.ndarray:
    """Normal, subnormal, signed zero, inf and NaN halves."""
    values = np.arange(32, dtype=np.float16) * np.float16(-0.75) + np.float16(3)
    values[:5] = [np.float16(6e-8), np.float16(-0.0), np.inf, -np.inf, np.nan]
    return values


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_f16_workgroup_arrays_keep_every_bit(backend):
    a = _f16_pattern()
    out = vx.run(_f16_exchange(), {"a": a}, backend=backend)["out"].reshape(-1)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out.view(np.uint16), a[::-1].view(np.uint16))


# Each lane loads 8 halves, builds them back in reverse order and stores
# them with one vector.store to an f16 workgroup array that scalar loads
# read (so not an array of uvec4s: the emitter stores the 8 elements one by
# one); after the barrier each lane reads its mirror's elements.
F16_VECTOR_STORE = """
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c8 = arith.constant 8 : index
      %c255 = arith.constant 255 : index
      %tile = memref.alloc() : memref<256xf16, 3 : i64>
      %at = arith.muli %lane, %c8 : index
      %x = vector.load %a[%at] : memref<256xf16>, vector<8xf16>
""" + "".join(f"      %e{i} = vector.extract %x[{i}] : f16 from vector<8xf16>\n"
          for i in range(8)) + """
      %y = vector.from_elements %e7, %e6, %e5, %e4, %e3, %e2, %e1, %e0 : vector<8xf16>
      vector.store %y, %tile[%at] : memref<256xf16, 3 : i64>, vector<8xf16>
      "gpu.barrier"() : () -> ()
      scf.for %k = %c0 to %c8 step %c1 {
        %i = arith.addi %at, %k : index
        %j = arith.subi %c255, %i : index
        %v = memref.load %tile[%j] : memref<256xf16, 3 : i64>
        memref.store %v, %out[%i] : memref<256xf16>
      }
"""


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_a_vector_of_halves_is_stored_in_order(backend):
    from vyre_xdsl.tools.mma_kernels import TileBuffer, lowered_kernel

    buffers = (TileBuffer("a", "read", (1, 256), "f16"),
               TileBuffer("out", "write", (1, 256), "f16"))
    kernel = vx.parse_module(lowered_kernel("reverse", buffers, F16_VECTOR_STORE))
    a = np.resize(_f16_pattern(), 256)
    a[100:] = np.arange(156, dtype=np.float16)
    tile = a.reshape(32, 8)[:, ::-1].reshape(-1)  # each lane's 8 reversed
    out = vx.run(kernel, {"a": a}, backend=backend)["out"].reshape(-1)
    np.testing.assert_array_equal(out.view(np.uint16), tile[::-1].view(np.uint16))


@needs_vulkan
def test_a_device_without_shader_int16_is_refused(monkeypatch):
    from vyre_xdsl.vulkan.device import _context, _validation_requested

    monkeypatch.setattr(_context(_validation_requested(None)), "int16", False)
    with pytest.raises(VyreError, match="needs the Vulkan feature shaderInt16"):
        vx.run(_f16_exchange(), {"a": _f16_pattern()}, backend="vulkan")


@pytest.mark.parametrize("head_dim, rolled", [(64, 1), (128, 0)])
def test_the_h200_plan_marks_the_tile_loop_rolled_at_64_dims_only(head_dim, rolled):
    """The driver's unrolling of the staged tile loop made the kernel of 64
    dims 1.15 times as slow, and leaving it rolled made the kernel of 128
    dims 1.26 times as slow (docs/performance.md, "Thirtieth session"): the
    SPIR-V says DontUnroll on that loop at 64 dims and nowhere at 128."""
    from helpers import dont_unroll_loops
    from vyre_xdsl.compiler import compile_module

    module = vx.flash_attention_2(seq_len=2048, num_heads=32, head_dim=head_dim, dtype="bf16")
    compiled = compile_module(module, device="h200", spirv=True)
    (binary,) = compiled.spirv.binaries()
    assert dont_unroll_loops(binary) == rolled


@pytest.mark.parametrize("head_dim, mods, unroll", [
    (64, {}, 2),
    (64, {"mask_mod": lambda q, k: q >= k}, 1),
    (64, {"score_mod": _softcap}, 1),
    (128, {}, 1),
])
def test_the_plan_computes_two_tiles_a_trip_at_64_dims_without_modifiers(head_dim, mods, unroll):
    """Two tiles a trip of the rolled loop were 7-10% faster (bf16) at 64 dims
    without modifiers and 1-3% slower with a mask or a soft-cap
    (docs/performance.md, "Thirty-second session")."""
    from vyre_xdsl.tuning import tensor_core_tiling

    module = vx.flash_attention_2(seq_len=4096, head_dim=head_dim, num_heads=32, dtype="bf16",
                                  **mods)
    skeleton = next(op for op in module.walk() if isinstance(op, vyre.TiledOnlineSoftmaxOp))
    assert tensor_core_tiling(skeleton, H200).unroll == unroll


@pytest.mark.parametrize("unroll", [2, 3])
@pytest.mark.parametrize("mods, options", [
    ({}, "keys=16"),
    ({}, "keys=32 row_tiles=2 stage=true prefetch=true registers=true"),
    # the mask's run of full tiles has bounds known at run time only
    ({"mask_mod": lambda q, k: q >= k}, "keys=32 stage=true prefetch=true"),
])
def test_tiles_a_trip_compute_what_one_a_trip_does(mods, options, unroll):
    """The copies run in order, the trips left over in a second loop (4
    or 8 tiles here: three a trip leave one or two): bit for bit the
    result of one tile a trip."""
    from vyre_xdsl.loop_bounds import constant_index

    module = vx.flash_attention_2(seq_len=128, head_dim=32, num_heads=2, dtype="f16", **mods)

    def out(n: int) -> np.ndarray:
        lowered = vx.lower_to_gpu(module, optimize=(
            f"vyre-tensor-cores{{device=h200 force=true rolled=true unroll={n} {options}}},"
            "vyre-to-gpu{optimize=exact}"))
        inputs = _inputs(lowered)
        if n > 1:
            loops = [op for op in lowered.walk() if isinstance(op, scf.ForOp)
                     and op.body.block.args[0].name_hint.startswith("tile_idx")]
            assert [constant_index(op.step) for op in loops][0] == n
            assert all("vyre.dont_unroll" in op.attributes for op in loops)
        return vx.run(lowered, inputs)["out"].view(np.uint16)

    np.testing.assert_array_equal(out(unroll), out(1))
