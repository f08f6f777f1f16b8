"""MLA decode for serving (#18): a batch of sequences, ragged key counts
at run time (kv_lens) and paged latent caches (block_table), as
`vx.mla_decode(batch=, kv_lens=, page_size=, num_pages=)` builds them.

What is checked: the oracle (`reference.mla_decode` and the absorbed
forms' oracles with kv_lens/block_table) against attention in float64 over
the dense caches gathered from the pages; the interpreter bit-exact with
the oracle at optimize none and exact (f32 and bf16), and the absorbed
kernels with their own oracles; `default` (absorbed, split) within the
tolerance of tests/test_absorb_mla.py (f32) or tests/test_half_precision.py
(bf16) on the interpreter and on lavapipe; one compiled kernel for every
length; lengths and pages out of range clamped; bad arguments refused."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from helpers import assert_bad_paged_inputs_refused
from requirements import needs_vulkan
from test_absorb_mla import assert_near_seed
from test_fuzz_numeric import assert_close
from test_half_precision import assert_within_tolerance
from vyre_xdsl import reference
from vyre_xdsl.dialects.mla import MLA_ATTR
from vyre_xdsl.dtypes import numpy_dtype
from vyre_xdsl.errors import VyreError

# batch, seq_len, heads, head_dim, rank, rope, tile, page_size, num_pages, lengths
CASES = {
    "ragged_b3": (3, 21, 2, 4, 6, 2, 8, None, None, [21, 0, 9]),
    "paged_b3": (3, 19, 3, 4, 5, 2, 4, 4, 18, [19, 1, 6]),
    "paged_b1": (1, 10, 2, 4, 4, 4, 4, 3, 6, [7]),
    "dense_b3": (3, 9, 2, 3, 4, 1, 4, None, None, None),
}
NAMES = ("q", "kv_cache", "kr_cache", "w_uk", "w_uv")


def module(case, dtype="f32", **overrides):
    batch, S, H, D, R, P, T, page, pages, lens = case
    kwargs = dict(dtype=dtype, batch=batch, kv_lens=lens is not None, page_size=page,
                  num_pages=pages)
    return vx.mla_decode(S, H, D, R, P, T, **{**kwargs, **overrides})


def inputs(case, dtype="f32", seed=0):
    """q, the caches (pools and a shuffled block table of distinct pages when
    paged), the weights, kv_lens; in `dtype`."""
    batch, S, H, D, R, P, _, page, pages, lens = case
    rng = np.random.default_rng(seed)
    rows = (batch, H, D)  # the builder is given batch= (module): its axis, one too
    keys = (pages, page) if page else (batch, S)
    half = numpy_dtype(dtype)
    ins = {
        "q": rng.standard_normal(rows),
        "kv_cache": rng.standard_normal((*keys, R)),
        "kr_cache": rng.standard_normal((*keys, P)),
        "w_uk": 0.5 * rng.standard_normal((R, H * D)),
        "w_uv": 0.5 * rng.standard_normal((R, H * D)),
    }
    ins = {name: a.astype(np.float32).astype(half) for name, a in ins.items()}
    if lens is not None:
        ins["kv_lens"] = np.asarray(lens, np.int32)
    if page:
        per_seq = -(-S // page)
        table = rng.permutation(pages)[: batch * per_seq]
        ins["block_table"] = table.reshape(batch, per_seq).astype(np.int32)
    return ins


def serving(case, ins) -> dict:
    """The oracle's keywords for the kernel's lengths and pages."""
    S, page, lens = case[1], case[7], case[9]
    if lens is None:
        return {}
    paged = dict(block_table=ins["block_table"], page_size=page) if page else {}
    return dict(kv_lens=ins["kv_lens"], kv_len=S, **paged)


def oracle(case, ins, form="mla_decode", dtype="f32", **options):
    arrays = [ins[n] for n in NAMES]
    return getattr(reference, form)(*arrays, tile_size=case[6], dtype=dtype,
                                    **serving(case, ins), **options)


def dense(case, ins) -> np.ndarray:
    """MLA decode in float64 over each sequence's first L_b keys of the
    dense caches (gathered from the pages): softmax(q K^T / sqrt(D)) V with
    K = W_uk c + [kr, 0], V = W_uv c; no keys gives 0."""
    batch, S, H, D, R, P, _, page, _, lens = case
    f64 = {n: ins[n].astype(np.float64) for n in NAMES}
    kv, kr = f64["kv_cache"], f64["kr_cache"]
    if page:
        kv, kr = (reference.gather_pages(ins[n].astype(np.float32), ins["block_table"], page, S)
                  for n in ("kv_cache", "kr_cache"))
    kv, kr = (np.asarray(a, np.float64).reshape(batch, S, -1) for a in (kv, kr))
    q = f64["q"].reshape(batch, H, D)
    wk, wv = (f64[n].reshape(R, H, D) for n in ("w_uk", "w_uv"))
    out = np.zeros((batch, H, D))
    for b in range(batch):
        length = S if lens is None else min(max(lens[b], 0), S)
        if length == 0:
            continue
        keys = np.einsum("rhd,tr->htd", wk, kv[b, :length])
        keys[:, :, :P] += kr[b, :length][None]
        values = np.einsum("rhd,tr->htd", wv, kv[b, :length])
        s = np.einsum("hd,htd->ht", q[b], keys) / np.sqrt(D)
        p = np.exp(s - s.max(-1, keepdims=True))
        out[b] = np.einsum("ht,htd->hd", p / p.sum(-1, keepdims=True), values)
    return out.reshape(ins["q"].shape)


def assert_same_bits(got, want, what=""):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    width = {2: np.uint16, 4: np.uint32}[got.dtype.itemsize]
    same = (got.view(width) == want.view(width)) | (
        np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32)))
    assert same.all(), f"{what}: differs at {np.argwhere(~same)[:3].tolist()}"


def assert_default_close(got, case, ins, dtype):
    """`default` absorbs and splits: the reordering tolerance of
    test_absorb_mla (f32), or test_half_precision's ulps of the half type
    at the f32 oracle (bf16)."""
    seed_f32 = oracle(case, {n: a.astype(np.float32) if a.dtype != np.int32 else a
                             for n, a in ins.items()})
    if dtype == "f32":
        assert_near_seed(got.reshape(-1, got.shape[-1]), seed_f32.reshape(-1, got.shape[-1]))
    else:
        assert_within_tolerance(got, seed_f32, dtype)


# -- the oracle -------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("form", ["mla_decode", "mla_decode_absorbed", "mla_decode_program"])
def test_oracle_matches_float64_attention(case, form):
    ins = inputs(case, seed=3)
    got = oracle(case, ins, form)
    want = dense(case, ins)
    assert got.shape == ins["q"].shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)


def test_oracle_of_a_batch_is_each_sequence_alone():
    case = CASES["ragged_b3"]
    ins = inputs(case, seed=4)
    batched = oracle(case, ins)
    for b, length in enumerate(case[9]):
        alone = reference.mla_decode(ins["q"][b], ins["kv_cache"][b, :length],
                                     ins["kr_cache"][b, :length], ins["w_uk"], ins["w_uv"],
                                     case[6]) if length else np.zeros_like(batched[b])
        assert_same_bits(batched[b], alone, f"sequence {b}")


def test_gather_pages_reads_latent_pools():
    pool = np.arange(5 * 2 * 3, dtype=np.float32).reshape(5, 2, 3)
    table = np.array([[4, -1], [9, 0]], np.int32)  # -1 and 9: clamped to 0 and 4
    dense_rows = reference.gather_pages(pool, table, 2, 3)
    assert dense_rows.shape == (2, 3, 3)
    np.testing.assert_array_equal(dense_rows[0], np.concatenate([pool[4], pool[0][:1]]))
    np.testing.assert_array_equal(dense_rows[1], np.concatenate([pool[4], pool[0][:1]]))


# -- the interpreter: bit-exact at none and exact ------------------------------------


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("optimize", ["none", "exact"])
def test_interpreter_is_bit_exact_with_the_oracle(case, dtype, optimize):
    ins = inputs(case, dtype, seed=5)
    got = vx.run(vx.lower_to_gpu(module(case, dtype), optimize=optimize), ins)["out"]
    assert_same_bits(got, oracle(case, ins, dtype=dtype), f"{optimize} {dtype}")


ABSORBED = "vyre-absorb-mla,vyre-to-gpu{optimize=exact}"
PROGRAM = "vyre-absorb-mla{kernels=3},vyre-to-gpu{optimize=exact}"
SPLIT = "vyre-absorb-mla{kernels=3},vyre-split-kv{splits=2 merge=kernel},vyre-to-gpu{optimize=exact}"


# (a split kernel with run-time lengths divides the tiles of kv_len, and
# so does the oracle: its split_keys are the kernel's kv_len)
@pytest.mark.parametrize("case, pipeline, form, options", [
    (CASES["ragged_b3"], ABSORBED, "mla_decode_absorbed", {}),
    (CASES["paged_b3"], ABSORBED, "mla_decode_absorbed", {}),
    (CASES["ragged_b3"], PROGRAM, "mla_decode_program", {}),
    (CASES["paged_b3"], PROGRAM, "mla_decode_program", {}),
    (CASES["dense_b3"], SPLIT, "mla_decode_program", dict(kv_splits=2)),
    (CASES["ragged_b3"], SPLIT, "mla_decode_program", dict(kv_splits=2)),
    (CASES["paged_b3"], SPLIT, "mla_decode_program", dict(kv_splits=2)),
], ids=["absorbed-ragged", "absorbed-paged", "program-ragged", "program-paged",
        "program-split-dense", "program-split-ragged", "program-split-paged"])
def test_absorbed_kernels_are_bit_exact_with_their_oracles(case, pipeline, form, options):
    ins = inputs(case, seed=6)
    got = vx.run(vx.lower_to_gpu(module(case), optimize=pipeline), ins)["out"]
    assert_same_bits(got, oracle(case, ins, form, **options), pipeline)


# -- default: absorbed and split, within tolerance -----------------------------------


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_default_on_the_interpreter_is_close_to_the_oracle(case, dtype):
    ins = inputs(case, dtype, seed=7)
    assert_default_close(vx.run(module(case, dtype), ins)["out"], case, ins, dtype)


@needs_vulkan
@pytest.mark.parametrize("case", [CASES["ragged_b3"], CASES["paged_b3"], CASES["paged_b1"]],
                         ids=["ragged_b3", "paged_b3", "paged_b1"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("optimize", ["none", "exact", "default"])
def test_lavapipe_runs_serving_mla(case, dtype, optimize):
    ins = inputs(case, dtype, seed=8)
    m = module(case, dtype)
    if optimize != "default":  # vx.run lowers at default, for the device
        m = vx.lower_to_gpu(m, optimize=optimize)
    got = vx.run(m, ins, backend="vulkan")["out"]
    if optimize == "default" or dtype != "f32":
        assert_default_close(got, case, ins, dtype)
    else:  # GLSL.std.450 Exp is not correctly rounded: the Vulkan tolerance
        assert_close(got, oracle(case, ins), f"vulkan {optimize}")


# -- one compiled kernel, clamping ---------------------------------------------------


def test_one_compiled_kernel_serves_every_length():
    case = CASES["paged_b3"]
    ins = inputs(case, seed=9)
    with vx.compile(module(case), backend="interpreter", optimize="exact") as kernel:
        for lens in ([19, 1, 6], [0, 0, 0], [4, 19, 12]):
            ins["kv_lens"] = np.asarray(lens, np.int32)
            assert_same_bits(kernel(**ins)["out"], oracle(case, ins), f"lengths {lens}")


def test_out_of_range_lengths_and_pages_are_clamped():
    case = CASES["paged_b3"]
    ins = inputs(case, seed=10)
    ins["kv_lens"] = np.array([-3, 100, 7], np.int32)  # clamped to 0, 19, 7
    ins["block_table"][0, 1] = -1
    ins["block_table"][2, 0] = 999  # clamped to the last page
    got = vx.run(vx.lower_to_gpu(module(case), optimize="exact"), ins)["out"]
    want = oracle(case, ins)
    assert_same_bits(got, want)
    assert not want[0].any()  # no keys: 0
    clamped = dict(ins, kv_lens=np.array([0, 19, 7], np.int32))
    clamped["block_table"] = np.clip(ins["block_table"], 0, case[8] - 1)
    assert_same_bits(want, oracle(case, clamped))


# -- the record and the boundary -----------------------------------------------------


def test_the_kernel_records_the_builders_arguments():
    case = CASES["paged_b3"]
    (kernel,) = module(case).body.block.ops
    assert kernel.attributes[MLA_ATTR].arguments() == dict(
        seq_len=19, num_heads=3, head_dim=4, kv_lora_rank=5, qk_rope_head_dim=2, batch=3,
        kv_lens=True, page_size=4, num_pages=18)
    buffers = {b.sym_name.data: b.logical_shape for b in kernel.buffers}
    assert buffers == {"q": (3, 3, 4), "kv_cache": (18, 4, 5), "kr_cache": (18, 4, 2),
                       "w_uk": (5, 12), "w_uv": (5, 12), "out": (3, 3, 4), "kv_lens": (3,),
                       "block_table": (3, 5)}


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch=0), "batch must be > 0"),
    (dict(batch=2.0), "batch must be a positive integer"),
    (dict(page_size=4), "give num_pages too"),
    (dict(num_pages=4), "give page_size too"),
    (dict(page_size=4, num_pages=8, kv_lens=False), "imply kv_lens"),
    (dict(kv_lens="yes"), "kv_lens must be True or False"),
    (dict(page_size=0, num_pages=8), "page_size must be > 0"),
    (dict(page_size=2**20, num_pages=2**20), "buffer kv_cache"),
    (dict(batch=2**31, seq_len=4), "buffer q"),
])
@pytest.mark.parametrize("builder", [vx.mla_decode, vx.mla_decode_absorbed,
                                     vx.mla_decode_program])
def test_bad_builder_arguments_are_refused(builder, kwargs, match):
    args = dict(seq_len=8, num_heads=2, head_dim=4, kv_lora_rank=3, qk_rope_head_dim=2,
                tile_size=4)
    with pytest.raises(VyreError, match=match):
        builder(**{**args, **kwargs})


def test_bad_run_time_inputs_are_refused():
    case = CASES["paged_b3"]
    assert_bad_paged_inputs_refused(module(case), inputs(case))


def test_bad_oracle_arguments_are_refused():
    case = CASES["paged_b3"]
    ins = inputs(case)
    arrays = [ins[n] for n in NAMES]
    with pytest.raises(VyreError, match="block_table, page_size and kv_lens together"):
        reference.mla_decode(*arrays, 4, block_table=ins["block_table"], kv_lens=ins["kv_lens"])
    with pytest.raises(VyreError, match="kv_lens must have one entry per sequence"):
        reference.mla_decode(*arrays, 4, kv_lens=ins["kv_lens"][:2], kv_len=19,
                             block_table=ins["block_table"], page_size=4)
    with pytest.raises(VyreError, match="kv_lens must be a 1-D np.int32 array"):
        reference.mla_decode(*arrays, 4, kv_lens=ins["kv_lens"].astype(np.int64), kv_len=19,
                             block_table=ins["block_table"], page_size=4)
    dense_case = CASES["ragged_b3"]
    dense_ins = inputs(dense_case)
    with pytest.raises(VyreError, match="same batch"):
        reference.mla_decode(dense_ins["q"][:2], *[dense_ins[n] for n in NAMES[1:]], 8)
