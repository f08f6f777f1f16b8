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
    """Without `batch` the layouts of before (no batch axis, and no head
    axis with one head); with it, batch=1 included, [B, H, Sq, D] as the
    oracle returns for 4-D inputs."""
    def out_shape(batch=None, num_heads=1, num_kv_heads=None, kv_len=4):
        m = vx.flash_attention_2(seq_len=4, head_dim=2, batch=batch, num_heads=num_heads,
                                 num_kv_heads=num_kv_heads, kv_len=kv_len)
        q = np.zeros((batch or 1) * num_heads * 4 * 2, np.float32)
        kv = np.zeros((batch or 1) * (num_kv_heads or num_heads) * kv_len * 2, np.float32)
        return vx.run(m, {"q": q, "k": kv, "v": kv})["out"].shape

    assert out_shape() == (4, 2)
    assert out_shape(num_heads=3) == (3, 4, 2)
    assert out_shape(batch=1) == (1, 1, 4, 2)
    assert out_shape(batch=1, num_heads=3) == (1, 3, 4, 2)
    assert out_shape(batch=2) == (2, 1, 4, 2)
    assert out_shape(batch=2, num_heads=3, num_kv_heads=1, kv_len=8) == (2, 3, 4, 2)


@pytest.mark.parametrize("heads", [1, 3])
def test_an_explicit_batch_of_one_matches_the_oracle_shape_for_shape(heads):
    """batch=1 with 4-D arrays: out and lse as the oracle shapes them, so
    that they compare without a reshape (MLA likewise, [1, H, D])."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, heads, 4, 2)).astype(np.float32) for _ in range(3))
    m = vx.flash_attention_2(seq_len=4, head_dim=2, tile_size=2, batch=1, num_heads=heads,
                             return_lse=True)
    got = vx.run(m, {"q": q, "k": k, "v": v})
    want = vx.reference.flash_attention_2(q, k, v, tile_size=2, return_lse=True)
    for name, expected in zip(("out", "lse"), want, strict=True):
        np.testing.assert_allclose(got[name], expected, rtol=1e-6, atol=1e-6)
    dims = dict(seq_len=8, num_heads=heads, head_dim=4, kv_lora_rank=4, qk_rope_head_dim=2,
                tile_size=4)
    ins = dict(q=rng.standard_normal((1, heads, 4)), kv_cache=rng.standard_normal((1, 8, 4)),
               kr_cache=rng.standard_normal((1, 8, 2)),
               w_uk=rng.standard_normal((4, heads * 4)), w_uv=rng.standard_normal((4, heads * 4)))
    ins = {name: a.astype(np.float32) for name, a in ins.items()}
    out = vx.run(vx.mla_decode(batch=1, **dims), ins)["out"]
    want = vx.reference.mla_decode(*ins.values(), tile_size=4)
    assert out.shape == want.shape == (1, heads, 4)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


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


def dense_lse(q, k, mask_mod=None):
    """log of each row's softmax denominator, in float64 (-inf: no key kept)."""
    batch, heads, sq, d = q.shape
    length = k.shape[2]
    kk = np.repeat(k.astype(np.float64), heads // k.shape[1], axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), kk) / np.sqrt(d)
    if mask_mod is not None:
        keep = mask_mod((length - sq + np.arange(sq))[:, None], np.arange(length)[None, :])
        s = np.where(keep, s, -np.inf)
    top = s.max(-1)
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(top), -np.inf, top + np.log(np.exp(s - top[..., None]).sum(-1)))


LSE_CASES = [
    # batch, heads, kv heads, queries, keys, head_dim, v_head_dim, mask
    (2, 2, 1, 5, 37, 8, 12, None),
    (1, 2, 2, 37, 37, 16, 4, lambda q, kv: kv <= q),
    (1, 1, 1, 64, 64, 8, 8, lambda q, kv: kv < q),  # row 0 keeps no key
]


