"""Vulkan runtime for SPIR-V kernels emitted by `vyre_xdsl.spirv`.

    execute(spirv, info, arrays)   dispatch and write output arrays in place
                                   (info: a KernelInfo, or a ProgramInfo whose
                                   kernels are dispatched in order)
    load(spirv, info)              a Dispatcher that keeps its pipelines and
                                   buffers across runs (what vx.compile uses)
    device_report()                list Vulkan devices and the one in use
    live_profile()                 the selected device's limits as a DeviceProfile
    workgroup_memory_bytes(spirv)  workgroup memory of a module or an entry point
    close()                        close open kernels, destroy the cached
                                   instance/device

Modules: device.py (loader, device selection, limits), limits.py (SPIR-V
inspection, checks before a run), dispatch.py (buffers, pipelines,
commands), runtime.py (load, execute).

Environment: VYRE_VULKAN_DEVICE (index or name substring) picks the device
(default: discrete GPU, then integrated, virtual, CPU/lavapipe);
VYRE_VULKAN_VALIDATION=1 runs under VK_LAYER_KHRONOS_validation and turns
every validation message into a VyreError."""

from vyre_xdsl.vulkan.runtime import (
    close,
    device_report,
    execute,
    live_profile,
    load,
    workgroup_memory_bytes,
)

__all__ = ["execute", "load", "device_report", "live_profile", "close",
           "workgroup_memory_bytes"]
