"""Run a SPIR-V compute kernel, or a program of several, on a Vulkan device
through the PyPI `vulkan` binding (cffi over the system libvulkan.so.1).

A program is one shader module with an entry point per kernel: one
descriptor set holds every buffer, each kernel gets its own pipeline, and
the dispatches run in order, a compute -> compute barrier between them.

One `_Context` (instance, chosen physical device, logical device, compute
queue) is created on first use and cached per validation setting; every
per-run object (buffers, memory, shader module, layouts, pipeline, pools,
fence, query pool) is destroyed before `execute` returns, also when it raises.

Binding pitfalls handled here (DESIGN.md): nested create-info structs are
bound to names before they are referenced; sizes are passed explicitly (never
VK_WHOLE_SIZE); mapped memory is wrapped with np.frombuffer and the view is
dropped before vkUnmapMemory; versions come from VK_MAKE_VERSION.
"""

from __future__ import annotations

import atexit
import os
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from vyre_xdsl.device import DeviceProfile
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import BufferInfo, KernelInfo, ProgramInfo, as_program
from vyre_xdsl.spirv.spec import Capability, Op

INSTALL_HINT = (
    "install the Vulkan loader and a driver, e.g. on Debian/Ubuntu "
    "`apt-get install libvulkan1 mesa-vulkan-drivers` (mesa-vulkan-drivers "
    "provides lavapipe, a CPU Vulkan driver), and the Python binding with "
    "`pip install vulkan`"
)
VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
DEVICE_ENV = "VYRE_VULKAN_DEVICE"
VALIDATION_ENV = "VYRE_VULKAN_VALIDATION"
FENCE_TIMEOUT_NS = 600 * 10**9

_DEVICE_TYPE_NAMES = {0: "other", 1: "integrated GPU", 2: "discrete GPU",
                      3: "virtual GPU", 4: "CPU"}
_DEVICE_TYPE_RANK = {2: 0, 1: 1, 3: 2, 4: 3, 0: 4}  # lower is preferred

# SPIR-V subgroup capability -> the VkSubgroupFeatureFlagBits name it needs
_SUBGROUP_CAPABILITIES = {
    Capability.GroupNonUniform: "BASIC",  # gpu.subgroup_size
    Capability.GroupNonUniformShuffle: "SHUFFLE",  # gpu.shuffle xor, idx
    Capability.GroupNonUniformShuffleRelative: "SHUFFLE_RELATIVE",  # up, down
}


@dataclass
class SubgroupSupport:
    """VkPhysicalDeviceSubgroupProperties, as far as vyre's kernels care."""

    size: int
    compute: bool  # subgroup operations are supported in compute shaders
    operations: frozenset[str]  # "BASIC", "SHUFFLE", ...


def _vk():
    try:
        import vulkan as vk
    except (ImportError, OSError) as error:
        raise VyreError(f"the Vulkan backend is unavailable ({error}); {INSTALL_HINT}") from None
    return vk


