"""bf16 on the matrix units: vyre-tensor-cores and vyre-latent-tensor-cores
with bf16 inputs multiply bf16 cooperative matrices into f32
(SPV_KHR_bfloat16; the H200's driver has 16x16x16 of them), the weights
rounded to bf16 for P V.

The interpreter runs both against the oracle within their declared bf16
tolerance, including values far beyond f16's range (bf16 has f32's, so
nothing is staged through f16 and no query row is scaled); MLIR's SPIR-V
dialect verifies the emitted bf16 matrices; mlir-opt-22, whose gpu dialect
has none, verifies the rest of the lowered kernel (requirements.py says
how).  The default plan takes bf16 matrices on a device that has them;
tools/gpu_check.py has the H200's cases."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl import tuning
from requirements import MLIR_OPT, assert_mlir_opt_accepts, needs_mlir_opt
from test_absorb_mla import NAMES
from test_mma import _mlir_verifies_spirv, needs_mlir_translate
from vyre_xdsl.compiler import apply_pipeline
from vyre_xdsl.device import H200
from vyre_xdsl.dialects import vyre
from vyre_xdsl.kernel_info import program_info
from vyre_xdsl.mma_elements import MATRIX_TOLERANCE
from vyre_xdsl.passes import latent_tensor_cores, tensor_cores
from vyre_xdsl.spirv import emit_spirv_module
from vyre_xdsl.spirv.spec import Capability

BF16 = ml_dtypes.bfloat16
TOLERANCE = MATRIX_TOLERANCE["bf16"]


def _softcap(score, q, k):
    return 30.0 * vx.tanh(score / 30.0)


LONG = dict(seq_len=128, head_dim=32, num_heads=2)
FA2_CASES = {
    "d16": (dict(seq_len=64, head_dim=16), ""),
    "gqa_row_blocks": (dict(seq_len=64, head_dim=32, num_heads=4, num_kv_heads=2),
                       "row_tiles=2"),
    "staged_prefetched_registers": (LONG, "row_tiles=2 stage=true prefetch=true keys=32 "
                                          "registers=true"),
    "soft_cap": (dict(seq_len=64, head_dim=16, num_heads=2, score_mod=_softcap), "keys=32"),
}


def _fa2(kwargs: dict, options: str, level: str = "exact"):
    module = vx.flash_attention_2(tile_size=16, dtype="bf16", **kwargs)
    return vx.lower_to_gpu(module, optimize=f"vyre-tensor-cores{{device=h200 force=true "
                                            f"{options}}},vyre-to-gpu{{optimize={level}}}")


def _inputs(lowered, seed: int = 0, scales: dict | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    scales = scales or {}
    return {b.name: (rng.standard_normal(b.shape) * scales.get(b.name, 1.0)).astype(BF16)
            for b in program_info(lowered).inputs}


def _fa2_oracle(kwargs: dict, ins) -> np.ndarray:
    return np.asarray(vx.reference.flash_attention_2(
        ins["q"], ins["k"], ins["v"], tile_size=16, dtype="bf16",
        score_mod=kwargs.get("score_mod")), np.float32)


def _error(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def _run(lowered, ins) -> np.ndarray:
    out = vx.run(lowered, ins)["out"]
    assert out.dtype == BF16
    return out.astype(np.float32)


@pytest.mark.parametrize("case", sorted(FA2_CASES))
def test_flash_attention_matches_the_oracle_within_the_bf16_tolerance(case):
    kwargs, options = FA2_CASES[case]
    lowered = _fa2(kwargs, options)
    assert '!gpu.mma_matrix<16x16xbf16, "AOp">' in str(lowered)
    ins = _inputs(lowered)
    got = _run(lowered, ins)
    assert _error(got, _fa2_oracle(kwargs, ins).reshape(got.shape)) <= TOLERANCE


def test_the_bf16_tolerance_catches_a_wrong_kernel():
    """Keys and values swapped: the same matrix code on the wrong rows."""
    kwargs, options = FA2_CASES["staged_prefetched_registers"]
    lowered = _fa2(kwargs, options)
    ins = _inputs(lowered)
    got = _run(lowered, dict(ins, k=ins["v"], v=ins["k"]))
    assert _error(got, _fa2_oracle(kwargs, ins).reshape(got.shape)) > TOLERANCE


@pytest.mark.parametrize("dtype, raised", [("bf16", 0), ("f16", 8)])
def test_only_weights_that_may_round_to_0_are_raised(dtype, raised):
    """A kept key's weight is at least exp(-80), above bf16's smallest
    normal, so a bf16 kernel raises none (value_range proves it); in f16 it
    may round to 0, so each of a lane's 8 weights of a 16 x 16 block is
    raised to f16's smallest subnormal."""
    from vyre_xdsl.dialects.constants import F16_SMALLEST, MIN_POSITIVE

    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype=dtype)
    text = str(apply_pipeline(module, "vyre-tensor-cores{device=h200 force=true}"))
    smallest = F16_SMALLEST if dtype == "f16" else MIN_POSITIVE
    assert text.count(f"arith.constant {smallest:.8e} : f32") == raised


