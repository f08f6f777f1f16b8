"""Run a SPIR-V compute kernel, or a program of several, on a Vulkan device
through the PyPI `vulkan` binding (cffi over the system libvulkan.so.1).

    device.py     the cached _Context (instance, device, queue), limits, report
    limits.py     SPIR-V inspection and the device limits checked before a run
    dispatch.py   buffers, pipelines, descriptors, commands

One `_Context` is created on first use and cached per validation setting;
every per-run object (buffers, memory, shader module, layouts, pipeline,
pools, fence, query pool) is destroyed before `execute` returns, also when
it raises.
"""

from __future__ import annotations

import time

import numpy as np

from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import KernelInfo, ProgramInfo, as_program
from vyre_xdsl.vulkan.device import (  # noqa: F401 (the names tests and tools use)
    DEVICE_ENV,
    FENCE_TIMEOUT_NS,
    INSTALL_HINT,
    VALIDATION_ENV,
    VALIDATION_LAYER,
    SubgroupSupport,
    _check,
    _context,
    _Context,
    _validation_requested,
    _vk,
    _vk_error,
    close,
    device_report,
    live_profile,
)
from vyre_xdsl.vulkan.dispatch import _buffer_bytes, _Resources, _run
from vyre_xdsl.vulkan.limits import (  # noqa: F401
    LLVMPIPE_LOOP_LIMIT,
    _check_arrays,
    _check_limits,
    workgroup_memory_bytes,
)

def execute(spirv: bytes, info: KernelInfo | ProgramInfo,
            arrays: dict[str, np.ndarray], *,
            validation: bool | None = None, staging: bool | None = None,
            timings: dict | None = None, repeat: int = 1) -> None:
    """Dispatch the SPIR-V kernel `spirv` (`info.grid_size` workgroups) on
    the selected Vulkan device; for a program, dispatch each kernel in
    order (entry point = kernel name), each seeing what the earlier ones
    wrote. `arrays` holds a flat float32 array for every input and output
    buffer (by name); outputs are overwritten in place. Temporary buffers
    live on the device only, zero-filled before the first kernel and never
    read back (an array given for one is left as it is).

    `validation` (default: env VYRE_VULKAN_VALIDATION) runs under the Khronos
    validation layer and raises VyreError on any message. `staging` forces
    (True) or avoids (False) device-local buffers with staging copies; by
    default they are used where the device has separate device memory.
    `timings`, if given, receives 'dispatch_ms' (GPU timestamps around the
    whole sequence of dispatches, when the queue supports them) and
    'total_ms' (host wall time of the run). `repeat` > 1 runs the sequence
    that many times back to back (each run overwrites the outputs and
    starts from zeroed temporaries); 'dispatch_ms' is then the median and
    'dispatch_ms_each' the list, for benchmarks."""
    program = as_program(info)
    if not isinstance(repeat, int) or repeat < 1:
        raise VyreError(f"repeat must be a positive integer, got {repeat!r}")
    start = time.perf_counter()
    validation = _validation_requested(validation)
    ctx = _context(validation)
    vk = ctx.vk
    if not isinstance(spirv, (bytes, bytearray)) or len(spirv) % 4:
        raise VyreError("execute expects a SPIR-V binary (bytes, whole words)")
    _check_arrays(program, arrays)
    _check_limits(ctx, spirv, program, arrays)
    use_staging = ctx.staging if staging is None else staging
    ctx.messages.clear()
    res = _Resources(ctx)
    try:
        _run(ctx, res, bytes(spirv), program, arrays, use_staging, timings, repeat)
    except (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory) as error:
        sizes = {b.name: _buffer_bytes(b, arrays) for b in program.buffers}
        largest = max(sizes, key=sizes.get)
        where = "device" if isinstance(error, vk.VkErrorOutOfDeviceMemory) else "host"
        raise VyreError(
            f"Vulkan device {ctx.name!r} ran out of {where} memory running "
            f"{program.label} ({sum(sizes.values())} bytes of buffers, the largest "
            f"{largest!r} of {sizes[largest]}); use smaller shapes, free memory "
            f"held by other programs (a framework's cached allocations, e.g. "
            f"torch.cuda.empty_cache()), or pick another device ({DEVICE_ENV})"
        ) from None
    except vk.VkErrorDeviceLost:
        raise VyreError(
            f"Vulkan device {ctx.name!r} was lost running {program.label}"
        ) from None
    except vk.VkError as error:
        raise VyreError(
            f"a Vulkan call failed running {program.label} on {ctx.name!r} "
            f"({_vk_error(error)}); rerun with {VALIDATION_ENV}=1 for details"
        ) from None
    finally:
        res.destroy()
    _check(ctx.messages, f"the run of {program.label} on {ctx.name}")
    if timings is not None:
        timings["total_ms"] = (time.perf_counter() - start) * 1e3