def _vk_error(error: BaseException) -> str:
    """`VkErrorIncompatibleDriver` rather than the binding's empty message."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _validation_requested(validation: bool | None) -> bool:
    if validation is not None:
        return validation
    return os.environ.get(VALIDATION_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _check(messages: list[str], where: str) -> None:
    if messages:
        text = "\n".join(messages)
        messages.clear()
        raise VyreError(f"Vulkan validation reported problems during {where}:\n{text}")


class _Context:
    """Instance, physical device, logical device and compute queue."""

    def __init__(self, validation: bool):
        vk = _vk()
        self.vk = vk
        self.validation = validation
        self.messages: list[str] = []
        self.messenger = None
        try:
            layers = [p.layerName for p in vk.vkEnumerateInstanceLayerProperties()]
        except Exception as error:  # loader present but broken
            raise VyreError(
                f"cannot query the Vulkan loader ({_vk_error(error)}); {INSTALL_HINT}"
            ) from None
        enabled_layers, enabled_exts = [], []
        if validation:
            if VALIDATION_LAYER not in layers:
                raise VyreError(
                    f"Vulkan validation was requested but {VALIDATION_LAYER} is not "
                    f"installed; `apt-get install vulkan-validationlayers`, or unset "
                    f"{VALIDATION_ENV}"
                )
            enabled_layers.append(VALIDATION_LAYER)
            enabled_exts.append("VK_EXT_debug_utils")
        app = vk.VkApplicationInfo(
            pApplicationName="vyre-xdsl", applicationVersion=vk.VK_MAKE_VERSION(0, 1, 0),
            pEngineName="vyre-xdsl", engineVersion=vk.VK_MAKE_VERSION(0, 1, 0),
            apiVersion=vk.VK_MAKE_VERSION(1, 1, 0),
        )
        create = vk.VkInstanceCreateInfo(
            pApplicationInfo=app,
            enabledLayerCount=len(enabled_layers), ppEnabledLayerNames=enabled_layers,
            enabledExtensionCount=len(enabled_exts), ppEnabledExtensionNames=enabled_exts,
        )
        try:
            self.instance = vk.vkCreateInstance(create, None)
        except Exception as error:
            hint = (" (no Vulkan driver was found)"
                    if isinstance(error, vk.VkErrorIncompatibleDriver) else "")
            raise VyreError(
                f"vkCreateInstance failed ({_vk_error(error)}){hint}; {INSTALL_HINT}"
            ) from None
        try:
            if validation:
                self._create_messenger()
            self._pick_device()
            self._create_device()
        except vk.VkError as error:
            self.close()
            raise VyreError(
                f"cannot set up a Vulkan device ({_vk_error(error)}); {INSTALL_HINT}"
            ) from None
        except BaseException:
            self.close()
            raise

    # setup ------------------------------------------------------------------
    def _create_messenger(self) -> None:
        vk = self.vk

        def callback(severity, types, data, user_data):
            self.messages.append(vk.ffi.string(data.pMessage).decode(errors="replace"))
            return 0

        self._callback = callback  # keep alive
        info = vk.VkDebugUtilsMessengerCreateInfoEXT(
            messageSeverity=(vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
                             | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT),
            messageType=(vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
                         | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
                         | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT),
            pfnUserCallback=callback,
        )
        create = vk.vkGetInstanceProcAddr(self.instance, "vkCreateDebugUtilsMessengerEXT")
        self.messenger = create(self.instance, info, None)

    def _pick_device(self) -> None:
        vk = self.vk
        devices = vk.vkEnumeratePhysicalDevices(self.instance)
        if not devices:
            raise VyreError(f"no Vulkan device found; {INSTALL_HINT}")
        props = [vk.vkGetPhysicalDeviceProperties(d) for d in devices]
        choice = os.environ.get(DEVICE_ENV, "").strip()
        index = None
        if choice:
            if choice.isdigit():
                index = int(choice)
                if index >= len(devices):
                    raise VyreError(
                        f"{DEVICE_ENV}={choice} but there are only {len(devices)} "
                        f"Vulkan devices:\n{_describe(props)}"
                    )
            else:
                matches = [i for i, p in enumerate(props)
                           if choice.lower() in p.deviceName.lower()]
                if not matches:
                    raise VyreError(
                        f"{DEVICE_ENV}={choice!r} matches no Vulkan device name:\n"
                        f"{_describe(props)}"
                    )
                index = matches[0]
        else:
            index = min(range(len(devices)),
                        key=lambda i: (_DEVICE_TYPE_RANK.get(props[i].deviceType, 9), i))
        self.physical = devices[index]
        self.props = props[index]
        self.name = self.props.deviceName
        self.limits = self.props.limits
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(self.physical)
        compute = [i for i, f in enumerate(families)
                   if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        if not compute:
            raise VyreError(f"Vulkan device {self.name!r} has no compute queue")
        self.family = compute[0]
        self.timestamp_bits = families[self.family].timestampValidBits
        memory = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
        self.memory_types = [
            (memory.memoryTypes[i].propertyFlags, memory.memoryTypes[i].heapIndex)
            for i in range(memory.memoryTypeCount)
        ]
        local = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        visible = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
        # separate device memory (a discrete GPU): device-local types that the
        # host cannot map exist -> stage through host-visible buffers
        self.staging = any(f & local and not f & visible for f, _ in self.memory_types)
        self.subgroup = self._subgroup_support()
        self.max_allocation = self._max_allocation()

    def _subgroup_support(self) -> SubgroupSupport:
        vk = self.vk
        if self.props.apiVersion < vk.VK_MAKE_VERSION(1, 1, 0):
            return SubgroupSupport(1, False, frozenset())  # no subgroup query
        found = vk.VkPhysicalDeviceSubgroupProperties()
        props = vk.VkPhysicalDeviceProperties2(pNext=found)
        vk.vkGetPhysicalDeviceProperties2(self.physical, props)
        operations = frozenset(
            name for name in set(_SUBGROUP_CAPABILITIES.values())
            if found.supportedOperations & getattr(vk, f"VK_SUBGROUP_FEATURE_{name}_BIT")
        )
        compute = bool(found.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT)
        return SubgroupSupport(found.subgroupSize, compute, operations)

    def _max_allocation(self) -> int:
        """maxMemoryAllocationSize (Vulkan 1.1), or maxStorageBufferRange
        where the device cannot say."""
        vk = self.vk
        if self.props.apiVersion < vk.VK_MAKE_VERSION(1, 1, 0):
            return self.limits.maxStorageBufferRange
        found = vk.VkPhysicalDeviceMaintenance3Properties()
        props = vk.VkPhysicalDeviceProperties2(pNext=found)
        vk.vkGetPhysicalDeviceProperties2(self.physical, props)
        return int(found.maxMemoryAllocationSize)

    def _create_device(self) -> None:
        vk = self.vk
        priorities = [1.0]
        queue_info = vk.VkDeviceQueueCreateInfo(
            queueFamilyIndex=self.family, queueCount=1, pQueuePriorities=priorities)
        queue_infos = [queue_info]
        create = vk.VkDeviceCreateInfo(queueCreateInfoCount=1,
                                       pQueueCreateInfos=queue_infos)
        self.device = vk.vkCreateDevice(self.physical, create, None)
        self.queue = vk.vkGetDeviceQueue(self.device, self.family, 0)

    def close(self) -> None:
        vk = self.vk
        if getattr(self, "device", None) is not None:
            vk.vkDeviceWaitIdle(self.device)
            vk.vkDestroyDevice(self.device, None)
            self.device = None
        if self.messenger is not None:
            destroy = vk.vkGetInstanceProcAddr(self.instance,
                                               "vkDestroyDebugUtilsMessengerEXT")
            destroy(self.instance, self.messenger, None)
            self.messenger = None
        if getattr(self, "instance", None) is not None:
            vk.vkDestroyInstance(self.instance, None)
            self.instance = None

    # helpers ------------------------------------------------------------------
    def memory_type(self, type_bits: int, required: int, preferred: int = 0) -> int:
        candidates = [i for i, (flags, _) in enumerate(self.memory_types)
                      if type_bits & (1 << i) and flags & required == required]
        if not candidates:
            raise VyreError(
                f"Vulkan device {self.name!r} has no memory type with flags "
                f"{required:#x} for a buffer"
            )
        best = [i for i in candidates
                if self.memory_types[i][0] & preferred == preferred]
        return (best or candidates)[0]


_CONTEXTS: dict[bool, _Context] = {}


def _context(validation: bool) -> _Context:
    ctx = _CONTEXTS.get(validation)
    if ctx is None:
        ctx = _Context(validation)
        _CONTEXTS[validation] = ctx
    return ctx


def close() -> None:
    """Destroy the cached Vulkan devices and instances. With validation on, the
    layer reports any object a run forgot to destroy here (raises VyreError)."""
    messages: list[str] = []
    for key in list(_CONTEXTS):
        ctx = _CONTEXTS.pop(key)
        ctx.close()
        messages.extend(ctx.messages)
    _check(messages, "vulkan.close()")


@atexit.register
def _close_quietly() -> None:
    try:
        close()
    except Exception:
        pass


def _describe(props) -> str:
    return "\n".join(
        f"  [{i}] {p.deviceName} ({_DEVICE_TYPE_NAMES.get(p.deviceType, '?')}, "
        f"Vulkan {p.apiVersion >> 22}.{(p.apiVersion >> 12) & 0x3FF}.{p.apiVersion & 0xFFF})"
        for i, p in enumerate(props)
    )


def live_profile(validation: bool | None = None) -> DeviceProfile:
    """The limits of the Vulkan device that `execute` uses, as a profile
    for the tuning (vyre_xdsl.device)."""
    ctx = _context(_validation_requested(validation))
    subgroup = ctx.subgroup
    shuffles = subgroup.compute and {"SHUFFLE", "SHUFFLE_RELATIVE"} <= subgroup.operations
    limits = ctx.limits
    return DeviceProfile(
        name=ctx.name,
        shared_memory_bytes=limits.maxComputeSharedMemorySize,
        max_workgroup_invocations=limits.maxComputeWorkGroupInvocations,
        shuffle_subgroup_size=subgroup.size if shuffles else 0,
        max_buffer_bytes=limits.maxStorageBufferRange,
    )


def device_report() -> str:
    """A description of every Vulkan device and which one `execute` uses."""
    ctx = _context(_validation_requested(None))
    vk = ctx.vk
    devices = vk.vkEnumeratePhysicalDevices(ctx.instance)
    props = [vk.vkGetPhysicalDeviceProperties(d) for d in devices]
    limits = ctx.limits
    return (
        f"Vulkan devices:\n{_describe(props)}\n"
        f"selected: {ctx.name} (set {DEVICE_ENV} to an index or a name substring)\n"
        f"  maxComputeSharedMemorySize = {limits.maxComputeSharedMemorySize}\n"
        f"  maxComputeWorkGroupInvocations = {limits.maxComputeWorkGroupInvocations}\n"
        f"  maxStorageBufferRange = {limits.maxStorageBufferRange}\n"
        f"  subgroupSize = {ctx.subgroup.size} (operations in compute shaders: "
        f"{', '.join(sorted(ctx.subgroup.operations)) if ctx.subgroup.compute else 'none'})\n"
        f"  memory: {'device-local + staging' if ctx.staging else 'host-visible'}\n"
    )


# SPIR-V inspection -------------------------------------------------------------

def _instructions(spirv: bytes):
    """(opcode, operand words) of each instruction after the header."""
    words = struct.unpack(f"<{len(spirv) // 4}I", spirv)
    pos = 5
    while pos < len(words):
        count, opcode = words[pos] >> 16, words[pos] & 0xFFFF
        yield opcode, words[pos + 1: pos + count]
        pos += max(count, 1)


def _capabilities(spirv: bytes) -> set[int]:
    return {ops[0] for opcode, ops in _instructions(spirv) if opcode == Op.Capability}


def _literal_string(words) -> str:
    data = struct.pack(f"<{len(words)}I", *words)
    return data.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _workgroup_variables(spirv: bytes) -> dict[int, int]:
    """Workgroup-storage variable id -> bytes (arrays of 32-bit scalars or
    vectors, as the vyre emitter declares them)."""
    constants: dict[int, int] = {}
    sizes: dict[int, int] = {}
    pointers: dict[int, int] = {}
    variables: dict[int, int] = {}
    for opcode, ops in _instructions(spirv):
        if opcode == 43 and len(ops) >= 3:  # OpConstant
            constants[ops[1]] = ops[2]
        elif opcode in (21, 22):  # OpTypeInt / OpTypeFloat
            sizes[ops[0]] = ops[1] // 8
        elif opcode == 23:  # OpTypeVector
            sizes[ops[0]] = sizes.get(ops[1], 4) * ops[2]
        elif opcode == 28:  # OpTypeArray
            sizes[ops[0]] = sizes.get(ops[1], 4) * constants.get(ops[2], 0)
        elif opcode == 32:  # OpTypePointer
            pointers[ops[0]] = ops[2]
        elif opcode == 59 and ops[2] == 4:  # OpVariable Workgroup
            variables[ops[1]] = sizes.get(pointers.get(ops[0], 0), 0)
    return variables


def _entry_function(spirv: bytes, entry_point: str) -> int:
    names = []
    for opcode, ops in _instructions(spirv):
        if opcode == 15:  # OpEntryPoint model function name interface...
            name = _literal_string(ops[2:])
            if name == entry_point:
                return ops[1]
            names.append(name)
    raise VyreError(
        f"the SPIR-V module has no entry point {entry_point!r} (it has "
        f"{', '.join(names) or 'none'}); emit it from the same module with emit_spirv"
    )


def _pointers_used(spirv: bytes, function: int) -> set[int]:
    """The pointer operands of the loads, stores and access chains of one
    function (where the vyre emitter reads and writes its variables)."""
    used: set[int] = set()
    current = None
    for opcode, ops in _instructions(spirv):
        if opcode == 54:  # OpFunction
            current = ops[1]
        elif opcode == 56:  # OpFunctionEnd
            current = None
        elif current == function:
            if opcode in (61, 65, 66):  # OpLoad, OpAccessChain, OpInBoundsAccessChain
                used.add(ops[2])
            elif opcode == 62:  # OpStore
                used.add(ops[0])
    return used


def workgroup_memory_bytes(spirv: bytes, entry_point: str | None = None) -> int:
    """Bytes of Workgroup-storage variables of a SPIR-V module: all of them,
    or those the function of `entry_point` uses (a kernel of a program gets
    only its own workgroup memory)."""
    variables = _workgroup_variables(spirv)
    if entry_point is None:
        return sum(variables.values())
    used = _pointers_used(spirv, _entry_function(spirv, entry_point))
    return sum(size for var, size in variables.items() if var in used)


# execution ---------------------------------------------------------------------

class _Resources:
    """Per-run Vulkan objects, destroyed in reverse order of creation."""

    def __init__(self, ctx: _Context):
        self.ctx = ctx
        self.items: list[tuple[str, object]] = []

    def add(self, kind: str, handle):
        self.items.append((kind, handle))
        return handle

    def destroy(self) -> None:
        vk, device = self.ctx.vk, self.ctx.device
        errors = []
        for kind, handle in reversed(self.items):
            try:
                self._destroy(vk, device, kind, handle)
            except Exception as error:  # keep destroying the rest
                errors.append(f"{kind}: {error}")
        self.items.clear()
        if errors:
            raise VyreError("could not destroy Vulkan objects: " + "; ".join(errors))

    @staticmethod
    def _destroy(vk, device, kind, handle) -> None:
        if True:
            if kind == "buffer":
                vk.vkDestroyBuffer(device, handle, None)
            elif kind == "memory":
                vk.vkFreeMemory(device, handle, None)
            elif kind == "shader":
                vk.vkDestroyShaderModule(device, handle, None)
            elif kind == "set_layout":
                vk.vkDestroyDescriptorSetLayout(device, handle, None)
            elif kind == "pipeline_layout":
                vk.vkDestroyPipelineLayout(device, handle, None)
            elif kind == "pipeline":
                vk.vkDestroyPipeline(device, handle, None)
            elif kind == "descriptor_pool":
                vk.vkDestroyDescriptorPool(device, handle, None)
            elif kind == "command_pool":
                vk.vkDestroyCommandPool(device, handle, None)
            elif kind == "fence":
                vk.vkDestroyFence(device, handle, None)
            elif kind == "query_pool":
                vk.vkDestroyQueryPool(device, handle, None)


def _buffer(ctx: _Context, res: _Resources, size: int, usage: int,
            required: int, preferred: int = 0):
    vk = ctx.vk
    info = vk.VkBufferCreateInfo(size=size, usage=usage,
                                 sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE)
    buffer = res.add("buffer", vk.vkCreateBuffer(ctx.device, info, None))
    needs = vk.vkGetBufferMemoryRequirements(ctx.device, buffer)
    alloc = vk.VkMemoryAllocateInfo(
        allocationSize=needs.size,
        memoryTypeIndex=ctx.memory_type(needs.memoryTypeBits, required, preferred))
    memory = res.add("memory", vk.vkAllocateMemory(ctx.device, alloc, None))
    vk.vkBindBufferMemory(ctx.device, buffer, memory, 0)
    return buffer, memory


def _write(ctx: _Context, memory, array: np.ndarray) -> None:
    vk = ctx.vk
    mapped = vk.vkMapMemory(ctx.device, memory, 0, array.nbytes, 0)
    view = np.frombuffer(mapped, dtype=np.float32, count=array.size)
    view[:] = array
    del view, mapped
    vk.vkUnmapMemory(ctx.device, memory)


def _read(ctx: _Context, memory, array: np.ndarray) -> None:
    vk = ctx.vk
    mapped = vk.vkMapMemory(ctx.device, memory, 0, array.nbytes, 0)
    view = np.frombuffer(mapped, dtype=np.float32, count=array.size)
    array[:] = view
    del view, mapped
    vk.vkUnmapMemory(ctx.device, memory)


# llvmpipe ends each invocation after this many loop iterations in total and
# silently skips the rest of its work (Mesa's LP_MAX_TGSI_LOOP_ITERATIONS).
LLVMPIPE_LOOP_LIMIT = 65535


def _buffer_bytes(buffer: BufferInfo, arrays: Mapping[str, np.ndarray]) -> int:
    """A buffer's size on the device (a temporary needs no host array)."""
    array = arrays.get(buffer.name)
    return 4 * buffer.count if array is None else array.nbytes


