"""The two decoders of SEMANTICS.md, each only its two fragments, and the
two absorbed forms of MLA decode that vyre-absorb-mla rewrites it into."""

from __future__ import annotations

import math
from collections.abc import Callable

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from vyre_xdsl import trace
from vyre_xdsl.dtypes import check_dtype
from vyre_xdsl.errors import VyreError
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.trace import Traced
from vyre_xdsl.skeleton import (
    WORKGROUP_SIZE,
    Buffer,
    Fragment,
    check_dimensions,
    check_result,
    check_u32_size,
    f32_scale,
    per_item_kernel,
    tiled_online_softmax,
)


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
    batch: int = 1,
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
    `[batch, num_kv_heads, kv_len, head_dim]` (without the batch axis when
    `batch == 1`, and `[seq_len, head_dim]` / `[kv_len, head_dim]` with one
    head as well); `kv_len` defaults to `seq_len`. Query head h reads kv
    head `h // (num_heads // num_kv_heads)` (grouped-query attention). With
    `seq_len < kv_len` the queries are the last `seq_len` positions of the
    sequence (bottom-right aligned, as in decoding or chunked prefill):
    query i sits at position `kv_len - seq_len + i`.

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
    paged = page_size is not None or num_pages is not None
    if kv_lens is None:
        kv_lens = paged
    if not isinstance(kv_lens, bool):
        raise VyreError(f"kv_lens must be True or False, got {kv_lens!r}")
    if paged:
        if page_size is None or num_pages is None:
            missing = "num_pages" if page_size is not None else "page_size"
            raise VyreError(
                f"paged KV needs both page_size and num_pages; give {missing} too "
                f"(k/v are [num_pages, page_size, num_kv_heads, head_dim])"
            )
        if not kv_lens:
            raise VyreError(
                "page_size/num_pages imply kv_lens (pages and lengths, as vLLM and "
                "FlashInfer store a cache): leave kv_lens out or pass kv_lens=True"
            )
        page_size, num_pages = check_dimensions(page_size=page_size, num_pages=num_pages)
    if num_kv_heads is None:
        num_kv_heads = num_heads
    if kv_len is None:
        kv_len = seq_len
    if v_head_dim is None:
        v_head_dim = head_dim
    if not isinstance(return_lse, bool):
        raise VyreError(f"return_lse must be True or False, got {return_lse!r}")
    (v_head_dim,) = check_dimensions(v_head_dim=v_head_dim)
    seq_len, head_dim, tile_size, num_heads, num_kv_heads, kv_len, batch = check_dimensions(
        seq_len=seq_len, head_dim=head_dim, tile_size=tile_size,
        num_heads=num_heads, num_kv_heads=num_kv_heads, kv_len=kv_len, batch=batch,
    )
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
        pages_per_seq = -(-kv_len // page_size)
        check_u32_size("buffer k", num_pages=num_pages, page_size=page_size,
                       num_kv_heads=num_kv_heads, head_dim=head_dim)
        check_u32_size("buffer v", num_pages=num_pages, page_size=page_size,
                       num_kv_heads=num_kv_heads, v_head_dim=v_head_dim)
        check_u32_size("buffer block_table", batch=batch, pages_per_seq=pages_per_seq)
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

    def run_time_length(b) -> SSAValue:
        """This item's key count, clamped to [0, kv_len], as an index (the
        skeleton clamps it the same way)."""
        seq = b.divui(b.args["item"], b.index(seq_items), "seq")
        return b.load_clamped_index(b.buffer("kv_lens"), seq, kv_len)

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
            seq = f.divui(f.item, f.index(seq_items), "seq")
            return kv_head, f.muli(seq, f.index(pages_per_seq), "table_base")
        if batch * num_heads == 1:
            return None
        kv_head = f.divui(f.divui(f.item, f.index(seq_len)), f.index(group), "kv_head")
        return f.muli(kv_head, f.index(kv_len), "kv_base")

    def kv_row(b: Fragment, base, t):
        if paged:
            # key t: slot t % P of page block_table[b, t // P] (clamped to
            # the pool), row (page * P + slot) * num_kv_heads + kv_head
            kv_head, table_base = base
            entry = b.addi(table_base, b.divui(t, b.index(page_size)), "table_entry")
            page = b.load_clamped_index(b.buffer("block_table"), entry, num_pages - 1)
            slot = b.addi(b.muli(page, b.index(page_size)), b.remui(t, b.index(page_size)))
            return b.addi(b.muli(slot, b.index(num_kv_heads)), kv_head, "kv_row")
        return t if base is None else b.addi(base, t, "kv_row")

    def scores(f: Fragment) -> None:
        k = f.buffer("k")
        base = kv_row_base(f)
        if score_mod is not None:
            length = run_time_length(f) if kv_lens else None
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
            if score_mod is not None:
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
                if mask_mod is not None or score_mod is not None:
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
        length = run_time_length(trace._builder()) if kv_lens else None
        q_pos = positions(item, mask_call.wants_head, length)
        keep = mask_call(q_pos[0], kv_idx, *q_pos[1:])
        return check_result(keep, "bool", mask_mod, "mask_mod")

    rows = (batch, num_heads, seq_len)
    kv_rows = (batch, num_kv_heads, kv_len)
    if batch == 1:  # the layouts without a batch axis, and one head's without heads
        keep = 2 if num_heads == 1 else 1
        rows, kv_rows = rows[keep:], kv_rows[keep:]
    if paged:
        kv_rows = (num_pages, page_size, num_kv_heads)
    buffers = [Buffer("q", (*rows, head_dim)), Buffer("k", (*kv_rows, head_dim)),
               Buffer("v", (*kv_rows, v_head_dim)), Buffer("out", (*rows, v_head_dim), "write")]
    if return_lse:  # the log-sum-exp stays f32 whatever the inputs are
        buffers.append(Buffer("lse", rows, "write", dtype="f32"))
    if kv_lens:
        buffers.append(Buffer("kv_lens", (batch,), dtype="i32"))
    if paged:
        buffers.append(Buffer("block_table", (batch, pages_per_seq), dtype="i32"))
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
        kv_lens="kv_lens" if kv_lens else None,
        items_per_seq=seq_items if kv_lens else None,
    )


