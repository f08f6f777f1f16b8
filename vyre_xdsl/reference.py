"""The numpy oracle of SEMANTICS.md.

Every function computes in IEEE f32 (numpy float32 arrays) with the same
order of floating-point operations as the contract: sums over `j`, `d` and
`r` are sequential Python loops whose body is a vector operation over the
items (and, where the contract allows it, over an independent second axis).
So an executor that follows SEMANTICS.md op for op agrees with this oracle
bit for bit.

The tiled online-softmax recurrence exists once, in `tiled_online_softmax`; each
decoder only supplies its two fragments (`compute_tile_scores`,
`update_o_acc`).  FlashAttention-2's oracle is here, MLA decode's (and its
absorbed forms') in `vyre_xdsl.reference_mla`, reached from here as
`reference.mla_decode` etc.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import numpy as np

from vyre_xdsl.dialects import constants
from vyre_xdsl.dtypes import check_array, check_dtype, numpy_dtype, round_to
from vyre_xdsl.errors import VyreError
from vyre_xdsl.numerics import pairwise_total, partial_weight_scale

__all__ = [
    "F32_MIN",
    "MIN_POSITIVE",
    "finite_or",
    "bounded_score",
    "bounded_exp_arg",
    "positive_denominator",
    "flush_tiny",
    "flash_attention_2",
    "gather_pages",
    "mla_decode",
    "mla_decode_absorbed",
    "mla_decode_program",
    "tiled_online_softmax",
]

F32_MIN = np.float32(constants.F32_MIN)
MIN_POSITIVE = np.float32(constants.MIN_POSITIVE)
_ZERO = np.float32(0.0)
_EXP_FLOOR = np.float32(constants.SCORE_FLOOR)


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
# update_o_acc(o_acc [items, head_dim], weight, rescale [items], tile_start,
#              tile_len) -> new o_acc, where weight(j) -> f32[items] is the
#              softmax weight of key j of the tile (exactly 0 where masked)
UpdateFragment = Callable[
    [np.ndarray, Callable[[int], np.ndarray], np.ndarray, int, int], np.ndarray
]
# mask_of(tile_start, tile_len) -> bool[tile_len, items] (True keeps the pair)
MaskFragment = Callable[[int, int], np.ndarray]


def tiled_online_softmax(
    item_count: int,
    head_dim: int,
    seq_len: int,
    tile_size: int,
    compute_tile_scores: ScoresFragment,
    update_o_acc: UpdateFragment,
    mask_of: MaskFragment | None = None,
    epilogue: Callable[[np.ndarray], np.ndarray] | None = None,
    prologue: Callable[[], None] | None = None,
    kv_splits: int = 1,
    return_lse: bool = False,
    split_keys: int | None = None,
    merge_teams: int = 1,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """The public oracle skeleton for new decoders: the recurrence of
    SEMANTICS.md over `item_count` items with your two fragments (and an
    optional mask), vectorised over items.

    compute_tile_scores(tile_start, tile_len) -> f32[tile_len, item_count]
    update_o_acc(o_acc, weight, rescale, tile_start, tile_len) -> o_acc, where
        weight(j) -> f32[item_count] is the weight of key j of the tile
    mask_of(tile_start, tile_len) -> bool[tile_len, item_count] (True keeps)
    prologue() before the first tile, epilogue(o_acc) -> o_acc after the
        last (the kernel's hooks; a prologue resets a decoder's own state)
    kv_splits: the kernel's `kv_splits` (vyre-split-kv): the recurrence
        runs, prologue to epilogue, over each of kv_splits runs of
        ceil(tile_count / kv_splits) tiles, and the partial results merge
        as inline_fragments.SplitMerge does.
    split_keys: the keys the kernel lays its splits out over, where it
        reads only the first `seq_len` of them at run time (kv_lens: its
        static kv_len); the runs are then ceil(ceil(split_keys / tile_size)
        / kv_splits) tiles, cut at seq_len, and the weights' scale is
        split_keys'.  `seq_len` unless given.
    merge_teams: the merge kernel's `teams` (vyre.merge_splits): split s
        goes to run s // (kv_splits / merge_teams); each run's max, l and o
        are taken
        over its splits in order, the runs' maxima in run order, and their
        l and o added pairwise (numerics.pairwise_total).  1 (one run in
        split order) is the merge in workgroup memory and a merge kernel
        without teams.

    Returns out: f32[item_count, head_dim] (head_dim: the width of o_acc,
    the value rows), and with `return_lse` also lse: f32[item_count], each
    item's m + log(l) (-inf where l = 0). With `mask_of`, a masked pair leaves the
    tile max alone and has weight exactly 0 in the tile sum and the update;
    so does a key whose score is -inf (how a score_mod drops a key).
    A tile whose pairs are all masked then changes nothing, so the kernel may
    skip it, provided `update_o_acc` adds nothing for a zero weight: guard
    `weight * value` (0 * inf and 0 * NaN are NaN), as flash_attention_2
    does."""
    item_count, head_dim = _positive("item_count", item_count), _positive("head_dim", head_dim)
    # no keys (a sequence whose run-time length is 0) is a row of zeros
    if isinstance(seq_len, bool) or not (isinstance(seq_len, int | np.integer) and seq_len == 0):
        seq_len = _positive("seq_len", seq_len)
    tile_size = _positive("tile_size", tile_size)
    for name, fn in (("compute_tile_scores", compute_tile_scores),
                     ("update_o_acc", update_o_acc)):
        if not callable(fn):
            raise VyreError(f"{name} must be a function, got {type(fn).__name__}")
    compute_tile_scores = _returning(
        compute_tile_scores, "compute_tile_scores(tile_start, tile_len)",
        lambda tile_len: (tile_len, item_count), "f32[tile_len, item_count]")
    update_o_acc = _returning(
        update_o_acc, "update_o_acc(o_acc, weight, rescale, tile_start, tile_len)",
        lambda _: (item_count, head_dim), "o_acc, f32[item_count, head_dim]")
    if mask_of is not None:
        mask_of = _returning(mask_of, "mask_of(tile_start, tile_len)",
                             lambda tile_len: (tile_len, item_count),
                             "bool[tile_len, item_count]")
    kv_splits = _positive("kv_splits", kv_splits)
    merge_teams = _positive("merge_teams", merge_teams)
    if kv_splits % merge_teams or merge_teams & (merge_teams - 1):
        raise VyreError(f"merge_teams ({merge_teams}) must be a power of two dividing "
                        f"kv_splits ({kv_splits}): each team merges as many splits")
    tile_count = -(-seq_len // tile_size)
    split_keys = seq_len if split_keys is None else _positive("split_keys", split_keys)
    if split_keys < seq_len:
        raise VyreError(f"split_keys ({split_keys}) must be at least seq_len ({seq_len})")
    # split partials scale their weights so that none overflows (numerics.py)
    scale = np.float32(partial_weight_scale(split_keys) if kv_splits > 1 else 1.0)

    def recurrence(tiles: range) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = np.full(item_count, F32_MIN, dtype=np.float32)
        l = np.zeros(item_count, dtype=np.float32)
        o_acc = np.zeros((item_count, head_dim), dtype=np.float32)
        if prologue is not None:
            prologue()
        for tile_idx in tiles:
            tile_start = tile_idx * tile_size
            tile_end = min(tile_start + tile_size, seq_len)
            tile_len = tile_end - tile_start
            s = compute_tile_scores(tile_start, tile_len)
            keep = mask_of(tile_start, tile_len) if mask_of is not None else None
            tile_max = np.full(item_count, F32_MIN, dtype=np.float32)
            for j in range(tile_len):
                bigger = np.where(s[j] > tile_max, s[j], tile_max)
                next_max = np.where(np.isnan(tile_max), tile_max, bigger)
                if keep is not None:
                    next_max = np.where(keep[j], next_max, tile_max)
                tile_max = next_max
            m_new = np.where(tile_max > m, tile_max, m)
            rescale = _exp(bounded_exp_arg(m - m_new))

            def weight(j: int, s=s, keep=keep, m_new=m_new) -> np.ndarray:
                w = _exp(bounded_exp_arg(s[j] - m_new)) * scale
                # a score of -inf (a score_mod's) drops its key: weight exactly 0
                w = np.where(s[j] == -np.inf, _ZERO, w).astype(np.float32)
                if keep is not None:
                    w = np.where(keep[j], w, _ZERO).astype(np.float32)
                return w

            tile_sum = np.zeros(item_count, dtype=np.float32)
            for j in range(tile_len):
                tile_sum = tile_sum + weight(j)
            l = rescale * l + tile_sum
            o_acc = update_o_acc(o_acc, weight, rescale, tile_start, tile_len)
            m = m_new
        if epilogue is not None:
            o_acc = epilogue(o_acc)
        return m, l, o_acc

    def finish(m, l, o_acc):  # noqa: E741
        out = flush_tiny(o_acc / positive_denominator(l)[:, None])
        if not return_lse:
            return out
        l = l * (np.float32(1.0) / scale)  # noqa: E741
        lse = np.where(l == _ZERO, np.float32(-np.inf), m + np.log(l)).astype(np.float32)
        return out, lse

    with np.errstate(all="ignore"):
        if kv_splits == 1:
            return finish(*recurrence(range(tile_count)))
        split_tiles = -(-split_keys // tile_size)  # the kernel's tiles
        per_split = -(-split_tiles // kv_splits)
        parts = [
            recurrence(range(s * per_split, min((s + 1) * per_split, tile_count)))
            for s in range(kv_splits)
        ]
        run = kv_splits // merge_teams
        runs = [parts[t * run:(t + 1) * run] for t in range(merge_teams)]

        def largest(maxima) -> np.ndarray:
            m_max = np.full(item_count, F32_MIN, dtype=np.float32)
            for m in maxima:
                m_max = np.where(m > m_max, m, m_max)
            return m_max

        m_max = largest(largest(m for m, _, _ in run) for run in runs)

        def weighted(run, value_of, shape) -> np.ndarray:
            total = np.zeros(shape, dtype=np.float32)
            for part in run:
                weight = _exp(bounded_exp_arg(part[0] - m_max))
                total = total + (weight if len(shape) == 1 else weight[:, None]) * value_of(part)
            return total

        l_total = pairwise_total(
            [weighted(run, lambda p: p[1], (item_count,)) for run in runs], np.add)
        o_total = pairwise_total(
            [weighted(run, lambda p: p[2], (item_count, head_dim)) for run in runs], np.add)
        return finish(m_max, l_total, o_total)


# --------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------


def _matrix(name: str, value, what: str) -> np.ndarray:
    check_array(value, name, name, "f32", "the oracle computes in float32", what)
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


def _returning(fn, call: str, shape_of, what: str):
    """`fn`, checked to return an array of shape_of(its last argument) (a
    fragment of the numpy skeleton: a wrong shape would broadcast)."""

    def checked(*args):
        value = fn(*args)
        shape = shape_of(args[-1])
        if np.shape(value) != shape or not isinstance(value, np.ndarray):
            got = (f"shape {np.shape(value)}" if isinstance(value, np.ndarray)
                   else type(value).__name__)
            raise VyreError(f"{call} must return {what}, here of shape {shape}; got {got}")
        return value

    return checked


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise VyreError(f"{name} must be an int, got {value!r}")
    if value <= 0:
        raise VyreError(f"{name} must be > 0, got {value}")
    if value > constants.U32_MAX:
        raise VyreError(f"{name} = {value} does not fit in u32")
    return int(value)


def _dim_parts(dim_parts, head_dim: int, dim_chunk=None) -> int:
    from vyre_xdsl.dialects.vyre import DIM_CHUNK

    dim_parts = _positive("dim_parts", dim_parts)
    chunk = DIM_CHUNK if dim_chunk is None else _positive("dim_chunk", dim_chunk)
    # the parts take turns over chunks of `chunk` dims (vyre.part_dims)
    if chunk & (chunk - 1):
        raise VyreError(f"dim_chunk ({chunk}) must be a power of two, as vyre-split-head-dim's")
    if dim_parts > 1 and (dim_parts & (dim_parts - 1) or head_dim % (dim_parts * chunk)):
        raise VyreError(
            f"dim_parts ({dim_parts}) must be a power of two, with the skeleton's "
            f"head_dim ({head_dim}) a multiple of dim_parts * dim_chunk ({chunk}), as "
            f"vyre-split-head-dim requires"
        )
    return dim_parts


def _dot_over_parts(term: Callable[[int], np.ndarray], head_dim: int, dim_parts: int,
                    shape: tuple[int, ...], dim_chunk=None) -> np.ndarray:
    """The sum over d < head_dim of term(d), from 0: in order, or split by
    vyre-split-head-dim: each of `dim_parts` parts sums its own dims
    (vyre.part_dims, in chunks of `dim_chunk`) in order, then the parts'
    sums are added pairwise, parts 1 apart, then 2, ... (the kernel's
    gpu.shuffle xor butterfly)."""
    from vyre_xdsl.dialects.vyre import DIM_CHUNK, part_dims

    sums = []
    for part in range(dim_parts):
        total = np.zeros(shape, dtype=np.float32)
        for d in part_dims(head_dim, dim_parts, part, dim_chunk or DIM_CHUNK):
            total = total + term(d)
        sums.append(total)
    return pairwise_total(sums, np.add)


# --------------------------------------------------------------------------
# Half-precision buffers
# --------------------------------------------------------------------------


def _widened(name: str, value, dtype: str) -> np.ndarray:
    """A `dtype` input array as the exact f32 values the kernel computes on."""
    reason = f"the oracle of a {dtype} kernel reads {numpy_dtype(dtype)}"
    return check_array(value, name, name, dtype, reason).astype(np.float32)


def _with_dtype(*array_names: str):
    """Give an f32 oracle a keyword `dtype` ("f32", "f16" or "bf16"), as the
    builders have: the arrays named take that dtype (np.float16,
    ml_dtypes.bfloat16) and are read as their exact f32 values, everything
    is computed in f32 as for an f32 kernel, and the output is rounded once
    to nearest even into `dtype` (a returned log-sum-exp stays f32)."""

    def wrap(fn):
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def oracle(*args, dtype: str = "f32", **kwargs):
            dtype = check_dtype(dtype)
            if dtype == "f32":
                return fn(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            for name in array_names:
                bound.arguments[name] = _widened(name, bound.arguments[name], dtype)
            result = fn(*bound.args, **bound.kwargs)
            if isinstance(result, tuple):
                return (round_to(result[0], dtype), *result[1:])
            return round_to(result, dtype)

        keyword = inspect.Parameter("dtype", inspect.Parameter.KEYWORD_ONLY, default="f32")
        oracle.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*signature.parameters.values(), keyword]
        )
        oracle.__doc__ = (fn.__doc__ or "") + (
            "\n\n    `dtype` (\"f32\", \"f16\" or \"bf16\"): the inputs' type (np.float16 /\n"
            "    ml_dtypes.bfloat16 arrays, read as their exact f32 values); the\n"
            "    output is rounded once, to nearest even, into it."
        )
        return oracle

    return wrap


# --------------------------------------------------------------------------
# Decoder 1: FlashAttention-2
# --------------------------------------------------------------------------


def _stacked(name: str, value, ndim: int, layouts: str) -> np.ndarray:
    """An `ndim`-D view of a 2-D to `ndim`-D f32 array (leading axes of 1
    added), checked as `_matrix` checks a matrix; `layouts` names them."""
    if isinstance(value, np.ndarray) and 2 < value.ndim <= ndim:
        flat = _matrix(name, value.reshape(-1, value.shape[-1])
                       if 0 not in value.shape else value, layouts)
        return flat.reshape((1,) * (ndim - value.ndim) + value.shape)
    matrix = _matrix(name, value, layouts)
    return matrix.reshape((1,) * (ndim - 2) + matrix.shape)


def _heads_array(name: str, value, heads_name: str, len_name: str) -> np.ndarray:
    """A [batch, heads, length, head_dim] view of a 2-D, 3-D or 4-D f32 array."""
    layouts = (f"[{len_name}, head_dim], [{heads_name}, {len_name}, head_dim] or "
               f"[batch, {heads_name}, {len_name}, head_dim]")
    return _stacked(name, value, 4, layouts)


@_with_dtype("q", "k", "v")
def flash_attention_2(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    tile_size: int = 64,
    *,
    score_mod: Callable | None = None,
    mask_mod: Callable | None = None,
    kv_splits: int = 1,
    merge_teams: int = 1,
    dim_parts: int = 1,
    dim_chunk: int | None = None,
    return_lse: bool = False,
    kv_lens: np.ndarray | None = None,
    block_table: np.ndarray | None = None,
    page_size: int | None = None,
    kv_len: int | None = None,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """FlashAttention-2 of SEMANTICS.md: q, k, v f32[seq_len, head_dim] ->
    out f32[seq_len, head_dim]; with heads q f32[num_heads, seq_len,
    head_dim] and k, v f32[num_kv_heads, kv_len, head_dim], with a batch
    q [batch, num_heads, seq_len, head_dim] and k, v [batch, num_kv_heads,
    kv_len, head_dim] (query head h reads kv head h // (num_heads //
    num_kv_heads)) -> out shaped like q. With seq_len < kv_len the queries
    are the last seq_len positions (bottom-right aligned): query i is at
    position kv_len - seq_len + i, the q_idx the modifiers get. v's rows may
    be wider or narrower than q's and k's (v_head_dim): out has v's width.
    `return_lse` returns (out, lse) with lse shaped like q without its last
    axis: the natural log of each row's softmax denominator (-inf for a row
    whose keys are all dropped).

    `score_mod(score, q_idx, kv_idx[, head])` and `mask_mod(q_idx, kv_idx[,
    head])` are the same functions `vx.flash_attention_2` takes, evaluated on
    numpy-backed traced values (f32 / i32 / bool, the kernel's rounding).
    `kv_splits` gives the order of a kernel split by vyre-split-kv (and
    `merge_teams` that of its merge kernel, tiled_online_softmax's),
    `dim_parts` that of one split by vyre-split-head-dim (each part's dot
    product over its own dims, then added across parts pairwise), its dims
    dealt in chunks of `dim_chunk` (the skeleton's; vyre.DIM_CHUNK if None).

    Ragged and paged caches (the kernel's `kv_lens=True`, `page_size`):
    `kv_lens` (int32 [batch]) gives each sequence's key count L_b, clamped
    to [0, kv_len] (kv_len: k's length, or the kernel's `kv_len` given
    here); sequence b then attends to its first L_b keys with its queries
    at positions L_b - seq_len + i, and `kv_splits` divides the kernel's
    kv_len keys into runs of tiles, as the kernel does, each sequence's cut
    at its L_b. With `block_table` (int32 [batch,
    pages_per_seq]) and `page_size`, k and v are pools [num_pages,
    page_size, num_kv_heads, head_dim] gathered with `gather_pages` (page
    indices clamped to the pool); paged implies kv_lens."""
    if not isinstance(return_lse, bool | np.bool_):
        raise VyreError(f"return_lse must be True or False, got {return_lse!r}")
    k, v = _gathered({"k": k, "v": v}, block_table, page_size, kv_lens, kv_len).values()
    if kv_lens is not None:
        return _ragged_flash_attention_2(
            q, k, v, kv_lens, kv_len, tile_size=tile_size, score_mod=score_mod,
            mask_mod=mask_mod, kv_splits=kv_splits, dim_parts=dim_parts,
            dim_chunk=dim_chunk, return_lse=return_lse, merge_teams=merge_teams,
        )
    if kv_len is not None:
        raise VyreError("kv_len is only for kv_lens (the kernel's most keys)")
    q4 = _heads_array("q", q, "num_heads", "seq_len")
    k4 = _heads_array("k", k, "num_kv_heads", "kv_len")
    v4 = _heads_array("v", v, "num_kv_heads", "kv_len")
    tile_size = _positive("tile_size", tile_size)
    batch, num_heads, seq_len, head_dim = q4.shape
    num_kv_heads, kv_len = k4.shape[1], k4.shape[2]
    if k4.shape[:3] != v4.shape[:3] or k4.shape[0] != batch or k4.shape[3] != head_dim:
        raise VyreError(
            f"k and v must have the same shape [batch, num_kv_heads, kv_len, "
            f"head_dim] (v's rows may be of another width, v_head_dim), with q's "
            f"batch and head_dim; got q {np.shape(q)}, k {np.shape(k)}, v {np.shape(v)}"
        )
    v_dim = v4.shape[3]
    if seq_len > kv_len:
        raise VyreError(
            f"q has {seq_len} rows but k and v only {kv_len} keys; the queries are "
            f"the last seq_len of kv_len positions, so seq_len must be <= kv_len"
        )
    if num_heads % num_kv_heads:
        raise VyreError(
            f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
        )
    result = _flash_attention_2(
        q4, k4, v4, kv_len - seq_len, tile_size, score_mod, mask_mod, kv_splits,
        (dim_parts, dim_chunk), return_lse, merge_teams=merge_teams,
    )
    rows = np.shape(q)[:-1]
    if return_lse:
        out, lse = result
        return out.reshape(*rows, v_dim), lse.reshape(rows)
    return result.reshape(*rows, v_dim)


def gather_pages(
    pool: np.ndarray, block_table: np.ndarray, page_size: int,
    kv_len: int | None = None, name: str = "pool",
) -> np.ndarray:
    """The dense [batch, num_kv_heads, kv_len, head_dim] cache of a paged
    `pool` [num_pages, page_size, num_kv_heads, head_dim] (FlashAttention-2's
    k and v), or the dense [batch, kv_len, width] cache of a pool
    [num_pages, page_size, width] (MLA's latent caches): key t of sequence
    b is row `block_table[b, t // page_size] * page_size + t % page_size`,
    the page index clamped to [0, num_pages - 1] as the kernel clamps it.
    `kv_len` defaults to the table's pages_per_seq * page_size."""
    page_size = _positive("page_size", page_size)
    if not isinstance(pool, np.ndarray) or pool.ndim not in (3, 4) or 0 in pool.shape:
        raise VyreError(
            f"{name} must be a paged pool [num_pages, page_size, num_kv_heads, "
            f"head_dim] (or [num_pages, page_size, width]), got "
            f"{getattr(pool, 'shape', type(pool).__name__)}"
        )
    if pool.shape[1] != page_size:
        raise VyreError(
            f"{name} has pages of {pool.shape[1]} rows, page_size is {page_size}"
        )
    table = _int_array("block_table", block_table, 2)
    pages_per_seq = table.shape[1]
    if kv_len is None:
        kv_len = pages_per_seq * page_size
    kv_len = _positive("kv_len", kv_len)
    if -(-kv_len // page_size) != pages_per_seq:
        raise VyreError(
            f"block_table has {pages_per_seq} pages a sequence, but kv_len {kv_len} "
            f"takes ceil({kv_len} / {page_size}) = {-(-kv_len // page_size)}"
        )
    t = np.arange(kv_len)
    pages = np.clip(table[:, t // page_size].astype(np.int64), 0, pool.shape[0] - 1)
    dense = pool[pages, (t % page_size)[None, :]]  # [batch, kv_len, (heads,) dim]
    if pool.ndim == 4:
        dense = dense.transpose(0, 2, 1, 3)
    return np.ascontiguousarray(dense).astype(np.float32)


def _gathered(
    pools: dict[str, np.ndarray], block_table, page_size, kv_lens, kv_len,
) -> dict[str, np.ndarray]:
    """The dense caches of `pools` gathered with `gather_pages` where the
    cache is paged (block_table and page_size given), else `pools`."""
    if block_table is None and page_size is None:
        return pools
    if block_table is None or page_size is None or kv_lens is None:
        raise VyreError("a paged cache needs block_table, page_size and kv_lens together")
    pages = {name: np.shape(pool)[0] for name, pool in pools.items() if np.ndim(pool)}
    if len(set(pages.values())) > 1:
        raise VyreError(f"the paged pools must have as many pages (one block table indexes "
                        f"them all, as the kernel's one num_pages), got "
                        + ", ".join(f"{name} {count}" for name, count in pages.items()))
    return {name: gather_pages(pool, block_table, page_size, kv_len, name)
            for name, pool in pools.items()}


def _lengths(kv_lens, batch: int, rows: int, kv_len: int | None) -> list[int]:
    """Each sequence's key count: `rows` (the caches' length) without
    kv_lens; else kv_lens (int32 [batch]) clamped to [0, kv_len] (the
    kernel's most keys, at most `rows`; `rows` unless given)."""
    if kv_lens is None:
        if kv_len is not None:
            raise VyreError("kv_len is only for kv_lens (the kernel's most keys)")
        return [rows] * batch
    kv_len = rows if kv_len is None else _positive("kv_len", kv_len)
    if kv_len > rows:
        raise VyreError(f"the caches hold {rows} keys a sequence, fewer than kv_len ({kv_len})")
    lens = _int_array("kv_lens", kv_lens, 1)
    if lens.shape != (batch,):
        raise VyreError(f"kv_lens must have one entry per sequence: shape ({batch},), "
                        f"got {lens.shape}")
    return [int(n) for n in np.clip(lens.astype(np.int64), 0, kv_len)]


def _int_array(name: str, value, ndim: int) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.dtype != np.int32 or value.ndim != ndim:
        raise VyreError(
            f"{name} must be a {ndim}-D np.int32 array, got "
            f"{getattr(value, 'dtype', type(value).__name__)} "
            f"{getattr(value, 'shape', '')}"
        )
    return value


def _ragged_flash_attention_2(
    q, k, v, kv_lens, kv_len, *, tile_size, score_mod, mask_mod, kv_splits,
    dim_parts, dim_chunk, return_lse, merge_teams=1,
):
    """flash_attention_2 with each sequence's own key count (see there)."""
    q4 = _heads_array("q", q, "num_heads", "seq_len")
    k4 = _heads_array("k", k, "num_kv_heads", "kv_len")
    v4 = _heads_array("v", v, "num_kv_heads", "kv_len")
    tile_size = _positive("tile_size", tile_size)
    batch, num_heads, seq_len, head_dim = q4.shape
    if kv_len is None:
        kv_len = k4.shape[2]
    kv_len = _positive("kv_len", kv_len)
    if k4.shape[:3] != v4.shape[:3] or k4.shape[0] != batch or k4.shape[3] != head_dim \
            or k4.shape[2] < kv_len:
        raise VyreError(
            f"k and v must be [batch, num_kv_heads, kv_len, head_dim] (v of its own "
            f"width) with q's batch and head_dim and at least kv_len ({kv_len}) keys; "
            f"got q {np.shape(q)}, k {np.shape(k)}, v {np.shape(v)}"
        )
    if seq_len > kv_len:
        raise VyreError(f"seq_len ({seq_len}) must be <= kv_len ({kv_len})")
    if num_heads % k4.shape[1]:
        raise VyreError(
            f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({k4.shape[1]})"
        )
    v_dim = v4.shape[3]
    outs, lses = [], []
    for b, length in enumerate(_lengths(kv_lens, batch, kv_len, kv_len)):
        result = _flash_attention_2(
            q4[b:b + 1], k4[b:b + 1, :, :length], v4[b:b + 1, :, :length],
            length - seq_len, tile_size, score_mod, mask_mod, kv_splits,
            (dim_parts, dim_chunk), return_lse, split_keys=kv_len, merge_teams=merge_teams,
        )
        out, lse = result if return_lse else (result, None)
        outs.append(out)
        lses.append(lse)
    rows = np.shape(q)[:-1]
    out = np.concatenate(outs).reshape(*rows, v_dim)
    if return_lse:
        return out, np.concatenate(lses).reshape(rows)
    return out


def _flash_attention_2(
    q4, k4, v4, q_offset, tile_size, score_mod, mask_mod, kv_splits, dim_split, return_lse,
    split_keys=None, merge_teams=1,
):
    """The oracle over checked [batch, heads, len, dim] arrays, query i at
    position q_offset + i, the dot products split as `dim_split` (dim_parts,
    dim_chunk) says; flat (out [items, v_dim], lse [items])."""
    from vyre_xdsl import trace

    batch, num_heads, seq_len, head_dim = q4.shape
    num_kv_heads, kv_len = k4.shape[1], k4.shape[2]
    v_dim = v4.shape[3]
    group = num_heads // num_kv_heads
    items = batch * num_heads * seq_len
    item = np.arange(items)
    row_group = item // seq_len  # batch * num_heads + head
    q_idx, head = q_offset + item % seq_len, row_group % num_heads
    kv_base = (row_group // group) * kv_len  # first k/v row of each item's kv head
    qf = q4.reshape(items, head_dim)
    kf = k4.reshape(-1, head_dim)
    vf = v4.reshape(-1, v_dim)
    scale = np.float32(1.0) / np.sqrt(np.float32(head_dim))
    dim_parts, dim_chunk = dim_split
    dim_parts = _dim_parts(dim_parts, head_dim, dim_chunk)
    score_call = trace.Modifier(score_mod, "score_mod") if score_mod is not None else None
    mask_call = trace.Modifier(mask_mod, "mask_mod") if mask_mod is not None else None

    def traced_positions(tile_start: int, tile_len: int):
        kv = trace.array("int", np.arange(tile_start, tile_start + tile_len)[:, None])
        return trace.array("int", q_idx[None, :]), kv, trace.array("int", head[None, :])

    def evaluate(call, args, kind: str, shape) -> np.ndarray:
        from vyre_xdsl.skeleton import check_result

        result = check_result(call(*args), kind, call.fn, call.role)
        value = result.value if isinstance(result, trace.Traced) else np.asarray(
            result, np.float32 if kind == "f32" else np.bool_)
        return np.ascontiguousarray(np.broadcast_to(value, shape))

    def compute_tile_scores(tile_start: int, tile_len: int) -> np.ndarray:
        t = np.arange(tile_start, tile_start + tile_len)
        rows = kf[kv_base[None, :] + t[:, None]]  # [tile_len, items, head_dim]
        dot = _dot_over_parts(lambda d: rows[:, :, d] * qf[None, :, d], head_dim,
                              dim_parts, (tile_len, items), dim_chunk)
        score = dot * scale
        if score_mod is not None:
            qi, kv, h = traced_positions(tile_start, tile_len)
            args = [trace.array("f32", score), qi, kv] + ([h] if score_call.wants_head else [])
            score = evaluate(score_call, args, "f32", score.shape)
            # -inf drops the key (SEMANTICS.md): kept, not bounded to -80
            return np.where(score == -np.inf, score, bounded_score(score)).astype(np.float32)
        return bounded_score(score)

    def mask_of(tile_start: int, tile_len: int) -> np.ndarray:
        qi, kv, h = traced_positions(tile_start, tile_len)
        args = [qi, kv] + ([h] if mask_call.wants_head else [])
        return evaluate(mask_call, args, "bool", (tile_len, items))

    def update_o_acc(o_acc, weight, rescale, tile_start, tile_len):
        wv = np.zeros((items, v_dim), dtype=np.float32)
        for j in range(tile_len):
            rows = vf[kv_base + tile_start + j]  # [items, head_dim]
            w = weight(j)[:, None]
            term = w * rows
            if mask_mod is not None or score_mod is not None:
                # a dropped key (weight exactly 0) adds nothing, even where v
                # is inf or NaN: the same as a skipped empty tile
                term = np.where(w == _ZERO, _ZERO, term).astype(np.float32)
            wv = wv + term
        return rescale[:, None] * o_acc + wv

    return tiled_online_softmax(
        items, v_dim, kv_len, tile_size, compute_tile_scores, update_o_acc,
        mask_of if mask_mod is not None else None, kv_splits=kv_splits,
        return_lse=return_lse, split_keys=split_keys, merge_teams=merge_teams,
    )


# --------------------------------------------------------------------------
# Decoder 2: MLA decode (vyre_xdsl/reference_mla.py)
# --------------------------------------------------------------------------

_MLA_ORACLES = ("mla_decode", "mla_decode_absorbed", "mla_decode_program")


def __getattr__(name: str):
    # reference_mla builds on this module: imported on first use
    if name in _MLA_ORACLES:
        from vyre_xdsl import reference_mla

        return getattr(reference_mla, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
