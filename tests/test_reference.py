"""The numpy oracle (vyre_xdsl.reference) against plain float64 attention,
the stability helpers against SEMANTICS.md, and its argument checks."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from vyre_xdsl import reference as ref
from vyre_xdsl.errors import VyreError

F32_MIN = np.float32(-3.4028235e38)
TINY = np.float32(1.17549435e-38)


def softmax_attention(q, k, v):
    """Plain attention in float64: softmax(q k^T / sqrt(d)) v."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


def rand(*shape, seed=0, scale=1.0):
    rng = np.random.default_rng(seed + sum(shape))
    return (scale * rng.standard_normal(shape)).astype(np.float32)


# --------------------------------------------------------------------------
# stability helpers
# --------------------------------------------------------------------------


def f32(*values):
    return np.array(values, dtype=np.float32)


def test_finite_or():
    got = ref.finite_or(f32(1.5, np.inf, -np.inf, np.nan), np.float32(7))
    assert (got == f32(1.5, 7, 7, 7)).all()


def test_bounded_score_keeps_nan_and_clamps_infinities():
    got = ref.bounded_score(f32(np.nan, np.inf, -np.inf, 3e38, -5.0))
    assert np.isnan(got[0])
    assert (got[1:] == f32(-80, -80, 3e38, -5)).all()


def test_bounded_exp_arg():
    got = ref.bounded_exp_arg(f32(np.nan, np.inf, -np.inf, 5.0, -100.0, -3.0, 0.0))
    assert np.isnan(got[0])
    assert (got[1:] == f32(-80, -80, 0, -80, -3, 0)).all()


def test_positive_denominator():
    got = ref.positive_denominator(
        f32(np.nan, 0.0, -1.0, np.inf, TINY, 1e-39, 2.0)
    )
    assert np.isnan(got[0])
    assert (got[1:] == f32(TINY, TINY, TINY, TINY, TINY, 2.0)).all()


def test_flush_tiny():
    got = ref.flush_tiny(f32(np.nan, TINY, -TINY, 1e-39, 1e-30, -2.0))
    assert np.isnan(got[0])
    assert (got[1:] == f32(0, 0, 0, 1e-30, -2.0)).all()
    assert not np.signbit(got[3])


def test_constants():
    assert ref.F32_MIN == F32_MIN == np.finfo(np.float32).min
    assert ref.MIN_POSITIVE == TINY == np.finfo(np.float32).tiny


# --------------------------------------------------------------------------
# FlashAttention-2
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seq_len,head_dim,tile_size",
    [(1, 1, 64), (5, 3, 64), (10, 4, 4), (64, 8, 16), (70, 5, 7)],
)
def test_flash_attention_2_is_attention(seq_len, head_dim, tile_size):
    q, k, v = (rand(seq_len, head_dim, seed=i) for i in range(3))
    got = ref.flash_attention_2(q, k, v, tile_size=tile_size)
    assert got.dtype == np.float32 and got.shape == (seq_len, head_dim)
    np.testing.assert_allclose(got, softmax_attention(q, k, v), rtol=2e-5, atol=2e-6)


def test_flash_attention_2_tile_size_changes_only_rounding():
    q, k, v = (rand(37, 4, seed=i) for i in range(3))
    a = ref.flash_attention_2(q, k, v, tile_size=64)
    for tile_size in (1, 5, 16):
        np.testing.assert_allclose(
            ref.flash_attention_2(q, k, v, tile_size=tile_size), a, rtol=1e-5, atol=1e-6
        )


def test_flash_attention_2_stability():
    q, k, v = (rand(12, 3, seed=i) for i in range(3))
    q[4, 2] = np.nan
    k[2, 0], k[7, 1] = np.inf, -np.inf
    out = ref.flash_attention_2(q, k, v, tile_size=4)
    assert np.isnan(out[4]).all()
    assert np.isfinite(np.delete(out, 4, axis=0)).all()
    huge = ref.flash_attention_2(q * np.float32(1e19), k, v, tile_size=4)
    assert np.isfinite(np.delete(huge, 4, axis=0)).all()
    zero_q = ref.flash_attention_2(np.zeros_like(q), rand(12, 3, seed=9), v, tile_size=4)
    np.testing.assert_allclose(zero_q, np.broadcast_to(v.mean(0), v.shape), rtol=1e-5)


