"""Vulkan soak: 1000 dispatches of a small kernel under the Khronos
validation layer. No validation message (execute raises on any), every
per-run object destroyed (close() under the layer reports leaks), results
stay right, and host memory stays flat."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vyre_xdsl.compiler import parse_module
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import kernel_info
import spirv_samples as samples
from requirements import needs_vulkan
from vyre_xdsl.spirv import emit_spirv_module

DISPATCHES = 1000
WARMUP = 100
RSS_GROWTH_LIMIT = 16 * 2**20  # bytes, over the 900 measured dispatches


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@needs_vulkan
def test_soak_1000_dispatches_under_validation(fuzz_stats):
    from vyre_xdsl import vulkan

    module = parse_module(samples.BARRIER_EXCHANGE)
    info = kernel_info(module)
    spirv = emit_spirv_module(module)
    a = np.arange(128, dtype=np.float32)
    expected_base = np.roll(a.reshape(2, 64), -1, axis=1).reshape(-1)
    rss = []
    for i in range(DISPATCHES):
        arrays = {"a": a + i, "out": np.zeros(128, np.float32)}
        vulkan.execute(spirv, info, arrays, validation=True, staging=bool(i % 2))
        if i % 97 == 0:
            np.testing.assert_array_equal(arrays["out"], expected_base + i)
        if i == WARMUP:
            rss.append(_rss())
    rss.append(_rss())
    fuzz_stats["soak: vulkan dispatches under validation"] += DISPATCHES
    vulkan.close()  # the layer reports any object a run forgot to destroy
    growth = rss[1] - rss[0]
    fuzz_stats["(soak: host RSS growth, KiB)"] += max(growth, 0) // 1024
    assert growth < RSS_GROWTH_LIMIT, f"host memory grew {growth / 2**20:.1f} MiB"


@needs_vulkan
def test_failing_runs_leave_nothing_behind(monkeypatch, fuzz_stats):
    """Runs that raise at each stage (pipeline creation, descriptors,
    submit, map) still destroy every object they made."""
    from vyre_xdsl import vulkan
    from vyre_xdsl.vulkan import runtime

    module = parse_module(samples.BARRIER_EXCHANGE)
    info = kernel_info(module)
    spirv = emit_spirv_module(module)
    ctx = runtime._context(True)
    # binding wrappers, and the context's submit (which calls libvulkan itself)
    stages = [(ctx.vk, "vkCreateComputePipelines"), (ctx.vk, "vkAllocateDescriptorSets"),
              (ctx.vk, "vkAllocateCommandBuffers"), (ctx, "submit"),
              (ctx.vk, "vkMapMemory")]
    for owner, stage in stages:
        def boom(*args, **kwargs):
            raise ctx.vk.VkErrorOutOfHostMemory("simulated")

        monkeypatch.setattr(owner, stage, boom)
        arrays = {"a": np.zeros(128, np.float32), "out": np.zeros(128, np.float32)}
        with pytest.raises(VyreError, match="ran out of host memory"):
            vulkan.execute(spirv, info, arrays, validation=True)
        monkeypatch.undo()
        fuzz_stats["soak: failing runs cleaned up"] += 1
    vulkan.close()
