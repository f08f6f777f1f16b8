"""vyre-latent-tensor-cores: MLA decode's latent attention in f16 on subgroup
matrix ops, a sequence's heads as the rows of the products.

The interpreter runs the expansion against the MLA oracle within the
declared tolerance (the query and the weights read in f16, the matrix
unit's order of sums), including query rows that f16 could not hold
without their own scale; mlir-opt-22 verifies the lowered IR, and MLIR's
SPIR-V deserialiser the emitted cooperative matrices.  The H200 runs it
through tools/gpu_check.py (`--match latent`)."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from requirements import assert_mlir_opt_accepts, needs_mlir_opt
from test_absorb_mla import NAMES
from test_mma import _mlir_verifies_spirv, needs_mlir_translate
from vyre_xdsl import tuning
from vyre_xdsl.compiler import apply_pipeline
from vyre_xdsl.device import GENERIC, H200
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dtypes import numpy_dtype
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import lowered_kernels, program_info, read_kernel
from vyre_xdsl.mma_elements import MATRIX_TOLERANCE
from vyre_xdsl.passes.latent_tensor_cores import (
    KEYS,
    LatentTiling,
    problem,
    workgroup_bytes,
)
from vyre_xdsl.spirv import emit_spirv_module
from vyre_xdsl.spirv.spec import Capability

TOLERANCE = MATRIX_TOLERANCE["f16"]

SMALL = dict(seq_len=128, num_heads=16, head_dim=16, kv_lora_rank=64, qk_rope_head_dim=16)
CASES = {
    "small_batch2": dict(SMALL, batch=2),
    # two row blocks of one sequence's 32 heads
    "heads32": dict(SMALL, num_heads=32, seq_len=192),
    # DeepSeek's dims: 512 latent and 64 rope dims, v_head_dim 512 over four subgroups
    "deepseek_dims": dict(seq_len=128, num_heads=16, head_dim=128, kv_lora_rank=512,
                          qk_rope_head_dim=64),
}


def _pipeline(options: str = "", level: str = "exact") -> str:
    return (f"vyre-absorb-mla{{kernels=3}},vyre-latent-tensor-cores{{device=h200 force=true "
            f"{options}}},vyre-to-gpu{{optimize={level}}}")


def _lowered(kwargs: dict, options: str = "", level: str = "exact"):
    module = vx.mla_decode(dtype="f16", **kwargs)
    return vx.lower_to_gpu(module, optimize=_pipeline(options, level))


def _inputs(lowered, seed: int = 0, weights: float = 0.1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {b.name: (rng.standard_normal(b.shape) * (weights if b.name.startswith("w_") else 1))
            .astype(np.float16) for b in program_info(lowered).inputs}


def _oracle(inputs) -> np.ndarray:
    """The program's oracle (the absorbed order of the kernels the pass
    expands: non-finite values propagate as in them)."""
    return np.asarray(vx.reference.mla_decode_program(*(inputs[n] for n in NAMES), dtype="f16"),
                      np.float32)


def _error(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def _run(lowered, inputs) -> np.ndarray:
    return vx.run(lowered, inputs)["out"].astype(np.float32)


@pytest.mark.parametrize("options", ["splits=1", "splits=2", ""])
@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreter_matches_the_oracle_within_the_tolerance(case, options):
    lowered = _lowered(CASES[case], options)
    assert "gpu.subgroup_mma_compute" in str(lowered)
    inputs = _inputs(lowered)
    got = _run(lowered, inputs)
    assert _error(got, _oracle(inputs).reshape(got.shape)) <= TOLERANCE


@pytest.mark.parametrize("level", ["none", "default"])
def test_every_level_after_the_expansion_matches_the_oracle(level):
    """`default` after the expansion plans the program's other kernels (the
    query's absorption, the merge, the projection) for the H200."""
    module = vx.mla_decode(dtype="f16", batch=2, **SMALL)
    pipeline = _pipeline("splits=2", level if level == "none" else "default device=h200")
    lowered = vx.lower_to_gpu(module, optimize=pipeline)
    inputs = _inputs(lowered)
    got = _run(lowered, inputs)
    assert _error(got, _oracle(inputs).reshape(got.shape)) <= TOLERANCE