def _check_mla_shape(
    seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim, tile_size
) -> tuple[int, ...]:
    """The MLA shape as Python ints, or a VyreError naming the bad parameter."""
    (seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim,
     tile_size) = shape = check_dimensions(
        seq_len=seq_len,
        num_heads=num_heads,
        head_dim=head_dim,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        tile_size=tile_size,
    )
    if qk_rope_head_dim > head_dim:
        raise VyreError(
            f"qk_rope_head_dim ({qk_rope_head_dim}) must be <= head_dim "
            f"({head_dim}): the rotary part is added to the first "
            f"qk_rope_head_dim dims of each key"
        )
    check_u32_size("buffer q", num_heads=num_heads, head_dim=head_dim)
    check_u32_size("buffer kv_cache", seq_len=seq_len, kv_lora_rank=kv_lora_rank)
    check_u32_size("buffer kr_cache", seq_len=seq_len, qk_rope_head_dim=qk_rope_head_dim)
    check_u32_size(
        "buffer w_uk",
        kv_lora_rank=kv_lora_rank,
        num_heads=num_heads,
        head_dim=head_dim,
    )
    return shape


def _mla_buffers(
    seq_len: int, num_heads: int, head_dim: int, kv_lora_rank: int, qk_rope_head_dim: int
) -> list[Buffer]:
    """The buffers of MLA decode (SEMANTICS.md, Decoder 2), in binding order."""
    heads = (num_heads, head_dim)
    return [
        Buffer("q", heads),
        Buffer("kv_cache", (seq_len, kv_lora_rank)),
        Buffer("kr_cache", (seq_len, qk_rope_head_dim)),
        Buffer("w_uk", (kv_lora_rank, num_heads * head_dim)),
        Buffer("w_uv", (kv_lora_rank, num_heads * head_dim)),
        Buffer("out", heads, "write"),
    ]


