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

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import BufferInfo, ProgramInfo
from vyre_xdsl.vulkan.device import FENCE_TIMEOUT_NS, _Context

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


def _buffer_bytes(buffer: BufferInfo, arrays: Mapping[str, np.ndarray]) -> int:
    """A buffer's size on the device (a temporary needs no host array)."""
    array = arrays.get(buffer.name)
    return 4 * buffer.count if array is None else array.nbytes


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
