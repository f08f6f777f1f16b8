"""Vulkan runtime for SPIR-V kernels emitted by `vyre_xdsl.spirv`.

    execute(spirv, info, arrays)   dispatch and write output arrays in place
                                   (info: a KernelInfo, or a ProgramInfo whose
                                   kernels are dispatched in order)
    device_report()                list Vulkan devices and the one in use
    close()                        destroy the cached instance/device

Environment: VYRE_VULKAN_DEVICE (index or name substring) picks the device
(default: discrete GPU, then integrated, virtual, CPU/lavapipe);
VYRE_VULKAN_VALIDATION=1 runs under VK_LAYER_KHRONOS_validation and turns
every validation message into a VyreError."""

from vyre_xdsl.vulkan.runtime import close, device_report, execute, workgroup_memory_bytes

__all__ = ["execute", "device_report", "close", "workgroup_memory_bytes"]
