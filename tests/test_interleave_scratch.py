"""vyre-interleave-scratch: the accumulator stays in workgroup memory,
lane-minor, with results bit-identical to the seed's layout."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from tests.requirements import needs_vulkan
from tests.test_stage_kv_tiles import _inputs

INTERLEAVED = (
    "vyre-to-gpu{optimize=none},vyre-interleave-scratch{arrays=q_scratch,o_acc},"
    "vyre-promote-scratch,"
    "vyre-unroll-jam,vyre-vectorize-loads,cse,dce"
)
STAGED = "vyre-stage-kv-tiles{shared_memory_bytes=4096}," + INTERLEAVED


def _workgroup_arrays(lowered) -> dict[str, int]:
    return {
        op.memref.name_hint: op.memref.type.get_shape()[0]
        for op in lowered.walk()
        if op.name == "memref.alloc"
    }


def test_the_named_arrays_stay_in_workgroup_memory():
    lowered = vx.lower_to_gpu(vx.flash_attention_2(128, 16, 32), optimize=INTERLEAVED)
    assert _workgroup_arrays(lowered) == {"q_scratch": 64 * 16, "o_acc": 64 * 16}


@pytest.mark.parametrize("pipeline", [INTERLEAVED, STAGED])
def test_interleaved_fa2_is_bit_identical_on_the_interpreter(pipeline):
    module = vx.flash_attention_2(64, 8, 16, num_heads=2)
    inputs = _inputs(module)
    seed = vx.run(vx.lower_to_gpu(module, optimize="none"), inputs)["out"]
    got = vx.run(vx.lower_to_gpu(module, optimize=pipeline), inputs)["out"]
    np.testing.assert_array_equal(got.view(np.uint32), seed.view(np.uint32))


@needs_vulkan
@pytest.mark.parametrize("pipeline", [INTERLEAVED, STAGED])
def test_interleaved_fa2_is_bit_identical_on_vulkan(pipeline):
    module = vx.flash_attention_2(256, 64, 32, num_heads=2,
                                  mask_mod=lambda q, kv: kv <= q)
    inputs = _inputs(module)
    exact = vx.run(vx.lower_to_gpu(module, optimize="exact"), inputs, backend="vulkan")
    got = vx.run(vx.lower_to_gpu(module, optimize=pipeline), inputs, backend="vulkan")
    np.testing.assert_array_equal(got["out"].view(np.uint32), exact["out"].view(np.uint32))


def test_an_array_read_across_lanes_is_left_as_it_is():
    staged = "vyre-stage-kv-tiles,vyre-to-gpu{optimize=none}"
    module = vx.flash_attention_2(64, 8, 16)
    plain = vx.lower_to_gpu(module, optimize=staged)
    asked = vx.lower_to_gpu(module, optimize=staged + ",vyre-interleave-scratch{arrays=kv_tile}")
    assert str(asked) == str(plain)


def test_default_keeps_the_query_row_in_workgroup_memory_on_a_small_grid():
    # rows of 132 dims, which vyre-split-head-dim cannot split over two lanes
    one_head = vx.lower_to_gpu(vx.flash_attention_2(4096, 132), device="h200")  # 64 workgroups
    assert set(_workgroup_arrays(one_head)) == {"q_scratch", "kv_tile"}
    many_heads = vx.lower_to_gpu(vx.flash_attention_2(1024, 132, num_heads=32), device="h200")
    assert set(_workgroup_arrays(many_heads)) == {"kv_tile"}
    # rows of 128 are split instead, 64 dims a lane: no interleaving (two
    # heads: one would run as register blocks, tests/test_block_product.py)
    split = vx.lower_to_gpu(vx.flash_attention_2(4096, 128, num_heads=2), device="h200")
    assert set(_workgroup_arrays(split)) == {"kv_tile"}
    # a device without room for the query rows next to the tiles: none kept
    generic = vx.lower_to_gpu(vx.flash_attention_2(4096, 132))
    assert "q_scratch" not in set(_workgroup_arrays(generic))