def mla_decode(
    seq_len: int,
    num_heads: int,
    head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    tile_size: int = 64,
    *,
    dtype: str = "f32",
) -> ModuleOp:
    """Multi-head latent attention decode of one new token, one head per item:
    K and V are decompressed on the fly from the latent `kv_cache` through
    `w_uk`/`w_uv`; the first `qk_rope_head_dim` key dims add `kr_cache`.
    `dtype` ("f32", "f16" or "bf16") is the element type of every buffer;
    the computation stays f32 (inputs widened, the output rounded once)."""
    dtype = check_dtype(dtype)
    (seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim,
     tile_size) = _check_mla_shape(
        seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim, tile_size
    )
    uv_stride = num_heads * head_dim
    scale = f32_scale(head_dim)

    def decompress(b: Fragment, weights, head, dim, t):
        """`sum over r of weights[r*uv_stride + head*head_dim + dim] * kv_cache[t*R + r]`"""
        kv_cache = b.buffer("kv_cache")
        column = b.flat_index(head, head_dim, dim)

        def step(b: Fragment, r, acc):
            w = b.load(weights, b.addi(b.muli(r, b.index(uv_stride)), column))
            c = b.load(kv_cache, b.flat_index(t, kv_lora_rank, r))
            return [b.addf(acc[0], b.mulf(w, c))]

        return b.loop(0, kv_lora_rank, step, [b.f32(0.0)], hint="r")[0]

    def scores(f: Fragment) -> None:
        w_uk, kr_cache = f.buffer("w_uk"), f.buffer("kr_cache")

        def score_one_key(b: Fragment, j, _):
            t = b.addi(f.tile_start, j, "t")

            def dot_step(b: Fragment, dim, acc):
                k_val = decompress(b, w_uk, f.item, dim, t)
                is_rope = b.cmpi(dim, b.index(qk_rope_head_dim), "ult")
                (k_val,) = b.if_else(
                    is_rope,
                    lambda b: [
                        b.addf(
                            k_val,
                            b.load(kr_cache, b.flat_index(t, qk_rope_head_dim, dim)),
                        )
                    ],
                    lambda b: [k_val],
                )
                q_d = b.load(f.q_scratch, b.q_index(dim))
                return [b.addf(acc[0], b.mulf(q_d, k_val))]

            (dot,) = b.loop(0, head_dim, dot_step, [b.f32(0.0)], hint="dim")
            score = b.bounded_score(b.mulf(dot, b.f32(scale)))
            b.store(score, f.score_tile, b.score_index(j))
            return []

        f.loop(0, f.tile_len, score_one_key, hint="j")

    def update(f: Fragment) -> None:
        w_uv = f.buffer("w_uv")

        def rescale_dim(b: Fragment, d, _):
            o_index = b.o_index(d)
            b.store(b.mulf(b.load(f.o_acc, o_index), f.rescale), f.o_acc, o_index)
            return []

        f.loop(0, head_dim, rescale_dim, hint="d")

        def add_one_key(b: Fragment, j, _):
            weight = b.weight(j)
            t = b.addi(f.tile_start, j, "t")

            def add_dim(b: Fragment, dim, _):
                v_val = decompress(b, w_uv, f.item, dim, t)
                o_index = b.o_index(dim)
                o = b.load(f.o_acc, o_index)
                b.store(b.addf(o, b.mulf(weight, v_val)), f.o_acc, o_index)
                return []

            b.loop(0, head_dim, add_dim, hint="dim")
            return []

        f.loop(0, f.tile_len, add_one_key, hint="j")

    return tiled_online_softmax(
        "mla_decode",
        _mla_buffers(seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim),
        item_count=num_heads,
        seq_len=seq_len,
        head_dim=head_dim,
        tile_size=tile_size,
        scores=scores,
        update=update,
        dtype=dtype,
    )


def _dot(b: IRBuilder, count: int, left, right, hint: str) -> SSAValue:
    """`sum over i < count of left(b, i) * right(b, i)`, in order from 0.0."""

    def step(b: IRBuilder, i, acc):
        return [b.addf(acc[0], b.mulf(left(b, i), right(b, i)))]

    return b.loop(0, count, step, [b.f32(0.0)], hint=hint)[0]


def _weight_index(b: IRBuilder, r, head, dim, uv_stride: int, head_dim: int):
    """`r*uv_stride + head*head_dim + dim`: w_uk/w_uv at (r, head, dim)."""
    return b.addi(b.muli(r, b.index(uv_stride)), b.flat_index(head, head_dim, dim))


