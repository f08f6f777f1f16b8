"""The numpy oracle of SEMANTICS.md.

Every function computes in IEEE f32 (numpy float32 arrays) with the same
order of floating-point operations as the contract: sums over `j`, `d` and
`r` are sequential Python loops whose body is a vector operation over the
items (and, where the contract allows it, over an independent second axis).
So an executor that follows SEMANTICS.md op for op agrees with this oracle
bit for bit.

The tiled online-softmax recurrence exists once, in `_online_softmax`; each
decoder only supplies its two fragments (`compute_tile_scores`,
`update_o_acc`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vyre_xdsl.errors import VyreError

__all__ = [
    "F32_MIN",
    "MIN_POSITIVE",
    "finite_or",
    "bounded_score",
    "bounded_exp_arg",
    "positive_denominator",
    "flush_tiny",
    "flash_attention_2",
    "mla_decode",
]

F32_MIN = np.float32(-3.4028235e38)
MIN_POSITIVE = np.float32(1.17549435e-38)
_ZERO = np.float32(0.0)
_EXP_FLOOR = np.float32(-80.0)
_U32_MAX = 2**32 - 1


# --------------------------------------------------------------------------
# f32 primitives
# --------------------------------------------------------------------------


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _exp(x) -> np.ndarray:
    """f32 exp as every executor of this project computes it: numpy's float32
    exp on a contiguous array (overflow gives +inf, never an exception)."""
    with np.errstate(all="ignore"):
        return np.exp(np.ascontiguousarray(x, dtype=np.float32))


# --------------------------------------------------------------------------
# Stability helpers (NaN is evidence: it is never hidden)
# --------------------------------------------------------------------------


def finite_or(v, r) -> np.ndarray:
    """`v` where it is finite, else `r`."""
    v = _f32(v)
    return np.where(np.isfinite(v), v, _f32(r)).astype(np.float32)


def bounded_score(v) -> np.ndarray:
    """NaN passes; +-inf becomes -80."""
    v = _f32(v)
    return np.where(np.isnan(v), v, finite_or(v, _EXP_FLOOR)).astype(np.float32)


def bounded_exp_arg(v) -> np.ndarray:
    """NaN passes; otherwise finite_or(v, -80) clamped to [-80, 0] (upper
    bound first, then lower)."""
    v = _f32(v)
    c = finite_or(v, _EXP_FLOOR)
    c = np.where(c > _ZERO, _ZERO, c)
    c = np.where(c < _EXP_FLOOR, _EXP_FLOOR, c)
    return np.where(np.isnan(v), v, c).astype(np.float32)


def positive_denominator(v) -> np.ndarray:
    """NaN passes; a finite value above MIN_POSITIVE passes; anything else
    (0, negative, tiny, +-inf) becomes MIN_POSITIVE."""
    v = _f32(v)
    keep = np.isfinite(v) & (v > MIN_POSITIVE)
    return np.where(np.isnan(v), v, np.where(keep, v, MIN_POSITIVE)).astype(
        np.float32
    )


def flush_tiny(v) -> np.ndarray:
    """0.0 where |v| <= MIN_POSITIVE; NaN passes through."""
    v = _f32(v)
    return np.where(np.abs(v) <= MIN_POSITIVE, _ZERO, v).astype(np.float32)


# --------------------------------------------------------------------------
# The skeleton: tiled online softmax, vectorised over items
# --------------------------------------------------------------------------

# compute_tile_scores(tile_start, tile_len) -> s: f32[tile_len, items]
ScoresFragment = Callable[[int, int], np.ndarray]
# update_o_acc(o_acc [items, head_dim], s [tile_len, items], m_new [items],
#              rescale [items], tile_start, tile_len) -> new o_acc
UpdateFragment = Callable[
    [np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int], np.ndarray
]


def _online_softmax(
    item_count: int,
    head_dim: int,
    seq_len: int,
    tile_size: int,
    compute_tile_scores: ScoresFragment,
    update_o_acc: UpdateFragment,
) -> np.ndarray:
    """The recurrence of SEMANTICS.md for all items at once; returns
    out: f32[item_count, head_dim]."""
    m = np.full(item_count, F32_MIN, dtype=np.float32)
    l = np.zeros(item_count, dtype=np.float32)
    o_acc = np.zeros((item_count, head_dim), dtype=np.float32)
    tile_count = -(-seq_len // tile_size)
    with np.errstate(all="ignore"):
        for tile_idx in range(tile_count):
            tile_start = tile_idx * tile_size
            tile_end = min(tile_start + tile_size, seq_len)
            tile_len = tile_end - tile_start
            s = compute_tile_scores(tile_start, tile_len)
            tile_max = np.full(item_count, F32_MIN, dtype=np.float32)
            for j in range(tile_len):
                bigger = np.where(s[j] > tile_max, s[j], tile_max)
                tile_max = np.where(np.isnan(tile_max), tile_max, bigger)
            m_new = np.where(tile_max > m, tile_max, m)
            rescale = _exp(bounded_exp_arg(m - m_new))
            tile_sum = np.zeros(item_count, dtype=np.float32)
            for j in range(tile_len):
                tile_sum = tile_sum + _exp(bounded_exp_arg(s[j] - m_new))
            l = rescale * l + tile_sum
            o_acc = update_o_acc(o_acc, s, m_new, rescale, tile_start, tile_len)
            m = m_new
        denom = positive_denominator(l)
        return flush_tiny(o_acc / denom[:, None])


# --------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------


def _matrix(name: str, value, what: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise VyreError(
            f"{name} must be a numpy array {what}, got {type(value).__name__}; "
            f"wrap it with np.asarray(..., dtype=np.float32)"
        )
    if value.dtype != np.float32:
        raise VyreError(
            f"{name} has dtype {value.dtype}, the oracle computes in float32; "
            f"convert it with {name}.astype(np.float32)"
        )
    if value.ndim != 2:
        raise VyreError(
            f"{name} must be 2-D {what}, got shape {value.shape}; reshape it"
        )
    if 0 in value.shape:
        raise VyreError(
            f"{name} has an empty dimension (shape {value.shape}); every "
            f"dimension must be > 0"
        )
    return np.ascontiguousarray(value)


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise VyreError(f"{name} must be an int, got {value!r}")
    if value <= 0:
        raise VyreError(f"{name} must be > 0, got {value}")
    if value > _U32_MAX:
        raise VyreError(f"{name} = {value} does not fit in u32")
    return int(value)


# --------------------------------------------------------------------------
# Decoder 1: FlashAttention-2
# --------------------------------------------------------------------------


def flash_attention_2(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, tile_size: int = 64
) -> np.ndarray:
    """FlashAttention-2 of SEMANTICS.md: q, k, v f32[seq_len, head_dim] ->
    out f32[seq_len, head_dim]."""
    q = _matrix("q", q, "[seq_len, head_dim]")
    k = _matrix("k", k, "[seq_len, head_dim]")
    v = _matrix("v", v, "[seq_len, head_dim]")
    tile_size = _positive("tile_size", tile_size)
    if k.shape != q.shape or v.shape != q.shape:
        raise VyreError(
            f"q, k and v must have the same shape [seq_len, head_dim]; got "
            f"q {q.shape}, k {k.shape}, v {v.shape}"
        )
    seq_len, head_dim = q.shape
    scale = np.float32(1.0) / np.sqrt(np.float32(head_dim))

    def compute_tile_scores(tile_start: int, tile_len: int) -> np.ndarray:
        rows = k[tile_start : tile_start + tile_len]  # [tile_len, head_dim]
        dot = np.zeros((tile_len, seq_len), dtype=np.float32)
        for d in range(head_dim):
            dot = dot + rows[:, d, None] * q[None, :, d]
        return bounded_score(dot * scale)

    def update_o_acc(o_acc, s, m_new, rescale, tile_start, tile_len):
        rows = v[tile_start : tile_start + tile_len]  # [tile_len, head_dim]
        wv = np.zeros((seq_len, head_dim), dtype=np.float32)
        for j in range(tile_len):
            weight = _exp(bounded_exp_arg(s[j] - m_new))
            wv = wv + weight[:, None] * rows[j][None, :]
        return rescale[:, None] * o_acc + wv

    return _online_softmax(
        seq_len, head_dim, seq_len, tile_size, compute_tile_scores, update_o_acc
    )


# --------------------------------------------------------------------------
# Decoder 2: MLA decode
# --------------------------------------------------------------------------


def mla_decode(
    q: np.ndarray,
    kv_cache: np.ndarray,
    kr_cache: np.ndarray,
    w_uk: np.ndarray,
    w_uv: np.ndarray,
    tile_size: int = 64,
) -> np.ndarray:
    """MLA decode of SEMANTICS.md: q f32[H, D], kv_cache f32[S, R],
    kr_cache f32[S, P], w_uk/w_uv f32[R, H*D] -> out f32[H, D]."""
    q = _matrix("q", q, "[num_heads, head_dim]")
    kv_cache = _matrix("kv_cache", kv_cache, "[seq_len, kv_lora_rank]")
    kr_cache = _matrix("kr_cache", kr_cache, "[seq_len, qk_rope_head_dim]")
    w_uk = _matrix("w_uk", w_uk, "[kv_lora_rank, num_heads * head_dim]")
    w_uv = _matrix("w_uv", w_uv, "[kv_lora_rank, num_heads * head_dim]")
    tile_size = _positive("tile_size", tile_size)
    num_heads, head_dim = q.shape
    seq_len, rank = kv_cache.shape
    rope = kr_cache.shape[1]
    if kr_cache.shape[0] != seq_len:
        raise VyreError(
            f"kr_cache has {kr_cache.shape[0]} rows but kv_cache has {seq_len}; "
            f"both are [seq_len, ...]"
        )
    if rope > head_dim:
        raise VyreError(
            f"qk_rope_head_dim ({rope}, the columns of kr_cache) must be <= "
            f"head_dim ({head_dim}): the rotary part is added to the first "
            f"qk_rope_head_dim dims of each key"
        )
    for name, w in (("w_uk", w_uk), ("w_uv", w_uv)):
        if w.shape != (rank, num_heads * head_dim):
            raise VyreError(
                f"{name} must have shape [kv_lora_rank, num_heads * head_dim] = "
                f"{(rank, num_heads * head_dim)}, got {w.shape}"
            )
    scale = np.float32(1.0) / np.sqrt(np.float32(head_dim))
    wk = w_uk.reshape(rank, num_heads, head_dim)
    wv = w_uv.reshape(rank, num_heads, head_dim)

    def decompress(w: np.ndarray, t: int) -> np.ndarray:
        """sum over r in order of w[r, head, dim] * kv_cache[t, r]: [H, D]."""
        acc = np.zeros((num_heads, head_dim), dtype=np.float32)
        for r in range(rank):
            acc = acc + w[r] * kv_cache[t, r]
        return acc

    def compute_tile_scores(tile_start: int, tile_len: int) -> np.ndarray:
        s = np.empty((tile_len, num_heads), dtype=np.float32)
        for j in range(tile_len):
            t = tile_start + j
            k_val = decompress(wk, t)
            k_val[:, :rope] = k_val[:, :rope] + kr_cache[t][None, :]
            dot = np.zeros(num_heads, dtype=np.float32)
            for dim in range(head_dim):
                dot = dot + q[:, dim] * k_val[:, dim]
            s[j] = bounded_score(dot * scale)
        return s

    def update_o_acc(o_acc, s, m_new, rescale, tile_start, tile_len):
        o_acc = o_acc * rescale[:, None]
        for j in range(tile_len):
            weight = _exp(bounded_exp_arg(s[j] - m_new))
            v_val = decompress(wv, tile_start + j)
            o_acc = o_acc + weight[:, None] * v_val
        return o_acc

    return _online_softmax(
        num_heads, head_dim, seq_len, tile_size, compute_tile_scores, update_o_acc
    )
