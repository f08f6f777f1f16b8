"""Property tests: random shapes and random data (NaN, +-inf, huge, subnormal)
for both decoders, on the interpreter and on Vulkan, against the oracle.

Contract checked (docs/reliability.md):
- interpreter == oracle bit for bit (NaN where the oracle has NaN, nowhere else);
- Vulkan: the NaN pattern is exactly the oracle's, everything else within
  rtol 1e-5 / atol 1e-6 (GLSL.std.450 Exp is not correctly rounded).

Hypothesis runs derandomized (a fixed seed per test), so CI tries the same
cases every run; `fuzz_stats` counts them for the session summary. Vulkan
shapes stay far below lavapipe's 65535-iteration loop budget.
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vyre_xdsl as vx
from vyre_xdsl.errors import VyreError
from requirements import needs_vulkan

RTOL, ATOL = 1e-5, 1e-6

SETTINGS = dict(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

F32 = np.finfo(np.float32)
SPECIALS = [
    float("nan"), float("inf"), float("-inf"),
    float(F32.max), float(-F32.max), 1e30, -1e30, 1e19, -1e19,  # huge
    1e-40, -1e-40, 1e-45, float(F32.tiny), 0.0, -0.0,           # subnormal, tiny, zeros
]
values = st.one_of(
    st.floats(-4.0, 4.0, width=32),                 # ordinary attention inputs
    st.sampled_from(SPECIALS),
    st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True),
)


def _arrays(draw, shape):
    n = int(np.prod(shape))
    # mostly ordinary data with a sprinkling of specials, sometimes all-wild
    mode = draw(st.sampled_from(["normal", "sprinkled", "sprinkled", "wild"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n).astype(np.float32)
    if mode == "sprinkled":
        for i in draw(st.lists(st.integers(0, n - 1), max_size=4)):
            a[i] = draw(values)
    elif mode == "wild":
        a[:] = draw(st.lists(values, min_size=n, max_size=n))
    return a.reshape(shape)


@functools.lru_cache(maxsize=256)
def _fa2(seq_len, head_dim, tile_size):
    # "exact": the one-pass order the oracle encodes (the default level may
    # split few rows over several invocations: tests/test_split_kv.py)
    return vx.lower_to_gpu(vx.flash_attention_2(seq_len=seq_len, head_dim=head_dim,
                                                tile_size=tile_size), optimize="exact")


@functools.lru_cache(maxsize=256)
def _mla(seq_len, num_heads, head_dim, rank, rope, tile_size):
    # "exact": the seed's order of operations, which the oracle encodes (the
    # default level absorbs w_uk/w_uv: tests/test_absorb_mla.py fuzzes that)
    return vx.lower_to_gpu(vx.mla_decode(seq_len=seq_len, num_heads=num_heads,
                                         head_dim=head_dim, kv_lora_rank=rank,
                                         qk_rope_head_dim=rope, tile_size=tile_size),
                           optimize="exact")


@st.composite
def fa2_cases(draw, max_seq=12, max_dim=5):
    s = draw(st.integers(1, max_seq))
    d = draw(st.integers(1, max_dim))
    t = draw(st.integers(1, 9))
    q, k, v = (_arrays(draw, (s, d)) for _ in range(3))
    return (s, d, t), {"q": q, "k": k, "v": v}


@st.composite
def mla_cases(draw, max_seq=10):
    s = draw(st.integers(1, max_seq))
    h = draw(st.integers(1, 3))
    d = draw(st.integers(1, 4))
    r = draw(st.integers(1, 3))
    p = draw(st.integers(1, d))
    t = draw(st.integers(1, 6))
    inputs = {
        "q": _arrays(draw, (h, d)),
        "kv_cache": _arrays(draw, (s, r)),
        "kr_cache": _arrays(draw, (s, p)),
        "w_uk": _arrays(draw, (r, h * d)),
        "w_uv": _arrays(draw, (r, h * d)),
    }
    return (s, h, d, r, p, t), inputs


def _oracle_fa2(shape, inputs):
    return vx.reference.flash_attention_2(inputs["q"], inputs["k"], inputs["v"],
                                          tile_size=shape[2])


def _oracle_mla(shape, inputs):
    return vx.reference.mla_decode(inputs["q"], inputs["kv_cache"], inputs["kr_cache"],
                                   inputs["w_uk"], inputs["w_uv"], tile_size=shape[5])


def assert_exact(got, want, what):
    assert got.shape == want.shape
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    assert np.array_equal(nan_got, nan_want), f"{what}: NaN pattern differs"
    # bit-exact (+0.0 and -0.0 compare equal, as in the existing oracle tests)
    assert np.array_equal(got, want, equal_nan=True), (
        f"{what}: differs from the oracle, max |diff| "
        f"{np.nanmax(np.abs(got.astype(np.float64) - want)):.3e}")


def assert_close(got, want, what, scale: float = 0.0):
    """Within RTOL of the oracle, and ATOL + RTOL * `scale` absolutely: an
    output is a weighted mean of values up to `scale` in size, whose terms
    may cancel (then its own size says nothing of the error's)."""
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN pattern differs"
    with np.errstate(all="ignore"):
        ok = np.isclose(got, want, rtol=RTOL, atol=ATOL + RTOL * scale, equal_nan=True)
    assert ok.all(), (f"{what}: differs at {np.argwhere(~ok)[:3].tolist()}: "
                      f"{got[~ok][:3]} vs oracle {want[~ok][:3]}")


# interpreter: bit-exact ---------------------------------------------------------

@settings(max_examples=300, **SETTINGS)
@given(case=fa2_cases())
def test_fa2_interpreter_matches_oracle_bit_exactly(case, fuzz_stats):
    shape, inputs = case
    out = vx.run(_fa2(*shape), inputs, backend="interpreter")["out"]
    fuzz_stats["numeric: fa2 interpreter vs oracle"] += 1
    assert_exact(out, _oracle_fa2(shape, inputs), f"fa2 {shape}")


@settings(max_examples=150, **SETTINGS)
@given(case=mla_cases())
def test_mla_interpreter_matches_oracle_bit_exactly(case, fuzz_stats):
    shape, inputs = case
    out = vx.run(_mla(*shape), inputs, backend="interpreter")["out"]
    fuzz_stats["numeric: mla interpreter vs oracle"] += 1
    assert_exact(out, _oracle_mla(shape, inputs), f"mla {shape}")


# Vulkan: exact NaN pattern, close values ------------------------------------------

def _largest(values: np.ndarray) -> float:
    finite = np.abs(values[np.isfinite(values)])
    return float(finite.max()) if finite.size else 0.0


vulkan = needs_vulkan


@vulkan
@settings(max_examples=150, **SETTINGS)
@given(case=fa2_cases())
def test_fa2_vulkan_matches_oracle(case, fuzz_stats):
    shape, inputs = case
    out = vx.run(_fa2(*shape), inputs, backend="vulkan")["out"]
    fuzz_stats["numeric: fa2 vulkan vs oracle"] += 1
    assert_close(out, _oracle_fa2(shape, inputs), f"fa2 {shape}", _largest(inputs["v"]))


@vulkan
@settings(max_examples=80, **SETTINGS)
@given(case=mla_cases())
def test_mla_vulkan_matches_oracle(case, fuzz_stats):
    shape, inputs = case
    out = vx.run(_mla(*shape), inputs, backend="vulkan")["out"]
    fuzz_stats["numeric: mla vulkan vs oracle"] += 1
    assert_close(out, _oracle_mla(shape, inputs), f"mla {shape}")


# FlashAttention-2 with score_mod / mask_mod, heads and GQA ---------------------------
#
# Modifiers are drawn from a fixed list (by index, so compiled kernels can be
# cached); the oracle gets the very same Python functions.

SCORE_MODS = [
    ("none", None),
    ("soft_cap", lambda s, q, kv: 30.0 * vx.tanh(s / 30.0)),
    ("alibi_head", lambda s, q, kv, h: s - (h + 1) * 0.5 * vx.abs(q - kv)),
    ("relative_bias", lambda s, q, kv: vx.where(kv > q, s - 2.0, vx.maximum(s, -1.0))),
    # -inf drops the key exactly, as a false mask (SEMANTICS.md); row 0 keeps none
    ("minus_inf_window", lambda s, q, kv: vx.where((q - kv > 6) | (q == 0), -math.inf, s)),
    ("gelu_erf", lambda s, q, kv: 0.5 * s * (1.0 + vx.erf(s * 0.70710677))),
    ("numpy_sin_bias", lambda s, q, kv, h: s + np.sin((q - kv) * 0.5) * (h + 1.0)),
]
MASK_MODS = [
    ("none", None),
    ("causal", lambda q, kv: kv <= q),
    ("sliding_window", lambda q, kv: (kv <= q) & (q - kv < 5)),
    # row 0 keeps no key at all
    ("strict_causal", lambda q, kv: kv < q),
    # every third row keeps no key; the others are causal
    ("rows_empty", lambda q, kv: (q % 3 != 1) & (kv <= q)),
    # odd heads attend everywhere, even heads causally
    ("head_mask", lambda q, kv, h: (kv <= q) | (h % 2 == 1)),
    # Python's floor // and % on negative differences (documents of 7, dilation 3)
    ("document_floor", lambda q, kv: (q - 5) // 7 == (kv - 5) // 7),
    ("dilated_mod", lambda q, kv: ((kv - q) % 3 == 0) & (kv <= q)),
    ("bits_keyword_head", lambda q, kv, *, head: ((q ^ kv) & 4 == 0) | (head == 1)),
]


@functools.lru_cache(maxsize=512)
def _fa2_mods(seq_len, head_dim, tile_size, heads, kv_heads, score_i, mask_i):
    return vx.lower_to_gpu(vx.flash_attention_2(
        seq_len, head_dim, tile_size, score_mod=SCORE_MODS[score_i][1],
        mask_mod=MASK_MODS[mask_i][1], num_heads=heads, num_kv_heads=kv_heads),
        optimize="exact")


def _wide_arrays(draw, shape):
    """Like `_arrays`, for arrays too big to draw element by element: the
    all-wild mode picks each element from the specials or a random f32 bit
    pattern with numpy (seeded by hypothesis)."""
    n = int(np.prod(shape))
    mode = draw(st.sampled_from(["normal", "sprinkled", "sprinkled", "wild"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = (rng.standard_normal(n) * draw(st.sampled_from([1.0, 4.0]))).astype(np.float32)
    if mode == "sprinkled":
        for i in draw(st.lists(st.integers(0, n - 1), max_size=4)):
            a[i] = draw(values)
    elif mode == "wild":
        p = draw(st.sampled_from([0.05, 0.3, 1.0]))  # share of wild elements
        wild = rng.random(n) < p
        specials = np.array(SPECIALS, np.float32)[rng.integers(0, len(SPECIALS), n)]
        bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
        a = np.where(wild, np.where(rng.random(n) < 0.7, specials, bits), a)
    return a.astype(np.float32).reshape(shape)


@st.composite
def fa2_mod_cases(draw, max_seq=80, max_dim=8):
    s = draw(st.integers(1, max_seq))
    d = draw(st.integers(1, max_dim))
    t = draw(st.sampled_from([1, 4, 8, 16, 64]))
    h = draw(st.sampled_from([1, 2, 4]))
    kv = draw(st.sampled_from([x for x in (1, 2, 4) if h % x == 0]))
    score_i = draw(st.integers(0, len(SCORE_MODS) - 1))
    mask_i = draw(st.integers(0, len(MASK_MODS) - 1))
    q_shape = (s, d) if h == 1 else (h, s, d)
    kv_shape = (s, d) if h == 1 else (kv, s, d)
    inputs = {"q": _wide_arrays(draw, q_shape), "k": _wide_arrays(draw, kv_shape),
              "v": _wide_arrays(draw, kv_shape)}
    return (s, d, t, h, kv, score_i, mask_i), inputs


def _oracle_fa2_mods(shape, inputs):
    _, _, t, _, _, score_i, mask_i = shape
    return vx.reference.flash_attention_2(
        inputs["q"], inputs["k"], inputs["v"], t,
        score_mod=SCORE_MODS[score_i][1], mask_mod=MASK_MODS[mask_i][1])


def _mods_label(shape):
    s, d, t, h, kv, score_i, mask_i = shape
    return (f"fa2 seq {s} dim {d} tile {t} heads {h}/{kv} "
            f"score_mod {SCORE_MODS[score_i][0]} mask_mod {MASK_MODS[mask_i][0]}")


@settings(max_examples=80, **SETTINGS)
@given(case=fa2_mod_cases())
def test_fa2_mods_interpreter_matches_oracle_bit_exactly(case, fuzz_stats):
    shape, inputs = case
    out = vx.run(_fa2_mods(*shape), inputs, backend="interpreter")["out"]
    fuzz_stats["numeric: fa2+mods interpreter vs oracle"] += 1
    assert_exact(out, _oracle_fa2_mods(shape, inputs), _mods_label(shape))


# Vulkan: lavapipe compiles every new shader with LLVM (about 1 s each, cold
# cache), so shapes and modifiers come from a fixed pool that covers every
# modifier, GQA, tile sizes 1..64 and a second block of 64 query items; the
# data varies freely.  (seq, dim, tile, heads, kv_heads, score_mod, mask_mod)
VULKAN_MOD_SHAPES = [
    (1, 1, 1, 1, 1, 0, 3),      # the only row is fully masked
    (13, 8, 4, 2, 1, 2, 1),
    (20, 5, 8, 4, 2, 3, 2),     # 80 items: two blocks
    (33, 2, 16, 1, 1, 1, 4),
    (70, 4, 16, 1, 1, 2, 2),    # block 2 skips empty tiles
    (24, 8, 64, 4, 4, 0, 5),
    (40, 6, 1, 2, 2, 1, 3),
    (17, 7, 8, 4, 1, 3, 4),
    (30, 8, 16, 4, 2, 1, 5),
    (21, 4, 8, 2, 1, 4, 6),     # -inf scores with documents of 7 (negative //)
    (50, 3, 16, 1, 1, 5, 7),    # erf with a dilated mask (negative %)
    (18, 5, 4, 2, 2, 6, 8),     # numpy sin bias per head, bit ops, keyword head
]


@st.composite
def fa2_mod_vulkan_cases(draw):
    shape = draw(st.sampled_from(VULKAN_MOD_SHAPES))
    s, d, _, h, kv, _, _ = shape
    q_shape = (s, d) if h == 1 else (h, s, d)
    kv_shape = (s, d) if h == 1 else (kv, s, d)
    inputs = {"q": _wide_arrays(draw, q_shape), "k": _wide_arrays(draw, kv_shape),
              "v": _wide_arrays(draw, kv_shape)}
    return shape, inputs


@vulkan
@settings(max_examples=50, **SETTINGS)
@given(case=fa2_mod_vulkan_cases())
def test_fa2_mods_vulkan_matches_oracle(case, fuzz_stats):
    shape, inputs = case
    out = vx.run(_fa2_mods(*shape), inputs, backend="vulkan")["out"]
    fuzz_stats["numeric: fa2+mods vulkan vs oracle"] += 1
    assert_close_to_values(out, _oracle_fa2_mods(shape, inputs), inputs["v"], shape[3],
                           _mods_label(shape))


def assert_close_to_values(got, want, v, num_heads, what):
    """`assert_close`, except that a value may also be off by RTOL times the
    largest finite |v| its average runs over (the column of its kv head).

    An output is a convex combination of v rows, so an error of the weights
    (lavapipe's tanh and exp are not correctly rounded: GLSL.std.450 allows
    Exp 3 + 2|x| ULP and Tanh inherits it) shows up relative to max |v|, not
    to |out|, which cancellation can make small (soft-cap and ALiBi scores
    spread much more than plain ones).  Seen so far: at most 1.2e-6 max|v|."""
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN pattern differs"
    v3 = v if v.ndim == 3 else v[None]
    with np.errstate(all="ignore"):
        vmax = np.where(np.isfinite(v3), np.abs(v3), 0).max(axis=1)  # [kv_heads, dim]
        scale = np.repeat(vmax, num_heads // v3.shape[0], axis=0)    # [heads, dim]
        scale = scale[:, None, :] if got.ndim == 3 else scale
        ok = np.isclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True) | (
            np.abs(got.astype(np.float64) - want) <= RTOL * scale)
    assert ok.all(), (f"{what}: differs at {np.argwhere(~ok)[:3].tolist()}: "
                      f"{got[~ok][:3]} vs oracle {want[~ok][:3]}")


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=vulkan)])
def test_masked_keys_with_nan_or_inf_values_leak_into_no_output(backend):
    """Found by the fuzzing above: `weight * v` with a masked key's weight of
    exactly 0 gave NaN where v was inf or NaN (0 * inf), so whether a row
    saw the masked key's NaN depended on whether its query block skipped the
    tile (empty) or computed it (partial).  Masked keys add nothing now."""
    seq, dim, tile = 67, 3, 16
    window = MASK_MODS[2][1]  # q - kv < 5, causal
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((seq, dim)).astype(np.float32) for _ in range(3))
    v[28] = [np.nan, np.inf, -np.inf]
    module = vx.flash_attention_2(seq, dim, tile, mask_mod=window)
    out = vx.run(module, {"q": q, "k": k, "v": v}, backend=backend)["out"]
    want = vx.reference.flash_attention_2(q, k, v, tile, mask_mod=window)
    sees_28 = np.array([28 <= row < 28 + 5 for row in range(seq)])
    # rows whose window holds key 28 get its NaN and infinities; no other row
    assert np.isnan(want[sees_28, 0]).all()
    assert (want[sees_28, 1] == np.inf).all() and (want[sees_28, 2] == -np.inf).all()
    assert np.isfinite(want[~sees_28]).all()
    assert np.array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)


