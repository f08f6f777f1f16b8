"""Vulkan execution of emitted SPIR-V, on lavapipe in CI, with the Khronos
validation layer on (any validation message fails the run).

Tolerance: Vulkan specifies GLSL.std.450 Exp to within 3 + 2*|x| ULP, not
correctly rounded, and lavapipe's exp differs from numpy's by an ulp at
times; sums then carry that through. Kernel outputs are compared to the f32
oracle with rtol=1e-5, atol=1e-6 (observed: <= 3e-7 absolute on values ~1).
Exact comparisons are used where exactness is guaranteed: comparisons,
selects, maximumf/minimumf, integer-valued float arithmetic, NaN placement.

lavapipe limit: llvmpipe stops every shader invocation after 65535 loop
iterations in total (LP_MAX_TGSI_LOOP_ITERATIONS, shared by all loops),
silently; the runtime refuses such kernels (KernelInfo.loop_iterations).
With the default optimisation (vyre-unroll-jam) FA2 seq 512 head_dim 64
needs 18,560 and runs here; MLA seq 1000 (8 heads, head_dim 64, rank 32)
still needs ~1.08M, so MLA runs here at seq 130 and the full shapes are
checked on a real GPU by tools/gpu_check.sh.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from vyre_xdsl.compiler import parse_module
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import kernel_info, program_info
import spirv_samples as samples
from requirements import needs_vulkan
from vyre_xdsl.spirv import emit_spirv_module

RTOL, ATOL = 1e-5, 1e-6


pytestmark = needs_vulkan


def _run(module, inputs: dict[str, np.ndarray], **kw) -> dict[str, np.ndarray]:
    from vyre_xdsl.vulkan import execute

    info = program_info(module)  # one kernel, or a program of several
    arrays = {b.name: (np.ascontiguousarray(inputs[b.name], dtype=np.float32).reshape(-1).copy()
                       if b.is_input else np.zeros(b.count, np.float32))
              for b in info.buffers}
    execute(emit_spirv_module(module), info, arrays, validation=True, **kw)
    return {b.name: arrays[b.name].reshape(b.shape) for b in info.outputs}


# hand-written kernels ---------------------------------------------------------

@pytest.mark.parametrize("staging", [False, True])
def test_barrier_exchange(staging):
    a = np.arange(128, dtype=np.float32)
    out = _run(parse_module(samples.BARRIER_EXCHANGE), {"a": a}, staging=staging)["out"]
    expected = np.concatenate([np.roll(a[:64], -1), np.roll(a[64:], -1)])
    np.testing.assert_array_equal(out, expected)


def test_cmpf_nan_semantics():
    values = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.5], np.float32)
    a = np.repeat(values, 8)
    b = np.tile(values, 8)
    out = _run(parse_module(samples.CMPF), {"a": a, "b": b})["out"].reshape(64, 16)
    with np.errstate(invalid="ignore"):
        nan = np.isnan(a) | np.isnan(b)
        expected = {
            "false": np.zeros(64, bool), "true": np.ones(64, bool),
            "oeq": a == b, "ogt": a > b, "oge": a >= b, "olt": a < b, "ole": a <= b,
            "one": (a != b) & ~nan, "ord": ~nan,
            "ueq": (a == b) | nan, "ugt": (a > b) | nan, "uge": (a >= b) | nan,
            "ult": (a < b) | nan, "ule": (a <= b) | nan, "une": a != b, "uno": nan,
        }
    for i, pred in enumerate(samples.CMPF_PREDICATES):
        np.testing.assert_array_equal(out[:, i], expected[pred].astype(np.float32), err_msg=pred)


def test_misc_ops_and_if_results():
    values = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.5], np.float32)
    a = np.repeat(values, 8)
    b = np.tile(values, 8)
    out = _run(parse_module(samples.MISC), {"a": a, "b": b})["out"].reshape(64, 4)
    mx, mn = np.maximum(a, b), np.minimum(a, b)  # NaN-propagating like MLIR
    zeros = (a == 0) & (b == 0)  # numpy ignores the sign of zero here; MLIR orders -0 < +0
    mx[zeros] = (a.view(np.uint32) & b.view(np.uint32))[zeros].view(np.float32)
    mn[zeros] = (a.view(np.uint32) | b.view(np.uint32))[zeros].view(np.float32)
    # signed zeros: maximumf(-0, +0) = +0, minimumf(+0, -0) = -0
    np.testing.assert_array_equal(out[:, 0].view(np.uint32), mx.view(np.uint32))
    np.testing.assert_array_equal(out[:, 1].view(np.uint32), mn.view(np.uint32))
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_allclose(out[:, 2], np.exp(a), rtol=RTOL, equal_nan=True)
        expected = np.where(a > 0, np.sqrt(np.where(a > 0, a, 0)), -a)
    np.testing.assert_allclose(out[:, 3], expected, rtol=RTOL, equal_nan=True)


def test_nested_loops_with_iter_args():
    a = np.arange(100, dtype=np.float32) * 0.5
    out = _run(parse_module(samples.NESTED_LOOPS), {"a": a})["out"]
    rows = np.arange(100) % 5
    expected = np.array([sum(a[i] * r + c for r in range(rows[i]) for c in range(3)) + rows[i]
                         for i in range(100)], np.float32)
    np.testing.assert_array_equal(out, expected)


# the decoders, against the numpy oracle ------------------------------------------

def _fa2(seq_len, head_dim, tile_size, q=None, k=None, v=None, seed=0, optimize="default",
         **kw):
    import vyre_xdsl as vx

    rng = np.random.default_rng(seed)
    q, k, v = ((x if x is not None else rng.standard_normal((seq_len, head_dim)).astype(np.float32))
               for x in (q, k, v))
    module = vx.lower_to_gpu(vx.flash_attention_2(seq_len=seq_len, head_dim=head_dim,
                                                  tile_size=tile_size), optimize=optimize)
    out = _run(module, {"q": q, "k": k, "v": v}, **kw)["out"].reshape(seq_len, head_dim)
    ref = vx.reference.flash_attention_2(q, k, v, tile_size=tile_size)
    return out, ref


@pytest.mark.parametrize("shape", [(512, 64, 64), (37, 5, 8), (1, 1, 1), (65, 3, 64), (130, 16, 7)])
def test_fa2_matches_oracle(shape):
    out, ref = _fa2(*shape)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_fa2_shared_scratch_matches_oracle():
    out, ref = _fa2(100, 16, 16, optimize="none")
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def test_mla_matches_oracle():
    import vyre_xdsl as vx

    S, H, D, R, P = 130, 3, 16, 8, 4  # inside lavapipe's loop budget (see top)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((H, D)).astype(np.float32)
    kv = rng.standard_normal((S, R)).astype(np.float32)
    kr = rng.standard_normal((S, P)).astype(np.float32)
    w_uk = (rng.standard_normal((R, H * D)) * 0.3).astype(np.float32)
    w_uv = rng.standard_normal((R, H * D)).astype(np.float32)
    module = vx.lower_to_gpu(vx.mla_decode(seq_len=S, num_heads=H, head_dim=D,
                                           kv_lora_rank=R, qk_rope_head_dim=P))
    out = _run(module, {"q": q, "kv_cache": kv, "kr_cache": kr, "w_uk": w_uk, "w_uv": w_uv})["out"]
    ref = vx.reference.mla_decode(q, kv, kr, w_uk, w_uv, tile_size=64)
    np.testing.assert_allclose(out.reshape(H, D), ref, rtol=RTOL, atol=ATOL)


def test_fa2_nan_row_stays_in_its_row():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((70, 8)).astype(np.float32)
    q[5, 3] = np.nan
    out, ref = _fa2(70, 8, 16, q=q)
    assert np.isnan(out[5]).all()
    assert not np.isnan(np.delete(out, 5, axis=0)).any()
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL, equal_nan=True)


def test_fa2_inf_in_k_is_clamped():
    rng = np.random.default_rng(3)
    k = rng.standard_normal((70, 8)).astype(np.float32)
    k[4, 0], k[9, 2] = np.inf, -np.inf
    out, ref = _fa2(70, 8, 16, k=k)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL, equal_nan=True)


def test_fa2_huge_logits_stay_finite():
    rng = np.random.default_rng(4)
    q = (rng.standard_normal((70, 8)) * 1e19).astype(np.float32)
    out, ref = _fa2(70, 8, 16, q=q)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


# runtime behaviour --------------------------------------------------------------

def test_many_dispatches_leave_nothing_behind():
    """50 runs, then destroy the device under validation: the layer reports
    any buffer, memory, pipeline... a run forgot (close() raises)."""
    from vyre_xdsl import vulkan

    module = parse_module(samples.BARRIER_EXCHANGE)
    a = np.arange(128, dtype=np.float32)
    for i in range(50):
        _run(module, {"a": a + i}, staging=bool(i % 2))
    vulkan.close()


def test_objects_destroyed_when_run_raises(monkeypatch):
    from vyre_xdsl import vulkan
    from vyre_xdsl.vulkan import runtime

    module = parse_module(samples.BARRIER_EXCHANGE)
    info = kernel_info(module)
    arrays = {"a": np.zeros(128, np.float32), "out": np.zeros(128, np.float32)}
    spirv = emit_spirv_module(module)

    def boom(*args, **kwargs):
        raise RuntimeError("dispatch failed")

    ctx = runtime._context(True)
    monkeypatch.setattr(ctx.vk, "vkCmdDispatch", boom)
    with pytest.raises(RuntimeError, match="dispatch failed"):
        vulkan.execute(spirv, info, arrays, validation=True)
    monkeypatch.undo()
    vulkan.close()  # the layer would report leaked objects here


def test_buffer_over_max_storage_buffer_range():
    from vyre_xdsl.vulkan import execute, runtime

    module = parse_module(samples.BARRIER_EXCHANGE)
    ctx = runtime._context(True)
    real = ctx.limits
    ctx.limits = types.SimpleNamespace(
        maxStorageBufferRange=256, maxComputeSharedMemorySize=real.maxComputeSharedMemorySize,
        maxComputeWorkGroupInvocations=1024, maxComputeWorkGroupSize=[1024] * 3,
        maxComputeWorkGroupCount=[65535] * 3, timestampPeriod=1.0)
    try:
        arrays = {"a": np.zeros(128, np.float32), "out": np.zeros(128, np.float32)}
        with pytest.raises(VyreError, match="maxStorageBufferRange"):
            execute(emit_spirv_module(module), kernel_info(module), arrays, validation=True)
    finally:
        ctx.limits = real


def test_shared_memory_over_limit_is_reported():
    import vyre_xdsl as vx
    from vyre_xdsl.vulkan import execute

    module = vx.lower_to_gpu(vx.flash_attention_2(seq_len=64, head_dim=64), optimize="none")
    info = kernel_info(module)
    arrays = {b.name: np.zeros(b.count, np.float32) for b in info.buffers}
    with pytest.raises(VyreError, match="maxComputeSharedMemorySize"):
        execute(emit_spirv_module(module), info, arrays, validation=True)


def test_missing_loader_names_packages(monkeypatch):
    import sys

    from vyre_xdsl.vulkan import runtime

    monkeypatch.setitem(sys.modules, "vulkan", None)
    with pytest.raises(VyreError, match="libvulkan1 mesa-vulkan-drivers"):
        runtime._vk()


def test_device_report_and_timings():
    from vyre_xdsl.vulkan import device_report

    assert "selected:" in device_report()
    timings: dict = {}
    module = parse_module(samples.BARRIER_EXCHANGE)
    _run(module, {"a": np.zeros(128, np.float32)}, timings=timings)
    assert timings["total_ms"] > 0 and "dispatch_ms" in timings


def test_run_backend_vulkan():
    import vyre_xdsl as vx

    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((20, 4)).astype(np.float32) for _ in range(3))
    out = vx.run(vx.flash_attention_2(seq_len=20, head_dim=4, tile_size=8),
                 {"q": q, "k": k, "v": v}, backend="vulkan")["out"]
    np.testing.assert_allclose(out, vx.reference.flash_attention_2(q, k, v, tile_size=8),
                               rtol=RTOL, atol=ATOL)


def test_a_run_reads_its_kernels_once(monkeypatch):
    """vx.run derives the kernel info once: the emitter is handed it."""
    import vyre_xdsl as vx
    import vyre_xdsl.kernel_info as ki

    lowered = vx.lower_to_gpu(vx.flash_attention_2(seq_len=20, head_dim=4, tile_size=8))
    read, calls = ki.read_kernel, []
    monkeypatch.setattr(ki, "read_kernel", lambda func: calls.append(func) or read(func))
    rng = np.random.default_rng(5)
    vx.run(lowered, {n: rng.standard_normal((20, 4)).astype(np.float32) for n in "qkv"},
           backend="vulkan")
    assert len(calls) == len(ki.lowered_kernels(lowered))


def test_the_runtime_takes_the_emitters_metadata_not_a_binary(monkeypatch):
    """What the device checks use comes with the SpirvModule: a bare binary
    is refused, and a changed entry is what the checks see."""
    import dataclasses

    from vyre_xdsl.vulkan import execute, runtime

    module = parse_module(samples.BARRIER_EXCHANGE)
    info = kernel_info(module)
    arrays = {"a": np.zeros(128, np.float32), "out": np.zeros(128, np.float32)}
    spirv = emit_spirv_module(module)
    with pytest.raises(VyreError, match="SpirvModule.*got bytes"):
        execute(spirv.binary, info, arrays)
    limit = runtime._context(True).limits.maxComputeSharedMemorySize
    (entry,) = spirv.entries
    huge = dataclasses.replace(spirv, entries=(
        dataclasses.replace(entry, workgroup_bytes=limit + 4),))
    with pytest.raises(VyreError, match=f"needs {limit + 4} bytes of workgroup memory"):
        execute(huge, info, arrays, validation=True)
