"""Run a SPIR-V compute kernel, or a program of several, on a Vulkan device
through the PyPI `vulkan` binding (cffi over the system libvulkan.so.1).

    device.py     the cached _Context (instance, device, queue), limits, report
    limits.py     the device limits checked before a run
    dispatch.py   Dispatcher: buffers, pipelines, descriptors, commands, kept
                  across calls (vx.compile), resident buffers

    load(spirv, info)              check the device's limits, make a Dispatcher
    execute(spirv, info, arrays)   load, run once, close (outputs in place)

`spirv` is the emitter's SpirvModule (vyre_xdsl.spirv.emit_spirv_module):
what each entry point needs (capabilities, workgroup memory and size) comes
with the binary, which nothing here parses.

One `_Context` is created on first use and cached per validation setting;
`execute` destroys every object it made (buffers, memory, shader module,
layouts, pipelines, pools, fence, query pool) before it returns, also when
it raises; a Dispatcher destroys them on close() (vulkan.close() closes
those still open).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import KernelInfo, ProgramInfo, as_program
from vyre_xdsl.mma_layout import AccumulatorLayout
from vyre_xdsl.spirv.module import SpirvModule
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
from vyre_xdsl.vulkan.dispatch import DeviceBuffer, Dispatcher  # noqa: F401
from vyre_xdsl.vulkan.limits import (  # noqa: F401
    LLVMPIPE_LOOP_LIMIT,
    _check_arrays,
    _check_limits,
)


def load(spirv: SpirvModule, info: KernelInfo | ProgramInfo, *,
         validation: bool | None = None, staging: bool | None = None,
         arrays: Mapping[str, np.ndarray] | None = None) -> Dispatcher:
    """A Dispatcher of the SPIR-V module `spirv` (emit_spirv_module) for
    `info` on the selected device, after checking the device's limits
    (buffer sizes from `arrays` where given, else from `info`); see execute
    for `validation` and `staging`. The caller closes it."""
    program = as_program(info)
    if not isinstance(spirv, SpirvModule):
        raise VyreError(
            f"the Vulkan runtime takes the SpirvModule of "
            f"vyre_xdsl.spirv.emit_spirv_module (the binary with what its entry "
            f"points need), got {type(spirv).__name__}"
        )
    ctx = _context(_validation_requested(validation))
    _check_limits(ctx, spirv, program, {} if arrays is None else arrays)
    _check_accumulator(ctx, program)
    ctx.messages.clear()
    dispatcher = Dispatcher(ctx, spirv.binaries(), program, staging)
    try:
        _check(ctx.messages, f"the setup of {program.label} on {ctx.name}")
    except VyreError:
        dispatcher.close()
        raise
    return dispatcher


def execute(spirv: SpirvModule, info: KernelInfo | ProgramInfo,
            arrays: dict[str, np.ndarray], *,
            validation: bool | None = None, staging: bool | None = None,
            timings: dict | None = None, repeat: int = 1) -> None:
    """Dispatch the SPIR-V kernel `spirv` (emit_spirv_module;
    `info.grid_size` workgroups) on the selected Vulkan device; for a
    program, dispatch each kernel in order (entry point = kernel name), each
    seeing what the earlier ones wrote. `arrays` holds a flat array of the buffer's dtype for every
    input and output buffer (by name); outputs are overwritten in place.
    Temporary buffers live on the device only, zero-filled before the first
    kernel and never read back (an array given for one is left as it is).
    To dispatch many times, keep a Dispatcher (load) or use vx.compile.

    `validation` (default: env VYRE_VULKAN_VALIDATION) runs under the Khronos
    validation layer and raises VyreError on any message. `staging` forces
    (True) or avoids (False) device-local buffers with staging copies; by
    default they are used where the device has separate device memory.
    `timings`, if given, receives 'dispatch_ms' (GPU timestamps around the
    whole sequence of dispatches, when the queue supports them), 'kernel_ms'
    (each kernel's share of it, by name) and
    'total_ms' (host wall time of the run), and what Dispatcher.run adds.
    `repeat` > 1 runs the sequence that many times back to back (each run
    overwrites the outputs and starts from zeroed temporaries);
    'dispatch_ms' is then the median and 'dispatch_ms_each' the list, for
    benchmarks."""
    program = as_program(info)
    if not isinstance(repeat, int) or repeat < 1:
        raise VyreError(f"repeat must be a positive integer, got {repeat!r}")
    start = time.perf_counter()
    _check_arrays(program, arrays)
    dispatcher = load(spirv, program, validation=validation, staging=staging,
                      arrays=arrays)
    ctx = dispatcher.ctx
    try:
        outputs = dispatcher.run({b.name: arrays[b.name] for b in program.inputs},
                                 timings, repeat)
        if timings is not None:
            dispatcher.gpu_times(timings)
    finally:
        dispatcher.close()
    for name, values in outputs.items():
        arrays[name][:] = values
    _check(ctx.messages, f"the run of {program.label} on {ctx.name}")
    if timings is not None:
        timings["total_ms"] = (time.perf_counter() - start) * 1e3


def _check_accumulator(ctx: _Context, program: ProgramInfo) -> None:
    """Refuse kernels compiled for another accumulator layout than the
    device's: they would compute on the wrong elements."""
    for kernel in program.kernels:
        if kernel.accumulator is not None and not kernel.accumulator.fits(
                device_accumulator(ctx)):
            raise VyreError(
                f"kernel @{kernel.name} computes on the elements of subgroup "
                f"matrices laid out as its vyre.launch's `accumulator` says, but "
                f"Vulkan device {ctx.name!r} lays them out differently (or has no "
                f"cooperative matrices); lower it for this device "
                f"(vx.lower_to_gpu(..., device='vulkan'), "
                f"vyre-tensor-cores{{device=vulkan}}) or run it with "
                f"backend='interpreter'")


def device_accumulator(ctx: _Context) -> AccumulatorLayout | None:
    """Which lane holds which element of the device's 16x16 accumulator
    matrices (vyre_xdsl.mma_layout), read once by running
    tools/mma_kernels.py's layout kernel for f32 and f16 accumulators and
    f16 (and bf16) A operands;
    None without what vyre-tensor-cores' kernels need (cooperative
    matrices, f16 arithmetic, the Vulkan memory model, 16-bit workgroup
    words), or where the two differ or kernels could not compute on them."""
    if not ctx.accumulator_read:
        usable = (ctx.cooperative_matrix and ctx.float16 and ctx.memory_model
                  and ctx.int16)
        ctx.reading_accumulator = True
        try:
            ctx.accumulator = _read_accumulator(ctx) if usable else None
        finally:
            ctx.reading_accumulator = False
        ctx.accumulator_read = True
    return ctx.accumulator


def bfloat16_matrices(ctx: _Context) -> bool:
    """Whether the kernels may use the device's bf16 matrices: it has them,
    and its layouts are read and usable (device_accumulator); while the
    layout kernels run (the bf16 one asks too), whether it has them."""
    if ctx.reading_accumulator:
        return ctx.bfloat16_matrices
    return device_accumulator(ctx) is not None and ctx.bfloat16_matrices


def _read_accumulator(ctx: _Context) -> AccumulatorLayout | None:
    from xdsl.parser import Parser

    from vyre_xdsl.compiler import make_context
    from vyre_xdsl.dtypes import numpy_dtype
    from vyre_xdsl.kernel_info import program_info
    from vyre_xdsl.spirv import emit_spirv_module
    from vyre_xdsl.tools.mma_kernels import SUBGROUP_LANES, accumulator_layout_kernel

    if ctx.subgroup.size != SUBGROUP_LANES:
        return None

    def table(dtype: str, operand: str) -> list[int] | None:
        """Which element of the matrix each lane holds, or None where the
        driver refuses the kernel."""
        module = Parser(make_context(),
                        accumulator_layout_kernel(dtype, operand=operand)).parse_module()
        info = program_info(module)
        count = info.buffer("c").count
        host = numpy_dtype(dtype)
        arrays = {"c": np.arange(count).astype(host), "out": np.zeros(count, host)}
        try:
            execute(emit_spirv_module(module, info), info, arrays)
        except VyreError:
            return None
        return arrays["out"].astype(np.int64).tolist()

    tables = [table(dtype, operand)
              for dtype, operand in (("f32", "COp"), ("f16", "COp"), ("f16", "AOp"))]
    if None in tables:  # a driver that refuses a kernel has no usable layout
        ctx.bfloat16_matrices = False
        return None
    # bf16 A operands must hold a lane's elements as f16's do (the kernels
    # record one order): else the device's bf16 matrices go unused
    ctx.bfloat16_matrices = ctx.bfloat16_matrices and table("bf16", "AOp") == tables[2]
    layout = AccumulatorLayout.from_positions(tables[0], SUBGROUP_LANES)
    same = layout == AccumulatorLayout.from_positions(tables[1], SUBGROUP_LANES)
    return layout.with_operand(tables[2]) if same and layout.problem() is None else None