def test_values_beyond_f16s_range_stay_exact():
    """Keys near 1e5 and values near 1e6 (f16 holds at most 65504): the
    matrices hold them in bf16 as they are."""
    kwargs, options = FA2_CASES["staged_prefetched_registers"]
    lowered = _fa2(kwargs, options)
    ins = _inputs(lowered, scales={"q": 1e-5, "k": 1e5, "v": 1e6})
    assert np.abs(ins["v"].astype(np.float32)).max() > 65504
    got = _run(lowered, ins)
    assert np.isfinite(got).all()
    assert _error(got, _fa2_oracle(kwargs, ins).reshape(got.shape)) <= TOLERANCE


@pytest.mark.parametrize("case", ["nan_query_inf_key_and_values", "tiny_weight_inf_value"])
def test_nan_and_inf_land_where_the_oracle_puts_them(case):
    """Row 10's weight of key 20 (exp(-90), below bf16's smallest normal)
    times an infinite value is inf, not 0 * inf = NaN."""
    kwargs, options = FA2_CASES["staged_prefetched_registers"]
    lowered = _fa2(kwargs, options)
    ins = _inputs(lowered)
    q, k, v = (ins[n].reshape(-1, LONG["head_dim"]) for n in "qkv")
    if case == "nan_query_inf_key_and_values":
        q[5, 3], k[7, 1], v[9, 4], v[200, 4] = np.nan, np.inf, -np.inf, np.inf
    else:
        q[10], k[20], k[21], v[20, 4] = 4.0, -4.0, 3.0, np.inf
    got = _run(lowered, ins)
    want = _fa2_oracle(kwargs, ins).reshape(got.shape)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.isinf(want).any() or np.isnan(want).any()
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    assert _error(got[finite], want[finite]) <= TOLERANCE


# MLA's latent attention -----------------------------------------------------------

SMALL = dict(seq_len=128, num_heads=16, head_dim=16, kv_lora_rank=64, qk_rope_head_dim=16)


def _latent(kwargs: dict, options: str = "", level: str = "exact"):
    module = vx.mla_decode(dtype="bf16", **kwargs)
    return vx.lower_to_gpu(module, optimize=(
        f"vyre-absorb-mla{{kernels=3}},vyre-latent-tensor-cores{{device=h200 force=true "
        f"{options}}},vyre-to-gpu{{optimize={level}}}"))


def _latent_oracle(ins) -> np.ndarray:
    return np.asarray(vx.reference.mla_decode_program(*(ins[n] for n in NAMES), dtype="bf16"),
                      np.float32)


WEIGHTS = {"w_uk": 0.1, "w_uv": 0.1}


@pytest.mark.parametrize("options", ["splits=1", "splits=2"])
@pytest.mark.parametrize("kwargs", [
    dict(SMALL, batch=2),
    dict(seq_len=128, num_heads=16, head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64),
], ids=["small_batch2", "deepseek_dims"])
def test_latent_attention_matches_the_oracle_within_the_bf16_tolerance(kwargs, options):
    lowered = _latent(kwargs, options)
    text = str(lowered)
    # bf16 rows are staged as they are: no scale, no scale matrix
    assert '!gpu.mma_matrix<16x16xbf16, "BOp">' in text and "tc_query_scale" not in text
    ins = _inputs(lowered, scales=WEIGHTS)
    got = _run(lowered, ins)
    assert _error(got, _latent_oracle(ins).reshape(got.shape)) <= TOLERANCE


def test_latent_keys_beyond_f16s_range_need_no_query_scale():
    """A latent cache near 1e36 and queries near 1e-36: a query row scaled
    into [2^14, 2^15), as f16 rows are, would overflow f32 against such
    keys; bf16 rows are not scaled."""
    lowered = _latent(dict(SMALL, batch=2), "splits=2")
    ins = _inputs(lowered, scales={"q": 1e-36, "kv_cache": 1e36, "kr_cache": 1e36,
                                   "w_uk": 0.1, "w_uv": 1e-36})
    got = _run(lowered, ins)
    want = _latent_oracle(ins).reshape(got.shape)
    assert np.isfinite(want).all() and np.isfinite(got).all()
    assert _error(got, want) <= TOLERANCE


