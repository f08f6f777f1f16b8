"""Dispatch on a Vulkan device: buffers, the shader module and pipelines,
descriptors and the command buffer of a program.

A program is one shader module with an entry point per kernel: one
descriptor set holds every buffer, each kernel gets its own pipeline, and
the dispatches run in order, a compute -> compute barrier between them.

Binding pitfalls handled here (DESIGN.md): nested create-info structs are
bound to names before they are referenced; sizes are passed explicitly (never
VK_WHOLE_SIZE); mapped memory is wrapped with np.frombuffer and the view is
dropped before vkUnmapMemory.
"""

from __future__ import annotations

import functools
import itertools
import statistics
import time
from collections.abc import Mapping

import numpy as np

from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import BufferInfo, ProgramInfo
from vyre_xdsl.vulkan.device import (
    DEVICE_ENV,
    FENCE_TIMEOUT_NS,
    VALIDATION_ENV,
    _Context,
    _vk_error,
)

# How long a dispatch is polled for before the host blocks on its fence.
FENCE_SPIN_S = 2e-3


class _Resources:
    """Vulkan objects, destroyed in reverse order of creation (mapped
    memory is unmapped before it is freed)."""

    def __init__(self, ctx: _Context):
        self.ctx = ctx
        self.items: list[tuple[str, object]] = []

    def add(self, kind: str, handle):
        self.items.append((kind, handle))
        return handle

    def destroy(self) -> None:
        vk, device = self.ctx.vk, self.ctx.device
        if device is None:  # vulkan.close() destroyed the device and all in it
            self.items.clear()
            return
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
            elif kind == "mapped":
                vk.vkUnmapMemory(device, handle)
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