# Python API: every shape argument is either a kernel or a VyreError ------------------

def _shape_values():
    return st.one_of(
        st.integers(-3, 80),
        st.sampled_from([0, 2**16, 2**26, 2**31, 2**32 - 1, 2**32, 2**40]),
        st.sampled_from([float("nan"), float("inf"), 4.0, 2.5, "4", None, True,
                         np.float32(4), np.bool_(True)]),
        st.sampled_from([np.int64(4), np.int32(3), np.uint16(7), np.int64(0),
                         np.int8(-2), np.uint64(2**40)]),  # accepted as integers
    )


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _fits(*factors):
    product = 1
    for f in factors:
        product *= int(f)  # numpy integers would wrap around
    return product <= 2**32 - 1


@settings(max_examples=400, **SETTINGS)
@given(seq_len=_shape_values(), head_dim=_shape_values(), tile_size=_shape_values())
def test_fa2_shapes_build_or_raise_vyre_error(seq_len, head_dim, tile_size, fuzz_stats):
    fuzz_stats["api: flash_attention_2 shape arguments"] += 1
    args = dict(seq_len=seq_len, head_dim=head_dim, tile_size=tile_size)
    # a tile longer than the keys is one tile of them (the builder's min)
    valid = all(_is_int(v) and v > 0 for v in args.values()) and _fits(
        seq_len, head_dim) and _fits(64, head_dim) and _fits(tile_size) and _fits(
        64, min(tile_size, seq_len))
    if not valid:
        with pytest.raises(VyreError) as info:
            vx.flash_attention_2(**args)
        message = str(info.value)
        assert any(name in message for name in args), message
        fuzz_stats["(api rejections)"] += 1
        return
    if int(seq_len) * int(head_dim) > 10**6:
        return  # valid, but too big to be worth building here
    module = vx.flash_attention_2(**args)
    assert "vyre.kernel" in str(module)


