"""Property tests for serving decode as the H200's plan lowers it: random
batches, GQA groups, head dims, key counts, dense / run-time lengths /
paged caches, f32 and bf16, wild data (NaN, +-inf, huge, subnormal) and
adversarial lengths and block tables (negative, past kv_len, page indices
outside the pool), on the interpreter against the oracle in the kernel's
order (tile, kv_splits, dim_parts, dim_chunk from the plan), bit for bit.

These kernels take the plan's decode rewrites together: kv splits merged
by a kernel, a key head's query rows on one lane (vyre-block-rows), rows
over lanes in chunks (vyre-split-head-dim), a tile's page looked up once
(vyre-fold-divisions), with run-time lengths a tile's value loads issued
at its top (vyre-hoist-tile-loads). Random shapes seldom take the shared
rows' plan, so a second property draws only shapes that do."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vyre_xdsl as vx
from vyre_xdsl.compiler import apply_pipeline
from vyre_xdsl.dialects import vyre

SETTINGS = dict(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HOST = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}
SPECIALS = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, 1e-40, 0.0, -0.0], np.float32)


@st.composite
def serving_cases(draw, shared_rows: bool = False):
    """A decode case; with `shared_rows`, one whose plan puts a key head's
    query rows in one invocation (rows of 128 dims, enough keys to split)."""
    batch = draw(st.integers(1, 4))
    kv_heads, group = draw(st.sampled_from(
        [(1, 2), (2, 2), (2, 4), (1, 8), (4, 8)] if shared_rows
        else [(1, 4), (2, 4), (2, 2), (4, 1), (1, 8)]))
    head_dim = 128 if shared_rows else draw(st.sampled_from([16, 32, 64, 128]))
    keys = draw(st.sampled_from([130, 300, 517] if shared_rows
                                else [1, 5, 16, 33, 64, 130, 300]))
    cache = draw(st.sampled_from(["dense", "kv_lens", "paged"]))
    dtype = draw(st.sampled_from(["f32", "bf16"]))
    page = draw(st.sampled_from([4, 16, 64]))
    seed = draw(st.integers(0, 2**32 - 1))
    specials = draw(st.integers(0, 3))
    lens = draw(st.lists(st.sampled_from([0, 1, keys, keys + 7, -5, max(keys // 2, 1)]),
                         min_size=batch, max_size=batch))
    bad_pages = draw(st.lists(st.sampled_from([-1, -100, 10**6]), max_size=2))
    return (batch, kv_heads, group, head_dim, keys, cache, dtype, page, seed, specials,
            lens, bad_pages)


def _case(batch, kv_heads, group, head_dim, keys, cache, dtype, page, seed, specials, lens,
          bad_pages):
    rng = np.random.default_rng(seed)
    heads = kv_heads * group
    pages = -(-keys // page)
    extra, paging = {}, {}
    if cache == "kv_lens":
        extra = {"kv_lens": True}
    if cache == "paged":
        extra = {"page_size": page, "num_pages": batch * pages}
    module = vx.flash_attention_2(seq_len=1, kv_len=keys, batch=batch, num_heads=heads,
                                  num_kv_heads=kv_heads, head_dim=head_dim, dtype=dtype,
                                  **extra)
    shape = ((batch * pages, page, kv_heads, head_dim) if cache == "paged"
             else (batch, kv_heads, keys, head_dim))
    arrays = {"q": rng.standard_normal((batch, heads, 1, head_dim)).astype(np.float32),
              "k": rng.standard_normal(shape).astype(np.float32),
              "v": rng.standard_normal(shape).astype(np.float32)}
    for _ in range(specials):
        name = rng.choice(["q", "k", "v"])
        arrays[name].flat[rng.integers(arrays[name].size)] = rng.choice(SPECIALS)
    arrays = {name: a.astype(HOST[dtype]) for name, a in arrays.items()}
    if cache != "dense":
        arrays["kv_lens"] = np.array(lens, np.int32)
        paging.update(kv_lens=arrays["kv_lens"], kv_len=keys)
    if cache == "paged":
        table = rng.permutation(batch * pages).astype(np.int32).reshape(batch, pages)
        for bad in bad_pages:
            table.flat[rng.integers(table.size)] = bad
        arrays["block_table"] = table
        paging.update(block_table=table, page_size=page)
    return module, arrays, paging


def _matches_the_oracle(case, fuzz_stats):
    """Run `case` at the H200's plan on the interpreter and compare it with
    the oracle in the kernel's order, bit for bit; its plan."""
    module, arrays, paging = _case(*case)
    (plan,) = [s.attributes["vyre.plan"] for s in
               apply_pipeline(module.clone(), "vyre-plan{device=h200}").walk()
               if isinstance(s, vyre.TiledOnlineSoftmaxOp)]
    got = vx.run(vx.lower_to_gpu(module, device="h200"), arrays)["out"]
    want = vx.reference.flash_attention_2(
        arrays["q"], arrays["k"], arrays["v"], tile_size=plan.tile_size,
        kv_splits=plan.kv_splits, merge_teams=plan.merge_teams, dim_parts=plan.dim_parts,
        dim_chunk=plan.dim_chunk,
        dtype=case[6], **paging)
    fuzz_stats["numeric: serving decode at the h200 plan vs oracle"] += 1
    fuzz_stats[f"numeric: ... with {plan.rows} rows an invocation"] += 1
    if plan.hoist_loads:
        fuzz_stats["numeric: ... with a tile's value loads at its top"] += 1
    # batch 1 keeps the single-sequence layouts: compare element for element
    got32, want32 = (a.astype(np.float32).reshape(-1) for a in (got, want))
    assert np.array_equal(np.isnan(got32), np.isnan(want32)), "NaN pattern differs"
    assert np.array_equal(got32, want32, equal_nan=True), (
        f"differs from the oracle: {case[:8]} plan {plan}")
    return plan


@settings(max_examples=40, **SETTINGS)
@given(case=serving_cases())
def test_serving_decode_at_the_h200_plan_matches_the_oracle_bit_for_bit(case, fuzz_stats):
    _matches_the_oracle(case, fuzz_stats)


@settings(max_examples=12, **SETTINGS)
@given(case=serving_cases(shared_rows=True))
def test_decode_with_shared_rows_matches_the_oracle_bit_for_bit(case, fuzz_stats):
    # a key head's query rows in one invocation (rows of 128 dims, splits
    # merged by a kernel), the value loads at the top of each tile where
    # lengths come at run time
    plan = _matches_the_oracle(case, fuzz_stats)
    assert plan.rows > 1, f"not the shared rows' plan: {plan}"
    assert bool(plan.hoist_loads) == (case[5] != "dense"), plan
