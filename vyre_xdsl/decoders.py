"""The two decoders of SEMANTICS.md, each only its two fragments:
FlashAttention-2 here, MLA decode (and the absorbed forms vyre-absorb-mla
rewrites it into) in `vyre_xdsl.mla`."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from vyre_xdsl import trace
from vyre_xdsl.dtypes import check_dtype
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kv_layout import KvLayout, check_paging, check_table
from vyre_xdsl.mla import mla_decode, mla_decode_absorbed, mla_decode_program
from vyre_xdsl.trace import Traced
from vyre_xdsl.value_range import never_infinite
from vyre_xdsl.skeleton import (
    Buffer,
    Fragment,
    check_dimensions,
    check_result,
    check_u32_size,
    f32_scale,
    tiled_online_softmax,
)

__all__ = ["flash_attention_2", "mla_decode", "mla_decode_absorbed", "mla_decode_program"]


def flash_attention_2(
    seq_len: int,
    head_dim: int,
    tile_size: int = 64,
    *,
    score_mod: Callable | None = None,
    mask_mod: Callable | None = None,
    num_heads: int = 1,
    num_kv_heads: int | None = None,
    kv_len: int | None = None,
    batch: int | None = None,
    dtype: str = "f32",
    v_head_dim: int | None = None,
    return_lse: bool = False,
    kv_lens: bool | None = None,
    page_size: int | None = None,
    num_pages: int | None = None,
) -> ModuleOp:
    """FlashAttention-2 forward, one query row per item:
    `out = softmax(score_mod(q k^T / sqrt(d)) masked by mask_mod) v`.

    `v_head_dim` (default head_dim) is the width of v's and out's rows.
    `return_lse=True` adds an output `lse` shaped like q without its last
    axis: the natural log of each row's softmax denominator (-inf for a row
    whose keys are all dropped), as FlexAttention and FlashAttention
    return it.

    `q`/`out` are `[batch, num_heads, seq_len, head_dim]` and `k`/`v`
    `[batch, num_kv_heads, kv_len, head_dim]`; without `batch` (one
    sequence, the layouts of before) they have no batch axis, and are
    `[seq_len, head_dim]` / `[kv_len, head_dim]` with one head as well
    (`batch=1` keeps the axes); `kv_len` defaults to `seq_len`. Query head
    h reads kv head `h // (num_heads // num_kv_heads)` (grouped-query
    attention). With `seq_len < kv_len` the queries are the last `seq_len`
    positions of the sequence (bottom-right aligned, as in decoding or
    chunked prefill): query i sits at position `kv_len - seq_len + i`.

    `score_mod(score, q_idx, kv_idx[, head]) -> score` and
    `mask_mod(q_idx, kv_idx[, head]) -> bool` (True keeps the pair) are
    Python functions over traced values (vyre_xdsl.trace); `q_idx`/`kv_idx`
    are positions in the sequence, `head` the query head.  With a modifier
    the kernel is named `flex_attention` instead of `flash_attention_2`.

    `dtype` ("f32", "f16" or "bf16") is the element type of q, k, v and out;
    scores, the softmax state and the accumulator stay f32 (inputs widened
    exactly, the output rounded once to nearest even).

    `kv_lens=True` (a build-time flag) adds a required int32 input `kv_lens
    [batch]`: each sequence's key count L_b, read at run time, so that one
    compiled kernel serves every length up to `kv_len` (k/v keep room for
    kv_len keys; keys past L_b are never read). Tiles past L_b are skipped,
    the last one is cut at L_b, and the queries are bottom-right aligned to
    L_b: query i sits at position `L_b - seq_len + i` (the q_idx of the
    modifiers; negative where L_b < seq_len). A length outside [0, kv_len]
    is clamped into it; a sequence of 0 keys outputs 0 (lse -inf).

    `page_size=P, num_pages=N` (paged KV, as vLLM and FlashInfer store it;
    implies kv_lens) make k a pool `[N, P, num_kv_heads, head_dim]` (v
    likewise with v_head_dim) and add an int32 input `block_table [batch,
    ceil(kv_len / P)]`: key t of sequence b is row `block_table[b, t // P] *
    P + t % P` of the pool. A page index outside [0, N - 1] is clamped into
    it: a bad table gives garbage, never a read outside the pool."""
    dtype = check_dtype(dtype)
    batched = batch is not None
    kv_lens, page_size, num_pages = check_paging(
        kv_lens, page_size, num_pages, "k/v are [num_pages, page_size, num_kv_heads, head_dim]"
    )
    paged = page_size is not None
    if num_kv_heads is None:
        num_kv_heads = num_heads
    if kv_len is None:
        kv_len = seq_len
    if v_head_dim is None:
        v_head_dim = head_dim
    if not isinstance(return_lse, bool | np.bool_):
        raise VyreError(f"return_lse must be True or False, got {return_lse!r}")
    return_lse = bool(return_lse)
    seq_len, head_dim, tile_size, num_heads, num_kv_heads, kv_len, batch = check_dimensions(
        seq_len=seq_len, head_dim=head_dim, tile_size=tile_size,
        num_heads=num_heads, num_kv_heads=num_kv_heads, kv_len=kv_len,
        batch=batch if batched else 1,
    )
    # after head_dim, its default: a bad head_dim is named as the one passed
    (v_head_dim,) = check_dimensions(v_head_dim=v_head_dim)
    if seq_len > kv_len:
        raise VyreError(
            f"seq_len ({seq_len}) must be <= kv_len ({kv_len}): the queries are the "
            f"last seq_len of the kv_len positions of each sequence"
        )
    if num_heads % num_kv_heads:
        raise VyreError(
            f"num_heads ({num_heads}) must be a multiple of num_kv_heads "
            f"({num_kv_heads}): each kv head serves num_heads // num_kv_heads "
            f"query heads"
        )
    check_u32_size("buffer q", batch=batch, num_heads=num_heads, seq_len=seq_len,
                   head_dim=head_dim)
    if paged:
        check_u32_size("buffer k", num_pages=num_pages, page_size=page_size,
                       num_kv_heads=num_kv_heads, head_dim=head_dim)
        check_u32_size("buffer v", num_pages=num_pages, page_size=page_size,
                       num_kv_heads=num_kv_heads, v_head_dim=v_head_dim)
    else:
        check_u32_size("buffer k", batch=batch, num_kv_heads=num_kv_heads, kv_len=kv_len,
                       head_dim=head_dim)
    group = num_heads // num_kv_heads
    items = batch * num_heads * seq_len
    offset = kv_len - seq_len  # position of query 0 (bottom-right aligned)
    scale = f32_scale(head_dim)
    score_call = trace.Modifier(score_mod, "score_mod") if score_mod is not None else None
    mask_call = trace.Modifier(mask_mod, "mask_mod") if mask_mod is not None else None

    seq_items = num_heads * seq_len  # items of one sequence (kv_lens[b])
    layout = KvLayout(batch, kv_len, seq_items, kv_lens, page_size, num_pages)
    check_table(layout)

    def positions(item: Traced, with_head: bool, length=None) -> list[Traced]:
        """[q_idx] or [q_idx, head] of an item, as traced integers; with
        kv_lens `length` is the item's run-time key count (an index)."""
        rows = batch * num_heads
        # items are >= 0: plain divsi/remsi (trace.index_div/index_mod)
        q_idx = item if rows == 1 else trace.index_mod(item, seq_len)
        if length is not None:  # bottom-right aligned to the run-time length
            q_idx = q_idx + trace.wrap(length) - seq_len
        elif offset:
            q_idx = q_idx + offset
        if not with_head:
            return [q_idx]
        if num_heads == 1:
            return [q_idx, item * 0]
        head = trace.index_div(item, seq_len)
        return [q_idx, head if batch == 1 else trace.index_mod(head, num_heads)]

    def kv_row_base(f: Fragment):
        """First row of this item's kv head in k/v (None with one sequence
        of one head); paged: (this item's kv head, first block_table entry
        of its sequence)."""
        if paged:
            row_group = f.divui(f.item, f.index(seq_len))  # batch * num_heads + head
            kv_head = f.divui(f.remui(row_group, f.index(num_heads)), f.index(group),
                              "kv_head")
            return kv_head, layout.table_base(f)
        if batch * num_heads == 1:
            return None
        kv_head = f.divui(f.divui(f.item, f.index(seq_len)), f.index(group), "kv_head")
        return f.muli(kv_head, f.index(kv_len), "kv_base")

    def kv_row(b: Fragment, base, t):
        if paged:
            # key t: slot t % P of page block_table[b, t // P] (clamped to
            # the pool), row (page * P + slot) * num_kv_heads + kv_head
            kv_head, table_base = base
            slot = layout.page_row(b, table_base, t)
            return b.addi(b.muli(slot, b.index(num_kv_heads)), kv_head, "kv_row")
        return t if base is None else b.addi(base, t, "kv_row")

    # whether a score_mod may drop a key (return -inf); a soft-cap cannot
    # (vyre_xdsl.value_range), and then neither fragment tests for it.
    # Read by update, which is built after scores (else it stays True).
    drops = [score_mod is not None]

    def scores(f: Fragment) -> None:
        k = f.buffer("k")
        base = kv_row_base(f)
        if score_mod is not None:
            length = layout.run_time_length(f) if kv_lens else None
            q_pos = positions(f.traced(f.item), score_call.wants_head, length)

        def score_one_key(b: Fragment, j, _):
            t = b.addi(f.tile_start, j, "t")
            row = kv_row(b, base, t)

            def dot_step(b: Fragment, d, acc):
                q_d = b.load(f.q_scratch, b.q_index(d))
                k_d = b.load(k, b.flat_index(row, head_dim, d))
                return [b.addf(acc[0], b.mulf(q_d, k_d))]

            (dot,) = b.loop(0, head_dim, dot_step, [b.f32(0.0)], hint="d")
            score = b.mulf(dot, b.f32(scale))
            if score_mod is not None:
                args = [trace.wrap(score), q_pos[0], b.traced(t), *q_pos[1:]]
                modified = score_call(*args)
                modified = check_result(modified, "f32", score_mod, "score_mod")
                score = modified.ssa if isinstance(modified, Traced) else b.f32(modified)
            stored = b.bounded_score(score)
            drops[0] = score_mod is not None and not never_infinite(score)
            if drops[0]:
                # SEMANTICS.md: a score_mod's -inf drops the key exactly, as a
                # false mask does: kept as -inf, the recurrence weighs it 0
                minus_inf = b.f32(-math.inf)
                stored = b.select(b.cmpf(score, minus_inf, "oeq"), minus_inf, stored)
            b.store(stored, f.score_tile, b.score_index(j))
            return []

        f.loop(0, f.tile_len, score_one_key, hint="j")

    def update(f: Fragment) -> None:
        v = f.buffer("v")
        base = kv_row_base(f)

        def update_one_dim(b: Fragment, d, _):
            def weigh_step(b: Fragment, j, acc):
                weight = b.weight(j)
                t = b.addi(f.tile_start, j, "t")
                v_d = b.load(v, b.flat_index(kv_row(b, base, t), v_head_dim, d))
                term = b.mulf(weight, v_d)
                if mask_mod is not None or drops[0]:
                    # A dropped key (masked or scored -inf: weight exactly 0; a
                    # kept key's weight is at least exp(-80)) adds nothing, even
                    # where v is inf or NaN (0 * inf = NaN): the same as a
                    # skipped empty tile.
                    zero = b.f32(0.0)
                    term = b.select(b.cmpf(weight, zero, "oeq"), zero, term)
                return [b.addf(acc[0], term)]

            (wv,) = b.loop(0, f.tile_len, weigh_step, [b.f32(0.0)], hint="j")
            o_index = b.o_index(d)
            o = b.load(f.o_acc, o_index)
            b.store(b.addf(b.mulf(f.rescale, o), wv), f.o_acc, o_index)
            return []

        f.loop(0, v_head_dim, update_one_dim, hint="d")

    def mask(item: Traced, kv_idx: Traced) -> Traced:
        # with kv_lens the mask region loads the item's length itself (the
        # fragment the skeleton traces it in is the innermost builder)
        length = layout.run_time_length(trace._builder()) if kv_lens else None
        q_pos = positions(item, mask_call.wants_head, length)
        keep = mask_call(q_pos[0], kv_idx, *q_pos[1:])
        return check_result(keep, "bool", mask_mod, "mask_mod")

    rows = (batch, num_heads, seq_len)
    kv_rows = (batch, num_kv_heads, kv_len)
    if not batched:  # the layouts without a batch axis, and one head's without heads
        keep = 2 if num_heads == 1 else 1
        rows, kv_rows = rows[keep:], kv_rows[keep:]
    if paged:
        kv_rows = (num_pages, page_size, num_kv_heads)
    buffers = [Buffer("q", (*rows, head_dim)), Buffer("k", (*kv_rows, head_dim)),
               Buffer("v", (*kv_rows, v_head_dim)), Buffer("out", (*rows, v_head_dim), "write")]
    if return_lse:  # the log-sum-exp stays f32 whatever the inputs are
        buffers.append(Buffer("lse", rows, "write", dtype="f32"))
    buffers += layout.buffers()
    # A modified kernel computes something else than FlashAttention-2's
    # oracle: it gets its own name (vyre-run --check must not mistake it).
    name = "flash_attention_2" if score_mod is None and mask_mod is None else "flex_attention"
    return tiled_online_softmax(
        name,
        buffers,
        item_count=items,
        seq_len=kv_len,
        head_dim=head_dim,
        tile_size=tile_size,
        scores=scores,
        update=update,
        mask=mask if mask_mod is not None else None,
        # without the head, a mask sees an item only through its position
        mask_period=seq_len if mask_mod is not None and not mask_call.wants_head else None,
        dtype=dtype,
        v_head_dim=v_head_dim,
        lse="lse" if return_lse else None,
        **layout.skeleton_args(),
    )