@settings(max_examples=400, **SETTINGS)
@given(seq_len=_shape_values(), num_heads=_shape_values(), head_dim=_shape_values(),
       kv_lora_rank=_shape_values(), qk_rope_head_dim=_shape_values())
def test_mla_shapes_build_or_raise_vyre_error(seq_len, num_heads, head_dim, kv_lora_rank,
                                              qk_rope_head_dim, fuzz_stats):
    fuzz_stats["api: mla_decode shape arguments"] += 1
    args = dict(seq_len=seq_len, num_heads=num_heads, head_dim=head_dim,
                kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim)
    ints = all(_is_int(v) and v > 0 for v in args.values())
    valid = ints and qk_rope_head_dim <= head_dim and all(
        _fits(*f) for f in [(num_heads, head_dim), (seq_len, kv_lora_rank),
                            (seq_len, qk_rope_head_dim), (64, head_dim),
                            (kv_lora_rank, num_heads, head_dim)])
    if not valid:
        with pytest.raises(VyreError) as info:
            vx.mla_decode(**args)
        message = str(info.value)
        assert any(name in message for name in args), message
        fuzz_stats["(api rejections)"] += 1
        return
    seq_len, num_heads, head_dim, kv_lora_rank = (
        int(x) for x in (seq_len, num_heads, head_dim, kv_lora_rank))
    if max(seq_len * kv_lora_rank, kv_lora_rank * num_heads * head_dim) > 10**6:
        return
    assert "vyre.kernel" in str(vx.mla_decode(**args))
