"""Vulkan runtime for SPIR-V kernels emitted by `vyre_xdsl.spirv`.

    execute(spirv, info, arrays)   dispatch and write output arrays in place
                                   (spirv: the emitter's SpirvModule; info: a
                                   KernelInfo, or a ProgramInfo whose kernels
                                   are dispatched in order)
    load(spirv, info)              a Dispatcher that keeps its pipelines and
                                   buffers across runs (what vx.compile uses)
    device_report()                list Vulkan devices and the one in use
    live_profile()                 the selected device's limits as a DeviceProfile
    close()                        close open kernels, destroy the cached
                                   instance/device

Modules: device.py (loader, device selection, limits), limits.py (checks
before a run, from the emitter's metadata: no binary is parsed),
dispatch.py (buffers, pipelines, commands), runtime.py (load, execute).

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
)

__all__ = ["execute", "load", "device_report", "live_profile", "close"]