def _check_limits(ctx: _Context, spirv: bytes, info: KernelInfo | ProgramInfo,
                  arrays: Mapping[str, np.ndarray]) -> None:
    program = as_program(info)
    _check_subgroup_support(ctx, spirv, program)
    for kernel in program.kernels:
        _check_loop_limit(ctx, kernel)
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
        _check_kernel_limits(ctx, spirv, kernel)


def _check_subgroup_support(ctx: _Context, spirv: bytes, program: ProgramInfo) -> None:
    """Refuse a module whose subgroup operations the device lacks (drivers
    may crash on them rather than fail)."""
    declared = _capabilities(spirv) & _SUBGROUP_CAPABILITIES.keys()
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


def _check_loop_limit(ctx: _Context, kernel: KernelInfo) -> None:
    if (
        "llvmpipe" in ctx.name.lower()
        and kernel.loop_iterations is not None
        and kernel.loop_iterations > LLVMPIPE_LOOP_LIMIT
    ):
        raise VyreError(
            f"kernel @{kernel.name} runs up to {kernel.loop_iterations} loop "
            f"iterations per invocation, but lavapipe ({ctx.name}) stops every "
            f"invocation after {LLVMPIPE_LOOP_LIMIT} and would return a wrong "
            f"result; use smaller shapes (seq_len, head_dim, kv_lora_rank), a "
            f"GPU ({DEVICE_ENV}), or backend='interpreter'"
        )