def test_exp2_with_the_scale_folded_in_stays_within_the_tolerance():
    module = vx.mla_decode(dtype="f16", batch=2, **SMALL)
    pipeline = _pipeline("splits=2").replace("},", "},vyre-use-exp2,", 1)
    lowered = vx.lower_to_gpu(module, optimize=pipeline)
    assert "math.exp2" in str(lowered)
    inputs = _inputs(lowered)
    got = _run(lowered, inputs)
    assert _error(got, _oracle(inputs).reshape(got.shape)) <= TOLERANCE


def test_query_rows_beyond_f16_are_staged_at_their_own_scale():
    """Latent query rows of about 3e5, past f16's 65504 (inf without a
    scale, and every output NaN), with keys small enough to keep the scores
    moderate: each row is staged at its own power of two."""
    lowered = _lowered(dict(SMALL, batch=2), "splits=2")
    inputs = _inputs(lowered)
    for name, factor in (("w_uk", 3e4), ("q", 30.0), ("kv_cache", 1e-6), ("kr_cache", 1e-3),
                         ("w_uv", 3e4)):
        inputs[name] = (inputs[name].astype(np.float32) * factor).astype(np.float16)
    q_lat = np.einsum("bhd,rhd->bhr",
                      inputs["q"].astype(np.float32).reshape(2, 16, 16),
                      inputs["w_uk"].astype(np.float32).reshape(64, 16, 16))
    assert (np.abs(q_lat).max(axis=-1) > 65504).all()
    got = _run(lowered, inputs)
    assert np.isfinite(got).all()
    assert _error(got, _oracle(inputs).reshape(got.shape)) <= TOLERANCE


def test_nan_and_inf_land_where_the_oracle_puts_them():
    lowered = _lowered(dict(SMALL, batch=2), "splits=2")
    inputs = _inputs(lowered)
    inputs["q"].reshape(2, 16, 16)[0, 3, 2] = np.nan  # sequence 0, head 3: NaN scores
    inputs["kv_cache"].reshape(2, 128, 64)[1, 70, 5] = np.inf  # sequence 1's key 70
    got = _run(lowered, inputs)
    want = _oracle(inputs).reshape(got.shape)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want).any()
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    assert np.isfinite(got[finite]).all()
    assert _error(got[finite], want[finite]) <= TOLERANCE


def test_the_tolerance_catches_a_wrong_kernel():
    """The latent and the rope caches' keys of two sequences swapped: the
    same matrix code on the wrong rows."""
    lowered = _lowered(dict(SMALL, batch=2))
    inputs = _inputs(lowered)
    kv = inputs["kv_cache"].reshape(2, 128, 64)
    swapped = dict(inputs, kv_cache=np.ascontiguousarray(kv[::-1]).reshape(
        inputs["kv_cache"].shape))
    got = _run(lowered, swapped)
    assert _error(got, _oracle(inputs).reshape(got.shape)) > TOLERANCE


