"""The host-side description of a lowered kernel, or of a program of several.

`convert-vyre-to-gpu` records what a runtime needs on the `gpu.func` as one
typed `vyre.launch` attribute (dialects/launch.py, docs/lowered-ir.md),
which verifies itself; this module reads it back, checked against the body
(argument types, grid, stores, lane slices), so every executor agrees on
bindings, workgroup size and grid.
A module may hold several kernels: `program_info` reads them all, in module
order, as one `ProgramInfo` over one set of buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from xdsl.dialects import gpu
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp

from vyre_xdsl.dialects.constants import I32_MIN, U32_MAX, WORKGROUP_MEMORY_SPACE
from vyre_xdsl.dialects.gpu_shuffle import ShuffleMode, ShuffleOp
from vyre_xdsl.dialects.launch import LAUNCH_ATTR, LaunchAttr, launch_of
from vyre_xdsl.dtypes import itemsize, numpy_dtype
from vyre_xdsl.errors import VyreError, op_error
from vyre_xdsl.loop_bounds import constant_index, loop_iterations
from vyre_xdsl.mma_layout import AccumulatorLayout



def only_loaded(buffer) -> bool:
    """Whether a kernel does nothing with its buffer argument `buffer` but
    load from it (memref.load, vector.load): a `temp` buffer it only reads,
    which vector loads may then read through a view of their own."""
    from xdsl.dialects import memref, vector

    return all(isinstance(use.operation, memref.LoadOp | vector.LoadOp) for use in buffer.uses)


def buffer_arguments(func: gpu.FuncOp, element_types) -> list[tuple]:
    """(argument, its #vyre.buffer) of each buffer argument of a lowered
    vyre kernel whose elements are of `element_types`; none without a
    launch attribute."""
    launch = launch_of(func)
    if launch is None:
        return []
    return [(arg, described)
            for arg, described in zip(func.body.block.args, launch.buffers, strict=False)
            if isinstance(arg.type, MemRefType) and arg.type.element_type in element_types]


@dataclass(frozen=True)
class BufferInfo:
    name: str
    binding: int
    access: str  # "read", "write" or "temp" (ACCESS_MODES)
    count: int  # elements
    shape: tuple[int, ...]  # logical shape, row-major; prod(shape) == count
    # element type, from the gpu.func argument's memref: "f32", "f16", "bf16"
    dtype: str = "f32"
    # a captured table's data (`data` of its #vyre.buffer): vx.run
    # passes it when the caller does not
    captured: tuple | None = None

    def captured_array(self) -> np.ndarray:
        """The captured data as a host array of the buffer's dtype and shape."""
        assert self.captured is not None
        return np.asarray(self.captured, dtype=self.numpy_dtype).reshape(self.shape)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The dtype of its host arrays (np.float16, ml_dtypes.bfloat16, ...)."""
        return numpy_dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        """Its size on the device: 4 bytes an element for f32, 2 for halves."""
        return self.count * itemsize(self.dtype)

    @property
    def is_input(self) -> bool:
        return self.access == "read"

    @property
    def is_output(self) -> bool:
        return self.access == "write"

    @property
    def is_temporary(self) -> bool:
        return self.access == "temp"


class _BufferSets:
    """The buffers of a kernel or a program by role; `buffers` is theirs."""

    buffers: tuple[BufferInfo, ...]

    def buffer(self, name: str) -> BufferInfo:
        for buffer in self.buffers:
            if buffer.name == name:
                return buffer
        raise KeyError(name)

    @cached_property  # a kernel's call checks them each time (vx.compile)
    def inputs(self) -> tuple[BufferInfo, ...]:
        return tuple(b for b in self.buffers if b.is_input)

    @cached_property
    def outputs(self) -> tuple[BufferInfo, ...]:
        return tuple(b for b in self.buffers if b.is_output)

    @cached_property
    def temporaries(self) -> tuple[BufferInfo, ...]:
        return tuple(b for b in self.buffers if b.is_temporary)


@dataclass(frozen=True)
class KernelInfo(_BufferSets):
    name: str
    buffers: tuple[BufferInfo, ...]  # in gpu.func argument order
    item_count: int
    workgroup_size: tuple[int, int, int]
    grid_size: tuple[int, int, int]
    func: gpu.FuncOp
    # Upper bound on the loop iterations of one invocation (None: unknown).
    loop_iterations: int | None = None
    # The tile size of the skeleton it was expanded from (None: it had none,
    # e.g. the merging kernel of a split): what the oracle must use.
    tile_size: int | None = None
    # ... and its keys (its static kv_len: what run-time lengths are
    # clamped to), None where it had none
    keys: int | None = None
    # The accumulator layout its subgroup matrices' elements are computed
    # on (None: it computes on none); the device must have it.
    accumulator: AccumulatorLayout | None = None
    # The subgroup size its xor shuffles need: lanes exchange values with
    # lanes up to this far apart (1: it shuffles nothing).
    shuffle_lanes: int = 1


@dataclass(frozen=True)
class ProgramInfo(_BufferSets):
    """The kernels of a lowered module, run in module order over one set of
    buffers: a name is the same buffer (binding, access, shape) in every
    kernel that declares it, and each dispatch sees what the earlier ones
    wrote. A single kernel is a program of one."""

    kernels: tuple[KernelInfo, ...]  # in module order

    @property
    def name(self) -> str:
        """The kernel's name; for several, their names joined by '+'."""
        return "+".join(kernel.name for kernel in self.kernels)

    @property
    def label(self) -> str:
        """`kernel @a` or `program @a, @b`, for messages."""
        names = ", ".join(f"@{kernel.name}" for kernel in self.kernels)
        return f"kernel {names}" if len(self.kernels) == 1 else f"program {names}"

    @cached_property
    def buffers(self) -> tuple[BufferInfo, ...]:
        """Every buffer of the program once, by binding."""
        by_name: dict[str, BufferInfo] = {}
        for kernel in self.kernels:
            for buffer in kernel.buffers:
                by_name.setdefault(buffer.name, buffer)
        return tuple(sorted(by_name.values(), key=lambda b: b.binding))

    @property
    def loop_iterations(self) -> int | None:
        """The largest bound of `KernelInfo.loop_iterations` over the
        kernels (a limit such as lavapipe's applies to each dispatch);
        None if any kernel's is unknown."""
        bounds = [kernel.loop_iterations for kernel in self.kernels]
        return None if None in bounds else max(bounds)


def as_program(info: KernelInfo | ProgramInfo) -> ProgramInfo:
    """`info` as a program, so executors take a kernel or a program alike."""
    if isinstance(info, ProgramInfo):
        return info
    if isinstance(info, KernelInfo):
        return ProgramInfo((info,))
    raise VyreError(
        f"expected a KernelInfo or ProgramInfo (from kernel_info or "
        f"program_info), got {type(info).__name__}"
    )


def check_device_ir(func: gpu.FuncOp) -> None:
    """Structural facts every executor relies on but xDSL's verifiers do not
    check (found by fuzzing): integer constants fit the device's 32 bits,
    every scf.for / scf.if region yields one value per result, and no loop
    has a constant step of 0."""
    from xdsl.dialects import arith, scf
    from xdsl.dialects.builtin import IndexType, IntegerType

    from xdsl.dialects import memref

    from vyre_xdsl.dialects.structure import check_dominance, check_no_definitions

    _structural(func, lambda: check_no_definitions(func, f"kernel @{func.sym_name.data}"))
    _structural(func, lambda: check_dominance(func))
    from xdsl.dialects import vector

    for op in func.walk():
        if isinstance(op, vector.ExtractOp):
            shape = op.vector.type.get_shape()
            for axis, position in enumerate(op.static_position.get_values()):
                if axis < len(shape) and not 0 <= position < shape[axis]:
                    raise op_error(
                        op,
                        f"kernel @{func.sym_name.data}: 'vector.extract' of lane "
                        f"{position} of a vector of {shape[axis]}; use a position in "
                        f"[0, {shape[axis] - 1}]",
                    )
        if isinstance(op, memref.AllocOp | memref.AllocaOp):
            count = 1
            for extent in op.memref.type.get_shape():
                count *= max(extent, 0)
            if count > U32_MAX:
                raise op_error(
                    op,
                    f"kernel @{func.sym_name.data}: '{op.name}' of {count} elements; "
                    f"an array holds at most {U32_MAX} (its index is a 32-bit "
                    f"unsigned integer on the device): shrink it",
                )
        if isinstance(op, arith.ConstantOp):
            value = op.value
            if isinstance(value, IntegerAttr) and isinstance(
                value.type, IndexType | IntegerType
            ):
                width = 32 if isinstance(value.type, IndexType) else value.type.width.data
                v = value.value.data
                if width > 1 and not I32_MIN <= v <= U32_MAX:
                    raise op_error(
                        op,
                        f"kernel @{func.sym_name.data}: constant {v} : {value.type} "
                        f"does not fit in 32 bits (index is a 32-bit unsigned "
                        f"integer on the device); use a value in "
                        f"[{I32_MIN}, {U32_MAX}]",
                    )
        elif isinstance(op, scf.ForOp | scf.IfOp):
            if isinstance(op, scf.ForOp) and constant_index(op.step) == 0:
                raise op_error(
                    op,
                    f"kernel @{func.sym_name.data}: an scf.for with a step of 0 never "
                    f"ends (a GPU would hang); give it a positive step",
                )
            for region in op.regions:
                for block in region.blocks:
                    last = block.last_op
                    if not isinstance(last, scf.YieldOp):
                        continue  # an empty else region, or caught by the verifier
                    got = [v.type for v in last.operands]
                    want = [r.type for r in op.results]
                    if got != want:
                        raise op_error(
                            op,
                            f"kernel @{func.sym_name.data}: a region of '{op.name}' "
                            f"yields ({', '.join(map(str, got))}) but the op returns "
                            f"({', '.join(map(str, want))}); end the region with "
                            f"scf.yield of one value per result",
                        )


def workgroup_memory_bytes(func: gpu.FuncOp) -> int:
    """The workgroup memory that the kernel `func` allocates."""
    from xdsl.dialects import memref

    total = 0
    for alloc in func.walk():
        if not isinstance(alloc, memref.AllocOp):
            continue
        memref_type = alloc.memref.type
        space = memref_type.memory_space
        if isinstance(space, IntegerAttr) and space.value.data == WORKGROUP_MEMORY_SPACE:
            count = 1
            for extent in memref_type.get_shape():
                count *= extent
            total += count * memref_type.element_type.bitwidth // 8
    return total


def lowered_kernels(module: ModuleOp) -> list[gpu.FuncOp]:
    """The lowered vyre kernels of `module` (gpu.funcs carrying
    'vyre.launch'), in module order."""
    return [
        op
        for op in module.walk()
        if isinstance(op, gpu.FuncOp) and LAUNCH_ATTR in op.attributes
    ]


def _no_kernel_error(expected: str) -> VyreError:
    return VyreError(
        f"expected {expected} lowered vyre kernel (a gpu.func carrying "
        f"'{LAUNCH_ATTR}'), found none; lower a vyre.kernel with the "
        f"vyre-to-gpu pipeline first"
    )


def find_kernel(module: ModuleOp) -> gpu.FuncOp:
    """The single `gpu.func` kernel of a lowered module."""
    kernels = lowered_kernels(module)
    if not kernels:
        raise _no_kernel_error("exactly one")
    if len(kernels) > 1:
        names = ", ".join(f"@{k.sym_name.data}" for k in kernels)
        raise op_error(
            kernels[1],
            f"the module holds {len(kernels)} lowered kernels ({names}), a "
            f"program that runs them in order; read it with program_info(module) "
            f"(vyre_xdsl.kernel_info) instead of kernel_info",
        )
    return kernels[0]


def program_info(module: ModuleOp) -> ProgramInfo:
    """Read every lowered kernel of `module`, in module order, and check that
    they agree on their buffers."""
    funcs = lowered_kernels(module)
    if not funcs:
        raise _no_kernel_error("at least one")
    kernels = tuple(read_kernel(func) for func in funcs)
    _check_unique_names(kernels)
    _check_shared_buffers(kernels)
    return ProgramInfo(kernels)


def _check_unique_names(kernels: tuple[KernelInfo, ...]) -> None:
    seen: set[str] = set()
    for kernel in kernels:
        if kernel.name in seen:
            raise op_error(
                kernel.func,
                f"two kernels of the module are named @{kernel.name}; a program "
                f"launches its kernels by name, so give each its own",
            )
        seen.add(kernel.name)


def _check_shared_buffers(kernels: tuple[KernelInfo, ...]) -> None:
    """A name means one buffer in every kernel; a binding belongs to one name."""
    from vyre_xdsl.dialects.structure import check_shared_buffers

    def shared(kernel: KernelInfo):
        return [(b.name, b.binding, b.access, b.shape, b.dtype) for b in kernel.buffers]

    for index, kernel in enumerate(kernels):
        earlier = [(k.name, shared(k)) for k in kernels[:index]]
        _structural(kernel.func, lambda: check_shared_buffers(
            earlier, kernel.name, shared(kernel)), prefix=False)


def kernel_info(module: ModuleOp) -> KernelInfo:
    """Read the host-side description of the lowered kernel in `module`
    (a module of several kernels is read with `program_info`)."""
    return read_kernel(find_kernel(module))


def read_kernel(func: gpu.FuncOp) -> KernelInfo:
    """The host-side description of one lowered kernel: its `vyre.launch`
    (verified when it was built or parsed) checked against the body."""
    kernel = f"@{func.sym_name.data}"
    launch = func.attributes.get(LAUNCH_ATTR)
    if not isinstance(launch, LaunchAttr):
        raise op_error(func,
            f"'{LAUNCH_ATTR}' of {kernel} must be a #vyre.launch<...> "
            f"(docs/lowered-ir.md), got {launch}"
        )
    arg_types = func.function_type.inputs.data
    if len(launch.buffers) != len(arg_types):
        raise op_error(func,
            f"'{LAUNCH_ATTR}' describes {len(launch.buffers)} buffers but "
            f"{kernel} takes {len(arg_types)} arguments"
        )
    buffers: list[BufferInfo] = []
    for index, (buffer, arg_type) in enumerate(zip(launch.buffers, arg_types, strict=True)):
        if not isinstance(arg_type, MemRefType) or any(
            d < 0 for d in arg_type.get_shape()
        ):
            raise op_error(func,
                f"argument {index} of {kernel} must be a static memref, got {arg_type}"
            )
        where = f"buffer {buffer.buffer_name.data!r} of {kernel}"
        if arg_type.element_type != buffer.dtype_attr:
            raise op_error(func,
                f"argument {index} of {kernel} is {arg_type} but {where} holds "
                f"{buffer.dtype}; make the memref's element type {buffer.dtype}"
            )
        count = 1
        for dim in arg_type.get_shape():
            count *= dim
        if buffer.count != count:
            raise op_error(func,
                f"{where}: shape {list(buffer.shape)} does not hold the {count} elements of "
                f"its memref; make the product of the shape equal {count}"
            )
        buffers.append(
            BufferInfo(buffer.buffer_name.data, buffer.binding, buffer.access, count,
                       buffer.shape, buffer.dtype, buffer.data)
        )
    check_device_ir(func)
    check_kernel_layout(func, buffers, launch.item_count, launch.workgroup_size,
                        launch.grid_size)
    skeleton = launch.skeleton
    return KernelInfo(
        name=func.sym_name.data,
        buffers=tuple(buffers),
        item_count=launch.item_count,
        workgroup_size=launch.workgroup_size,
        grid_size=launch.grid_size,
        func=func,
        loop_iterations=loop_iterations(func.body),
        tile_size=None if skeleton is None else skeleton.tile_size.data,
        keys=None if skeleton is None else skeleton.seq_len.data,
        accumulator=None if launch.accumulator is None else launch.accumulator.layout,
        shuffle_lanes=shuffle_lanes(func),
    )


def shuffle_lanes(func: gpu.FuncOp) -> int:
    """The smallest subgroup within which every xor shuffle of `func` stays:
    a shuffle with mask o pairs lanes that differ below o's highest bit, so
    a subgroup of fewer lanes would pair lanes that do not exist (SPIR-V
    leaves the result undefined).  Masks are constants where vyre's passes
    build them; a mask read at run time counts as the widest i32."""
    lanes = 1
    for op in func.walk():
        if isinstance(op, ShuffleOp) and op.mode.data == ShuffleMode.XOR:
            mask = constant_index(op.offset)
            lanes = max(lanes, 1 << 32 if mask is None else 1 << mask.bit_length())
    return lanes


def check_kernel_layout(
    func: gpu.FuncOp, buffers: list[BufferInfo], item_count: int,
    workgroup_size: tuple[int, int, int], grid_size: tuple[int, int, int],
) -> None:
    """docs/lowered-ir.md's rules that tie the host side to the body: the
    grid covers every item, `read` buffers are never stored to, and the
    recorded workgroup size fits the workgroup arrays the lanes index."""
    from vyre_xdsl.dialects.structure import check_no_stores_to

    kernel = f"kernel @{func.sym_name.data}"
    lanes = workgroup_size[0] * grid_size[0]
    if lanes < item_count:
        raise op_error(
            func,
            f"{kernel}: the grid runs {grid_size[0]} workgroups of {workgroup_size[0]} "
            f"lanes = {lanes} invocations along x, fewer than its {item_count} items "
            f"('items' of '{LAUNCH_ATTR}'); set its 'grid' to "
            f"[{-(-item_count // workgroup_size[0])}, 1, 1]",
        )
    args = func.body.blocks[0].args
    read_only = {arg: b.name for arg, b in zip(args, buffers, strict=True) if b.is_input}
    _structural(func, lambda: check_no_stores_to(func, read_only.get))
    _check_lane_slices(func, workgroup_size[0], item_count)


def _structural(func: gpu.FuncOp, check, prefix: bool = True) -> None:
    """Run a dialects.structure check; its error as a located VyreError
    (with `prefix`, naming the kernel and the op)."""
    from xdsl.utils.exceptions import VerifyException

    try:
        check()
    except VerifyException as error:
        op = getattr(error, "op", func)
        message = f"kernel @{func.sym_name.data}: '{op.name}' {error}" if prefix else str(error)
        raise op_error(op, message) from None


def _check_lane_slices(func: gpu.FuncOp, lanes: int, item_count: int) -> None:
    """A workgroup array indexed `thread_id * c + ...` must hold the slice of
    the last lane: a body written for fewer lanes than the recorded
    workgroup size would make the extra lanes write past it (lavapipe
    crashes or corrupts other arrays).  Only accesses every lane makes are
    judged (not under a branch on the lane; under the item guard only when
    the first workgroup is full)."""
    from xdsl.dialects import memref

    from vyre_xdsl.index_forms import linear_index

    for op in func.walk():
        if not isinstance(op, memref.LoadOp | memref.StoreOp) or len(op.indices) != 1:
            continue
        alloc = op.memref.owner
        if not isinstance(alloc, memref.AllocOp | memref.AllocaOp):
            continue
        size = 1
        for extent in alloc.memref.type.get_shape():
            size *= extent
        form = linear_index(op.indices[0])
        lane_coefficient = sum(c for v, c in form.terms if _is_lane(v))
        if lane_coefficient <= 0 or any(c < 0 for _, c in form.terms):
            continue
        if not _every_lane_reaches(op, func, lanes, item_count):
            continue
        lowest = (lanes - 1) * lane_coefficient + form.constant
        if lowest >= size:
            raise op_error(
                op,
                f"kernel @{func.sym_name.data}: lane {lanes - 1} (the workgroup has "
                f"{lanes} lanes, 'workgroup' of '{LAUNCH_ATTR}') indexes this array of {size} "
                f"elements at {lowest} or more; the body is written for fewer lanes: "
                f"record the workgroup size it was built for, or size the array "
                f"for {lanes} lanes",
            )


def _is_lane(value) -> bool:
    from xdsl.dialects import arith

    owner = value.owner
    if isinstance(owner, arith.IndexCastOp):
        return _is_lane(owner.input)
    return isinstance(owner, gpu.ThreadIdOp) and owner.dimension.data.value == "x"


def _depends_on_ids(value, seen: set | None = None) -> tuple[bool, bool]:
    """(on the thread id, on the global id) for an SSA value."""
    from xdsl.ir import OpResult

    seen = set() if seen is None else seen
    if not isinstance(value, OpResult) or value in seen:
        return False, False
    seen.add(value)
    owner = value.op
    if isinstance(owner, gpu.ThreadIdOp):
        return True, False
    if isinstance(owner, gpu.GlobalIdOp):
        return False, True
    lane = item = False
    for operand in owner.operands:
        a, b = _depends_on_ids(operand, seen)
        lane, item = lane or a, item or b
    return lane, item


def _every_lane_reaches(op, func, lanes: int, item_count: int) -> bool:
    from xdsl.dialects import scf

    parent = op.parent_op()
    while parent is not None and parent is not func:
        if isinstance(parent, scf.IfOp):
            on_lane, on_item = _depends_on_ids(parent.cond)
            if on_lane or (on_item and item_count < lanes):
                return False
        parent = parent.parent_op()
    return True