@pytest.mark.parametrize(
    "args,match",
    [
        ((np.zeros(4, np.float32),) * 3, "2-D"),
        ((np.zeros((4, 2)),) * 3, "dtype float64"),
        ((np.zeros((4, 2), np.float32), np.zeros((5, 2), np.float32),
          np.zeros((4, 2), np.float32)), "same shape"),
        (([[1.0]], [[1.0]], [[1.0]]), "numpy array"),
        ((np.zeros((0, 2), np.float32),) * 3, "empty dimension"),
    ],
)
def test_flash_attention_2_rejects_bad_arguments(args, match):
    with pytest.raises(VyreError, match=match):
        ref.flash_attention_2(*args)


def test_bad_tile_size():
    q = np.zeros((2, 2), np.float32)
    with pytest.raises(VyreError, match="tile_size must be > 0"):
        ref.flash_attention_2(q, q, q, tile_size=0)


@pytest.mark.parametrize("split_keys, match", [
    (3, r"split_keys \(3\) must be at least seq_len \(4\)"),
    (0, "split_keys must be > 0"),
    (2.5, "split_keys must be an int"),
    ("8", "split_keys must be an int"),
])
def test_split_keys_are_the_kernels_keys_or_an_error(split_keys, match):
    def scores(tile_start, tile_len):
        return np.zeros((tile_len, 1), np.float32)

    def update(o_acc, weight, rescale, tile_start, tile_len):
        return o_acc

    with pytest.raises(VyreError, match=match):
        ref.tiled_online_softmax(1, 1, 4, 2, scores, update, kv_splits=2, split_keys=split_keys)


def _zero_scores(tile_start, tile_len):
    return np.zeros((tile_len, 3), np.float32)


def _same_o_acc(o_acc, weight, rescale, tile_start, tile_len):
    return o_acc


@pytest.mark.parametrize("args, match", [
    ((3, 2, 4, 0, _zero_scores, _same_o_acc), "tile_size must be > 0, got 0"),
    ((3, 2, -1, 2, _zero_scores, _same_o_acc), "seq_len must be > 0, got -1"),
    ((3, 2, False, 2, _zero_scores, _same_o_acc), "seq_len must be an int, got False"),
    ((0, 2, 4, 2, _zero_scores, _same_o_acc), "item_count must be > 0"),
    ((3, 2, 4, 2, lambda start, n: np.zeros((3, n), np.float32), _same_o_acc),
     r"compute_tile_scores\(tile_start, tile_len\) must return f32\[tile_len, item_count\], "
     r"here of shape \(2, 3\); got shape \(3, 2\)"),
    ((3, 2, 4, 2, _zero_scores, lambda *args: None),
     r"update_o_acc\(.*\) must return o_acc, f32\[item_count, head_dim\], here of shape "
     r"\(3, 2\); got NoneType"),
    ((3, 2, 4, 2, _zero_scores, "update"), "update_o_acc must be a function, got str"),
])
def test_the_numpy_skeleton_checks_its_arguments_and_fragments(args, match):
    """Each was a ZeroDivisionError, a numpy broadcast error or a TypeError."""
    with pytest.raises(VyreError, match=match):
        ref.tiled_online_softmax(*args)
    # no keys at all (a run-time length of 0): rows of zeros
    out = ref.tiled_online_softmax(3, 2, 0, 2, _zero_scores, _same_o_acc)
    assert out.shape == (3, 2) and not out.any()