def mla_decode_absorbed(
    seq_len: int,
    num_heads: int,
    head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    tile_size: int = 64,
    *,
    dtype: str = "f32",
) -> ModuleOp:
    """MLA decode with `w_uk` and `w_uv` absorbed: what `vyre-absorb-mla`
    turns `mla_decode` into.  The same attention, with the sums reordered
    (so within a tolerance of `mla_decode`, not bit-identical):

        q_lat[r] = sum over dim of q[dim] * w_uk[r*uv_stride + head*head_dim + dim]
        s[j]     = bounded_score(scale * (sum over r of q_lat[r] * kv_cache[t, r]
                                 + sum over dim < rope of q[dim] * kr_cache[t, dim]))
        o_lat[r] = the online-softmax weighted sum of kv_cache[t, r]
        o_acc[d] = sum over r of w_uv[r*uv_stride + head*head_dim + d] * o_lat[r]

    A key costs kv_lora_rank + qk_rope_head_dim multiply-adds for its score
    and kv_lora_rank for the update, instead of head_dim * kv_lora_rank each.
    The two latent vectors are per-lane scratch (`q_lat`, `o_lat`, one
    kv_lora_rank slice per lane).  The prologue computes `q_lat` and zeroes
    `o_lat`; the update fragment folds the tile into `o_lat` the way
    FlashAttention-2's folds it into `o_acc`; the epilogue projects `o_lat`
    through `w_uv` into `o_acc`, which the skeleton then divides by the
    softmax denominator.  `reference.mla_decode_absorbed` is its oracle, op
    for op.  `dtype` is the buffers' element type, as in `mla_decode`."""
    dtype = check_dtype(dtype)
    (seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim,
     tile_size) = _check_mla_shape(
        seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim, tile_size
    )
    for latent in ("q_lat", "o_lat"):
        check_u32_size(
            f"scratch {latent}", workgroup_size=WORKGROUP_SIZE, kv_lora_rank=kv_lora_rank
        )
    uv_stride = num_heads * head_dim
    scale = f32_scale(head_dim)
    rank, rope = kv_lora_rank, qk_rope_head_dim

    def weight_index(b: Fragment, r, head, dim):
        return _weight_index(b, r, head, dim, uv_stride, head_dim)

    def absorb_query(f: Fragment) -> None:
        """prologue: q_lat = W_uk q; o_lat = 0."""
        w_uk = f.buffer("w_uk")
        q_lat, o_lat = f.scratch("q_lat"), f.scratch("o_lat")

        def one_rank(b: Fragment, r, _):
            q_r = _dot(
                b, head_dim,
                lambda b, dim: b.load(f.q_scratch, b.q_index(dim)),
                lambda b, dim: b.load(w_uk, weight_index(b, r, f.item, dim)),
                "dim",
            )
            b.store(q_r, q_lat, b.scratch_index("q_lat", r))
            b.store(b.f32(0.0), o_lat, b.scratch_index("o_lat", r))
            return []

        f.loop(0, rank, one_rank, hint="r")

    def scores(f: Fragment) -> None:
        kv_cache, kr_cache = f.buffer("kv_cache"), f.buffer("kr_cache")
        q_lat = f.scratch("q_lat")

        def score_one_key(b: Fragment, j, _):
            t = b.addi(f.tile_start, j, "t")

            def latent_step(b: Fragment, r, acc):
                q_r = b.load(q_lat, b.scratch_index("q_lat", r))
                c = b.load(kv_cache, b.flat_index(t, rank, r))
                return [b.addf(acc[0], b.mulf(q_r, c))]

            def rope_step(b: Fragment, dim, acc):
                q_d = b.load(f.q_scratch, b.q_index(dim))
                k_r = b.load(kr_cache, b.flat_index(t, rope, dim))
                return [b.addf(acc[0], b.mulf(q_d, k_r))]

            (dot,) = b.loop(0, rank, latent_step, [b.f32(0.0)], hint="r")
            (dot,) = b.loop(0, rope, rope_step, [dot], hint="dim")
            score = b.bounded_score(b.mulf(dot, b.f32(scale)))
            b.store(score, f.score_tile, b.score_index(j))
            return []

        f.loop(0, f.tile_len, score_one_key, hint="j")

    def update(f: Fragment) -> None:
        """o_lat[r] = rescale * o_lat[r] + sum over j of weight(j) * kv[t_j, r]
        (FlashAttention-2's order: the loop over r has a read-only inner
        loop, so vyre-unroll-jam advances 32 ranks side by side)."""
        kv_cache = f.buffer("kv_cache")
        o_lat = f.scratch("o_lat")

        def one_rank(b: Fragment, r, _):
            def weigh_step(b: Fragment, j, acc):
                t = b.addi(f.tile_start, j, "t")
                c = b.load(kv_cache, b.flat_index(t, rank, r))
                return [b.addf(acc[0], b.mulf(b.weight(j), c))]

            (weighted,) = b.loop(0, f.tile_len, weigh_step, [b.f32(0.0)], hint="j")
            index = b.scratch_index("o_lat", r)
            b.store(b.addf(b.mulf(f.rescale, b.load(o_lat, index)), weighted), o_lat, index)
            return []

        f.loop(0, rank, one_rank, hint="r")

    def project_output(f: Fragment) -> None:
        """epilogue: o_acc = W_uv o_lat."""
        w_uv = f.buffer("w_uv")
        o_lat = f.scratch("o_lat")

        def one_dim(b: Fragment, d, _):
            v = _dot(
                b, rank,
                lambda b, r: b.load(w_uv, weight_index(b, r, f.item, d)),
                lambda b, r: b.load(o_lat, b.scratch_index("o_lat", r)),
                "r",
            )
            b.store(v, f.o_acc, b.o_index(d))
            return []

        f.loop(0, head_dim, one_dim, hint="d")

    return tiled_online_softmax(
        "mla_decode",
        _mla_buffers(seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim),
        item_count=num_heads,
        seq_len=seq_len,
        head_dim=head_dim,
        tile_size=tile_size,
        scores=scores,
        update=update,
        scratch={"q_lat": kv_lora_rank, "o_lat": kv_lora_rank},
        prologue=absorb_query,
        epilogue=project_output,
        dtype=dtype,
    )


