"""vyre-split-kv (flash-decoding): an item's tiles over several invocations,
merged in workgroup memory; exact against the split-order oracle, within
tolerance of the one-pass oracle, on the interpreter and on Vulkan.  The
merge by a kernel of its own is tested in tests/test_mla_program.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl import reference
from vyre_xdsl.compiler import apply_pipeline
from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import program_info
from tests.helpers import merge_teams_of
from tests.requirements import needs_vulkan

# |split - one pass| / max|out|, measured at most 4e-7 on these shapes.
TOLERANCE = 1e-5


def _splits(module) -> int:
    (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
    return op.splits


def _exact(got, want):
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _close(got, want):
    scale = max(float(np.max(np.abs(want))), 1e-30)
    assert float(np.max(np.abs(got - want))) <= TOLERANCE * scale


def _mla_inputs(seq, heads, dim, rank, rope, seed=2):
    rng = np.random.default_rng(seed)
    w = 1 / np.sqrt(rank)
    return {
        "q": rng.standard_normal((heads, dim)).astype(np.float32),
        "kv_cache": rng.standard_normal((seq, rank)).astype(np.float32),
        "kr_cache": rng.standard_normal((seq, rope)).astype(np.float32),
        "w_uk": (rng.standard_normal((rank, heads * dim)) * w).astype(np.float32),
        "w_uv": (rng.standard_normal((rank, heads * dim)) * w).astype(np.float32),
    }


@pytest.mark.parametrize("shape", [(256, 4, 16, 32, 8, 16), (300, 2, 8, 12, 4, 8)])
def test_absorbed_mla_is_split_in_its_workgroup_and_exact_with_its_oracle(shape):
    # The one-kernel absorbed form (tests/test_mla_program.py has the default,
    # the three-kernel one): its hooks keep the merge in the workgroup.
    *dims, tile = shape
    module = vx.mla_decode(*dims, tile_size=tile)
    split = apply_pipeline(module.clone(), "vyre-absorb-mla,vyre-split-kv")
    splits = _splits(split)
    assert splits > 1 and "_merge" not in str(split)
    inputs = _mla_inputs(*dims)
    got = vx.run(vx.lower_to_gpu(module, optimize="vyre-absorb-mla,vyre-to-gpu"), inputs)["out"]
    args = list(inputs.values())
    _exact(got, reference.mla_decode_absorbed(*args, tile_size=tile, kv_splits=splits))
    _close(got, reference.mla_decode(*args, tile_size=tile))


@pytest.mark.parametrize("shape", [(128, 8, 16), (112, 6, 16), (64, 4, 8)])
def test_few_fa2_rows_are_split_and_exact_with_the_split_oracle(shape):
    seq, dim, tile = shape
    module = vx.flash_attention_2(seq, dim, tile)
    splits = _splits(apply_pipeline(module.clone(), "vyre-split-kv"))
    assert splits > 1
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((seq, dim)).astype(np.float32) for _ in range(3))
    q[3, 0] = np.nan  # a NaN row stays NaN, the others stay finite
    got = vx.run(module, {"q": q, "k": k, "v": v})["out"]
    _exact(got, reference.flash_attention_2(q, k, v, tile_size=tile, kv_splits=splits))
    one_pass = reference.flash_attention_2(q, k, v, tile_size=tile)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(one_pass))
    rows = ~np.isnan(one_pass).any(axis=1)
    _close(got[rows], one_pass[rows])


@pytest.mark.parametrize("merge_dims", [1, 4])
@pytest.mark.parametrize("paged", [False, True])
def test_ragged_splits_lay_out_the_kernels_tiles_not_each_sequences(paged, merge_dims):
    # 17 keys in tiles of 4 are 5 tiles, 2 a split of 4: a sequence of 8
    # keys runs its 2 tiles in split 0 (the oracle's split_keys), not one
    # in each of splits 0 and 1; empty splits, and lengths clamped to
    # [0, kv_len], merge as nothing
    batch, heads, kv_heads, dim, keys, tile, page = 5, 4, 2, 8, 17, 4, 4
    pages = -(-keys // page)
    extra = dict(page_size=page, num_pages=batch * pages) if paged else dict(kv_lens=True)
    module = vx.flash_attention_2(seq_len=1, kv_len=keys, batch=batch, num_heads=heads,
                                  num_kv_heads=kv_heads, head_dim=dim, tile_size=tile, **extra)
    rng = np.random.default_rng(9)
    q = rng.standard_normal((batch, heads, 1, dim)).astype(np.float32)
    shape = (batch * pages, page, kv_heads, dim) if paged else (batch, kv_heads, keys, dim)
    k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    lens = np.array([1, 17, 0, 8, 22], np.int32)
    ins = {"q": q, "k": k, "v": v, "kv_lens": lens}
    paging = {}
    if paged:
        ins["block_table"] = rng.permutation(batch * pages).astype(np.int32).reshape(batch, -1)
        paging = dict(block_table=ins["block_table"], page_size=page)
    # merge_dims: each invocation of the merge kernel merges that many dims
    pipeline = (f"vyre-split-kv{{splits=4 merge=kernel merge_dims={merge_dims}}},"
                f"vyre-to-gpu{{optimize=exact}}")
    lowered = vx.lower_to_gpu(module, optimize=pipeline)
    (merge,) = [k for k in program_info(lowered).kernels if k.name.endswith("_merge")]
    assert merge.item_count == batch * heads * dim // merge_dims
    got = vx.run(lowered, ins)["out"]
    want = reference.flash_attention_2(q, k, v, tile_size=tile, kv_splits=4, kv_lens=lens,
                                       kv_len=keys, **paging)
    _exact(got, want)


@pytest.mark.parametrize("merge_dims", [2, 8])
def test_a_merge_kernel_of_several_dims_an_invocation_writes_each_lse_once(merge_dims):
    seq_len, kv_len, dim, heads = 3, 64, 8, 2
    module = vx.flash_attention_2(seq_len=seq_len, kv_len=kv_len, batch=1, num_heads=heads,
                                  head_dim=dim, tile_size=8, return_lse=True)
    pipeline = (f"vyre-split-kv{{splits=4 merge=kernel merge_dims={merge_dims}}},"
                f"vyre-to-gpu{{optimize=exact}}")
    rng = np.random.default_rng(12)
    q = rng.standard_normal((1, heads, seq_len, dim)).astype(np.float32)
    k, v = (rng.standard_normal((1, heads, kv_len, dim)).astype(np.float32) for _ in "kv")
    got = vx.run(vx.lower_to_gpu(module, optimize=pipeline), {"q": q, "k": k, "v": v})
    want, want_lse = reference.flash_attention_2(q, k, v, tile_size=8, kv_splits=4,
                                                 return_lse=True)
    _exact(got["out"], want)
    _exact(got["lse"], want_lse)


@pytest.mark.parametrize("order", ["split_first", "exp2_first"])
def test_exp2_and_a_merge_kernel_in_either_order(order):
    """vyre-use-exp2 after the split marks the merge kernel too: it merges
    maxima in log2 units (it merged them with exp: out off by 0.13, lse by
    1.0)."""
    seq_len, kv_len, dim, heads = 3, 64, 8, 2
    module = vx.flash_attention_2(seq_len=seq_len, kv_len=kv_len, num_heads=heads,
                                  head_dim=dim, tile_size=8, return_lse=True)
    passes = ["vyre-split-kv{splits=4 merge=kernel}", "vyre-use-exp2"]
    if order == "exp2_first":
        passes.reverse()
    lowered = vx.lower_to_gpu(module, optimize=",".join(passes + ["vyre-to-gpu{optimize=exact}"]))
    rng = np.random.default_rng(13)
    q = rng.standard_normal((heads, seq_len, dim)).astype(np.float32) * 3
    k, v = (rng.standard_normal((heads, kv_len, dim)).astype(np.float32) for _ in "kv")
    got = vx.run(lowered, {"q": q, "k": k, "v": v})
    want, want_lse = reference.flash_attention_2(q, k, v, tile_size=8, return_lse=True)
    _close(got["out"], want)
    np.testing.assert_allclose(got["lse"], want_lse, rtol=1e-5, atol=1e-5)


def test_merge_dims_of_the_tuning():
    from vyre_xdsl import tuning

    # as many dims as keep the kernel's invocations
    assert tuning.merge_dims(4096, 512) == tuning.MERGE_DIMS
    assert tuning.merge_dims(512, 512) == 4
    assert tuning.merge_dims(128, 512) == 1
    assert tuning.merge_dims(100000, 12) == 4  # a power of two dividing head_dim
    assert tuning.merge_dims(100000, 7) == 1


def _teams_case(cache: str, lse: bool, seed: int):
    """GQA decode of 2 sequences (4 query heads on 2 key heads, 16 dims,
    256 keys in tiles of 8), its inputs and the oracle's paging arguments."""
    keys, page = 256, 16
    extra = {"kv_lens": True} if cache == "kv_lens" else (
        {"page_size": page, "num_pages": 2 * keys // page} if cache == "paged" else {})
    module = vx.flash_attention_2(seq_len=1, kv_len=keys, batch=2, num_heads=4,
                                  num_kv_heads=2, head_dim=16, tile_size=8, return_lse=lse,
                                  **extra)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 4, 1, 16)).astype(np.float32)
    q[1, 2, 0, 3] = np.inf  # a row of clamped scores
    shape = (2 * keys // page, page, 2, 16) if cache == "paged" else (2, 2, keys, 16)
    k, v = (rng.standard_normal(shape).astype(np.float32) for _ in "kv")
    arrays, paging = {"q": q, "k": k, "v": v}, {}
    if cache != "dense":
        arrays["kv_lens"] = np.array([keys - 37, 90], np.int32)
        paging = {"kv_lens": arrays["kv_lens"], "kv_len": keys}
    if cache == "paged":
        arrays["block_table"] = rng.permutation(2 * keys // page).astype(np.int32).reshape(2, -1)
        paging.update(block_table=arrays["block_table"], page_size=page)
    return module, arrays, paging


@pytest.mark.parametrize("teams, dims, cache, lse", [
    (2, 1, "dense", True), (4, 2, "kv_lens", False), (8, 1, "paged", True), (32, 1, "dense",
                                                                             False)])
def test_a_merge_kernel_in_teams_has_the_bits_of_the_oracle_in_its_order(teams, dims, cache,
                                                                          lse):
    # 32 splits: each team walks 32 / teams of them, then team 0 adds the
    # teams' sums pairwise (vyre.merge_splits teams; the oracle's merge_teams)
    module, arrays, paging = _teams_case(cache, lse, seed=teams)
    pipeline = (f"vyre-split-kv{{splits=32 merge=kernel merge_dims={dims} "
                f"merge_teams={teams}}},vyre-to-gpu{{optimize=exact}}")
    lowered = vx.lower_to_gpu(module, optimize=pipeline)
    (merge,) = [k for k in program_info(lowered).kernels if k.name.endswith("_merge")]
    assert merge.item_count == 2 * 4 * 16 // dims * teams
    got = vx.run(lowered, arrays)
    want, other = (reference.flash_attention_2(
        arrays["q"], arrays["k"], arrays["v"], tile_size=8, kv_splits=32, merge_teams=t,
        return_lse=lse, **paging) for t in (teams, 1))
    if lse:
        (want, want_lse), (other, _) = want, other
        _exact(got["lse"], want_lse)
    _exact(got["out"], want)
    # the order shows in the bits, so a merge that ignored its teams would fail
    assert not np.array_equal(want, other)
    _close(got["out"], other)


@needs_vulkan
def test_a_merge_kernel_in_teams_on_vulkan():
    module, arrays, paging = _teams_case("paged", True, seed=5)
    lowered = vx.lower_to_gpu(module, optimize="vyre-split-kv{splits=32 merge=kernel "
                                                "merge_teams=8},vyre-to-gpu{optimize=exact}")
    got = vx.run(lowered, arrays, backend="vulkan")
    want, want_lse = reference.flash_attention_2(
        arrays["q"], arrays["k"], arrays["v"], tile_size=8, kv_splits=32, merge_teams=8,
        return_lse=True, **paging)
    _close(got["out"], want)
    np.testing.assert_allclose(got["lse"], want_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_split_kernels_write_their_partial_rows_16_bytes_at_a_time(backend):
    # vyre-vectorize-stores: a lane's four neighbouring dims of its partial
    # row go to split_o as one vector store, through a NonReadable vec4 view
    # in SPIR-V; nothing else changes, so the bits are the oracle's
    from vyre_xdsl.spirv import disassemble

    module, arrays, paging = _teams_case("dense", False, seed=7)
    lowered = vx.lower_to_gpu(module, optimize="vyre-split-kv{splits=32 merge=kernel},"
                                                "vyre-split-head-dim{parts=2 chunk=8},"
                                                "vyre-to-gpu{optimize=exact}")
    stores = [op for op in lowered.walk() if op.name in ("memref.store", "vector.store")
              and op.operands[1].name_hint == "flash_attention_2_split_o"]
    assert stores and all(op.name == "vector.store" for op in stores)
    text = disassemble(vx.compile_spirv(lowered))
    (view,) = re.findall(r'OpName (%\d+) "flash_attention_2_split_o_out_vec4"', text)
    assert f"OpDecorate {view} NonReadable" in text
    got = vx.run(lowered, arrays, backend=backend)["out"]
    want = reference.flash_attention_2(arrays["q"], arrays["k"], arrays["v"], tile_size=8,
                                       kv_splits=32, dim_parts=2, dim_chunk=8,
                                       merge_teams=merge_teams_of(apply_pipeline(
                                           module.clone(), "vyre-split-kv{splits=32 "
                                           "merge=kernel}")))
    if backend == "interpreter":
        _exact(got, want)
    else:
        _close(got, want)


def test_merge_teams_of_the_tuning_and_the_plan():
    from vyre_xdsl import tuning

    assert tuning.merge_teams(512, 4096, 64) == 8  # each team's 8 columns bound it
    assert tuning.merge_teams(512, 65536, 256) == tuning.MERGE_TEAMS
    assert tuning.merge_teams(48, 4096, 64) == 4  # 12 splits a team; 6 would be too few
    assert tuning.merge_teams(8, 4096, 64) == 1  # too few splits to share
    assert tuning.merge_teams(512, 12, 64) == 1  # 32 columns a team do not divide 12
    # GQA decode at batch 1 on the H200: 512 splits of 32 keys, merged in 8 teams
    module = vx.flash_attention_2(seq_len=1, kv_len=16384, batch=1, num_heads=32,
                                  num_kv_heads=8, head_dim=128, dtype="bf16")
    (plan,) = [s.attributes["vyre.plan"] for s in
               apply_pipeline(module, "vyre-plan{device=h200}").walk()
               if isinstance(s, vyre.TiledOnlineSoftmaxOp)]
    assert (plan.kv_splits, plan.merge.value, plan.merge_teams) == (512, "kernel", 8)
    lowered = vx.lower_to_gpu(module, device="h200")
    (merge,) = [k for k in program_info(lowered).kernels if k.name.endswith("_merge")]
    assert merge.item_count == 32 * 128 * 8


def test_merge_teams_that_do_not_fit_are_refused():
    module = vx.flash_attention_2(seq_len=1, kv_len=64, head_dim=8, tile_size=8)
    with pytest.raises(VyreError, match="cannot merge in 8 teams: they must divide its 4 "
                                        "splits"):
        vx.lower_to_gpu(module, optimize="vyre-split-kv{splits=4 merge=kernel merge_teams=8},"
                                         "vyre-to-gpu{optimize=exact}")
    with pytest.raises(VyreError, match="merge_teams must be 0 .choose. or a power of two, got 6"):
        vx.lower_to_gpu(module, optimize="vyre-split-kv{merge_teams=6}")
    q = np.zeros((1, 8), np.float32)
    with pytest.raises(VyreError, match=r"merge_teams \(3\) must be a power of two dividing "
                                        r"kv_splits \(6\)"):
        reference.flash_attention_2(q, q, q, tile_size=1, kv_splits=6, merge_teams=3)


def test_merge_dims_that_do_not_divide_the_value_dims_are_refused():
    module = vx.flash_attention_2(seq_len=1, kv_len=64, head_dim=8, tile_size=8)
    with pytest.raises(VyreError, match="cannot merge 3 dims an invocation: its rows have 8"):
        vx.lower_to_gpu(module, optimize="vyre-split-kv{splits=4 merge=kernel merge_dims=3},"
                                         "vyre-to-gpu{optimize=exact}")
    with pytest.raises(VyreError, match="option merge_dims takes an integer of at least 0"):
        vx.lower_to_gpu(module, optimize="vyre-split-kv{merge_dims=-1}")


def test_automatic_choice():
    def chosen(module):
        return _splits(apply_pipeline(module, "vyre-split-kv"))

    assert chosen(vx.mla_decode(4096, 16, 8, 8, 4)) == 64  # 16 items: as many as lanes
    assert chosen(vx.flash_attention_2(512, 8)) == 8  # 512 rows -> 4096 invocations
    assert chosen(vx.flash_attention_2(4096, 8)) == 1  # enough rows already
    causal = vx.flash_attention_2(256, 8, mask_mod=lambda q, kv: kv <= q)
    assert chosen(causal) == 1  # tile skipping is per block of rows


def test_forced_split_that_cannot_be_done_is_an_error():
    with pytest.raises(VyreError, match="cannot be split 8 ways: there are only 4 tiles"):
        vx.lower_to_gpu(vx.flash_attention_2(64, 2, 16),
                        optimize="vyre-split-kv{splits=8},vyre-to-gpu{optimize=none}")


def test_split_mla_fits_lavapipe_at_the_issue_shape():
    # The seed form runs 1000 keys in one invocation (over lavapipe's 65535
    # loop iterations); split, each invocation has a few tiles.
    lowered = vx.lower_to_gpu(vx.mla_decode(1000, 8, 64, 32, 16))
    assert program_info(lowered).loop_iterations < 65535


@needs_vulkan
def test_split_mla_on_vulkan_at_the_issue_shape():
    inputs = _mla_inputs(1000, 8, 64, 32, 16)
    got = vx.run(vx.mla_decode(1000, 8, 64, 32, 16), inputs, backend="vulkan")["out"]
    _close(got, reference.mla_decode(*inputs.values()))


@needs_vulkan
def test_split_fa2_on_vulkan():
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((256, 16)).astype(np.float32) for _ in range(3))
    got = vx.run(vx.flash_attention_2(256, 16), {"q": q, "k": k, "v": v},
                 backend="vulkan")["out"]
    _close(got, reference.flash_attention_2(q, k, v))


def _huge_values(seq_len, kv_len, dim):
    # Key 0 outscores the others by 20, whose values are 3e37: one pass gives
    # them weights of e^-20, but a split without key 0 weighs them near 1
    # against its own maximum, and its unscaled partial overflows.
    q = np.zeros((seq_len, dim), np.float32)
    q[:, 0] = 4.0
    k = np.zeros((kv_len, dim), np.float32)
    k[0, 0] = 10.0
    v = np.full((kv_len, dim), 3e37, np.float32)
    v[0] = 0.0
    return q, k, v


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
@pytest.mark.parametrize("seq_len", [64, 1])  # merged in the workgroup; by a kernel
def test_split_partials_do_not_overflow_where_one_pass_does_not(backend, seq_len):
    kv_len, dim = 1024, 4
    lse = seq_len > 1  # a merge kernel does not take lse
    module = vx.flash_attention_2(seq_len, dim, kv_len=kv_len, return_lse=lse)
    pipeline = "vyre-split-kv,vyre-to-gpu{optimize=exact}"
    splits = _splits(apply_pipeline(module.clone(), "vyre-split-kv"))
    assert splits > 1
    assert ("_merge" in str(vx.lower_to_gpu(module, optimize=pipeline))) == (not lse)
    q, k, v = _huge_values(seq_len, kv_len, dim)
    got = vx.run(vx.lower_to_gpu(module, optimize=pipeline), {"q": q, "k": k, "v": v},
                 backend=backend)
    want = reference.flash_attention_2(q, k, v, kv_splits=splits, return_lse=lse)
    one_pass = reference.flash_attention_2(q, k, v, return_lse=lse)
    if lse:
        (want, want_lse), (one_pass, one_lse) = want, one_pass
        _exact(got["lse"], want_lse)
        np.testing.assert_allclose(got["lse"], one_lse, rtol=1e-6)
    assert np.isfinite(one_pass).all() and np.isfinite(got["out"]).all()
    _exact(got["out"], want)
    _close(got["out"], one_pass)