def _check_kernel_limits(ctx: _Context, spirv: bytes, kernel: KernelInfo) -> None:
    """Shared memory (of this kernel's entry point only), workgroup and grid."""
    limits = ctx.limits
    shared = workgroup_memory_bytes(spirv, kernel.name)
    if shared > limits.maxComputeSharedMemorySize:
        raise VyreError(
            f"kernel @{kernel.name} needs {shared} bytes of workgroup memory but "
            f"Vulkan device {ctx.name!r} allows maxComputeSharedMemorySize = "
            f"{limits.maxComputeSharedMemorySize}; lower it for this device "
            f"(vx.run does; vx.lower_to_gpu(..., device='vulkan'), "
            f"vyre-to-gpu{{device=vulkan}}), or with optimize='exact' (it keeps no "
            f"scratch in workgroup memory)"
        )
    wg = kernel.workgroup_size
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
        if not isinstance(array, np.ndarray) or array.dtype != np.float32 or \
                array.size != buffer.count or not array.flags.c_contiguous:
            raise VyreError(
                f"buffer {buffer.name!r} must be a contiguous float32 numpy array "
                f"of {buffer.count} elements"
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


@dataclass
class _DeviceBuffer:
    """A buffer of the program on the device, and where the host reaches it."""

    info: BufferInfo
    size: int  # bytes
    buffer: object  # the storage buffer the kernels bind
    memory: object | None  # host-visible memory holding its data (None: temporary)
    staging: object | None = None  # the staging buffer of `memory`, if any


def _create_buffers(ctx: _Context, res: _Resources, program: ProgramInfo,
                    arrays: Mapping[str, np.ndarray],
                    use_staging: bool) -> list[_DeviceBuffer]:
    """Storage buffers with the inputs written; temporaries device-local,
    filled with zeros by the command buffer."""
    vk = ctx.vk
    host = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
    local = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
    storage = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
    t_src, t_dst = vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT, vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
    buffers = []
    for buffer in program.buffers:
        size = _buffer_bytes(buffer, arrays)
        if buffer.is_temporary:
            dev_buf, _ = _buffer(ctx, res, size, storage | t_dst, 0, local)
            buffers.append(_DeviceBuffer(buffer, size, dev_buf, None))
        elif use_staging:
            dev_buf, _ = _buffer(ctx, res, size, storage | t_src | t_dst, local)
            stage_buf, stage_mem = _buffer(ctx, res, size, t_src | t_dst, host,
                                           vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
            _write(ctx, stage_mem, arrays[buffer.name])
            buffers.append(_DeviceBuffer(buffer, size, dev_buf, stage_mem, stage_buf))
        else:
            dev_buf, dev_mem = _buffer(ctx, res, size, storage, host)
            _write(ctx, dev_mem, arrays[buffer.name])
            buffers.append(_DeviceBuffer(buffer, size, dev_buf, dev_mem))
    return buffers


def _create_pipelines(ctx: _Context, res: _Resources, spirv: bytes,
                      program: ProgramInfo, buffers: list[_DeviceBuffer]):
    """One shader module and descriptor set layout (every binding of the
    program); a compute pipeline per kernel, its entry point by name.
    Returns (set layout, pipeline layout, pipelines in kernel order)."""
    vk, device = ctx.vk, ctx.device
    shader_info = vk.VkShaderModuleCreateInfo(codeSize=len(spirv), pCode=spirv)
    shader = res.add("shader", vk.vkCreateShaderModule(device, shader_info, None))
    bindings = [
        vk.VkDescriptorSetLayoutBinding(
            binding=b.info.binding, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
        for b in buffers
    ]
    layout_info = vk.VkDescriptorSetLayoutCreateInfo(bindingCount=len(bindings),
                                                     pBindings=bindings)
    set_layout = res.add("set_layout",
                         vk.vkCreateDescriptorSetLayout(device, layout_info, None))
    set_layouts = [set_layout]
    pipeline_layout_info = vk.VkPipelineLayoutCreateInfo(setLayoutCount=1,
                                                         pSetLayouts=set_layouts)
    pipeline_layout = res.add(
        "pipeline_layout", vk.vkCreatePipelineLayout(device, pipeline_layout_info, None))
    pipelines = []
    for kernel in program.kernels:
        stage = vk.VkPipelineShaderStageCreateInfo(
            stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=shader, pName=kernel.name)
        pipeline_info = vk.VkComputePipelineCreateInfo(stage=stage, layout=pipeline_layout)
        pipeline_infos = [pipeline_info]
        created = vk.vkCreateComputePipelines(device, vk.VK_NULL_HANDLE, 1,
                                              pipeline_infos, None)
        pipelines.append(res.add("pipeline", created[0]))  # a cdata array of one
    return set_layout, pipeline_layout, pipelines


def _create_descriptor_set(ctx: _Context, res: _Resources, set_layout,
                           buffers: list[_DeviceBuffer]):
    vk, device = ctx.vk, ctx.device
    pool_size = vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                        descriptorCount=len(buffers))
    pool_sizes = [pool_size]
    pool_info = vk.VkDescriptorPoolCreateInfo(maxSets=1, poolSizeCount=1,
                                              pPoolSizes=pool_sizes)
    pool = res.add("descriptor_pool", vk.vkCreateDescriptorPool(device, pool_info, None))
    set_layouts = [set_layout]
    alloc_info = vk.VkDescriptorSetAllocateInfo(descriptorPool=pool,
                                                descriptorSetCount=1,
                                                pSetLayouts=set_layouts)
    descriptor_set = vk.vkAllocateDescriptorSets(device, alloc_info)[0]
    buffer_infos, writes = [], []
    for b in buffers:
        buffer_info = vk.VkDescriptorBufferInfo(buffer=b.buffer, offset=0, range=b.size)
        buffer_infos.append([buffer_info])
        writes.append(vk.VkWriteDescriptorSet(
            dstSet=descriptor_set, dstBinding=b.info.binding, dstArrayElement=0,
            descriptorCount=1, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            pBufferInfo=buffer_infos[-1]))
    vk.vkUpdateDescriptorSets(device, len(writes), writes, 0, None)
    return descriptor_set


def _run(ctx: _Context, res: _Resources, spirv: bytes, program: ProgramInfo,
         arrays: dict[str, np.ndarray], use_staging: bool,
         timings: dict | None, repeat: int) -> None:
    vk, device = ctx.vk, ctx.device
    buffers = _create_buffers(ctx, res, program, arrays, use_staging)
    set_layout, pipeline_layout, pipelines = _create_pipelines(
        ctx, res, spirv, program, buffers)
    descriptor_set = _create_descriptor_set(ctx, res, set_layout, buffers)

    # commands --------------------------------------------------------------
    command_pool_info = vk.VkCommandPoolCreateInfo(queueFamilyIndex=ctx.family)
    command_pool = res.add("command_pool",
                           vk.vkCreateCommandPool(device, command_pool_info, None))
    command_info = vk.VkCommandBufferAllocateInfo(
        commandPool=command_pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        commandBufferCount=1)
    cmd = vk.vkAllocateCommandBuffers(device, command_info)[0]
    query_pool = None
    if timings is not None and ctx.timestamp_bits:
        query_info = vk.VkQueryPoolCreateInfo(queryType=vk.VK_QUERY_TYPE_TIMESTAMP,
                                              queryCount=2 * repeat)
        query_pool = res.add("query_pool", vk.vkCreateQueryPool(device, query_info, None))
    begin = vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)
    vk.vkBeginCommandBuffer(cmd, begin)
    if query_pool is not None:
        vk.vkCmdResetQueryPool(cmd, query_pool, 0, 2 * repeat)

    def barrier(src_access, dst_access, src_stage, dst_stage):
        memory_barrier = vk.VkMemoryBarrier(srcAccessMask=src_access,
                                            dstAccessMask=dst_access)
        barriers = [memory_barrier]
        vk.vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 1, barriers,
                                0, None, 0, None)

    shader_rw = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
    compute = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
    transfer = vk.VK_PIPELINE_STAGE_TRANSFER_BIT
    staged = [b for b in buffers if b.staging is not None]
    temporaries = [b for b in buffers if b.info.is_temporary]
    if use_staging:
        for b in staged:
            region = vk.VkBufferCopy(srcOffset=0, dstOffset=0, size=b.size)
            regions = [region]
            vk.vkCmdCopyBuffer(cmd, b.staging, b.buffer, 1, regions)
        barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT, shader_rw, transfer, compute)
    else:
        barrier(vk.VK_ACCESS_HOST_WRITE_BIT, shader_rw,
                vk.VK_PIPELINE_STAGE_HOST_BIT, compute)
    vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipelines[0])
    bound = 0
    sets = [descriptor_set]
    # one pipeline layout for every kernel: the set stays bound across pipelines
    vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_layout,
                               0, 1, sets, 0, None)
    for index in range(repeat):
        if index:  # the next run rewrites what this one wrote
            barrier(vk.VK_ACCESS_SHADER_WRITE_BIT, shader_rw, compute, compute)
        if temporaries:  # every run starts from zeroed temporaries (untimed)
            if index:
                barrier(shader_rw, vk.VK_ACCESS_TRANSFER_WRITE_BIT, compute, transfer)
            for b in temporaries:
                vk.vkCmdFillBuffer(cmd, b.buffer, 0, b.size, 0)
            barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT, shader_rw, transfer, compute)
        if query_pool is not None:
            vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT,
                                   query_pool, 2 * index)
        for position, (kernel, pipeline) in enumerate(zip(program.kernels, pipelines)):
            if position:  # a kernel sees everything the previous ones wrote
                barrier(vk.VK_ACCESS_SHADER_WRITE_BIT, shader_rw, compute, compute)
            if bound != position:
                vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
                bound = position
            vk.vkCmdDispatch(cmd, *kernel.grid_size)
        if query_pool is not None:
            vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                                   query_pool, 2 * index + 1)
    if use_staging:
        barrier(vk.VK_ACCESS_SHADER_WRITE_BIT, vk.VK_ACCESS_TRANSFER_READ_BIT,
                compute, transfer)
        for b in staged:
            if b.info.is_output:
                region = vk.VkBufferCopy(srcOffset=0, dstOffset=0, size=b.size)
                regions = [region]
                vk.vkCmdCopyBuffer(cmd, b.buffer, b.staging, 1, regions)
        barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT, vk.VK_ACCESS_HOST_READ_BIT,
                transfer, vk.VK_PIPELINE_STAGE_HOST_BIT)
    else:
        barrier(vk.VK_ACCESS_SHADER_WRITE_BIT, vk.VK_ACCESS_HOST_READ_BIT,
                compute, vk.VK_PIPELINE_STAGE_HOST_BIT)
    vk.vkEndCommandBuffer(cmd)

    fence_info = vk.VkFenceCreateInfo()
    fence = res.add("fence", vk.vkCreateFence(device, fence_info, None))
    command_buffers = [cmd]
    submit = vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=command_buffers)
    submits = [submit]
    vk.vkQueueSubmit(ctx.queue, 1, submits, fence)
    fences = [fence]
    try:
        vk.vkWaitForFences(device, 1, fences, vk.VK_TRUE, FENCE_TIMEOUT_NS)
    except vk.VkTimeout:
        raise VyreError(f"{program.label} did not finish within "
                        f"{FENCE_TIMEOUT_NS // 10**9} s on {ctx.name}") from None
    except vk.VkErrorDeviceLost:
        raise VyreError(f"Vulkan device {ctx.name!r} was lost running "
                        f"{program.label}") from None

    for b in buffers:
        if b.info.is_output:
            _read(ctx, b.memory, arrays[b.info.name])
    if query_pool is not None:
        data = vk.ffi.new(f"uint64_t[{2 * repeat}]")
        vk.vkGetQueryPoolResults(device, query_pool, 0, 2 * repeat, 16 * repeat, data, 8,
                                 vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        each = [(int(data[2 * i + 1]) - int(data[2 * i])) * ctx.limits.timestampPeriod / 1e6
                for i in range(repeat)]
        timings["dispatch_ms_each"] = each
        timings["dispatch_ms"] = float(np.median(each))
