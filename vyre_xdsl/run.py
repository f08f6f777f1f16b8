"""`vx.run`: execute a vyre or lowered module on numpy arrays."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from vyre_xdsl.dtypes import check_array
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import KernelInfo, ProgramInfo, as_program

if TYPE_CHECKING:
    from vyre_xdsl.compiler import Compiled

BACKENDS = ("interpreter", "vulkan")


def ensure_lowered(
    module: ModuleOp, device: str | None = None, optimize: str = "default",
    f32_parts: int = 0,
) -> ModuleOp:
    """`module` itself if it is already lowered, else a copy lowered for
    `device` at `optimize` with `f32_parts` (vx.lower_to_gpu)."""
    from vyre_xdsl.compiler import is_vyre_module, lower_to_gpu

    if not isinstance(module, ModuleOp):
        raise VyreError(
            f"expected an xdsl ModuleOp (from vx.flash_attention_2, vx.mla_decode "
            f"or vx.parse_module), got {type(module).__name__}"
        )
    if is_vyre_module(module):
        return lower_to_gpu(module, optimize=optimize, device=device, f32_parts=f32_parts)
    if device is not None:
        raise VyreError(
            f"device={device!r} applies to vyre IR; this module is already lowered "
            f"(lower the vyre module with vx.lower_to_gpu(m, device=...))"
        )
    if f32_parts:
        raise VyreError(
            f"f32_parts={f32_parts} applies to vyre IR; this module is already lowered "
            f"(lower the vyre module with vx.lower_to_gpu(m, f32_parts=...))"
        )
    if optimize != "default":
        raise VyreError(
            f"optimize={optimize!r} applies to vyre IR; this module is already "
            f"lowered (lower the vyre module with vx.lower_to_gpu(m, optimize=...))"
        )
    return module


def prepare_buffers(
    info: KernelInfo | ProgramInfo, inputs: Mapping[str, object]
) -> dict[str, np.ndarray]:
    """Check `inputs` against the program's input buffers; return flat
    arrays of each buffer's dtype (float32, float16 or ml_dtypes.bfloat16)
    for every buffer (inputs copied, outputs and temporaries zeroed), keyed
    by buffer name."""
    arrays = check_inputs(info, inputs)
    return {
        b.name: arrays[b.name] if b.is_input else np.zeros(b.count, dtype=b.numpy_dtype)
        for b in as_program(info).buffers
    }


def check_inputs(
    info: KernelInfo | ProgramInfo,
    inputs: Mapping[str, object],
    resident: Collection[str] = (),
) -> dict[str, np.ndarray]:
    """Check `inputs` against the program's input buffers; return a flat
    copy of each, keyed by buffer name. Inputs named in `resident`
    (vx.compile's DeviceArrays, checked by the kernel) count as given and
    are left out."""
    program = as_program(info)
    if not isinstance(inputs, Mapping):
        raise VyreError(
            f"inputs must be a dict of buffer name -> numpy array, got "
            f"{type(inputs).__name__}"
        )
    # captured tables (data recorded in the IR) are passed unless given
    inputs = {
        **{b.name: b.captured_array() for b in program.inputs if b.captured is not None},
        **inputs,
    }
    expected = [b.name for b in program.inputs]
    listed = ", ".join(expected) or "none"
    unknown = [name for name in inputs if name not in expected]
    if unknown:
        raise VyreError(
            f"unknown input {unknown[0]!r} for {program.label}"
            f"{_not_an_input(program, unknown[0])}; its inputs are {listed}"
        )
    missing = [name for name in expected if name not in inputs]
    if missing:
        raise VyreError(
            f"missing input {missing[0]!r} for {program.label}; pass every one "
            f"of {listed}"
        )
    arrays: dict[str, np.ndarray] = {}
    for buffer in program.inputs:
        if buffer.name in resident:
            continue
        value = inputs[buffer.name]
        check_array(
            value, buffer.name, f"input {buffer.name!r}", buffer.dtype,
            f"the kernel reads {buffer.numpy_dtype} ({buffer.dtype} buffer)",
        )
        if value.size != buffer.count:
            raise VyreError(
                f"input {buffer.name!r} has {value.size} elements (shape "
                f"{value.shape}), the kernel expects {buffer.count} (shape "
                f"{buffer.shape}); any shape with that many elements is accepted"
            )
        arrays[buffer.name] = np.ascontiguousarray(value).reshape(-1).copy()
    return arrays


def _not_an_input(program: ProgramInfo, name: object) -> str:
    """Why a buffer the program has is not passed in ('' for other names)."""
    if not isinstance(name, str):
        return ""
    try:
        buffer = program.buffer(name)
    except KeyError:
        return ""
    if buffer.is_temporary:
        return (" (a temporary buffer: the run allocates and zeroes it, and its "
                "kernels pass values through it)")
    return " (an output: the run returns it)"


def run(
    module: ModuleOp | Compiled,
    inputs: Mapping[str, object],
    backend: str = "interpreter",
    device: str | None = None,
    *,
    optimize: str = "default",
    f32_parts: int = 0,
) -> dict[str, np.ndarray]:
    """Run the kernels of `module`, in order, on `inputs` (buffer name ->
    array of the right size, any shape, for every `read` buffer: float32,
    or np.float16 / ml_dtypes.bfloat16 for an f16 / bf16 buffer); return
    each output (`write`) buffer in its logical shape and dtype. `temp`
    buffers are allocated zeroed and not returned.

    `backend` is "interpreter" (the xDSL interpreter, f32-exact) or "vulkan"
    (SPIR-V on the best Vulkan device; `VYRE_VULKAN_DEVICE` picks one).
    A vyre module is lowered for `device` (vx.lower_to_gpu): by default the
    Vulkan device that runs it, and the generic profile for the
    interpreter, at `optimize` with `f32_parts` (as vx.compile: "exact"
    keeps the oracle's order of sums); a vyre_xdsl.compiler.Compiled is run
    as it was compiled."""
    from vyre_xdsl.kernel import compile

    with compile(module, backend=backend, optimize=optimize, device=device,
                 f32_parts=f32_parts) as kernel:
        return kernel(inputs)