def mla_decode_program(
    seq_len: int,
    num_heads: int,
    head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    tile_size: int = 64,
    *,
    name: str = "mla_decode",
    dtype: str = "f32",
) -> ModuleOp:
    """MLA decode with `w_uk` and `w_uv` absorbed once per head, as a
    program of three kernels (what `vyre-absorb-mla{kernels=3}` turns
    `mla_decode` into), run in this order:

        @<name>_absorb_query  one item per (head, r):
            q_lat[head, r] = sum over dim of q[head, dim] * w_uk[r, head, dim]
        @<name>               the skeleton over the latent cache, one item
            per head, rows of kv_lora_rank:
            s[j]  = bounded_score(scale * (sum over r of q_lat[head, r] * kv_cache[t, r]
                                  + sum over dim < rope of q[head, dim] * kr_cache[t, dim]))
            o_lat = flush_tiny(online-softmax average of the kv_cache rows)
        @<name>_project       one item per (head, d):
            out[head, d] = sum over r of w_uv[r, head, d] * o_lat[head, r]

    `q_lat` and `o_lat` are `temp` buffers.  Unlike `mla_decode_absorbed`,
    no invocation repeats the head's projections, and the attention is a
    plain skeleton (no hooks) that vyre-split-kv can split across
    workgroups.  It normalises o_lat before projecting it, so it is within
    rounding of the other forms; `reference.mla_decode_program` is its
    oracle, op for op.  The score reads the head's q_lat row from the
    buffer, where every lane of a workgroup of one head's splits reads the
    same row; the skeleton's own copy of it (q_scratch) goes unread.
    `dtype` is the element type of the inputs and `out`, as in
    `mla_decode`; q_lat and o_lat stay f32."""
    dtype = check_dtype(dtype)
    (seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim,
     tile_size) = _check_mla_shape(
        seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim, tile_size
    )
    check_u32_size("scratch o_acc", workgroup_size=WORKGROUP_SIZE, kv_lora_rank=kv_lora_rank)
    uv_stride = num_heads * head_dim
    rank, rope = kv_lora_rank, qk_rope_head_dim
    buffers = {
        b.name: Buffer(b.name, b.shape, b.access, binding)
        for binding, b in enumerate(
            _mla_buffers(seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim)
        )
    }
    binding = len(buffers)
    for latent in ("q_lat", "o_lat"):
        buffers[latent] = Buffer(latent, (num_heads, rank), "temp", binding, "f32")
        binding += 1

    def uses(*names: str) -> list[Buffer]:
        return [buffers[n] for n in names]

    def absorb_query(b: IRBuilder, v: dict[str, SSAValue], item: SSAValue) -> None:
        head, r = b.divui(item, b.index(rank), "head"), b.remui(item, b.index(rank), "r")
        q_r = _dot(
            b, head_dim,
            lambda b, dim: b.load(v["q"], b.flat_index(head, head_dim, dim)),
            lambda b, dim: b.load(
                v["w_uk"], _weight_index(b, r, head, dim, uv_stride, head_dim)
            ),
            "dim",
        )
        b.store(q_r, v["q_lat"], item)

    def project(b: IRBuilder, v: dict[str, SSAValue], item: SSAValue) -> None:
        head = b.divui(item, b.index(head_dim), "head")
        d = b.remui(item, b.index(head_dim), "d")
        out = _dot(
            b, rank,
            lambda b, r: b.load(v["w_uv"], _weight_index(b, r, head, d, uv_stride, head_dim)),
            lambda b, r: b.load(v["o_lat"], b.flat_index(head, rank, r)),
            "r",
        )
        b.store(out, v["out"], item)

    scale = f32_scale(head_dim)

    def scores(f: Fragment) -> None:
        q, q_lat = f.buffer("q"), f.buffer("q_lat")
        kv_cache, kr_cache = f.buffer("kv_cache"), f.buffer("kr_cache")

        def score_one_key(b: Fragment, j, _):
            t = b.addi(f.tile_start, j, "t")
            dot = _dot(
                b, rank,
                lambda b, r: b.load(q_lat, b.flat_index(f.item, rank, r)),
                lambda b, r: b.load(kv_cache, b.flat_index(t, rank, r)),
                "r",
            )

            def rope_step(b: Fragment, dim, acc):
                q_d = b.load(q, b.flat_index(f.item, head_dim, dim))
                k_r = b.load(kr_cache, b.flat_index(t, rope, dim))
                return [b.addf(acc[0], b.mulf(q_d, k_r))]

            (dot,) = b.loop(0, rope, rope_step, [dot], hint="dim")
            b.store(b.bounded_score(b.mulf(dot, b.f32(scale))), f.score_tile, b.score_index(j))
            return []

        f.loop(0, f.tile_len, score_one_key, hint="j")

    def update(f: Fragment) -> None:
        """o_acc[r] = rescale * o_acc[r] + sum over j of weight(j) * kv[t_j, r]."""
        kv_cache = f.buffer("kv_cache")

        def one_rank(b: Fragment, r, _):
            weighted = _dot(
                b, f.tile_len,
                lambda b, j: b.weight(j),
                lambda b, j: b.load(kv_cache, b.flat_index(b.addi(f.tile_start, j, "t"), rank, r)),
                "j",
            )
            index = b.o_index(r)
            b.store(b.addf(b.mulf(f.rescale, b.load(f.o_acc, index)), weighted), f.o_acc, index)
            return []

        f.loop(0, rank, one_rank, hint="r")

    (attention,) = tiled_online_softmax(
        name,
        uses("q", "kv_cache", "kr_cache", "q_lat", "o_lat"),
        item_count=num_heads,
        seq_len=seq_len,
        head_dim=rank,
        tile_size=tile_size,
        scores=scores,
        update=update,
        q="q_lat",
        out="o_lat",
        dtype=dtype,
    ).body.block.ops
    attention.detach()
    module = ModuleOp([
        per_item_kernel(
            f"{name}_absorb_query", uses("q", "w_uk", "q_lat"),
            num_heads * rank, absorb_query, dtype,
        ),
        attention,
        per_item_kernel(
            f"{name}_project", uses("w_uv", "o_lat", "out"), num_heads * head_dim, project,
            dtype,
        ),
    ])
    module.verify()
    return module