def _buffer_bytes(buffer: BufferInfo, arrays: Mapping[str, np.ndarray]) -> int:
    """A buffer's size on the device (a temporary needs no host array): its
    elements' bytes (4 for f32, 2 for f16/bf16), rounded up to whole 32-bit
    words (vkCmdFillBuffer and some drivers want them)."""
    array = arrays.get(buffer.name)
    size = buffer.nbytes if array is None else array.nbytes
    return -(-size // 4) * 4


def _host_dtype(buffer: BufferInfo) -> np.dtype:
    """The dtype of the host arrays of `buffer` (and of mapped views of it):
    BufferInfo.numpy_dtype, float32 where BufferInfo has no dtype yet."""
    return getattr(buffer, "numpy_dtype", None) or np.dtype(np.float32)


_SERIALS = itertools.count(1)


class DeviceBuffer:
    """One buffer of a program on the device: the storage buffer the kernels
    bind and, where the host reaches it, `view`, a persistent mapping (of the
    buffer's own host-visible memory, or of its staging buffer `staging`).
    Temporaries, and resident arrays on a device with separate memory
    (`host=False`), have no view: transfers go through a staging buffer
    made for the occasion (Dispatcher.write/read)."""

    def __init__(self, ctx: _Context, info: BufferInfo, *, staging: bool,
                 host: bool = True):
        vk = ctx.vk
        self.info = info
        self.size = _buffer_bytes(info, {})
        self.serial = next(_SERIALS)  # never reused, unlike id()
        self.res = _Resources(ctx)
        self.view: np.ndarray | None = None
        self.staging = None
        visible = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        local = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        transfer = vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        usage = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | transfer
        try:
            if info.is_temporary:
                self.buffer, _ = _buffer(ctx, self.res, self.size, usage, 0, local)
            elif staging:
                self.buffer, _ = _buffer(ctx, self.res, self.size, usage, local)
                if host:
                    self.staging, memory = _buffer(ctx, self.res, self.size, transfer, visible,
                                                   vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                    self.view = _map(ctx, self.res, memory, self.size, info)
            else:
                self.buffer, memory = _buffer(ctx, self.res, self.size, usage, visible)
                self.view = _map(ctx, self.res, memory, self.size, info)
        except BaseException:
            self.destroy()
            raise

    def destroy(self) -> None:
        self.view = None  # before the memory is unmapped
        self.res.destroy()


def _map(ctx: _Context, res: _Resources, memory, size: int,
         info: BufferInfo, dtype: np.dtype | None = None) -> np.ndarray:
    """A numpy view of host-visible `memory`, mapped until `res` is destroyed
    (at most the buffer's elements: a half buffer of an odd count is
    allocated in whole 32-bit words, one element more)."""
    mapped = ctx.vk.vkMapMemory(ctx.device, memory, 0, size, 0)
    res.add("mapped", memory)
    dtype = _host_dtype(info) if dtype is None else dtype
    count = min(size // dtype.itemsize, info.count)
    return np.frombuffer(mapped, dtype=dtype, count=count)


def vulkan_error(ctx: _Context, program: ProgramInfo, error: BaseException) -> VyreError:
    """A VyreError for a failed Vulkan call while preparing or running `program`."""
    vk = ctx.vk
    if isinstance(error, (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory)):
        sizes = {b.name: _buffer_bytes(b, {}) for b in program.buffers}
        largest = max(sizes, key=sizes.get)
        where = "device" if isinstance(error, vk.VkErrorOutOfDeviceMemory) else "host"
        return VyreError(
            f"Vulkan device {ctx.name!r} ran out of {where} memory running "
            f"{program.label} ({sum(sizes.values())} bytes of buffers, the largest "
            f"{largest!r} of {sizes[largest]}); use smaller shapes, free memory "
            f"held by other programs (a framework's cached allocations, e.g. "
            f"torch.cuda.empty_cache()), or pick another device ({DEVICE_ENV})"
        )
    if isinstance(error, vk.VkErrorDeviceLost):
        return VyreError(f"Vulkan device {ctx.name!r} was lost running {program.label}")
    return VyreError(
        f"a Vulkan call failed running {program.label} on {ctx.name!r} "
        f"({_vk_error(error)}); rerun with {VALIDATION_ENV}=1 for details"
    )


class Dispatcher:
    """A program made ready once and dispatched many times on one device.

    It keeps a pipeline per kernel (each built from its own binary of
    `binaries`: SpirvModule.binaries()), their shader modules, the descriptor set
    layout and set, a command pool with a recorded command buffer, a fence,
    a timestamp query pool, and the buffers of outputs and temporaries.
    The buffer of an input is made the first time the input comes as an
    array; an input may instead come as a resident `DeviceBuffer` (upload),
    which the descriptor set then points at. The command buffer is recorded
    again only when what it binds or copies changes. Every call waits for
    its fence, so nothing is in flight between calls.

    Vulkan errors come out as VyreErrors (vulkan_error); a failed call
    leaves the dispatcher usable, `close` destroys everything it made."""

    def __init__(self, ctx: _Context, binaries: tuple[bytes, ...], program: ProgramInfo,
                 staging: bool | None = None):
        self.ctx, self.program = ctx, program
        self.staging = ctx.staging if staging is None else bool(staging)
        self.res = _Resources(ctx)
        self.own: dict[str, DeviceBuffer] = {}  # the buffers the dispatcher made
        self.resident: set[DeviceBuffer] = set()
        self.bound: dict[int, int] = {}  # binding -> serial of the buffer bound
        self.recorded: tuple | None = None  # what the command buffer holds
        self.query_pool, self.query_count = None, 0
        self.pending = False  # a submission may still be running
        self.last_repeat = 0  # runs in the last submission (0: none yet)
        self.closed = False
        ctx.users.add(self)
        try:
            self._create(binaries)
        except BaseException as error:
            try:
                self.close()
            except Exception:
                pass  # the first error says more
            if isinstance(error, ctx.vk.VkError):
                raise vulkan_error(ctx, program, error) from None
            raise

    # setup ------------------------------------------------------------------
    def _create(self, binaries: tuple[bytes, ...]) -> None:
        ctx, program, res = self.ctx, self.program, self.res
        vk, device = ctx.vk, ctx.device
        shaders = {}  # one module for the kernels that share a binary
        for binary in binaries:
            if binary not in shaders:
                shader_info = vk.VkShaderModuleCreateInfo(codeSize=len(binary), pCode=binary)
                shaders[binary] = res.add("shader",
                                          vk.vkCreateShaderModule(device, shader_info, None))
        bindings = [
            vk.VkDescriptorSetLayoutBinding(
                binding=b.binding, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
            for b in program.buffers
        ]
        layout_info = vk.VkDescriptorSetLayoutCreateInfo(bindingCount=len(bindings),
                                                         pBindings=bindings)
        set_layout = res.add("set_layout",
                             vk.vkCreateDescriptorSetLayout(device, layout_info, None))
        set_layouts = [set_layout]
        pipeline_layout_info = vk.VkPipelineLayoutCreateInfo(setLayoutCount=1,
                                                             pSetLayouts=set_layouts)
        self.pipeline_layout = res.add(
            "pipeline_layout", vk.vkCreatePipelineLayout(device, pipeline_layout_info, None))
        self.pipelines = []
        for kernel, binary in zip(program.kernels, binaries, strict=True):
            stage = vk.VkPipelineShaderStageCreateInfo(  # entry point = kernel name
                stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=shaders[binary],
                pName=kernel.name)
            flags = (vk.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR if ctx.statistics
                     else 0)
            pipeline_info = vk.VkComputePipelineCreateInfo(flags=flags, stage=stage,
                                                           layout=self.pipeline_layout)
            pipeline_infos = [pipeline_info]
            created = vk.vkCreateComputePipelines(device, vk.VK_NULL_HANDLE, 1,
                                                  pipeline_infos, None)
            self.pipelines.append(res.add("pipeline", created[0]))  # a cdata array of one

        pool_size = vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                            descriptorCount=len(bindings))
        pool_sizes = [pool_size]
        pool_info = vk.VkDescriptorPoolCreateInfo(maxSets=1, poolSizeCount=1,
                                                  pPoolSizes=pool_sizes)
        pool = res.add("descriptor_pool", vk.vkCreateDescriptorPool(device, pool_info, None))
        alloc_info = vk.VkDescriptorSetAllocateInfo(descriptorPool=pool,
                                                    descriptorSetCount=1,
                                                    pSetLayouts=set_layouts)
        self.descriptor_set = vk.vkAllocateDescriptorSets(device, alloc_info)[0]

        command_pool_info = vk.VkCommandPoolCreateInfo(
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
            queueFamilyIndex=ctx.family)
        command_pool = res.add("command_pool",
                               vk.vkCreateCommandPool(device, command_pool_info, None))
        command_info = vk.VkCommandBufferAllocateInfo(
            commandPool=command_pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
            commandBufferCount=2)
        commands = vk.vkAllocateCommandBuffers(device, command_info)
        self.cmd, self.transfer_cmd = commands[0], commands[1]  # kernels; uploads
        fence_info = vk.VkFenceCreateInfo()
        self.fence = res.add("fence", vk.vkCreateFence(device, fence_info, None))
        # what every submission passes, converted to C once (the binding's
        # conversion of Python arguments costs more than the calls)
        self.fences = vk.ffi.new("VkFence[1]", [self.fence])
        main_cmds, transfer_cmds = [self.cmd], [self.transfer_cmd]
        self._submit_infos = (  # the structs own what the pointers below point at
            vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=main_cmds),
            vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=transfer_cmds))
        self.submits, self.transfer_submits = (vk.ffi.addressof(info)
                                               for info in self._submit_infos)
        self._ensure_queries(1)
        for buffer in program.buffers:
            if not buffer.is_input:
                self.own[buffer.name] = DeviceBuffer(ctx, buffer, staging=self.staging)
        self._bind([self.own[b.name] for b in program.buffers if not b.is_input])
        self.inputs = program.inputs
        self.outputs = tuple((b.name, self.own[b.name]) for b in program.outputs)

    def _stamps(self) -> int:
        """Timestamps a run writes: before its first kernel and after each."""
        return len(self.program.kernels) + 1

    def _ensure_queries(self, repeat: int) -> None:
        """A timestamp query pool for `repeat` runs and the whole command
        buffer (when the queue has timestamps)."""
        ctx = self.ctx
        count = self._stamps() * repeat + 2
        if not ctx.timestamp_bits or self.query_count >= count:
            return
        vk = ctx.vk
        self._destroy_queries()
        query_info = vk.VkQueryPoolCreateInfo(queryType=vk.VK_QUERY_TYPE_TIMESTAMP,
                                              queryCount=count)
        self.query_pool = vk.vkCreateQueryPool(ctx.device, query_info, None)
        self.query_count = count
        self.query_data = vk.ffi.new(f"uint64_t[{count}]")

    def _destroy_queries(self) -> None:
        if self.query_pool is not None:
            self.ctx.vk.vkDestroyQueryPool(self.ctx.device, self.query_pool, None)
            self.query_pool, self.query_count = None, 0

    def _bind(self, buffers: list[DeviceBuffer]) -> None:
        """Point the descriptor set's bindings at `buffers` (the command
        buffer that bound the set is stale after this)."""
        vk = self.ctx.vk
        buffer_infos, writes = [], []
        for b in buffers:
            buffer_info = vk.VkDescriptorBufferInfo(buffer=b.buffer, offset=0, range=b.size)
            buffer_infos.append([buffer_info])
            writes.append(vk.VkWriteDescriptorSet(
                dstSet=self.descriptor_set, dstBinding=b.info.binding, dstArrayElement=0,
                descriptorCount=1, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                pBufferInfo=buffer_infos[-1]))
        self.recorded = None
        vk.vkUpdateDescriptorSets(self.ctx.device, len(writes), writes, 0, None)
        for b in buffers:
            self.bound[b.info.binding] = b.serial

    # running ----------------------------------------------------------------
    def run(self, inputs: Mapping[str, np.ndarray | DeviceBuffer],
            timings: dict | None = None, repeat: int = 1) -> dict[str, np.ndarray]:
        """Dispatch the program on `inputs` (every input buffer by name: a
        flat contiguous array of its dtype, or a resident DeviceBuffer of
        this dispatcher); return new flat arrays of the outputs. `timings`,
        if given, receives 'wait_ms' (host time blocked on the fence),
        'uploaded_bytes' (bytes of inputs copied for this call) and
        'recorded' (whether the command buffer was recorded again); the GPU
        time of the dispatches is read afterwards (gpu_times)."""
        self._check_open()
        vk = self.ctx.vk
        try:
            return self._run(inputs, timings, repeat)
        except vk.VkError as error:
            raise vulkan_error(self.ctx, self.program, error) from None

    def _run(self, inputs, timings, repeat):
        ctx = self.ctx
        changed, copies, uploaded = [], [], 0
        for info in self.inputs:
            value = inputs[info.name]
            if isinstance(value, DeviceBuffer):
                # the same BufferInfo as a rule (a dataclass __eq__ costs more)
                if value not in self.resident or (value.info is not info
                                                  and value.info != info):
                    raise VyreError(f"input {info.name!r}: not a resident buffer of "
                                    f"{self.program.label} for it")
                buffer = value
            else:
                buffer = self.own.get(info.name)
                if buffer is None:
                    buffer = self.own[info.name] = DeviceBuffer(ctx, info,
                                                                staging=self.staging)
                buffer.view[:] = value
                uploaded += buffer.size
                if buffer.staging is not None:
                    copies.append(buffer)
            if self.bound.get(info.binding) != buffer.serial:
                changed.append(buffer)
        if changed:
            self._bind(changed)
        key = (tuple(b.serial for b in copies), repeat)
        recorded = key != self.recorded
        if recorded:
            self._ensure_queries(repeat)
            self.recorded = None  # until the recording is whole
            self._record(copies, repeat)
            self.recorded = key
        waited = self._submit(self.submits)
        self.last_repeat = repeat
        outputs = {name: buffer.view.copy() for name, buffer in self.outputs}
        if timings is not None:
            timings["wait_ms"] = waited * 1e3
            timings["uploaded_bytes"] = uploaded
            timings["recorded"] = recorded
        return outputs

    def _submit(self, submits) -> float:
        """Submit and wait for the fence; the seconds spent waiting. The
        fence calls and the submission (_Context.submit) go to libvulkan
        directly (a few microseconds less each than through the binding's
        argument conversion). A short dispatch
        (a decode step) is polled for, as CUDA's default wait spins: a
        blocking wait sleeps and costs the wake-up after the GPU is done."""
        ctx = self.ctx
        vk, device = ctx.vk, ctx.device
        ctx.check(vk.lib.vkResetFences(device, 1, self.fences))
        ctx.submit(submits, self.fence)
        self.pending = True
        start = time.perf_counter()
        result, status = vk.VK_NOT_READY, vk.lib.vkGetFenceStatus
        while result == vk.VK_NOT_READY and time.perf_counter() - start < FENCE_SPIN_S:
            result = status(device, self.fence)
        if result == vk.VK_NOT_READY:
            result = vk.lib.vkWaitForFences(device, 1, self.fences, vk.VK_TRUE,
                                            FENCE_TIMEOUT_NS)
        waited = time.perf_counter() - start
        if result == vk.VK_TIMEOUT:
            raise VyreError(f"{self.program.label} did not finish within "
                            f"{FENCE_TIMEOUT_NS // 10**9} s on {self.ctx.name}")
        ctx.check(result)
        self.pending = False
        return waited

    def gpu_times(self, timings: dict) -> None:
        """Add the GPU time of the last run's dispatches to `timings`, where
        the queue has timestamps: 'dispatch_ms' (the kernels; with `repeat`
        > 1 the median, and 'dispatch_ms_each' every run's), 'kernel_ms'
        (each kernel's, by name in program order: the time from the end of
        the kernel before it, or the run's start, to its own end; medians
        over the runs) and 'device_ms' (the whole command buffer: input
        copies, zeroed temporaries, dispatches, output copies)."""
        self._check_open()
        repeat = self.last_repeat
        if self.query_pool is None or not repeat:
            return
        vk, data, stamps = self.ctx.vk, self.query_data, self._stamps()
        count = stamps * repeat + 2
        try:
            vk.vkGetQueryPoolResults(self.ctx.device, self.query_pool, 0, count, 8 * count,
                                     data, 8,
                                     vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        except vk.VkError as error:
            raise vulkan_error(self.ctx, self.program, error) from None
        period = self.ctx.limits.timestampPeriod / 1e6
        runs = [[data[stamps * i + k] for k in range(stamps)] for i in range(repeat)]
        each = [(run[-1] - run[0]) * period for run in runs]
        timings["dispatch_ms"] = each[0] if repeat == 1 else statistics.median(each)
        timings["kernel_ms"] = {
            kernel.name: statistics.median((run[k + 1] - run[k]) * period for run in runs)
            for k, kernel in enumerate(self.program.kernels)}
        timings["device_ms"] = (data[count - 1] - data[count - 2]) * period
        if repeat > 1:
            timings["dispatch_ms_each"] = each

    def _barrier(self, cmd, src_access, dst_access, src_stage, dst_stage) -> None:
        vk = self.ctx.vk
        memory_barrier = vk.VkMemoryBarrier(srcAccessMask=src_access,
                                            dstAccessMask=dst_access)
        barriers = [memory_barrier]
        vk.vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 1, barriers, 0, None, 0, None)

    def _copy(self, cmd, src, dst, size: int, dst_offset: int = 0) -> None:
        vk = self.ctx.vk
        region = vk.VkBufferCopy(srcOffset=0, dstOffset=dst_offset, size=size)
        regions = [region]
        vk.vkCmdCopyBuffer(cmd, src, dst, 1, regions)

    def _record(self, copies: list[DeviceBuffer], repeat: int) -> None:
        """Record the command buffer: copies of staged inputs, then `repeat`
        runs of the kernels in order (temporaries zeroed before each, between
        timestamps), then the outputs back to their staging buffers."""
        vk, program, cmd = self.ctx.vk, self.program, self.cmd
        barrier = functools.partial(self._barrier, cmd)
        vk.vkResetCommandBuffer(cmd, 0)
        begin = vk.VkCommandBufferBeginInfo()
        vk.vkBeginCommandBuffer(cmd, begin)
        query_pool, stamps = self.query_pool, self._stamps()
        end = stamps * repeat  # each run's stamps, then the command buffer's start and end
        if query_pool is not None:
            vk.vkCmdResetQueryPool(cmd, query_pool, 0, end + 2)
            vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, query_pool, end)
        shader_rw = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
        compute = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
        transfer = vk.VK_PIPELINE_STAGE_TRANSFER_BIT
        temporaries = [self.own[b.name] for b in program.temporaries]
        if self.staging:  # also makes earlier uploads (Dispatcher.write) visible
            for b in copies:
                self._copy(cmd, b.staging, b.buffer, b.size)
            barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT, shader_rw, transfer, compute)
        else:
            barrier(vk.VK_ACCESS_HOST_WRITE_BIT, shader_rw,
                    vk.VK_PIPELINE_STAGE_HOST_BIT, compute)
        vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.pipelines[0])
        bound = 0
        sets = [self.descriptor_set]
        # one pipeline layout for every kernel: the set stays bound across pipelines
        vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE,
                                   self.pipeline_layout, 0, 1, sets, 0, None)
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
                                       query_pool, stamps * index)
            for position, (kernel, pipeline) in enumerate(zip(program.kernels,
                                                              self.pipelines)):
                if position:  # a kernel sees everything the previous ones wrote
                    barrier(vk.VK_ACCESS_SHADER_WRITE_BIT, shader_rw, compute, compute)
                if bound != position:
                    vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
                    bound = position
                vk.vkCmdDispatch(cmd, *kernel.grid_size)
                if query_pool is not None:  # once the kernel is done
                    vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                                           query_pool, stamps * index + position + 1)
        if self.staging:
            barrier(vk.VK_ACCESS_SHADER_WRITE_BIT, vk.VK_ACCESS_TRANSFER_READ_BIT,
                    compute, transfer)
            for info in program.outputs:
                b = self.own[info.name]
                self._copy(cmd, b.buffer, b.staging, b.size)
            barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT, vk.VK_ACCESS_HOST_READ_BIT,
                    transfer, vk.VK_PIPELINE_STAGE_HOST_BIT)
        else:
            barrier(vk.VK_ACCESS_SHADER_WRITE_BIT, vk.VK_ACCESS_HOST_READ_BIT,
                    compute, vk.VK_PIPELINE_STAGE_HOST_BIT)
        if query_pool is not None:
            vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                                   query_pool, end + 1)
        vk.vkEndCommandBuffer(cmd)

    # resident buffers -------------------------------------------------------
    def upload(self, info: BufferInfo, array: np.ndarray) -> DeviceBuffer:
        """A resident device buffer for input `info`, holding `array` (flat,
        of its dtype), until `free` or `close`."""
        self._check_open()
        vk = self.ctx.vk
        try:
            buffer = DeviceBuffer(self.ctx, info, staging=self.staging, host=False)
        except vk.VkError as error:
            raise vulkan_error(self.ctx, self.program, error) from None
        self.resident.add(buffer)
        try:
            self.write(buffer, array)
        except BaseException:
            self.free(buffer)
            raise
        return buffer

    def write(self, buffer: DeviceBuffer, array: np.ndarray, offset: int = 0) -> None:
        """Write `array` (flat, of the buffer's dtype) into `buffer` from
        element `offset` on."""
        self._check_open()
        self._check_resident(buffer)
        if buffer.view is not None:
            buffer.view[offset:offset + array.size] = array
            return
        itemsize = _host_dtype(buffer.info).itemsize
        self._transfer(buffer, array, offset * itemsize)

    def read(self, buffer: DeviceBuffer) -> np.ndarray:
        """A new flat array with what `buffer` holds."""
        self._check_open()
        self._check_resident(buffer)
        if buffer.view is not None:
            return buffer.view.copy()
        return self._transfer(buffer, None, 0)

    def _check_resident(self, buffer: DeviceBuffer) -> None:
        if buffer not in self.resident:  # destroyed: its memory may be another's now
            raise VyreError(f"buffer {buffer.info.name!r} is not resident on this kernel "
                            f"(it was freed); upload the array again")

    def _transfer(self, buffer: DeviceBuffer, array: np.ndarray | None,
                  offset: int) -> np.ndarray | None:
        """Copy `array` into `buffer` at byte `offset`, or (None) all of
        `buffer` out, through a staging buffer made for it."""
        ctx = self.ctx
        vk, cmd = ctx.vk, self.transfer_cmd
        dtype = _host_dtype(buffer.info)
        size = buffer.size if array is None else array.nbytes
        if size == 0:
            return None if array is not None else np.zeros(0, dtype)
        res = _Resources(ctx)
        try:
            visible = (vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
                       | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)
            usage = vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
            staging, memory = _buffer(ctx, res, -(-size // 4) * 4, usage, visible,
                                      vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
            view = _map(ctx, res, memory, size, buffer.info, dtype)
            if array is not None:
                view[:array.size] = array
            vk.vkResetCommandBuffer(cmd, 0)
            begin = vk.VkCommandBufferBeginInfo(
                flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)
            vk.vkBeginCommandBuffer(cmd, begin)
            every = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
            written = vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT
            if array is not None:  # after every earlier use of the buffer
                self._barrier(cmd, written, vk.VK_ACCESS_TRANSFER_WRITE_BIT, every,
                              vk.VK_PIPELINE_STAGE_TRANSFER_BIT)
                self._copy(cmd, staging, buffer.buffer, size, offset)
            else:
                self._barrier(cmd, written, vk.VK_ACCESS_TRANSFER_READ_BIT, every,
                              vk.VK_PIPELINE_STAGE_TRANSFER_BIT)
                self._copy(cmd, buffer.buffer, staging, size)
                self._barrier(cmd, vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                              vk.VK_ACCESS_HOST_READ_BIT, vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
                              vk.VK_PIPELINE_STAGE_HOST_BIT)
            vk.vkEndCommandBuffer(cmd)
            self._submit(self.transfer_submits)
            result = None if array is not None else view[:buffer.info.count].copy()
            del view
            return result
        except vk.VkError as error:
            raise vulkan_error(ctx, self.program, error) from None
        finally:
            res.destroy()

    def free(self, buffer: DeviceBuffer) -> None:
        """Destroy a resident buffer (the next run binds what it is given)."""
        if buffer not in self.resident:
            return
        self.resident.discard(buffer)
        if self.bound.get(buffer.info.binding) == buffer.serial:
            del self.bound[buffer.info.binding]  # the set points at nothing now
            self.recorded = None
        if not self.closed and self.ctx.device is not None:
            buffer.destroy()

    def statistics(self) -> dict[str, dict[str, int | float | bool]]:
        """What the driver reports it compiled each kernel into (name ->
        {statistic: value}; NVIDIA's include the registers a lane), through
        VK_KHR_pipeline_executable_properties; empty where the device
        lacks it."""
        self._check_open()
        ctx = self.ctx
        if not ctx.statistics:
            return {}
        vk, ffi = ctx.vk, ctx.vk.ffi
        name = b"vkGetPipelineExecutableStatisticsKHR"
        query = ffi.cast("PFN_" + name.decode(), vk.lib.vkGetDeviceProcAddr(ctx.device, name))
        formats = {
            vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: lambda v: bool(v.b32),
            vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: lambda v: int(v.i64),
            vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: lambda v: int(v.u64),
            vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: lambda v: float(v.f64),
        }
        found = {}
        for kernel, pipeline in zip(self.program.kernels, self.pipelines, strict=True):
            # a compute pipeline compiles into one executable
            info = ffi.new("VkPipelineExecutableInfoKHR*", {
                "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
                "pipeline": pipeline, "executableIndex": 0})
            count = ffi.new("uint32_t*")
            ctx.check(query(ctx.device, info, count, ffi.NULL))
            stats = ffi.new("VkPipelineExecutableStatisticKHR[]", count[0])
            for stat in stats:
                stat.sType = vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR
            ctx.check(query(ctx.device, info, count, stats))
            values = {ffi.string(stat.name).decode(): formats[stat.format](stat.value)
                      for stat in stats[0:count[0]]}
            found[kernel.name] = values
        return found

    # teardown ---------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise VyreError(f"{self.program.label} was closed on {self.ctx.name} "
                            f"(kernel.close() or vyre_xdsl.vulkan.close()); compile it again")

    def close(self) -> None:
        """Destroy every object of the dispatcher and its resident buffers.
        Idempotent; after vulkan.close() destroyed the device, a no-op."""
        if self.closed:
            return
        self.closed = True
        ctx = self.ctx
        ctx.users.discard(self)
        if ctx.device is None:
            return
        vk = ctx.vk
        if self.pending:  # a wait that timed out or failed
            try:
                with ctx.queue_lock:
                    vk.vkQueueWaitIdle(ctx.queue)
            except Exception:
                pass
        errors = []
        for buffer in [*self.resident, *self.own.values()]:
            try:
                buffer.destroy()
            except VyreError as error:
                errors.append(str(error))
        self.resident.clear()
        self.own.clear()
        try:
            self._destroy_queries()
        except Exception as error:
            errors.append(f"query_pool: {error}")
        try:
            self.res.destroy()
        except VyreError as error:
            errors.append(str(error))
        if errors:
            raise VyreError("; ".join(errors))

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass  # garbage collection has no one to tell