def _skeleton(**kwargs):
    module = vx.mla_decode(**kwargs)
    apply_pipeline(module, "vyre-absorb-mla{kernels=3}")
    (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
    return op


@pytest.mark.parametrize("kwargs, tiling, reason", [
    (dict(SMALL, dtype="f32"), LatentTiling(),
     "must be all f16 or all bf16, not kv_cache f32"),
    (dict(SMALL, num_heads=8, batch=2, dtype="f16"), LatentTiling(),
     "items 0 and 8 read different rows of kv_cache"),
    (dict(SMALL, seq_len=96, dtype="f16"), LatentTiling(),
     "the keys (seq_len) (96) is not a multiple of 64"),
    (dict(SMALL, dtype="f16"), LatentTiling(splits=3), "3 splits of 2 tiles"),
    (dict(SMALL, dtype="f16"), LatentTiling(row_tiles=16), "256 rows a workgroup"),
    # 48 rows do not share 128 lanes evenly (the staging read past q_lat)
    (dict(SMALL, num_heads=48, dtype="f16"), LatentTiling(row_tiles=3),
     "48 rows a workgroup: its 128 lanes stage them in equal shares"),
    # pages of 8 keys: a run of 16 keys spans two pages
    (dict(SMALL, kv_lens=True, batch=2, page_size=8, num_pages=32, dtype="f16"), LatentTiling(),
     "not 64 contiguous elements apart in runs of 16 keys"),
])
def test_problem_names_what_does_not_qualify(kwargs, tiling, reason):
    assert reason in problem(_skeleton(**kwargs), H200, tiling)


def test_flash_attention_does_not_qualify():
    """FlashAttention-2's query row is the skeleton's copy (q_scratch), not a
    buffer: vyre-tensor-cores takes it."""
    module = vx.flash_attention_2(seq_len=128, head_dim=64, num_heads=16, dtype="f16")
    (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
    assert "not both read from buffers" in problem(op, H200)


def test_the_workgroup_memory_must_fit_the_device():
    """Two row blocks of 576 query dims, split, take 50 KiB (their m and l
    exported for the merge), past the H200's 48; unsplit, 46."""
    op = _skeleton(seq_len=128, num_heads=32, head_dim=128, kv_lora_rank=512,
                   qk_rope_head_dim=64, dtype="f16")
    assert workgroup_bytes(op, LatentTiling(2, 2), H200) > H200.shared_memory_bytes
    assert workgroup_bytes(op, LatentTiling(2, 1), H200) <= H200.shared_memory_bytes
    module = vx.mla_decode(seq_len=128, num_heads=32, head_dim=128, kv_lora_rank=512,
                           qk_rope_head_dim=64, dtype="f16")
    with pytest.raises(VyreError, match="workgroup memory .* exceeds the device's 49152"):
        vx.lower_to_gpu(module, optimize=_pipeline("row_tiles=2 splits=2"))


def test_run_time_lengths_fit_beside_the_split_at_deepseeks_dims():
    """kv_lens add the columns (1 KiB) and each subgroup's cut block of 16
    keys x 128 dims (4 KiB): 43,008 bytes with a split, under 48 KiB."""
    op = _skeleton(seq_len=4096, num_heads=16, head_dim=128, kv_lora_rank=512,
                   qk_rope_head_dim=64, batch=2, kv_lens=True, page_size=64, num_pages=128,
                   dtype="f16")
    assert workgroup_bytes(op, LatentTiling(1, 2), H200) == 43008


@pytest.mark.parametrize("row_blocks, tiles, splits", [
    (32, 64, 4),  # batch 32, 16 heads, 4096 keys: 128 workgroups
    (66, 64, 2),  # 132: one a streaming multiprocessor
    (256, 64, 1),  # batch 32, 128 heads
    (8, 512, 16),  # batch 1, 128 heads, 32768 keys
    (1, 512, 128),  # batch 1, 16 heads
    (1, 64, 32),  # ... 4096 keys: two tiles a split
    (1, 2, 1),  # too few tiles to split
    (132, 64, 1),  # the grid is full
])
def test_splits_fill_the_grid_once_keeping_two_tiles_each(row_blocks, tiles, splits):
    assert tuning.latent_splits(row_blocks, tiles) == splits


def test_the_pass_chooses_its_splits():
    """splits=0 (the default) asks tuning.latent_splits: one row block of
    16 heads and 4096 keys (64 tiles) split 32 ways."""
    module = vx.mla_decode(dtype="f16", **dict(SMALL, seq_len=4096))
    apply_pipeline(module, "vyre-absorb-mla{kernels=3},vyre-latent-tensor-cores{device=h200}")
    kernels = {k.sym_name.data: k for k in module.walk() if isinstance(k, vyre.KernelOp)}
    assert kernels["mla_decode"].items == 32 * 128  # 32 workgroups of 128 lanes
    assert "mla_decode_merge" in kernels
    assert 4096 // KEYS // 32 == tuning.LATENT_SPLIT_TILES


# one rounding of an f16 / bf16 output, relative (11 and 8 significant bits)
HALF_ULP = {"f16": 2.0 ** -10, "bf16": 2.0 ** -7}


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_default_plan_takes_the_expansion_where_the_device_has_matrices(dtype):
    """On the H200 the plan records the pass's own choice
    (#vyre.latent_tensor_cores) and vyre-to-gpu expands it, within the
    tolerance; f32 caches and a device without matrices keep the lanes."""
    kwargs = dict(SMALL, batch=2, seq_len=256)
    module = vx.mla_decode(dtype=dtype, **kwargs)
    apply_pipeline(module, "vyre-absorb-mla{kernels=3}")
    (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
    chosen = tuning.latent_tiling(op, H200)
    assert chosen == LatentTiling(row_tiles=1, splits=tuning.latent_splits(2, 256 // KEYS))
    assert tuning.latent_tiling(op, GENERIC) is None
    lowered = vx.lower_to_gpu(vx.mla_decode(dtype=dtype, **kwargs), optimize="default",
                              device="h200")
    assert "gpu.subgroup_mma_compute" in str(lowered)
    inputs = {name: a.astype(numpy_dtype(dtype)) for name, a in _inputs(lowered).items()}
    got = _run(lowered, inputs)
    want = vx.reference.mla_decode_program(*(inputs[n] for n in NAMES), dtype=dtype)
    assert _error(got, np.asarray(want, np.float32).reshape(got.shape)) <= MATRIX_TOLERANCE[dtype]
    f32 = vx.lower_to_gpu(vx.mla_decode(**kwargs), optimize="default", device="h200")
    assert "gpu.subgroup_mma_compute" not in str(f32)
    # matrix_units=false: the H200's plan without its matrices, f32 products
    # on the lanes, an output within one rounding of the half type
    lanes = vx.lower_to_gpu(vx.mla_decode(dtype=dtype, **kwargs),
                            optimize="vyre-to-gpu{device=h200 matrix_units=false}")
    assert "gpu.subgroup_mma" not in str(lanes)
    got = _run(lanes, inputs)
    assert _error(got, np.asarray(want, np.float32).reshape(got.shape)) <= HALF_ULP[dtype]


@pytest.mark.parametrize("heads, dtype, extra, groups", [
    (16, "bf16", {}, 1),  # two groups would mix two sequences' keys
    (32, "bf16", {}, 2),
    (64, "f16", dict(kv_lens=True, page_size=32, num_pages=16), 2),
])
def test_the_plan_shares_staged_tiles_between_two_groups_where_the_heads_fill_them(
        heads, dtype, extra, groups):
    kwargs = dict(STAGED, num_heads=heads, batch=2, dtype=dtype, **extra)
    module = vx.mla_decode(**kwargs)
    apply_pipeline(module, "vyre-absorb-mla{kernels=3}")
    (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
    chosen = tuning.latent_tiling(op, H200)
    assert chosen.stage and chosen.row_groups == groups
    assert workgroup_bytes(op, chosen, H200) <= H200.shared_memory_bytes
    lowered = vx.lower_to_gpu(vx.mla_decode(**kwargs), optimize="default", device="h200")
    (kernel,) = [k for k in lowered_kernels(lowered) if k.sym_name.data == "mla_decode"]
    assert read_kernel(kernel).workgroup_size[0] == 128 * groups


@needs_mlir_opt
@pytest.mark.parametrize("level", ["none", "exact", "default device=h200"])
@pytest.mark.parametrize("options", ["splits=1", "splits=2"])
def test_mlir_opt_accepts_the_lowered_kernel(level, options):
    module = vx.mla_decode(dtype="f16", batch=2, **SMALL)
    printed = assert_mlir_opt_accepts(vx.lower_to_gpu(module, optimize=_pipeline(options, level)))
    assert "gpu.subgroup_mma_compute" in printed
    assert "#vyre.accumulator<lanes = 32" in printed


@needs_mlir_translate
@needs_mlir_opt
def test_spirv_cooperative_matrices_verify_in_mlir(tmp_path):
    lowered = _lowered(dict(SMALL, batch=2), "splits=2")
    spirv = emit_spirv_module(lowered)
    entry = spirv.entry("mla_decode")
    assert {Capability.CooperativeMatrixKHR, Capability.Float16} <= entry.capabilities
    text = _mlir_verifies_spirv(spirv.binary, tmp_path)
    assert "spirv.KHR.CooperativeMatrixMulAdd" in text


# Run-time lengths and paged caches ------------------------------------------------

# (batch, S, H, D, R, P, T, page, pages, lens) as tests/test_mla_serving.py builds them
SERVING = {
    "ragged": (3, 192, 16, 16, 64, 16, 64, None, None, [192, 70, 0]),
    "paged16": (3, 192, 16, 16, 64, 16, 64, 16, 40, [150, 5, 64]),
    "paged64_heads32": (2, 256, 32, 16, 64, 16, 64, 64, 8, [200, 17]),
}


def _poison_past_the_ends(case, ins) -> None:
    """NaN and inf in every key row past its sequence's end (a cache's
    rows there may hold anything): a kernel that multiplies one gives NaN."""
    _, S, *_, page, _, lens = case
    for name in ("kv_cache", "kr_cache"):
        for b, length in enumerate(lens):
            for t in range(max(length, 0), S):
                at = (ins["block_table"][b, t // page], t % page) if page else (b, t)
                ins[name][at] = np.nan if t % 2 else np.inf


@pytest.mark.parametrize("options", ["splits=1", "splits=2"])
@pytest.mark.parametrize("case", sorted(SERVING))
def test_serving_caches_match_the_oracle_past_poisoned_ends(case, options):
    """kv_lens (a sequence with all 192 keys, one ending inside a run of 16,
    one with none) and paged caches (shuffled pages of 16 and 64 keys)."""
    _check_serving(SERVING[case], options)


def _check_serving(spec, options: str) -> None:
    """`spec` (as tests/test_mla_serving.py builds it) through the pass with
    `options`, NaN and inf in every key row past a sequence's end, against
    the program's oracle."""
    from test_mla_serving import inputs, module, oracle

    lowered = vx.lower_to_gpu(module(spec, dtype="f16"), optimize=_pipeline(options))
    ins = inputs(spec, dtype="f16")
    ins["w_uk"] = (ins["w_uk"].astype(np.float32) * 0.2).astype(np.float16)
    _poison_past_the_ends(spec, ins)
    got = _run(lowered, ins)
    want = np.asarray(oracle(spec, ins, form="mla_decode_program", dtype="f16"),
                      np.float32).reshape(got.shape)
    assert np.isfinite(got).all()
    if 0 in spec[9]:  # no keys: 0, as the oracle says
        assert not got[spec[9].index(0)].any()
    assert _error(got, want) <= TOLERANCE


@needs_mlir_opt
@pytest.mark.parametrize("level", ["none", "exact", "default device=h200"])
def test_mlir_opt_accepts_the_paged_kernel(level):
    from test_mla_serving import module

    lowered = vx.lower_to_gpu(module(SERVING["paged16"], dtype="f16"),
                              optimize=_pipeline("splits=2", level))
    printed = assert_mlir_opt_accepts(lowered)
    assert "gpu.subgroup_mma_compute" in printed and "block_table" in str(lowered)


# Staged tiles (`stage=true`) --------------------------------------------------------

# query dims of 64 latent + 64 rope: eight 16-dim blocks, two a subgroup
STAGED = dict(seq_len=128, num_heads=16, head_dim=64, kv_lora_rank=64, qk_rope_head_dim=64)
STAGED_CASES = {
    "batch2": dict(STAGED, batch=2),
    "heads32": dict(STAGED, num_heads=32, seq_len=192),
    "deepseek_dims": CASES["deepseek_dims"],
}


@pytest.mark.parametrize("options", ["splits=1", "splits=2", ""])
@pytest.mark.parametrize("case", sorted(STAGED_CASES))
def test_staged_tiles_match_the_oracle_within_the_tolerance(case, options):
    lowered = _lowered(STAGED_CASES[case], f"stage=true {options}")
    printed = str(lowered)
    assert "tc_stage" in printed and "tc_weights" not in printed
    inputs = _inputs(lowered)
    got = _run(lowered, inputs)
    assert _error(got, _oracle(inputs).reshape(got.shape)) <= TOLERANCE


def test_two_staged_row_blocks_export_each_splits_rows_bit_for_bit():
    """Two row blocks a workgroup, split: m and l go out through tc_scores
    once the last tile is done, the same bits as one row block's."""
    kernels = [_lowered(STAGED_CASES["heads32"], f"stage=true splits=2 row_tiles={rows}")
               for rows in (1, 2)]
    assert all("tc_rows" not in str(kernel) for kernel in kernels)
    inputs = _inputs(kernels[0])
    got = [_run(kernel, inputs) for kernel in kernels]
    assert np.array_equal(got[0], got[1])
    assert _error(got[1], _oracle(inputs).reshape(got[1].shape)) <= TOLERANCE


@pytest.mark.parametrize("options", ["stage=true splits=2", "stage=true", "splits=2"])
def test_skipping_the_rescale_changes_no_bit(options):
    """x * 1 is x: O's rescale skipped by a subgroup whose rows kept their
    maxima gives the same bits, NaN and inf included."""
    kernels = [_lowered(dict(STAGED, batch=2), f"{options} skip_rescale={skip}")
               for skip in ("false", "true")]
    assert str(kernels[1]).count("scf.if") > str(kernels[0]).count("scf.if")
    inputs = _inputs(kernels[0])
    inputs["q"].reshape(2, 16, 64)[0, 3, 2] = np.nan
    inputs["kv_cache"].reshape(2, 128, 64)[1, 70, 5] = np.inf
    got = [_run(kernel, inputs) for kernel in kernels]
    assert np.array_equal(got[0].view(np.uint32), got[1].view(np.uint32))
    finite = np.isfinite(want := _oracle(inputs).reshape(got[1].shape))
    assert _error(got[1][finite], want[finite]) <= TOLERANCE


def test_the_plan_records_skip_rescale_and_row_groups():
    from vyre_xdsl.dialects.plan import LatentTensorCoresAttr

    for tiling in (LatentTiling(2, 4, True, skip_rescale=True),
                   LatentTiling(1, 2, True, row_groups=2)):
        assert LatentTiling.of(tiling.attr()) == tiling
    assert "skip_rescale = true" in str(LatentTiling(2, 4, True, skip_rescale=True).attr())
    assert "row_groups = 2" in str(LatentTiling(1, 2, True, row_groups=2).attr())
    default = LatentTiling.of(LatentTensorCoresAttr(1, 1, True))
    assert default.skip_rescale is False and default.row_groups == 1


def test_staged_tiles_in_bf16_match_the_oracle():
    module = vx.mla_decode(dtype="bf16", **dict(STAGED, batch=2))
    lowered = vx.lower_to_gpu(module, optimize=_pipeline("stage=true splits=2"))
    inputs = {n: a.astype(numpy_dtype("bf16")) for n, a in _inputs(lowered).items()}
    got = _run(lowered, inputs)
    want = vx.reference.mla_decode_program(*(inputs[n] for n in NAMES), dtype="bf16")
    assert _error(got, np.asarray(want, np.float32).reshape(got.shape)) <= MATRIX_TOLERANCE["bf16"]


def test_staged_tiles_put_nan_and_inf_where_the_oracle_does():
    lowered = _lowered(dict(STAGED, batch=2), "stage=true splits=2")
    inputs = _inputs(lowered)
    inputs["q"].reshape(2, 16, 64)[0, 3, 2] = np.nan
    inputs["kv_cache"].reshape(2, 128, 64)[1, 70, 5] = np.inf
    got = _run(lowered, inputs)
    want = _oracle(inputs).reshape(got.shape)
    assert np.isnan(want).any() and np.isinf(want).any()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    assert _error(got[finite], want[finite]) <= TOLERANCE


def test_staged_tiles_catch_a_wrong_kernel():
    lowered = _lowered(dict(STAGED, batch=2), "stage=true")
    inputs = _inputs(lowered)
    kv = inputs["kv_cache"].reshape(2, 128, 64)
    swapped = dict(inputs, kv_cache=np.ascontiguousarray(kv[::-1]).reshape(
        inputs["kv_cache"].shape))
    got = _run(lowered, swapped)
    assert _error(got, _oracle(inputs).reshape(got.shape)) > TOLERANCE


STAGED_SERVING = {
    "ragged": (3, 192, 16, 64, 64, 64, 64, None, None, [192, 70, 0]),
    "paged16": (3, 192, 16, 64, 64, 64, 64, 16, 40, [150, 5, 64]),
}


@pytest.mark.parametrize("options", ["splits=1", "splits=2"])
@pytest.mark.parametrize("case", sorted(STAGED_SERVING))
def test_staged_serving_caches_match_the_oracle_past_poisoned_ends(case, options):
    """A tile the sequence ends in has its rows past the end cleared, which
    hold NaN and inf here."""
    _check_serving(STAGED_SERVING[case], f"stage=true {options}")


def test_staged_tiles_need_the_query_blocks_shared_by_the_subgroups():
    # 64 latent + 16 rope dims: five blocks of 16
    assert "a multiple of 4 is needed" in problem(_skeleton(dtype="f16", **SMALL), H200,
                                                  LatentTiling(stage=True))


def test_staged_tiles_need_p_built_in_registers():
    from dataclasses import replace

    device = replace(H200, accumulator_layout=replace(H200.accumulator_layout, operand_a=None))
    assert "build P in registers" in problem(_skeleton(dtype="f16", **STAGED), device,
                                             LatentTiling(stage=True))


def test_staged_workgroup_memory_at_deepseeks_dims():
    """Two staged tiles of 16 keys x 584 (576 dims padded against bank
    conflicts) and each subgroup's S; the query shares the tiles' bytes, a
    split's m and l those of S, so two row blocks fit with splits."""
    op = _skeleton(seq_len=4096, num_heads=32, head_dim=128, kv_lora_rank=512,
                   qk_rope_head_dim=64, dtype="bf16")
    tiles = 2 * (2 * 16 * 584)
    assert workgroup_bytes(op, LatentTiling(1, 1, True), H200) == tiles + 4 * 1024
    assert workgroup_bytes(op, LatentTiling(1, 2, True), H200) == tiles + 4 * 1024
    assert workgroup_bytes(op, LatentTiling(2, 4, True), H200) == tiles + 4 * 2048
    assert tiles + 4 * 2048 <= H200.shared_memory_bytes


@needs_mlir_opt
@pytest.mark.parametrize("level, options", [
    ("none", ""), ("exact", ""), ("default device=h200", ""), ("exact", "skip_rescale=true")])
def test_mlir_opt_accepts_the_staged_kernel(level, options):
    from test_mla_serving import module

    lowered = vx.lower_to_gpu(module(STAGED_SERVING["paged16"], dtype="f16"),
                              optimize=_pipeline(f"stage=true splits=2 {options}", level))
    printed = assert_mlir_opt_accepts(lowered)
    assert "gpu.subgroup_mma_compute" in printed and "tc_stage" in str(lowered)


@needs_mlir_translate
@needs_mlir_opt
def test_staged_spirv_verifies_in_mlir(tmp_path):
    lowered = _lowered(dict(STAGED, batch=2), "stage=true splits=2")
    text = _mlir_verifies_spirv(emit_spirv_module(lowered).binary, tmp_path)
    assert "spirv.KHR.CooperativeMatrixMulAdd" in text


@pytest.mark.parametrize("kwargs, staged", [
    (dict(STAGED, batch=2), True),
    (dict(seq_len=4096, num_heads=128, head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64),
     True),
    (dict(SMALL, batch=2), False),  # five query blocks: the unstaged expansion
])
def test_the_plan_stages_the_tiles_where_they_qualify(kwargs, staged):
    op = _skeleton(dtype="bf16", **kwargs)
    chosen = tuning.latent_tiling(op, H200)
    assert chosen is not None and chosen.stage is staged


def test_the_default_plan_with_staged_tiles_matches_the_oracle():
    lowered = vx.lower_to_gpu(vx.mla_decode(dtype="bf16", **dict(STAGED, batch=2)),
                              optimize="default", device="h200")
    assert "tc_stage" in str(lowered)
    inputs = {n: a.astype(numpy_dtype("bf16")) for n, a in _inputs(lowered).items()}
    got = _run(lowered, inputs)
    want = vx.reference.mla_decode_program(*(inputs[n] for n in NAMES), dtype="bf16")
    assert _error(got, np.asarray(want, np.float32).reshape(got.shape)) <= MATRIX_TOLERANCE["bf16"]


# Two groups of four subgroups sharing the staged tiles (row_groups) --------------


@pytest.mark.parametrize("kwargs, options", [
    (dict(STAGED_CASES["heads32"], batch=2), "splits=2"),
    (dict(STAGED, num_heads=64), "row_tiles=2 splits=1"),
    (dict(CASES["deepseek_dims"], num_heads=32), "skip_rescale=true"),
])
def test_two_row_groups_give_one_groups_bits(kwargs, options):
    """Each group of four subgroups computes its row block as one group
    does (the same parts of S in the same order, the same P V): the
    workgroup of 256 lanes shares each staged tile between them and stages
    it in half the turns, with the same bits."""
    kernels = [_lowered(kwargs, f"stage=true row_groups={groups} {options}")
               for groups in (1, 2)]
    lanes = {k: read_kernel(f).workgroup_size[0] for k in kernels
             for f in lowered_kernels(k) if f.sym_name.data == "mla_decode"}
    assert sorted(lanes.values()) == [128, 256]
    inputs = _inputs(kernels[0])
    got = [_run(kernel, inputs) for kernel in kernels]
    assert np.array_equal(got[0], got[1])
    assert _error(got[1], _oracle(inputs).reshape(got[1].shape)) <= TOLERANCE


def test_two_row_groups_on_serving_caches_match_the_oracle():
    _check_serving((3, 192, 32, 64, 64, 64, 64, 16, 40, [150, 5, 64]),
                   "stage=true row_groups=2 splits=2")


@pytest.mark.parametrize("tiling, reason", [
    (LatentTiling(row_groups=2), "row_groups 2 needs stage=true"),
    (LatentTiling(stage=True, row_groups=3), "row_groups must be 1 or 2, got 3"),
])
def test_row_groups_that_do_not_qualify(tiling, reason):
    op = _skeleton(dtype="f16", **dict(STAGED, num_heads=32))
    assert reason in problem(op, H200, tiling)


def test_two_row_groups_need_their_rows_to_share_keys():
    """16 heads a sequence: a workgroup of 32 rows would hold two sequences."""
    op = _skeleton(dtype="f16", **dict(STAGED, batch=2))
    assert "read different rows of kv_cache" in problem(
        op, H200, LatentTiling(stage=True, row_groups=2))


def test_two_row_groups_fit_at_deepseeks_dims():
    """32 rows of 576 dims staged, S of both groups: 45,568 bytes in bf16
    (47,616 in f16, with the rows' scales), under the H200's 49,152."""
    for dtype, size in (("bf16", 45568), ("f16", 47616)):
        op = _skeleton(seq_len=128, num_heads=32, head_dim=128, kv_lora_rank=512,
                       qk_rope_head_dim=64, dtype=dtype)
        assert workgroup_bytes(op, LatentTiling(stage=True, splits=2, row_groups=2),
                               H200) == size


@needs_mlir_opt
@pytest.mark.parametrize("level", ["none", "exact", "default device=h200"])
def test_mlir_opt_accepts_two_row_groups(level):
    kwargs = dict(STAGED_CASES["heads32"], batch=2)
    printed = assert_mlir_opt_accepts(_lowered(kwargs, "stage=true row_groups=2 splits=2",
                                               level))
    assert "gpu.subgroup_mma_compute" in printed


@needs_mlir_translate
@needs_mlir_opt
def test_two_row_groups_spirv_verifies_in_mlir(tmp_path):
    spirv = emit_spirv_module(_lowered(STAGED_CASES["heads32"], "stage=true row_groups=2"))
    assert spirv.entry("mla_decode").workgroup_size == (256, 1, 1)
    assert "spirv.KHR.CooperativeMatrixMulAdd" in _mlir_verifies_spirv(spirv.binary, tmp_path)


def test_the_h200_plan_leaves_the_staged_loops_rolled_for_the_driver():
    """Unrolled by the H100's driver, the latent attention took 1.04-1.23
    times as long and the projection onto W_uv 1.10-1.56 times
    (docs/performance.md, "Thirtieth session"): in the SPIR-V of the
    program's kernels each loop that holds a barrier says DontUnroll."""
    from xdsl.dialects import gpu, scf

    from helpers import dont_unroll_loops
    from vyre_xdsl.compiler import compile_module

    module = vx.mla_decode(4096, 16, 128, 512, 64, dtype="bf16", batch=32)
    compiled = compile_module(module, device="h200", spirv=True)
    staged = {}
    for func in compiled.lowered.walk():
        if isinstance(func, gpu.FuncOp):
            staged[func.sym_name.data] = sum(
                isinstance(loop, scf.ForOp)
                and any(isinstance(o, gpu.BarrierOp) for o in loop.walk())
                for loop in func.walk())
    assert staged["mla_decode"] == 1 and staged["mla_decode_project"] == 1
    spirv = compiled.spirv
    assert spirv.alone  # a binary an entry point, so each can be read alone
    rolled = {entry.name: dont_unroll_loops(binary)
              for entry, binary in zip(spirv.entries, spirv.binaries(), strict=True)}
    assert rolled == staged
