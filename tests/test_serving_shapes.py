"""FlashAttention-2 over batches of sequences, with queries and keys of
different lengths (bottom-right aligned), against the oracle and against
dense attention computed in float64."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl import reference
from vyre_xdsl.errors import VyreError
from tests.requirements import needs_vulkan


def dense(q, k, v, mask_mod=None):
    """softmax(q k^T / sqrt(D)) v in float64, q [B,H,Sq,D], k/v [B,Hkv,L,D],
    queries at positions L - Sq + i."""
    batch, heads, sq, d = q.shape
    length = k.shape[2]
    group = heads // k.shape[1]
    kk, vv = (np.repeat(a.astype(np.float64), group, axis=1) for a in (k, v))
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), kk) / np.sqrt(d)
    if mask_mod is not None:
        qi = (length - sq + np.arange(sq))[:, None]
        ki = np.arange(length)[None, :]
        if len(inspect.signature(mask_mod).parameters) == 3:
            keep = np.stack([np.broadcast_to(mask_mod(qi, ki, h), (sq, length))
                             for h in range(heads)])[None]
        else:
            keep = np.broadcast_to(mask_mod(qi, ki), (sq, length))[None, None]
        s = np.where(keep, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), vv)


CASES = [
    # batch, heads, kv heads, queries, keys, head_dim, mask
    (2, 4, 2, 5, 37, 8, None),
    (3, 2, 1, 37, 37, 16, lambda q, kv: kv <= q),
    (2, 2, 2, 3, 40, 8, lambda q, kv: kv <= q),  # causal decode of 3 tokens
    (1, 1, 1, 1, 50, 4, None),  # one token against a cache
    (1, 3, 1, 7, 20, 4, lambda q, kv, h: (q - kv) <= 3 + h),  # a window per head
]


def _inputs(batch, heads, kv_heads, sq, length, d, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, heads, sq, d), dtype=np.float32)
    k, v = (rng.standard_normal((batch, kv_heads, length, d), dtype=np.float32)
            for _ in range(2))
    return q, k, v


def _module(batch, heads, kv_heads, sq, length, d, mask):
    return vx.flash_attention_2(seq_len=sq, kv_len=length, batch=batch, num_heads=heads,
                                num_kv_heads=kv_heads, head_dim=d, tile_size=16,
                                mask_mod=mask)


@pytest.mark.parametrize("case", CASES)
def test_oracle_matches_dense_attention(case):
    q, k, v = _inputs(*case[:6])
    got = reference.flash_attention_2(q, k, v, tile_size=16, mask_mod=case[6])
    assert got.shape == q.shape
    np.testing.assert_allclose(got, dense(q, k, v, case[6]), atol=1e-6)


@pytest.mark.parametrize("case", CASES)
def test_interpreter_is_bit_exact_with_the_oracle(case):
    q, k, v = _inputs(*case[:6])
    lowered = vx.lower_to_gpu(_module(*case), optimize="exact")
    got = vx.run(lowered, {"q": q, "k": k, "v": v})["out"]
    want = reference.flash_attention_2(q, k, v, tile_size=16, mask_mod=case[6])
    np.testing.assert_array_equal(got.reshape(want.shape), want)


@needs_vulkan
@pytest.mark.parametrize("case", CASES)
def test_default_on_vulkan_matches_dense_attention(case):
    q, k, v = _inputs(*case[:6])
    got = vx.run(_module(*case), {"q": q, "k": k, "v": v}, backend="vulkan")["out"]
    np.testing.assert_allclose(got.reshape(q.shape), dense(q, k, v, case[6]), atol=2e-6)


def test_layouts_keep_todays_shapes_for_one_sequence():
    def out_shape(batch=1, num_heads=1, num_kv_heads=None, kv_len=4):
        m = vx.flash_attention_2(seq_len=4, head_dim=2, batch=batch, num_heads=num_heads,
                                 num_kv_heads=num_kv_heads, kv_len=kv_len)
        q = np.zeros(batch * num_heads * 4 * 2, np.float32)
        kv = np.zeros(batch * (num_kv_heads or num_heads) * kv_len * 2, np.float32)
        return vx.run(m, {"q": q, "k": kv, "v": kv})["out"].shape

    assert out_shape() == (4, 2)
    assert out_shape(num_heads=3) == (3, 4, 2)
    assert out_shape(batch=2) == (2, 1, 4, 2)
    assert out_shape(batch=2, num_heads=3, num_kv_heads=1, kv_len=8) == (2, 3, 4, 2)


def test_modifiers_see_bottom_right_positions():
    seen = []

    def mask(q, kv):
        seen.append(q)
        return kv <= q

    sq, length = 3, 10
    q, k, v = _inputs(1, 1, 1, sq, length, 4)
    m = vx.flash_attention_2(seq_len=sq, kv_len=length, head_dim=4, mask_mod=mask)
    got = vx.run(m, {"q": q, "k": k, "v": v})["out"]
    # the last query sees every key, the first all but the last two
    np.testing.assert_allclose(got.reshape(q.shape), dense(q, k, v, lambda a, b: b <= a),
                               atol=1e-6)
    assert seen  # the mask was traced


@pytest.mark.parametrize("kwargs, match", [
    (dict(seq_len=8, kv_len=4), r"seq_len \(8\) must be <= kv_len \(4\)"),
    (dict(seq_len=4, kv_len=0), "kv_len"),
    (dict(seq_len=4, batch=0), "batch"),
    (dict(seq_len=4, batch=2**31, num_heads=2**3), "batch"),
    (dict(seq_len=4, batch="2"), "batch"),
])
def test_bad_serving_shapes_are_refused(kwargs, match):
    with pytest.raises(VyreError, match=match):
        vx.flash_attention_2(head_dim=4, **kwargs)


def test_the_oracle_refuses_mismatched_batches_and_lengths():
    q, k, v = _inputs(2, 2, 1, 4, 6, 4)
    with pytest.raises(VyreError, match="batch"):
        reference.flash_attention_2(q, k[:1], v[:1])
    with pytest.raises(VyreError, match="seq_len must be <= kv_len"):
        reference.flash_attention_2(k.repeat(2, axis=1), q[:, :, :2], q[:, :, :2])
