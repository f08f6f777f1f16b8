"""The Vulkan device a kernel runs on: the loader and binding, the cached
`_Context` (instance, chosen physical device, logical device, compute
queue) per validation setting, its limits as a tuning profile, and the
device report.

Environment: VYRE_VULKAN_DEVICE (index or name substring) picks the device
(default: discrete GPU, then integrated, virtual, CPU/lavapipe);
VYRE_VULKAN_VALIDATION=1 runs under VK_LAYER_KHRONOS_validation and turns
every validation message into a VyreError.

Binding pitfalls handled here and in dispatch.py (DESIGN.md): nested
create-info structs are bound to names before they are referenced; versions
come from VK_MAKE_VERSION.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from dataclasses import dataclass

from vyre_xdsl.device import DeviceProfile
from vyre_xdsl.errors import VyreError
from vyre_xdsl.mma_layout import TILE
from vyre_xdsl.spirv.spec import Capability

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
COOPERATIVE_MATRIX_EXTENSION = "VK_KHR_cooperative_matrix"
# bf16 matrices (spirv/mma.py).  The Python binding (1.3.275) predates the
# extension, so its two numbers are the Vulkan registry's (vk.xml), and its
# features struct is read and written through one of the same layout (sType,
# pNext, three VkBool32: shaderBFloat16Type, shaderBFloat16DotProduct,
# shaderBFloat16CooperativeMatrix), VkPhysicalDeviceVulkanMemoryModelFeatures
BFLOAT16_EXTENSION = "VK_KHR_shader_bfloat16"
BFLOAT16_FEATURES = 1000141000  # VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR
BFLOAT16_COMPONENT = 1000141000  # VK_COMPONENT_TYPE_BFLOAT16_KHR
# the driver's compile statistics of each pipeline (registers, spills, ...)
STATISTICS_EXTENSION = "VK_KHR_pipeline_executable_properties"

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
        # the layer reports in the thread that made the call: each thread's
        # run sees its own messages (messages)
        self._thread = threading.local()
        # Vulkan wants the queue's users serialised (kernels called from
        # several threads submit to this one queue)
        self.queue_lock = threading.Lock()
        self.messenger = None
        self.users: weakref.WeakSet = weakref.WeakSet()  # dispatchers on the device
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

    @property
    def messages(self) -> list[str]:
        """The validation layer's messages in this thread since they were
        last checked (device._check clears them)."""
        return self._thread.__dict__.setdefault("messages", [])

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
        # the device extensions, which the feature queries below look for
        self.extensions = frozenset(
            e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(self.physical, None))
        self.subgroup = self._subgroup_support()
        self.max_allocation = self._max_allocation()
        self.storage_16bit = self._storage_16bit_support()
        self.float16, self.memory_model, self.cooperative_matrix = self._matrix_support()
        # 16x16x16 bf16 products into f32 (runtime.device_accumulator also
        # requires their A operands laid out as f16's)
        self.bfloat16_matrices = self._bfloat16_matrix_support()
        # 16-bit integers outside storage buffers: f16 tiles in workgroup memory
        self.int16 = bool(vk.vkGetPhysicalDeviceFeatures(self.physical).shaderInt16)
        self.statistics = self._statistics_support()
        # the accumulator layout, read on first need (runtime.device_accumulator)
        self.accumulator_read = False
        self.reading_accumulator = False  # the layout kernels are running
        self.accumulator = None

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

    def _storage_16bit_support(self) -> bool:
        """Whether the device can load and store 16-bit values of storage
        buffers (storageBuffer16BitAccess, Vulkan 1.1): what f16 and bf16
        buffers need (spirv/half.py)."""
        vk = self.vk
        if self.props.apiVersion < vk.VK_MAKE_VERSION(1, 1, 0):
            return False
        found = vk.VkPhysicalDevice16BitStorageFeatures()
        features = vk.VkPhysicalDeviceFeatures2(pNext=found)
        vk.vkGetPhysicalDeviceFeatures2(self.physical, features)
        return bool(found.storageBuffer16BitAccess)

    def _matrix_support(self) -> tuple[bool, bool, bool]:
        """Whether the device has f16 arithmetic (shaderFloat16), the Vulkan
        memory model (vulkanMemoryModel; both Vulkan 1.2) and cooperative
        matrices (VK_KHR_cooperative_matrix's cooperativeMatrix): what f16
        subgroup matrix ops need (spirv/mma.py)."""
        vk = self.vk
        if self.props.apiVersion < vk.VK_MAKE_VERSION(1, 2, 0):
            return False, False, False
        # a feature struct of an extension the device lacks is not queried
        matrix = (vk.VkPhysicalDeviceCooperativeMatrixFeaturesKHR()
                  if COOPERATIVE_MATRIX_EXTENSION in self.extensions else None)
        model = vk.VkPhysicalDeviceVulkanMemoryModelFeatures(pNext=matrix)
        float16 = vk.VkPhysicalDeviceShaderFloat16Int8Features(pNext=model)
        vk.vkGetPhysicalDeviceFeatures2(self.physical,
                                        vk.VkPhysicalDeviceFeatures2(pNext=float16))
        return (bool(float16.shaderFloat16), bool(model.vulkanMemoryModel),
                bool(matrix and matrix.cooperativeMatrix))

    def _bfloat16_features(self, enable: bool = False, pNext=None):  # noqa: N803
        """VK_KHR_shader_bfloat16's features struct (the carrier above):
        to read, or with the type and cooperative matrices `enable`d."""
        vk = self.vk
        on = vk.VK_TRUE if enable else vk.VK_FALSE
        return vk.VkPhysicalDeviceVulkanMemoryModelFeatures(
            sType=BFLOAT16_FEATURES, pNext=pNext, vulkanMemoryModel=on,
            vulkanMemoryModelAvailabilityVisibilityChains=on)

    def _bfloat16_matrix_support(self) -> bool:
        """Whether the device multiplies 16x16x16 bf16 cooperative matrices
        into f32 at subgroup scope (VK_KHR_shader_bfloat16's
        shaderBFloat16CooperativeMatrix and a matching entry of
        vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)."""
        vk = self.vk
        if not self.cooperative_matrix:
            return False
        if BFLOAT16_EXTENSION not in self.extensions:
            return False
        found = self._bfloat16_features()
        vk.vkGetPhysicalDeviceFeatures2(self.physical, vk.VkPhysicalDeviceFeatures2(pNext=found))
        if not (found.vulkanMemoryModel and found.vulkanMemoryModelAvailabilityVisibilityChains):
            return False
        ffi = vk.ffi
        name = b"vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"
        address = vk.lib.vkGetInstanceProcAddr(self.instance, name)
        if address == ffi.NULL:
            return False
        query = ffi.cast("PFN_" + name.decode(), address)
        count = ffi.new("uint32_t*")
        self.check(query(self.physical, count, ffi.NULL))
        shapes = ffi.new("VkCooperativeMatrixPropertiesKHR[]", count[0])
        for shape in shapes:
            shape.sType = vk.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR
        self.check(query(self.physical, count, shapes))
        f32 = vk.VK_COMPONENT_TYPE_FLOAT32_KHR
        return any((s.MSize, s.NSize, s.KSize) == (TILE, TILE, TILE)
                   and s.AType == s.BType == BFLOAT16_COMPONENT
                   and s.CType == s.ResultType == f32 and s.scope == vk.VK_SCOPE_SUBGROUP_KHR
                   for s in shapes[0:count[0]])

    def _statistics_support(self) -> bool:
        """Whether the driver reports what it compiled each pipeline into
        (VK_KHR_pipeline_executable_properties' pipelineExecutableInfo):
        Dispatcher.statistics."""
        vk = self.vk
        if self.props.apiVersion < vk.VK_MAKE_VERSION(1, 1, 0):
            return False
        if STATISTICS_EXTENSION not in self.extensions:
            return False
        found = vk.VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR()
        vk.vkGetPhysicalDeviceFeatures2(self.physical, vk.VkPhysicalDeviceFeatures2(pNext=found))
        return bool(found.pipelineExecutableInfo)

    def _create_device(self) -> None:
        vk = self.vk
        priorities = [1.0]
        queue_info = vk.VkDeviceQueueCreateInfo(
            queueFamilyIndex=self.family, queueCount=1, pQueuePriorities=priorities)
        queue_infos = [queue_info]
        # enable cooperative matrices, the Vulkan memory model, f16 arithmetic
        # and 16-bit storage where the device has them (subgroup matrix ops,
        # f16/bf16 buffers)
        features = (
            vk.VkPhysicalDeviceCooperativeMatrixFeaturesKHR(cooperativeMatrix=vk.VK_TRUE)
            if self.cooperative_matrix else None
        )
        if self.memory_model:
            features = vk.VkPhysicalDeviceVulkanMemoryModelFeatures(
                pNext=features, vulkanMemoryModel=vk.VK_TRUE)
        if self.float16:
            features = vk.VkPhysicalDeviceShaderFloat16Int8Features(
                pNext=features, shaderFloat16=vk.VK_TRUE)
        if self.storage_16bit:
            features = vk.VkPhysicalDevice16BitStorageFeatures(
                pNext=features, storageBuffer16BitAccess=vk.VK_TRUE)
        extensions = [COOPERATIVE_MATRIX_EXTENSION] if self.cooperative_matrix else []
        if self.bfloat16_matrices:
            features = self._bfloat16_features(enable=True, pNext=features)
            extensions.append(BFLOAT16_EXTENSION)
        if self.statistics:
            features = vk.VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR(
                pNext=features, pipelineExecutableInfo=vk.VK_TRUE)
            extensions.append(STATISTICS_EXTENSION)
        enabled = vk.VkPhysicalDeviceFeatures(shaderInt16=vk.VK_TRUE) if self.int16 else None
        create = vk.VkDeviceCreateInfo(pNext=features,
                                       pEnabledFeatures=enabled,
                                       queueCreateInfoCount=1,
                                       pQueueCreateInfos=queue_infos,
                                       enabledExtensionCount=len(extensions),
                                       ppEnabledExtensionNames=extensions)
        self.device = vk.vkCreateDevice(self.physical, create, None)
        self.queue = vk.vkGetDeviceQueue(self.device, self.family, 0)

    def close(self) -> None:
        vk = self.vk
        if getattr(self, "device", None) is not None:
            with self.queue_lock:
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
    def check(self, result: int) -> None:
        """Raise the binding's VkError for a failed call's `result`, as its
        wrappers do (vulkan_error words it)."""
        if result != self.vk.VK_SUCCESS:
            raise self.vk.exception_codes[result]

    def submit(self, submits, fence) -> None:
        """Submit one VkSubmitInfo (`submits`, a pointer to it) to the queue,
        signalling `fence`. Straight to libvulkan: the binding's wrapper
        converts each argument again on every call. Every submission goes
        through here (tests inject a failing one)."""
        with self.queue_lock:
            result = self.vk.lib.vkQueueSubmit(self.queue, 1, submits, fence)
        self.check(result)

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
_CONTEXTS_LOCK = threading.Lock()  # one device per setting, whichever thread asks first


def _context(validation: bool) -> _Context:
    ctx = _CONTEXTS.get(validation)
    if ctx is None:
        with _CONTEXTS_LOCK:
            ctx = _CONTEXTS.get(validation)
            if ctx is None:
                ctx = _Context(validation)
                _CONTEXTS[validation] = ctx
    return ctx


def close() -> None:
    """Close the compiled kernels still open on the cached Vulkan devices
    (vx.compile; calling one later raises VyreError), then destroy the
    devices and instances. With validation on, the layer reports any object
    a run forgot to destroy here (raises VyreError)."""
    messages: list[str] = []
    for key in list(_CONTEXTS):
        ctx = _CONTEXTS.pop(key)
        for user in list(ctx.users):  # compiled kernels still open
            try:
                user.close()
            except VyreError as error:
                messages.append(str(error))
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
    from vyre_xdsl.vulkan.runtime import bfloat16_matrices, device_accumulator

    ctx = _context(_validation_requested(validation))
    accumulator = device_accumulator(ctx)
    subgroup = ctx.subgroup
    shuffles = subgroup.compute and {"SHUFFLE", "SHUFFLE_RELATIVE"} <= subgroup.operations
    limits = ctx.limits
    return DeviceProfile(
        name=ctx.name,
        shared_memory_bytes=limits.maxComputeSharedMemorySize,
        max_workgroup_invocations=limits.maxComputeWorkGroupInvocations,
        shuffle_subgroup_size=subgroup.size if shuffles else 0,
        max_buffer_bytes=limits.maxStorageBufferRange,
        subgroup_operations=subgroup.operations if subgroup.compute else frozenset(),
        float16=ctx.storage_16bit,
        bfloat16=ctx.storage_16bit,
        # the 16x16x16 shape is the one whose layout the probe reads
        cooperative_matrix_shapes=((TILE, TILE, TILE),) if accumulator else (),
        bfloat16_matrix_shapes=((TILE, TILE, TILE),) if bfloat16_matrices(ctx) else (),
        accumulator_layout=accumulator,
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
        f"  storageBuffer16BitAccess = {ctx.storage_16bit} (f16 and bf16 buffers)\n"
        f"  shaderFloat16 = {ctx.float16}, vulkanMemoryModel = {ctx.memory_model}, "
        f"cooperativeMatrix = {ctx.cooperative_matrix} ({COOPERATIVE_MATRIX_EXTENSION}): "
        f"subgroup matrix ops\n"
        f"  bf16 matrices = {ctx.bfloat16_matrices} ({BFLOAT16_EXTENSION})\n"
    )
