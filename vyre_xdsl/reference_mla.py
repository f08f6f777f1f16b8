"""The numpy oracle of MLA decode (SEMANTICS.md, Decoder 2) and of the two
absorbed forms vyre-absorb-mla rewrites it into, op for op with the
kernels; `vyre_xdsl.reference` gives them as `vx.reference.mla_decode`,
`mla_decode_absorbed` and `mla_decode_program`.

Each form is written for one sequence (`MlaArrays`); batched, ragged and
paged caches are split into their sequences first (`_sequences`): sequence
b attends to its first L_b keys, gathered from the pages of its block
table as the kernel reads them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from vyre_xdsl.errors import VyreError
from vyre_xdsl.reference import (
    ScoresFragment,
    _dim_parts,
    _dot_over_parts,
    _gathered,
    _lengths,
    _matrix,
    _positive,
    _stacked,
    _with_dtype,
    bounded_score,
    tiled_online_softmax,
)

__all__ = ["mla_decode", "mla_decode_absorbed", "mla_decode_program"]


class MlaArrays(NamedTuple):
    """One sequence's checked MLA arguments (weights as [rank, head, dim]),
    their dimensions and the score scale 1/sqrt(head_dim) in f32."""

    q: np.ndarray
    kv_cache: np.ndarray
    kr_cache: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    tile_size: int
    num_heads: int
    head_dim: int
    seq_len: int
    rank: int
    rope: int
    scale: np.float32
    split_keys: int  # the kernel's keys, of which seq_len are read (kv_lens)


def _sequences(
    q: np.ndarray,
    kv_cache: np.ndarray,
    kr_cache: np.ndarray,
    w_uk: np.ndarray,
    w_uv: np.ndarray,
    tile_size: int = 64,
    *,
    kv_lens: np.ndarray | None = None,
    block_table: np.ndarray | None = None,
    page_size: int | None = None,
    kv_len: int | None = None,
) -> list[MlaArrays]:
    """The arguments checked (f32, consistent shapes) and split into their
    sequences, or a VyreError.  q is [num_heads, head_dim] or [batch,
    num_heads, head_dim], the caches [seq_len, .] or [batch, seq_len, .],
    or pools [num_pages, page_size, .] with block_table and page_size."""
    caches = _gathered({"kv_cache": kv_cache, "kr_cache": kr_cache}, block_table,
                       page_size, kv_lens, kv_len)
    q3 = _stacked("q", q, 3, "[num_heads, head_dim] or [batch, num_heads, head_dim]")
    kv3 = _stacked("kv_cache", caches["kv_cache"], 3,
                   "[seq_len, kv_lora_rank] or [batch, seq_len, kv_lora_rank]")
    kr3 = _stacked("kr_cache", caches["kr_cache"], 3,
                   "[seq_len, qk_rope_head_dim] or [batch, seq_len, qk_rope_head_dim]")
    w_uk = _matrix("w_uk", w_uk, "[kv_lora_rank, num_heads * head_dim]")
    w_uv = _matrix("w_uv", w_uv, "[kv_lora_rank, num_heads * head_dim]")
    tile_size = _positive("tile_size", tile_size)
    batch, num_heads, head_dim = q3.shape
    seq_len, rank = kv3.shape[1:]
    rope = kr3.shape[2]
    if kv3.shape[0] != batch or kr3.shape[0] != batch:
        raise VyreError(
            f"q, kv_cache and kr_cache must have the same batch; got q {np.shape(q)}, "
            f"kv_cache {kv3.shape}, kr_cache {kr3.shape}"
        )
    if kr3.shape[1] != seq_len:
        raise VyreError(
            f"kr_cache has {kr3.shape[1]} rows but kv_cache has {seq_len}; "
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
    lengths = _lengths(kv_lens, batch, seq_len, kv_len)
    split_keys = seq_len if kv_len is None else kv_len
    wk, wv = (w.reshape(rank, num_heads, head_dim) for w in (w_uk, w_uv))
    scale = np.float32(1.0) / np.sqrt(np.float32(head_dim))
    return [
        MlaArrays(q3[b], kv3[b, :length], kr3[b, :length], wk, wv, tile_size, num_heads,
                  head_dim, length, rank, rope, scale, split_keys)
        for b, length in enumerate(lengths)
    ]




SERVING_DOC = """

    Serving, as the kernels take it (`vx.mla_decode(batch=, kv_lens=,
    page_size=, num_pages=)`): q [batch, num_heads, head_dim] and caches
    [batch, seq_len, .] (w_uk, w_uv shared), out shaped like q; `kv_lens`
    (int32 [batch]) each sequence's key count L_b, clamped to [0, kv_len]
    (kv_len: the caches' length, or the kernel's `seq_len` given here);
    with `block_table` (int32 [batch, pages_per_seq]) and `page_size` the
    caches are pools [num_pages, page_size, .], gathered with
    `gather_pages` (page indices clamped to the pool); paged implies
    kv_lens."""


def _oracle(form: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """The public oracle of `form` (one sequence's, MlaArrays first): every
    form takes `_sequences`' arguments, with its own options (kv_splits,
    dim_parts) after tile_size, and runs over every sequence, out shaped
    like q; `_with_dtype` adds `dtype`."""
    shared = list(inspect.signature(_sequences).parameters.values())
    own = list(inspect.signature(form).parameters.values())[1:]
    signature = inspect.Signature([*shared[:6], *own, *shared[6:]], return_annotation=np.ndarray)

    @functools.wraps(form)
    def oracle(*args, **kwargs) -> np.ndarray:
        arguments = signature.bind(*args, **kwargs)
        arguments.apply_defaults()
        checked = dict(arguments.arguments)
        options = {p.name: checked.pop(p.name) for p in own}
        outs = [form(a, **options) for a in _sequences(**checked)]
        return np.stack(outs).reshape(np.shape(checked["q"]))

    del oracle.__wrapped__
    oracle.__signature__ = signature  # type: ignore[attr-defined]
    oracle.__doc__ += SERVING_DOC
    return _with_dtype("q", "kv_cache", "kr_cache", "w_uk", "w_uv")(oracle)


# The oracles of one sequence ------------------------------------------------


def _seed(a: MlaArrays) -> np.ndarray:
    def decompress(w: np.ndarray, t: int) -> np.ndarray:
        """sum over r in order of w[r, head, dim] * kv_cache[t, r]: [H, D]."""
        acc = np.zeros((a.num_heads, a.head_dim), dtype=np.float32)
        for r in range(a.rank):
            acc = acc + w[r] * a.kv_cache[t, r]
        return acc

    def compute_tile_scores(tile_start: int, tile_len: int) -> np.ndarray:
        s = np.empty((tile_len, a.num_heads), dtype=np.float32)
        for j in range(tile_len):
            t = tile_start + j
            k_val = decompress(a.wk, t)
            k_val[:, :a.rope] = k_val[:, :a.rope] + a.kr_cache[t][None, :]
            dot = np.zeros(a.num_heads, dtype=np.float32)
            for dim in range(a.head_dim):
                dot = dot + a.q[:, dim] * k_val[:, dim]
            s[j] = bounded_score(dot * a.scale)
        return s

    def update_o_acc(o_acc, weight, rescale, tile_start, tile_len):
        o_acc = o_acc * rescale[:, None]
        for j in range(tile_len):
            v_val = decompress(a.wv, tile_start + j)
            o_acc = o_acc + weight(j)[:, None] * v_val
        return o_acc

    return tiled_online_softmax(
        a.num_heads, a.head_dim, a.seq_len, a.tile_size, compute_tile_scores, update_o_acc
    )


def _latent_scores(q_lat, a: MlaArrays, dim_parts: int = 1) -> ScoresFragment:
    """The absorbed forms' scores: bounded_score((sum over r of q_lat[:, r]
    * kv_cache[t, r] + sum over dim < rope of q[:, dim] * kr_cache[t, dim])
    * scale), in that order (the sum over r split into `dim_parts`)."""

    def compute_tile_scores(tile_start: int, tile_len: int) -> np.ndarray:
        s = np.empty((tile_len, a.num_heads), dtype=np.float32)
        for j in range(tile_len):
            t = tile_start + j
            dot = _dot_over_parts(lambda r, t=t: q_lat[:, r] * a.kv_cache[t, r], a.rank,
                                  dim_parts, (a.num_heads,))
            for dim in range(a.rope):
                dot = dot + a.q[:, dim] * a.kr_cache[t, dim]
            s[j] = bounded_score(dot * a.scale)
        return s

    return compute_tile_scores


def _latent_weighted_sum(kv_cache, weight, tile_start: int, tile_len: int) -> np.ndarray:
    """sum over j of weight(j) * kv_cache[tile_start + j], in order: [H, R]."""
    weighted = np.zeros((len(weight(0)), kv_cache.shape[1]), dtype=np.float32)
    for j in range(tile_len):
        weighted = weighted + weight(j)[:, None] * kv_cache[tile_start + j][None, :]
    return weighted


def _absorb_query(q: np.ndarray, wk: np.ndarray) -> np.ndarray:
    """q_lat[h, r] = sum over dim (in order) of q[h, dim] * wk[r, h, dim]."""
    num_heads, head_dim = q.shape
    q_lat = np.zeros((num_heads, wk.shape[0]), dtype=np.float32)
    with np.errstate(all="ignore"):
        for dim in range(head_dim):
            q_lat = q_lat + q[:, dim, None] * wk[:, :, dim].T
    return q_lat


def _project(wv: np.ndarray, o_lat: np.ndarray) -> np.ndarray:
    """out[h, d] = sum over r (in order) of wv[r, h, d] * o_lat[h, r]."""
    out = np.zeros(wv.shape[1:], dtype=np.float32)
    with np.errstate(all="ignore"):
        for r in range(wv.shape[0]):
            out = out + wv[r] * o_lat[:, r, None]
    return out


def _absorbed(a: MlaArrays, kv_splits: int) -> np.ndarray:
    q_lat = _absorb_query(a.q, a.wk)  # the prologue
    latent = {}  # o_lat, set by the prologue

    def zero_latent() -> None:
        latent["o"] = np.zeros((a.num_heads, a.rank), dtype=np.float32)

    def update_o_acc(o_acc, weight, rescale, tile_start, tile_len):
        weighted = _latent_weighted_sum(a.kv_cache, weight, tile_start, tile_len)
        latent["o"] = rescale[:, None] * latent["o"] + weighted
        return o_acc

    def project_output(o_acc):
        return _project(a.wv, latent["o"])

    return tiled_online_softmax(
        a.num_heads, a.head_dim, a.seq_len, a.tile_size, _latent_scores(q_lat, a),
        update_o_acc, epilogue=project_output, prologue=zero_latent, kv_splits=kv_splits,
        split_keys=a.split_keys,
    )


def _program(a: MlaArrays, kv_splits: int, dim_parts: int, merge_teams: int) -> np.ndarray:
    dim_parts = _dim_parts(dim_parts, a.rank)
    q_lat = _absorb_query(a.q, a.wk)

    def update_o_acc(o_acc, weight, rescale, tile_start, tile_len):
        weighted = _latent_weighted_sum(a.kv_cache, weight, tile_start, tile_len)
        return rescale[:, None] * o_acc + weighted

    o_lat = tiled_online_softmax(
        a.num_heads, a.rank, a.seq_len, a.tile_size, _latent_scores(q_lat, a, dim_parts),
        update_o_acc, kv_splits=kv_splits, split_keys=a.split_keys, merge_teams=merge_teams,
    )
    return _project(a.wv, o_lat)


# The public oracles ------------------------------------------------------------


@_oracle
def mla_decode(a: MlaArrays) -> np.ndarray:
    """MLA decode of SEMANTICS.md: q f32[H, D], kv_cache f32[S, R],
    kr_cache f32[S, P], w_uk/w_uv f32[R, H*D] -> out f32[H, D]."""
    return _seed(a)


@_oracle
def mla_decode_absorbed(a: MlaArrays, kv_splits: int = 1) -> np.ndarray:
    """MLA decode with W_uk and W_uv absorbed, in the order of operations of
    `vyre_xdsl.mla.mla_decode_absorbed` (what vyre-absorb-mla makes of
    `mla_decode`): the same arguments and result as `mla_decode`, equal to
    it up to the rounding of reordered sums, and bit-exact with the kernel.

    Per head: q_lat[r] = sum over dim of q[dim] * w_uk[r, head, dim] and
    o_lat = 0 before the first tile; a key's score is
    bounded_score((sum over r of q_lat[r] * kv_cache[t, r] + sum over
    dim < rope of q[dim] * kr_cache[t, dim]) * scale); the update sets
    o_lat[r] = rescale * o_lat[r] + (sum over j of weight(j) * kv_cache[t, r]),
    and after the last tile o_acc[dim] = sum over r of w_uv[r, head, dim] *
    o_lat[r].  `kv_splits` gives the order of a kernel split by
    vyre-split-kv."""
    return _absorbed(a, kv_splits)


@_oracle
def mla_decode_program(a: MlaArrays, kv_splits: int = 1, dim_parts: int = 1,
                       merge_teams: int = 1) -> np.ndarray:
    """MLA decode in the order of operations of the three-kernel program
    `vyre_xdsl.mla.mla_decode_program` (what vyre-absorb-mla{kernels=3}
    makes of `mla_decode`): the same arguments and result as `mla_decode`,
    equal to it up to the rounding of reordered sums, and bit-exact with
    the kernels.

    q_lat[h, r] = sum over dim of q[h, dim] * w_uk[r, h, dim]; the skeleton
    over the latent cache gives o_lat (rows of kv_lora_rank, normalised);
    out[h, d] = sum over r of w_uv[r, h, d] * o_lat[h, r].  `kv_splits`
    gives the order of a kernel split by vyre-split-kv (merged in workgroup
    memory or by a kernel: the same order), `merge_teams` that of a merge
    kernel with teams (tiled_online_softmax's), `dim_parts` that of its
    latent rows split by vyre-split-head-dim."""
    return _program(a, kv_splits, dim_parts, merge_teams)