def test_split_keys_lay_the_splits_over_the_kernels_tiles():
    # 4 keys of a kernel of 16 in tiles of 2, split 2 ways: split 0 takes
    # tiles 0-3 of the kernel's 8, so all 4 keys run in one split
    runs = []

    def scores(tile_start, tile_len):
        runs[-1].append(tile_start)  # prologue() opened this split's run
        return np.zeros((tile_len, 1), np.float32)

    def update(o_acc, weight, rescale, tile_start, tile_len):
        return o_acc

    def prologue():
        runs.append([])

    ref.tiled_online_softmax(1, 1, 4, 2, scores, update, prologue=prologue, kv_splits=2,
                             split_keys=16)
    assert runs == [[0, 2], []]
    runs.clear()
    ref.tiled_online_softmax(1, 1, 4, 2, scores, update, prologue=prologue, kv_splits=2)
    assert runs == [[0], [2]]


# --------------------------------------------------------------------------
# MLA decode
# --------------------------------------------------------------------------


def mla_args(S, H, D, R, P, seed=0):
    return (
        rand(H, D, seed=seed),
        rand(S, R, seed=seed + 1),
        rand(S, P, seed=seed + 2),
        rand(R, H * D, seed=seed + 3, scale=0.5),
        rand(R, H * D, seed=seed + 4, scale=0.5),
    )


def mla_float64(q, kv, kr, wk, wv):
    H, D = q.shape
    S, R = kv.shape
    P = kr.shape[1]
    out = np.empty((H, D))
    for h in range(H):
        k = kv.astype(np.float64) @ wk[:, h * D:(h + 1) * D].astype(np.float64)
        k[:, :P] += kr
        v = kv.astype(np.float64) @ wv[:, h * D:(h + 1) * D].astype(np.float64)
        s = k @ q[h].astype(np.float64) / np.sqrt(D)
        p = np.exp(s - s.max())
        out[h] = p @ v / p.sum()
    return out


@pytest.mark.parametrize(
    "S,H,D,R,P,T",
    [(1, 1, 1, 1, 1, 64), (10, 3, 4, 5, 2, 4), (9, 2, 4, 3, 4, 64), (70, 4, 3, 6, 1, 16)],
)
def test_mla_decode_is_latent_attention(S, H, D, R, P, T):
    args = mla_args(S, H, D, R, P)
    got = ref.mla_decode(*args, tile_size=T)
    assert got.dtype == np.float32 and got.shape == (H, D)
    np.testing.assert_allclose(got, mla_float64(*args), rtol=1e-4, atol=1e-5)


def test_mla_decode_nan_head():
    args = list(mla_args(6, 3, 2, 2, 1))
    args[0][1, 0] = np.nan
    out = ref.mla_decode(*args, tile_size=4)
    assert np.isnan(out[1]).all() and np.isfinite(out[[0, 2]]).all()


def test_mla_decode_rejects_bad_shapes():
    q, kv, kr, wk, wv = mla_args(4, 2, 3, 2, 1)
    with pytest.raises(VyreError, match="w_uk must have shape"):
        ref.mla_decode(q, kv, kr, wk[:, :5], wv)
    with pytest.raises(VyreError, match="kr_cache has 3 rows"):
        ref.mla_decode(q, kv, kr[:3], wk, wv)
    with pytest.raises(VyreError, match="qk_rope_head_dim"):
        ref.mla_decode(q, kv, np.zeros((4, 4), np.float32), wk, wv)


def test_recurrence_exists_once():
    """Both decoders use the one skeleton; neither repeats the recurrence."""
    source = inspect.getsource(ref)
    assert source.count("positive_denominator(l)") == 1
    assert source.count("def tiled_online_softmax") == 1
    # flash_attention_2 checks its arrays (and splits ragged batches), its
    # fragments are _flash_attention_2's; the MLA oracles' are one sequence's
    from vyre_xdsl import reference_mla

    assert "positive_denominator" not in inspect.getsource(reference_mla)
    for decoder in (ref._flash_attention_2, reference_mla._seed, reference_mla._absorbed,
                    reference_mla._program):
        body = inspect.getsource(decoder)
        assert "tiled_online_softmax(" in body
        assert "tile_max" not in body and "positive_denominator" not in body
    for wrapper in (ref.flash_attention_2, ref._ragged_flash_attention_2):
        body = inspect.getsource(wrapper)
        assert "tile_max" not in body and "positive_denominator" not in body