def _lse_case(batch, heads, kv_heads, sq, length, d, dv, mask, seed=1):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, heads, sq, d), dtype=np.float32)
    k = rng.standard_normal((batch, kv_heads, length, d), dtype=np.float32)
    v = rng.standard_normal((batch, kv_heads, length, dv), dtype=np.float32)
    module = vx.flash_attention_2(seq_len=sq, kv_len=length, batch=batch, num_heads=heads,
                                  num_kv_heads=kv_heads, head_dim=d, v_head_dim=dv,
                                  tile_size=16, mask_mod=mask, return_lse=True)
    return module, {"q": q, "k": k, "v": v}


def _dense_out(ins, mask):
    q, k, v = ins["q"], ins["k"], ins["v"]
    with np.errstate(invalid="ignore"):
        out = dense(q, k, v, mask)
    return np.nan_to_num(out, nan=0.0)  # a row with no key outputs 0


@pytest.mark.parametrize("case", LSE_CASES)
def test_oracle_lse_and_value_rows_match_dense_attention(case):
    _, ins = _lse_case(*case)
    out, lse = reference.flash_attention_2(*ins.values(), tile_size=16, mask_mod=case[7],
                                           return_lse=True)
    assert out.shape == (*ins["q"].shape[:-1], case[6]) and lse.shape == ins["q"].shape[:-1]
    np.testing.assert_allclose(out, _dense_out(ins, case[7]), atol=1e-6)
    np.testing.assert_allclose(lse, dense_lse(ins["q"], ins["k"], case[7]), atol=1e-5)


@pytest.mark.parametrize("case", LSE_CASES)
@pytest.mark.parametrize("device", ["generic", "h200"])
def test_interpreter_lse_and_value_rows(case, device):
    module, ins = _lse_case(*case)
    got = vx.run(module, ins, device=device)
    want_out, want_lse = reference.flash_attention_2(*ins.values(), tile_size=16,
                                                     mask_mod=case[7], return_lse=True)
    np.testing.assert_allclose(got["out"].reshape(want_out.shape), want_out, atol=1e-6)
    np.testing.assert_allclose(got["lse"].reshape(want_lse.shape), want_lse, atol=1e-6)
    exact = vx.run(vx.lower_to_gpu(module, optimize="exact"), ins)
    np.testing.assert_array_equal(exact["out"].reshape(want_out.shape), want_out)
    np.testing.assert_array_equal(exact["lse"].reshape(want_lse.shape), want_lse)


def test_lse_through_a_merge_in_the_workgroup():
    # one head of 64 rows on the H200's profile: split over invocations and
    # merged in workgroup memory; split 0 writes the merged log-sum-exp
    module, ins = _lse_case(1, 1, 1, 64, 256, 8, 8, None)
    lowered = vx.lower_to_gpu(module, device="h200")
    assert "split_m" in str(lowered)
    got = vx.run(lowered, ins)
    np.testing.assert_allclose(got["lse"].reshape(64), dense_lse(ins["q"], ins["k"]).reshape(64),
                               atol=1e-5)
    np.testing.assert_allclose(got["out"].reshape(64, 8), _dense_out(ins, None).reshape(64, 8),
                               atol=1e-6)


@needs_vulkan
@pytest.mark.parametrize("case", LSE_CASES)
def test_vulkan_lse_and_value_rows(case):
    module, ins = _lse_case(*case)
    got = vx.run(module, ins, backend="vulkan")
    want_out, want_lse = _dense_out(ins, case[7]), dense_lse(ins["q"], ins["k"], case[7])
    np.testing.assert_allclose(got["out"].reshape(want_out.shape), want_out, atol=2e-6)
    np.testing.assert_allclose(got["lse"].reshape(want_lse.shape), want_lse, atol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(return_lse=1), "return_lse must be True or False"),
    (dict(v_head_dim=0), "v_head_dim"),
    (dict(v_head_dim=2.5), "v_head_dim"),
])
def test_bad_lse_and_value_row_arguments_are_refused(kwargs, match):
    with pytest.raises(VyreError, match=match):
        vx.flash_attention_2(seq_len=4, head_dim=4, **kwargs)