@pytest.mark.parametrize("case", ["ragged", "paged16"])
def test_latent_serving_caches_match_the_oracle_past_poisoned_ends(case):
    from test_latent_tensor_cores import SERVING, _poison_past_the_ends
    from test_mla_serving import inputs, module, oracle

    spec = SERVING[case]
    lowered = vx.lower_to_gpu(module(spec, dtype="bf16"), optimize=(
        "vyre-absorb-mla{kernels=3},vyre-latent-tensor-cores{device=h200 force=true "
        "splits=2},vyre-to-gpu{optimize=exact}"))
    ins = inputs(spec, dtype="bf16")
    ins["w_uk"] = (ins["w_uk"].astype(np.float32) * 0.2).astype(BF16)
    _poison_past_the_ends(spec, ins)
    got = _run(lowered, ins)
    want = np.asarray(oracle(spec, ins, form="mla_decode_program", dtype="bf16"),
                      np.float32).reshape(got.shape)
    assert np.isfinite(got).all()
    assert _error(got, want) <= TOLERANCE


# the plan, the device, MLIR -------------------------------------------------------

def test_the_default_plan_takes_bf16_matrices_where_the_device_has_them():
    """On the H200 bf16 FlashAttention-2 takes f16's tilings onto the
    matrix units; a device without bf16 matrices keeps it on the lanes."""
    for dtype in ("bf16", "f16"):
        module = vx.flash_attention_2(seq_len=256, head_dim=64, num_heads=8, dtype=dtype)
        lowered = vx.lower_to_gpu(module, optimize="default", device="h200")
        assert "gpu.subgroup_mma_compute" in str(lowered), dtype
    bf16, f16 = (_skeleton(vx.flash_attention_2(seq_len=256, head_dim=64, num_heads=8,
                                                dtype=dtype)) for dtype in ("bf16", "f16"))
    assert tuning.tensor_core_tiling(bf16, H200) == tuning.tensor_core_tiling(f16, H200)
    assert tuning.tensor_core_tiling(bf16, H200) is not None
    assert tuning.tensor_core_tiling(bf16, replace(H200, bfloat16_matrix_shapes=())) is None


def _skeleton(module, pipeline: str = ""):
    if pipeline:
        apply_pipeline(module, pipeline)
    (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
    return op


def test_a_device_without_bf16_matrices_does_not_qualify():
    no_bf16 = replace(H200, bfloat16_matrix_shapes=())
    fa2 = _skeleton(vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16, dtype="bf16"))
    latent = _skeleton(vx.mla_decode(dtype="bf16", **SMALL), "vyre-absorb-mla{kernels=3}")
    assert tensor_cores.problem(fa2, H200) is None
    assert latent_tensor_cores.problem(latent, H200) is None
    reason = "the device has no 16x16x16 bf16 cooperative matrices"
    assert tensor_cores.problem(fa2, no_bf16) == reason
    assert latent_tensor_cores.problem(latent, no_bf16) == reason


@needs_mlir_translate
@needs_mlir_opt
@pytest.mark.parametrize("kernel", ["fa2", "latent"])
def test_mlir_verifies_the_bf16_matrices_in_spirv(kernel, tmp_path):
    lowered = (_fa2(*FA2_CASES["staged_prefetched_registers"]) if kernel == "fa2"
               else _latent(dict(SMALL, batch=2), "splits=2"))
    spirv = emit_spirv_module(lowered)
    capabilities = set().union(*(e.capabilities for e in spirv.entries))
    assert {Capability.BFloat16TypeKHR, Capability.BFloat16CooperativeMatrixKHR} <= capabilities
    text = _mlir_verifies_spirv(spirv.binary, tmp_path)
    assert "!spirv.coopmatrix<16x16xbf16, Subgroup, MatrixA>" in text
    # P's weights cut to bf16 in the IR (an f32 with its low 16 bits
    # cleared), so the device's FConvert, whatever its rounding, is exact:
    # the interpreter computes the same
    converted = 0
    for function in text.split("spirv.func")[1:]:  # each numbers its values anew
        defined = dict(re.findall(r"(%\w+) = (spirv\.[^\n]*)", function))
        for value in re.findall(r"spirv.FConvert (%\w+) : f32 to bf16", function):
            cast = re.fullmatch(r"spirv.Bitcast (%\w+) : i32 to f32", defined[value])
            assert cast, defined[value]
            assert re.fullmatch(r"spirv.BitwiseAnd %\w+, %cst-65536_i32\w* : i32",
                                defined[cast.group(1)]), defined[cast.group(1)]
            converted += 1
    assert converted


@needs_mlir_opt
@pytest.mark.parametrize("level", ["none", "exact", "default device=h200"])
def test_mlir_opt_verifies_the_rest_of_the_lowered_kernel(level):
    """MLIR 22's gpu dialect refuses bf16 matrices, and only them: with
    bf16 read as f16 it accepts the kernel (when it stops refusing them,
    requirements.py needs no substitution)."""
    lowered = _fa2(*FA2_CASES["gqa_row_blocks"], level=level)
    refused = subprocess.run([MLIR_OPT, "--allow-unregistered-dialect"], input=str(lowered),
                             capture_output=True, text=True)
    assert refused.returncode != 0
    assert "MMAMatrixType elements must be" in refused.stderr
    assert "gpu.subgroup_mma_compute" in assert_mlir_opt_accepts(lowered)
