"""What a Vulkan device allows, checked before anything is created: buffer
sizes, workgroup memory, workgroup and grid sizes, subgroup operations,
16-bit storage (f16/bf16 buffers), cooperative matrices, lavapipe's loop
budget. What a module
needs comes from the emitter (spirv.SpirvModule), never from its binary."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import KernelInfo, ProgramInfo, as_program
from vyre_xdsl.loop_bounds import MAX_TRIPS_ATTR
from vyre_xdsl.spirv.module import EntryPoint, SpirvModule
from vyre_xdsl.spirv.spec import Capability
from vyre_xdsl.vulkan.device import (
    BFLOAT16_EXTENSION,
    COOPERATIVE_MATRIX_EXTENSION,
    DEVICE_ENV,
    _SUBGROUP_CAPABILITIES,
    _Context,
)
from vyre_xdsl.vulkan.dispatch import _buffer_bytes

# llvmpipe ends each invocation after this many loop iterations in total and
# silently skips the rest of its work (Mesa's LP_MAX_TGSI_LOOP_ITERATIONS).
LLVMPIPE_LOOP_LIMIT = 65535


def _check_limits(ctx: _Context, spirv: SpirvModule, info: KernelInfo | ProgramInfo,
                  arrays: Mapping[str, np.ndarray]) -> None:
    program = as_program(info)
    _check_subgroup_support(ctx, spirv.capabilities, program)
    _check_16bit_storage(ctx, spirv.capabilities, program)
    _check_cooperative_matrix(ctx, spirv.capabilities, program)
    _check_int16(ctx, spirv.capabilities, program)
    for kernel in program.kernels:
        _check_loop_limit(ctx, kernel)
        _check_shuffle_lanes(ctx, kernel)
    limits = ctx.limits
    for buffer in program.buffers:
        size = _buffer_bytes(buffer, arrays)
        for limit, name in ((limits.maxStorageBufferRange, "maxStorageBufferRange"),
                            (ctx.max_allocation, "maxMemoryAllocationSize")):
            if size > limit:
                raise VyreError(
                    f"buffer {buffer.name!r} is {size} bytes but Vulkan device "
                    f"{ctx.name!r} allows at most {name} = {limit} bytes; use "
                    f"smaller shapes (fewer heads or a shorter sequence per call) "
                    f"or another device ({DEVICE_ENV})"
                )
    for kernel in program.kernels:
        _check_kernel_limits(ctx, spirv.entry(kernel.name), kernel)


def _check_16bit_storage(ctx: _Context, capabilities: frozenset[int],
                         program: ProgramInfo) -> None:
    """Refuse a module with f16/bf16 buffers (16-bit storage, spirv/half.py)
    on a device without the storageBuffer16BitAccess feature."""
    if Capability.StorageBuffer16BitAccess not in capabilities:
        return
    if ctx.storage_16bit:
        return
    halves = ", ".join(
        f"{b.name!r} ({b.dtype})" for b in program.buffers if b.dtype != "f32"
    )
    raise VyreError(
        f"{program.label} reads or writes half-precision buffers ({halves}), which "
        f"needs the Vulkan feature storageBuffer16BitAccess (VK_KHR_16bit_storage, "
        f"core in Vulkan 1.1), but Vulkan device {ctx.name!r} lacks it; build the "
        f"kernel with dtype='f32', run it with backend='interpreter', or pick "
        f"another device ({DEVICE_ENV})"
    )


def _check_cooperative_matrix(ctx: _Context, capabilities: frozenset[int],
                              program: ProgramInfo) -> None:
    """Refuse a module with subgroup matrix ops (spirv/mma.py) on a device
    without cooperative matrices or the Vulkan memory model, with f16 ones
    without shaderFloat16, or with bf16 ones without bf16 matrices."""
    from vyre_xdsl.vulkan.runtime import bfloat16_matrices

    if Capability.CooperativeMatrixKHR not in capabilities:
        return
    missing = []
    if not ctx.cooperative_matrix:
        missing.append(f"cooperativeMatrix ({COOPERATIVE_MATRIX_EXTENSION})")
    if Capability.Float16 in capabilities and not ctx.float16:
        missing.append("shaderFloat16 (f16 matrices)")
    if Capability.BFloat16CooperativeMatrixKHR in capabilities and not bfloat16_matrices(ctx):
        missing.append(f"shaderBFloat16CooperativeMatrix ({BFLOAT16_EXTENSION}) with 16x16x16 "
                       f"bf16 products into f32 (bf16 matrices)")
    if Capability.VulkanMemoryModel in capabilities and not ctx.memory_model:
        missing.append("vulkanMemoryModel (which cooperative matrices require)")
    if missing:
        raise VyreError(
            f"{program.label} uses subgroup matrix ops (gpu.subgroup_mma_*), which "
            f"need the Vulkan feature {' and '.join(missing)}, but Vulkan device "
            f"{ctx.name!r} lacks it; run it with backend='interpreter' or pick "
            f"another device ({DEVICE_ENV})"
        )


def _check_int16(ctx: _Context, capabilities: frozenset[int], program: ProgramInfo) -> None:
    """Refuse a module with f16 workgroup arrays (16-bit words outside
    storage buffers: Int16, spirv/memref.py) on a device without shaderInt16."""
    if Capability.Int16 in capabilities and not ctx.int16:
        raise VyreError(
            f"{program.label} keeps f16 arrays in workgroup memory (vyre-tensor-cores' "
            f"tiles), which needs the Vulkan feature shaderInt16, but Vulkan device "
            f"{ctx.name!r} lacks it; run it with backend='interpreter' or pick "
            f"another device ({DEVICE_ENV})"
        )


def _check_subgroup_support(ctx: _Context, capabilities: frozenset[int],
                            program: ProgramInfo) -> None:
    """Refuse a module whose subgroup operations the device lacks (drivers
    may crash on them rather than fail)."""
    declared = capabilities & _SUBGROUP_CAPABILITIES.keys()
    if not declared:
        return
    support = ctx.subgroup
    needed = {_SUBGROUP_CAPABILITIES[c] for c in declared}
    lacks = []
    if not support.compute:
        lacks.append("subgroup operations in compute shaders")
    lacks.extend(
        f"VK_SUBGROUP_FEATURE_{name}_BIT" for name in sorted(needed - support.operations)
    )
    shuffles = needed & {"SHUFFLE", "SHUFFLE_RELATIVE"}
    if shuffles and support.size < 2:
        lacks.append(f"subgroups of more than one lane (subgroupSize = {support.size})")
    if lacks:
        what = "subgroup shuffles" if shuffles else "subgroup operations"
        raise VyreError(
            f"{program.label} uses {what}, but Vulkan device {ctx.name!r} lacks "
            f"{' and '.join(lacks)}; lower it with optimize='exact', which uses "
            f"no shuffles, or pick another device ({DEVICE_ENV})"
        )


def _check_shuffle_lanes(ctx: _Context, kernel: KernelInfo) -> None:
    """Refuse a kernel whose xor shuffles reach further than the device's
    subgroups: the lanes they pair would not exist and the result would be
    undefined (NaN on lavapipe), not an error."""
    lanes = min(ctx.subgroup.size, int(np.prod(kernel.workgroup_size)))
    if kernel.shuffle_lanes > lanes:
        raise VyreError(
            f"kernel @{kernel.name} adds values across {kernel.shuffle_lanes} lanes with "
            f"subgroup shuffles (vyre-split-head-dim{{parts={kernel.shuffle_lanes}}}), but "
            f"Vulkan device {ctx.name!r} has subgroups of {ctx.subgroup.size} and the "
            f"kernel's workgroups {int(np.prod(kernel.workgroup_size))} lanes; lower it "
            f"for this device (optimize='default' with device='vulkan' splits rows over "
            f"at most {lanes} lanes) or with fewer parts"
        )


def _check_loop_limit(ctx: _Context, kernel: KernelInfo) -> None:
    if "llvmpipe" not in ctx.name.lower():
        return
    if kernel.loop_iterations is None:
        raise VyreError(
            f"kernel @{kernel.name} has a loop whose trip count cannot be bounded (a "
            f"bound read at run time, a step that is not a positive constant, or index "
            f"arithmetic that may wrap), but lavapipe ({ctx.name}) stops every "
            f"invocation after {LLVMPIPE_LOOP_LIMIT} loop iterations and would return "
            f"a wrong result without a word; give such a loop a "
            f"{MAX_TRIPS_ATTR} = N attribute (at most N trips; f.loop(..., "
            f"max_trips=N) in a fragment), or run it on a GPU "
            f"({DEVICE_ENV}) or with backend='interpreter'"
        )
    if kernel.loop_iterations > LLVMPIPE_LOOP_LIMIT:
        raise VyreError(
            f"kernel @{kernel.name} runs up to {kernel.loop_iterations} loop "
            f"iterations per invocation, but lavapipe ({ctx.name}) stops every "
            f"invocation after {LLVMPIPE_LOOP_LIMIT} and would return a wrong "
            f"result; use smaller shapes (seq_len, head_dim, kv_lora_rank), a "
            f"GPU ({DEVICE_ENV}), or backend='interpreter'"
        )


def _check_kernel_limits(ctx: _Context, entry: EntryPoint, kernel: KernelInfo) -> None:
    """Shared memory (of this kernel's entry point only), workgroup and grid."""
    limits = ctx.limits
    shared = entry.workgroup_bytes
    if shared > limits.maxComputeSharedMemorySize:
        raise VyreError(
            f"kernel @{kernel.name} needs {shared} bytes of workgroup memory but "
            f"Vulkan device {ctx.name!r} allows maxComputeSharedMemorySize = "
            f"{limits.maxComputeSharedMemorySize}; lower it for this device "
            f"(vx.run does; vx.lower_to_gpu(..., device='vulkan'), "
            f"vyre-to-gpu{{device=vulkan}}), or with optimize='exact' (it keeps no "
            f"scratch in workgroup memory)"
        )
    wg = entry.workgroup_size
    invocations = wg[0] * wg[1] * wg[2]
    if invocations > limits.maxComputeWorkGroupInvocations or any(
            w > m for w, m in zip(wg, list(limits.maxComputeWorkGroupSize))):
        raise VyreError(
            f"workgroup size {wg} of kernel @{kernel.name} exceeds the limits of "
            f"Vulkan device {ctx.name!r}"
        )
    if any(g > m for g, m in zip(kernel.grid_size, list(limits.maxComputeWorkGroupCount))):
        raise VyreError(
            f"grid size {kernel.grid_size} of kernel @{kernel.name} exceeds "
            f"maxComputeWorkGroupCount {list(limits.maxComputeWorkGroupCount)} of "
            f"Vulkan device {ctx.name!r}"
        )


def _check_arrays(program: ProgramInfo, arrays: Mapping[str, np.ndarray]) -> None:
    for buffer in program.buffers:
        array = arrays.get(buffer.name)
        if array is None and buffer.is_temporary:
            continue  # lives on the device only
        if not isinstance(array, np.ndarray) or array.dtype != buffer.numpy_dtype or \
                array.size != buffer.count or not array.flags.c_contiguous:
            raise VyreError(
                f"buffer {buffer.name!r} must be a contiguous {buffer.numpy_dtype} "
                f"numpy array ({buffer.dtype} buffer) of {buffer.count} elements"
            )
