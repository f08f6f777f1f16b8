"""vyre-stage-kv-tiles: cooperative key/value tiles in workgroup memory,
bit-identical to the seed's layout, on the interpreter and on Vulkan."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl import reference
from vyre_xdsl.kernel_info import kernel_info
from tests.requirements import needs_vulkan

CASES = {
    "gqa": lambda: vx.flash_attention_2(64, 8, 16, num_heads=4, num_kv_heads=2),
    "one_head_short_tiles": lambda: vx.flash_attention_2(128, 12, 48),
    "causal": lambda: vx.flash_attention_2(128, 8, 32, mask_mod=lambda q, kv: kv <= q),
    "mla_64_heads": lambda: vx.mla_decode(40, 64, 8, 12, 4, tile_size=16),
}


def _inputs(module, seed=5):
    rng = np.random.default_rng(seed)
    info = kernel_info(vx.lower_to_gpu(module, optimize="none"))
    return {
        b.name: rng.standard_normal(b.shape).astype(np.float32)
        for b in info.buffers if not b.is_output
    }


STAGED = "vyre-stage-kv-tiles,vyre-to-gpu{optimize=exact}"


def _barriers(lowered) -> int:
    return sum(op.name == "gpu.barrier" for op in lowered.walk())


@pytest.mark.parametrize("name", CASES)
def test_staged_kernel_is_bit_identical_to_the_seed_layout(name):
    module = CASES[name]()
    staged = vx.lower_to_gpu(module, optimize=STAGED)
    assert _barriers(staged) >= 2
    inputs = _inputs(module)
    seed = vx.run(vx.lower_to_gpu(module, optimize="none"), inputs)["out"]
    got = vx.run(staged, inputs)["out"]
    np.testing.assert_array_equal(got.view(np.uint32), seed.view(np.uint32))


def test_a_partial_workgroup_is_not_staged():
    lowered = vx.lower_to_gpu(vx.flash_attention_2(100, 8, 16), optimize=STAGED)
    assert _barriers(lowered) == 0


def test_tiles_over_the_budget_are_not_staged():
    module = vx.flash_attention_2(64, 128, 64)  # 64 rows x 512 B = 32 KiB
    fits = vx.lower_to_gpu(module, optimize=STAGED)
    assert _barriers(fits) == 4
    small = vx.lower_to_gpu(
        module,
        optimize="vyre-stage-kv-tiles{shared_memory_bytes=16384},vyre-to-gpu{optimize=none}",
    )
    assert _barriers(small) == 0


@needs_vulkan
def test_staged_gqa_runs_on_vulkan_within_tolerance():
    rng = np.random.default_rng(9)
    q = rng.standard_normal((4, 128, 16)).astype(np.float32)
    k, v = (rng.standard_normal((2, 128, 16)).astype(np.float32) for _ in range(2))
    module = vx.flash_attention_2(128, 16, 32, num_heads=4, num_kv_heads=2)
    lowered = vx.lower_to_gpu(module, optimize=STAGED)
    assert _barriers(lowered) >= 2
    got = vx.run(lowered, {"q": q, "k": k, "v": v}, backend="vulkan")["out"]
    want = np.stack([reference.flash_attention_2(q[h], k[h // 2], v[h // 2], tile_size=32)
                     for h in range(4)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
