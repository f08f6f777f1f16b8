"""vyre-resize-workgroup: smaller workgroups, bit-identical results."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl.dialects.launch import launch_of
from tests.requirements import needs_vulkan
from tests.test_stage_kv_tiles import _inputs

CASES = {
    "gqa": lambda: vx.flash_attention_2(64, 8, 16, num_heads=4, num_kv_heads=2),
    "causal": lambda: vx.flash_attention_2(128, 8, 32, mask_mod=lambda q, kv: kv <= q),
    "mla_absorbed": lambda: vx.mla_decode_absorbed(40, 64, 8, 12, 4, tile_size=16),
}


def _workgroup_size(lowered) -> int:
    (func,) = [op for op in lowered.walk() if op.name == "gpu.func"]
    return launch_of(func).workgroup_size[0]


@pytest.mark.parametrize("name", CASES)
def test_resized_kernel_is_bit_identical_on_the_interpreter(name):
    module = CASES[name]()
    resized = vx.lower_to_gpu(
        module, optimize="vyre-resize-workgroup{size=16},vyre-to-gpu{optimize=exact}"
    )
    assert _workgroup_size(resized) == 16
    inputs = _inputs(module)
    seed = vx.run(vx.lower_to_gpu(module, optimize="none"), inputs)["out"]
    got = vx.run(resized, inputs)["out"]
    np.testing.assert_array_equal(got.view(np.uint32), seed.view(np.uint32))


@needs_vulkan
@pytest.mark.parametrize("size", [32, 128])
def test_resized_staged_causal_kernel_is_bit_identical_on_vulkan(size):
    module = vx.flash_attention_2(128, 16, 32, num_heads=2, mask_mod=lambda q, kv: kv <= q)
    inputs = _inputs(module)
    exact = vx.run(vx.lower_to_gpu(module, optimize="exact"), inputs, backend="vulkan")
    resized = vx.lower_to_gpu(
        module,
        optimize=f"vyre-resize-workgroup{{size={size}}},vyre-stage-kv-tiles,"
                 "vyre-to-gpu{optimize=exact}",
    )
    assert _workgroup_size(resized) == size
    got = vx.run(resized, inputs, backend="vulkan")
    np.testing.assert_array_equal(got["out"].view(np.uint32), exact["out"].view(np.uint32))


def test_default_keeps_workgroups_of_64_for_small_grids():
    assert _workgroup_size(vx.lower_to_gpu(vx.flash_attention_2(4096, 64))) == 64


def test_default_gives_large_grids_workgroups_of_128():
    # 32 heads of 4096 rows: 2048 workgroups of 64, measured faster as 1024 of 128
    module = vx.flash_attention_2(4096, 8, num_heads=32)
    assert _workgroup_size(vx.lower_to_gpu(module)) == 128
    assert _workgroup_size(vx.lower_to_gpu(module, optimize="exact")) == 64


@pytest.mark.parametrize("size", [48, 100])
def test_a_size_that_neither_divides_nor_multiplies_is_an_error(size):
    with pytest.raises(vx.VyreError, match="positive divisor or multiple"):
        vx.lower_to_gpu(vx.flash_attention_2(128, 8),
                        optimize=f"vyre-resize-workgroup{{size={size}}},vyre-to-gpu")
