"""Heavy-first workgroup order (vyre_xdsl.workgroup_order and
vyre-inline-fragments{heavy_first}): a permutation of whole workgroups that
starts every head's heaviest query blocks first; results are bit-identical
to the natural order on the interpreter and on Vulkan, and `default`
uses it for masked kernels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl.compiler import apply_pipeline
from vyre_xdsl.workgroup_order import MAX_PERIOD_WORKGROUPS, heavy_first_order
from tests.requirements import needs_vulkan


@dataclass(frozen=True)
class Range:
    lo: int
    hi: int


def causal_ranges(blocks: int) -> list[Range]:
    return [Range(0, b + 1) for b in range(blocks)]


@pytest.mark.parametrize("blocks, block_items, items, lanes_per_item, lanes", [
    (4, 2, 3 * 8, 1, 2),        # a workgroup a block
    (8, 64, 32 * 512, 1, 128),  # two blocks a workgroup
    (8, 64, 4 * 512, 2, 128),   # rows over two lanes: half a block a workgroup
    (5, 3, 2 * 15, 1, 5),       # a period of 3 workgroups
])
def test_the_order_is_a_permutation_with_the_heaviest_first(
    blocks, block_items, items, lanes_per_item, lanes
):
    ranges = causal_ranges(blocks)
    order = heavy_first_order(ranges, block_items, items, lanes_per_item, lanes)
    assert order is not None
    groups = items * lanes_per_item // lanes
    runs = [order.workgroup(w) for w in range(groups)]
    assert sorted(runs) == list(range(groups))

    def work(w):
        first, last = w * lanes // lanes_per_item, ((w + 1) * lanes - 1) // lanes_per_item
        return max(ranges[b % blocks].hi - ranges[b % blocks].lo
                   for b in range(first // block_items, last // block_items + 1))

    started = [work(w) for w in runs]
    assert started == sorted(started, reverse=True)  # longest first over the whole grid


def test_nothing_to_reorder():
    uniform = [Range(0, 4)] * 4
    assert heavy_first_order(uniform, 64, 4 * 64 * 8, 1, 64) is None
    descending = [Range(0, 4 - b) for b in range(4)]  # already heaviest first
    assert heavy_first_order(descending, 64, 4 * 64 * 8, 1, 64) is None
    assert heavy_first_order([], 64, 1024, 1, 64) is None
    # the table's period does not tile the grid (a last, shorter head)
    assert heavy_first_order(causal_ranges(4), 64, 4 * 64 + 64, 1, 64) is None
    # items that do not fill the last workgroup
    assert heavy_first_order(causal_ranges(4), 64, 4 * 64 - 1, 1, 64) is None


def test_a_long_period_is_left_in_order():
    blocks = MAX_PERIOD_WORKGROUPS + 1
    assert heavy_first_order(causal_ranges(blocks), 1, blocks, 1, 1) is None


def _mods():
    def causal(q, kv):
        return kv <= q

    def window(q, kv):
        return (kv <= q) & (q - kv < 40)

    def alibi(s, q, kv, h):
        return s - vx.exp2(-8.0 * (h + 1) / 3) * vx.abs(q - kv)

    return {"causal": dict(mask_mod=causal), "window": dict(mask_mod=window),
            "alibi causal": dict(mask_mod=causal, score_mod=alibi)}


NATURAL = "vyre-inline-fragments,vyre-expand-stability,convert-vyre-to-gpu"
HEAVY = "vyre-inline-fragments{heavy_first=true},vyre-expand-stability,convert-vyre-to-gpu"


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
@pytest.mark.parametrize("mod", ["causal", "window", "alibi causal"])
def test_heavy_first_gives_the_same_bits(backend, mod):
    rng = np.random.default_rng(3)
    heads, seq, dim = 3, 192, 8
    q, k, v = (rng.standard_normal((heads, seq, dim), dtype=np.float32) for _ in range(3))
    module = vx.flash_attention_2(seq, dim, 16, num_heads=heads, **_mods()[mod])
    heavy = apply_pipeline(module.clone(), HEAVY)
    assert "%heavy_first" in str(heavy)
    got = vx.run(heavy, {"q": q, "k": k, "v": v}, backend=backend)["out"]
    natural = apply_pipeline(module.clone(), NATURAL)
    want = vx.run(natural, {"q": q, "k": k, "v": v}, backend=backend)["out"]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    oracle = vx.reference.flash_attention_2(q, k, v, tile_size=16, **_mods()[mod])
    if backend == "interpreter":  # f32-exact; a driver's exp may differ in an ulp
        np.testing.assert_array_equal(got.reshape(oracle.shape).view(np.uint32),
                                      oracle.view(np.uint32))
    else:
        assert np.abs(got.reshape(oracle.shape) - oracle).max() <= 1e-5 * np.abs(oracle).max()


def test_default_orders_masked_kernels_and_leaves_the_others():
    mods = _mods()
    causal = vx.flash_attention_2(4096, 64, num_heads=32, **mods["causal"])
    assert "heavy_first" in str(vx.lower_to_gpu(causal, device="h200"))
    assert "heavy_first" not in str(vx.lower_to_gpu(causal, optimize="exact"))
    plain = vx.flash_attention_2(4096, 64, num_heads=32)
    assert "heavy_first" not in str(vx.lower_to_gpu(plain, device="h200"))
