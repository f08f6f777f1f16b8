"""The two decoders of SEMANTICS.md, each only its two fragments."""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from vyre_xdsl.errors import VyreError
from vyre_xdsl.skeleton import (
    Buffer,
    Fragment,
    check_dimensions,
    check_u32_size,
    f32_scale,
    tiled_online_softmax,
)


def flash_attention_2(seq_len: int, head_dim: int, tile_size: int = 64) -> ModuleOp:
    """FlashAttention-2 forward, one query row per item:
    `q, k, v, out : f32[seq_len, head_dim]`, `out = softmax(q k^T / sqrt(d)) v`."""
    check_dimensions(seq_len=seq_len, head_dim=head_dim, tile_size=tile_size)
    check_u32_size("buffer q", seq_len=seq_len, head_dim=head_dim)
    rows = (seq_len, head_dim)
    scale = f32_scale(head_dim)

    def scores(f: Fragment) -> None:
        k = f.buffer("k")

        def score_one_key(b: Fragment, j, _):
            t = b.addi(f.tile_start, j, "t")

            def dot_step(b: Fragment, d, acc):
                q_d = b.load(f.q_scratch, b.q_index(d))
                k_d = b.load(k, b.flat_index(t, head_dim, d))
                return [b.addf(acc[0], b.mulf(q_d, k_d))]

            (dot,) = b.loop(0, head_dim, dot_step, [b.f32(0.0)], hint="d")
            score = b.bounded_score(b.mulf(dot, b.f32(scale)))
            b.store(score, f.score_tile, b.score_index(j))
            return []

        f.loop(0, f.tile_len, score_one_key, hint="j")

    def update(f: Fragment) -> None:
        v = f.buffer("v")

        def update_one_dim(b: Fragment, d, _):
            def weigh_step(b: Fragment, j, acc):
                s = b.load(f.score_tile, b.score_index(j))
                weight = b.exp(b.bounded_exp_arg(b.subf(s, f.m_new)))
                t = b.addi(f.tile_start, j, "t")
                v_d = b.load(v, b.flat_index(t, head_dim, d))
                return [b.addf(acc[0], b.mulf(weight, v_d))]

            (wv,) = b.loop(0, f.tile_len, weigh_step, [b.f32(0.0)], hint="j")
            o_index = b.o_index(d)
            o = b.load(f.o_acc, o_index)
            b.store(b.addf(b.mulf(f.rescale, o), wv), f.o_acc, o_index)
            return []

        f.loop(0, head_dim, update_one_dim, hint="d")

    return tiled_online_softmax(
        "flash_attention_2",
        [Buffer("q", rows), Buffer("k", rows), Buffer("v", rows), Buffer("out", rows, "write")],
        item_count=seq_len,
        seq_len=seq_len,
        head_dim=head_dim,
        tile_size=tile_size,
        scores=scores,
        update=update,
    )


def mla_decode(
    seq_len: int,
    num_heads: int,
    head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    tile_size: int = 64,
) -> ModuleOp:
    """Multi-head latent attention decode of one new token, one head per item:
    K and V are decompressed on the fly from the latent `kv_cache` through
    `w_uk`/`w_uv`; the first `qk_rope_head_dim` key dims add `kr_cache`."""
    check_dimensions(
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
            s = b.load(f.score_tile, b.score_index(j))
            weight = b.exp(b.bounded_exp_arg(b.subf(s, f.m_new)), "weight")
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

    heads = (num_heads, head_dim)
    return tiled_online_softmax(
        "mla_decode",
        [
            Buffer("q", heads),
            Buffer("kv_cache", (seq_len, kv_lora_rank)),
            Buffer("kr_cache", (seq_len, qk_rope_head_dim)),
            Buffer("w_uk", (kv_lora_rank, uv_stride)),
            Buffer("w_uv", (kv_lora_rank, uv_stride)),
            Buffer("out", heads, "write"),
        ],
        item_count=num_heads,
        seq_len=seq_len,
        head_dim=head_dim,
        tile_size=tile_size,
        scores=scores,
        update=update,
    )
