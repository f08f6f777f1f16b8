"""A decoder neither built-in has: attention with an additive bias buffer.

    out = softmax(q k^T / sqrt(head_dim) + bias) v,   bias: f32[seq_len, seq_len]

(T5-style relative position biases, ALiBi tables, or any learned bias.)  It
is written with the public API only: two fragments over the one skeleton
(`vx.tiled_online_softmax`), with traced handles for the score arithmetic,
and its oracle over the public oracle skeleton
(`vx.reference.tiled_online_softmax`).
"""

from __future__ import annotations

import numpy as np

import vyre_xdsl as vx
from vyre_xdsl.reference import bounded_score, tiled_online_softmax


def build(seq_len: int, head_dim: int, tile_size: int = 64):
    scale = float(np.float32(1.0) / np.sqrt(np.float32(head_dim)))

    def scores(f: vx.Fragment) -> None:
        k, bias = f.buffer("k"), f.buffer("bias")

        def one_key(b, j, _):
            t = b.addi(f.tile_start, j)

            def dot_step(b, d, acc):
                q_d = b.load(f.q_scratch, b.q_index(d))
                k_d = b.load(k, b.flat_index(t, head_dim, d))
                return [vx.wrap(acc[0]) + vx.wrap(q_d) * vx.wrap(k_d)]

            (dot,) = b.loop(0, head_dim, dot_step, [0.0])
            row, key = vx.wrap(f.item), vx.wrap(t)
            s = vx.wrap(dot) * scale + vx.wrap(b.load(bias, row * seq_len + key))
            b.store(b.bounded_score(s), f.score_tile, b.score_index(j))
            return []

        f.loop(0, f.tile_len, one_key)

    def update(f: vx.Fragment) -> None:
        v = f.buffer("v")

        def one_dim(b, d, _):
            def weigh(b, j, acc):
                t = b.addi(f.tile_start, j)
                v_d = b.load(v, b.flat_index(t, head_dim, d))
                return [vx.wrap(acc[0]) + vx.wrap(b.weight(j)) * vx.wrap(v_d)]

            (wv,) = b.loop(0, f.tile_len, weigh, [0.0])
            o = b.o_index(d)
            b.store(vx.wrap(f.rescale) * vx.wrap(b.load(f.o_acc, o)) + vx.wrap(wv), f.o_acc, o)
            return []

        f.loop(0, head_dim, one_dim)

    rows = (seq_len, head_dim)
    return vx.tiled_online_softmax(
        "biased_attention",
        [vx.Buffer("q", rows), vx.Buffer("k", rows), vx.Buffer("v", rows),
         vx.Buffer("bias", (seq_len, seq_len)), vx.Buffer("out", rows, "write")],
        item_count=seq_len, seq_len=seq_len, head_dim=head_dim, tile_size=tile_size,
        scores=scores, update=update,
    )


def reference(q, k, v, bias, tile_size: int = 64) -> np.ndarray:
    """The oracle: the same fragments in numpy, in the same f32 order."""
    seq_len, head_dim = q.shape
    scale = np.float32(1.0) / np.sqrt(np.float32(head_dim))

    def compute_tile_scores(tile_start, tile_len):
        rows = k[tile_start:tile_start + tile_len]
        dot = np.zeros((tile_len, seq_len), np.float32)
        for d in range(head_dim):
            dot = dot + q[None, :, d] * rows[:, d, None]
        return bounded_score(dot * scale + bias[:, tile_start:tile_start + tile_len].T)

    def update_o_acc(o_acc, weight, rescale, tile_start, tile_len):
        wv = np.zeros_like(o_acc)
        for j in range(tile_len):
            wv = wv + weight(j)[:, None] * v[tile_start + j][None, :]
        return rescale[:, None] * o_acc + wv

    return tiled_online_softmax(
        seq_len, head_dim, seq_len, tile_size, compute_tile_scores, update_o_acc
    )


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    S, D = 100, 8
    q, k, v = (rng.standard_normal((S, D), dtype=np.float32) for _ in range(3))
    bias = rng.standard_normal((S, S), dtype=np.float32)
    out = vx.run(build(S, D, 32), {"q": q, "k": k, "v": v, "bias": bias})["out"]
    assert np.array_equal(out, reference(q, k, v, bias, 32))
    print("biased_attention: interpreter matches the oracle bit for bit")
