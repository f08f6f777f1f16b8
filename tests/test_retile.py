"""vyre-retile: smaller key tiles; exact against the oracle at the new tile
size (masks included: the refined tile classes skip exactly the same keys),
within tolerance of the built one."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl import reference
from vyre_xdsl.errors import VyreError

CAUSAL = dict(mask_mod=lambda q, kv: kv <= q)
WINDOW = dict(mask_mod=lambda q, kv: (kv <= q) & (q - kv < 40))


@pytest.mark.parametrize("mods", [{}, CAUSAL, WINDOW], ids=["plain", "causal", "window"])
@pytest.mark.parametrize("shape", [(200, 8, 64, 16), (130, 4, 32, 8)])
def test_retiled_kernel_is_exact_at_the_new_tile_size(mods, shape):
    seq, dim, built, small = shape
    rng = np.random.default_rng(seq)
    q, k, v = (rng.standard_normal((seq, dim)).astype(np.float32) for _ in range(3))
    module = vx.flash_attention_2(seq, dim, built, **mods)
    lowered = vx.lower_to_gpu(
        module, optimize=f"vyre-retile{{tile_size={small}}},vyre-to-gpu{{optimize=exact}}"
    )
    got = vx.run(lowered, {"q": q, "k": k, "v": v})["out"]
    want = reference.flash_attention_2(q, k, v, tile_size=small, **mods)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    built_order = reference.flash_attention_2(q, k, v, tile_size=built, **mods)
    assert np.max(np.abs(got - built_order)) <= 1e-5 * np.max(np.abs(built_order))


def test_default_tiles_follow_the_h200_measurements():
    from vyre_xdsl.compiler import apply_pipeline
    from vyre_xdsl.dialects import vyre

    def chosen(module):
        (op,) = [o for o in apply_pipeline(module, "vyre-retile").walk()
                 if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
        return op.shape()["tile_size"]

    assert chosen(vx.flash_attention_2(4096, 64, num_heads=32)) == 16
    assert chosen(vx.flash_attention_2(4096, 64, tile_size=8)) == 8
    # rows of 128 dims, which the default splits over two lanes
    # (vyre-split-head-dim): 32 keys, or 4 on a small grid (64 workgroups)
    wide = apply_pipeline(vx.flash_attention_2(4096, 128, num_heads=32), "vyre-resize-workgroup")
    assert chosen(wide) == 32
    assert chosen(vx.flash_attention_2(4096, 128)) == 4
    assert chosen(vx.flash_attention_2(4096, 128, 48, num_heads=32)) == 48  # 32 does not divide
    # rows of 128 dims that cannot be split (head_dim not a multiple of 8)
    assert chosen(vx.flash_attention_2(4096, 132, num_heads=32)) == 8
    assert chosen(apply_pipeline(vx.flash_attention_2(4096, 132, num_heads=32),
                                 "vyre-resize-workgroup")) == 16
    # kernels that vyre-split-kv splits in their workgroups keep their tiles
    assert chosen(vx.flash_attention_2(256, 64)) == 64
    assert chosen(vx.mla_decode_absorbed(4096, 16, 128, 512, 64)) == 64
    # ...and one split by a kernel gets a tile per split: 16 heads x 256 splits
    assert chosen(vx.mla_decode_program(4096, 16, 128, 512, 64)) == 16
    assert chosen(vx.mla_decode(4096, 16, 128, 512, 64)) == 16


def test_a_tile_size_that_does_not_divide_is_an_error():
    with pytest.raises(VyreError, match="must be a positive divisor of the built tile size 64"):
        vx.lower_to_gpu(vx.flash_attention_2(128, 4),
                        optimize="vyre-retile{tile_size=24},vyre-to-gpu{optimize=none}")
