"""The pure parts of benchmarks/attention_gpu.py, without torch: the absorbed
MLA formula its PyTorch baseline runs (the same code, on numpy here) against
the oracle, the modifiers both sides build (ours traced, PyTorch's as SDPA
masks and Flex mods) against one dense softmax, and the FLOP and table helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from benchmark_modules import benchmark_fixture

import vyre_xdsl as vx

bench = benchmark_fixture("attention_gpu")
# the baselines and helpers attention_gpu.py and decode_gpu.py share
common = benchmark_fixture("_common")


def test_mla_absorbed_matches_oracle(common):
    rng = np.random.default_rng(3)
    heads, dim, seq, rank, rope = 3, 8, 70, 16, 4
    q = rng.standard_normal((heads, dim), dtype=np.float32)
    kv = rng.standard_normal((seq, rank), dtype=np.float32)
    kr = rng.standard_normal((seq, rope), dtype=np.float32)
    w_uk, w_uv = (rng.standard_normal((rank, heads * dim), dtype=np.float32) / 4
                  for _ in range(2))
    got = common.mla_absorbed(q.astype(np.float64), kv.astype(np.float64),
                             kr.astype(np.float64), w_uk.astype(np.float64),
                             w_uv.astype(np.float64), np.einsum, common.numpy_softmax)
    want = vx.reference.mla_decode(q, kv, kr, w_uk, w_uv)
    assert got.shape == (heads, dim)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_mla_absorbed_rope_term_matters(common):
    """A formula without the rope term (or with it on the wrong dims) fails above."""
    rng = np.random.default_rng(4)
    q, kv, kr = (rng.standard_normal(s) for s in ((2, 4), (10, 8), (10, 2)))
    w = rng.standard_normal((8, 8))
    with_rope = common.mla_absorbed(q, kv, kr, w, w, np.einsum, common.numpy_softmax)
    without = common.mla_absorbed(q, kv, 0 * kr, w, w, np.einsum, common.numpy_softmax)
    assert not np.allclose(with_rope, without)


def dense(q, k, v, scores, bias=None):
    """softmax(scores(q k^T / sqrt(d)) + bias) v over [H, N, D], in float64."""
    s = np.einsum("hqd,hkd->hqk", q, k) / math.sqrt(q.shape[-1])
    s = scores(s)
    if bias is not None:
        s = s + bias
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("hqk,hkd->hqd", p / p.sum(-1, keepdims=True), v)


def modifiers(bench):
    return [bench.PLAIN, bench.CAUSAL, bench.sliding_window(5), bench.soft_cap(2.0),
            bench.ALIBI]


@pytest.mark.parametrize("index", range(5))
def test_modifiers_mean_the_same_on_both_sides(bench, index):
    mod = modifiers(bench)[index]
    rng = np.random.default_rng(index)
    heads, seq, dim = 2, 40, 8
    q, k, v = (rng.standard_normal((heads, seq, dim), dtype=np.float32) * 2 for _ in range(3))
    ours = vx.reference.flash_attention_2(q, k, v, 16, **bench.vx_mods(mod, heads, batch=1))
    q_idx, kv_idx = np.arange(seq)[:, None], np.arange(seq)[None, :]
    h_idx = np.arange(heads)[:, None, None]
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    # Flex's view: score_mod on every score, then the block mask.
    keep = mod.keep(q_idx, kv_idx) if mod.masks else np.ones((seq, seq), bool)
    flex = dense(q64, k64, v64, lambda s: np.where(
        keep, mod.score(s, q_idx, kv_idx, h_idx, heads, np), -np.inf))
    np.testing.assert_allclose(ours, flex, rtol=1e-4, atol=2e-5)
    # SDPA's view, where it can express the modifier.
    kwargs = mod.sdpa_kwargs(q_idx, kv_idx, h_idx, heads, np)
    if mod.soft_cap is not None:
        assert kwargs is None
        return
    if kwargs.get("is_causal"):
        bias = np.where(np.tril(np.ones((seq, seq), bool)), 0.0, -np.inf)
    elif "attn_mask" in kwargs:
        mask = kwargs["attn_mask"]
        bias = np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask[0]
    else:
        assert kwargs == {} and mod is bench.PLAIN
        bias = None
    np.testing.assert_allclose(ours, dense(q64, k64, v64, lambda s: s, bias),
                               rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("seq", [1, 7, 64, 300])
def test_kept_pairs(bench, seq):
    q_idx, kv_idx = np.arange(seq)[:, None], np.arange(seq)[None, :]
    for mod in modifiers(bench) + [bench.sliding_window(1), bench.sliding_window(1000)]:
        want = int(mod.keep(q_idx, kv_idx).sum()) if mod.masks else seq * seq
        assert bench.kept_pairs(seq, mod) == want, mod
    assert bench.fa2_flops(2, 3, seq, 8, bench.PLAIN) == 4 * 2 * 3 * seq * seq * 8


def test_best_path_and_text(common):
    times = {"eff": 4.03, "math": 9.1, "cudnn": None, "flash": None, "flex": 1.31}
    assert common.best_path(times) == ("flex", 1.31)
    assert common.paths_text(times) == "eff 4.03 / math 9.1 / cudnn n/a / flash n/a / flex 1.31"
    assert common.best_path({"eff": None}) == (None, None)
    assert common.fmt_ms(123.4) == "123" and common.fmt_ms(0.1724) == "0.172"


def test_row_ratio_is_against_the_best_path(bench):
    row = bench.Row("fa2", "x", "default", flops=4e9, torch_ms={"eff": 4.0, "math": 8.0,
                                                              "cudnn": None})
    row.ours_ms = 5.0
    assert row.best == ("eff", 4.0)
    assert row.ratio == pytest.approx(0.8)
    assert row.best_tflops == pytest.approx(1.0)
    record = row.as_json()
    assert record["best_path"] == "eff" and record["torch_ms"]["cudnn"] is None


def test_variants_and_tiles(bench):
    assert bench.parse_variants("none;default") == [("none", "none"), ("default", None)]
    assert bench.tile_size_of("tile=32/exact") == (32, "exact")
    assert bench.tile_size_of("tile=16") == (16, None)
    assert bench.tile_size_of(None) == (None, None)


def test_alibi_slopes_and_soft_cap_values(bench):
    heads = 8
    penalty = bench.ALIBI.score(0.0, 5, 2, np.arange(heads), heads, np)
    np.testing.assert_allclose(penalty, -3 * 2.0 ** (-8.0 * (np.arange(heads) + 1) / heads))
    assert bench.soft_cap(30).score(1e6, 0, 0, None, 1, np) == pytest.approx(30.0)
    assert bench.sliding_window(256).name == "window=256"
    assert bench.soft_cap(30).name == "softcap=30"
