"""Device profiles: `optimize="default"` fits the limits of the device it is
lowered for, at every head_dim and head count a model uses, and runs there."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from xdsl.utils.exceptions import DiagnosticException

import vyre_xdsl as vx
from vyre_xdsl import reference
from vyre_xdsl.device import GENERIC, H200, LAVAPIPE, PROFILES, device_profile
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import lowered_kernels, read_kernel, workgroup_memory_bytes
from vyre_xdsl.passes.vyre_to_gpu import check_fits
from tests.requirements import needs_vulkan

FA2_DIMS = (1, 24, 65, 128, 132, 256)


def _fits(lowered, device) -> None:
    for func in lowered_kernels(lowered):
        assert workgroup_memory_bytes(func) <= device.shared_memory_bytes
        assert read_kernel(func).workgroup_size[0] <= device.max_workgroup_invocations
        if device.shuffle_subgroup_size == 0:
            assert not any(op.name == "gpu.shuffle" for op in func.walk())


@pytest.mark.parametrize("name", sorted(PROFILES))
@pytest.mark.parametrize("heads", [1, 32])
@pytest.mark.parametrize("dim", FA2_DIMS)
def test_default_fa2_fits_every_profile(name, heads, dim):
    device = PROFILES[name]
    module = vx.flash_attention_2(seq_len=4096, head_dim=dim, num_heads=heads)
    _fits(vx.lower_to_gpu(module, device=name), device)


@pytest.mark.parametrize("name", sorted(PROFILES))
@pytest.mark.parametrize("heads", [1, 16, 128])
def test_default_mla_fits_every_profile(name, heads):
    module = vx.mla_decode(seq_len=4096, num_heads=heads, head_dim=128, kv_lora_rank=512,
                           qk_rope_head_dim=64)
    _fits(vx.lower_to_gpu(module, device=name), PROFILES[name])


def test_a_merge_too_big_for_the_workgroup_goes_to_a_kernel():
    # rows of 256 split over invocations: the merge in the workgroup would
    # take 4 * 64 * 258 bytes, more than the H200's 48 KiB
    lowered = vx.lower_to_gpu(vx.flash_attention_2(seq_len=300, head_dim=256, num_heads=4),
                              device="h200")
    names = [k.sym_name.data for k in lowered_kernels(lowered)]
    assert names == ["flash_attention_2", "flash_attention_2_merge"]
    # MLA with 128 heads: latent rows of 512 merged by a kernel too
    mla = vx.lower_to_gpu(vx.mla_decode(4096, 128, 128, 512, 64), device="h200")
    assert "mla_decode_merge" in [k.sym_name.data for k in lowered_kernels(mla)]


def test_the_generic_profile_is_the_default_and_the_h200_keeps_its_tuning():
    module = vx.flash_attention_2(seq_len=4096, head_dim=64)  # one head: a small grid
    assert str(vx.lower_to_gpu(module)) == str(vx.lower_to_gpu(module, device="generic"))
    assert "gpu.shuffle" in str(vx.lower_to_gpu(module, device="h200"))
    assert "gpu.shuffle" not in str(vx.lower_to_gpu(module))


def test_check_fits_refuses_a_kernel_above_the_limits():
    lowered = vx.lower_to_gpu(vx.flash_attention_2(seq_len=4096, head_dim=64, num_heads=32),
                              device="h200")
    tiny = dataclasses.replace(H200, name="tiny", shared_memory_bytes=1024)
    with pytest.raises(DiagnosticException, match="more than device 'tiny' allows"):
        check_fits(lowered, tiny)
    check_fits(lowered, H200)


@pytest.mark.parametrize("bad", ["tpu", "", 3, None])
def test_unknown_devices_are_refused(bad):
    with pytest.raises(VyreError, match="choose one of generic, h200, lavapipe, vulkan"):
        device_profile(bad)
    module = vx.flash_attention_2(seq_len=64, head_dim=8)
    if bad is not None:
        with pytest.raises(VyreError, match="unknown device"):
            vx.lower_to_gpu(module, device=bad)
        with pytest.raises(VyreError, match="unknown device"):
            vx.run(module, {}, device=bad)


def test_a_device_with_a_pipeline_string_says_where_to_name_it():
    module = vx.flash_attention_2(seq_len=64, head_dim=8)
    with pytest.raises(VyreError, match=r"vyre-to-gpu\{device=h200\}"):
        vx.lower_to_gpu(module, optimize="cse", device="h200")


@needs_vulkan
def test_the_live_profile_of_lavapipe_matches_its_table_entry():
    live = device_profile("vulkan")
    if "llvmpipe" not in live.name:
        pytest.skip(f"the Vulkan device is {live.name}, not lavapipe")
    assert dataclasses.replace(live, name=LAVAPIPE.name) == LAVAPIPE


def _fa2_inputs(heads, n, d, seed=0):
    rng = np.random.default_rng(seed)
    return {x: rng.standard_normal((heads, n, d), dtype=np.float32) for x in "qkv"}


@needs_vulkan
@pytest.mark.parametrize("dim", FA2_DIMS)
def test_default_fa2_runs_on_the_vulkan_device_at_every_head_dim(dim):
    ins = _fa2_inputs(2, 37, dim)
    got = vx.run(vx.flash_attention_2(seq_len=37, head_dim=dim, num_heads=2), ins,
                 backend="vulkan")["out"]
    want = reference.flash_attention_2(ins["q"], ins["k"], ins["v"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@needs_vulkan
@pytest.mark.parametrize("heads", [1, 3, 128])
def test_default_mla_runs_on_the_vulkan_device_at_model_head_counts(heads):
    rng = np.random.default_rng(heads)
    s, d, r, p = 24, 128, 512, 64
    ins = dict(q=rng.standard_normal((heads, d)), kv_cache=rng.standard_normal((s, r)),
               kr_cache=rng.standard_normal((s, p)),
               w_uk=rng.standard_normal((r, heads * d)) / np.sqrt(r),
               w_uv=rng.standard_normal((r, heads * d)) / np.sqrt(r))
    ins = {name: a.astype(np.float32) for name, a in ins.items()}
    got = vx.run(vx.mla_decode(s, heads, d, r, p), ins, backend="vulkan")["out"]
    want = reference.mla_decode(**ins)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_generic_is_the_vulkan_minimum():
    # Vulkan 1.1's required minimums: 16 KiB of shared memory, 128
    # invocations, 2^27-byte storage buffers; subgroup shuffles optional
    assert (GENERIC.shared_memory_bytes, GENERIC.max_workgroup_invocations,
            GENERIC.max_buffer_bytes, GENERIC.max_dim_parts) == (16384, 128, 2**27, 1)
