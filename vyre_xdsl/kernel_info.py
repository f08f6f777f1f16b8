"""The host-side description of a lowered kernel.

`convert-vyre-to-gpu` records what a runtime needs on the `gpu.func` as
discardable `vyre.*` attributes (see docs/lowered-ir.md); this module reads
them back so every executor agrees on bindings, workgroup size and grid.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import gpu
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
)

from vyre_xdsl.errors import VyreError
from vyre_xdsl.loop_bounds import loop_iterations

BUFFERS_ATTR = "vyre.buffers"
ITEM_COUNT_ATTR = "vyre.item_count"
WORKGROUP_SIZE_ATTR = "vyre.workgroup_size"
GRID_SIZE_ATTR = "vyre.grid_size"
OUTPUT_SHAPE_ATTR = "vyre.output_shape"


@dataclass(frozen=True)
class BufferInfo:
    name: str
    binding: int
    access: str  # "read" or "write"
    count: int  # f32 elements
    shape: tuple[int, ...]  # logical shape, row-major; prod(shape) == count

    @property
    def is_output(self) -> bool:
        return self.access == "write"


@dataclass(frozen=True)
class KernelInfo:
    name: str
    buffers: tuple[BufferInfo, ...]  # in gpu.func argument order
    item_count: int
    workgroup_size: tuple[int, int, int]
    grid_size: tuple[int, int, int]
    func: gpu.FuncOp
    # Upper bound on the loop iterations of one invocation (None: unknown).
    loop_iterations: int | None = None

    def buffer(self, name: str) -> BufferInfo:
        for buffer in self.buffers:
            if buffer.name == name:
                return buffer
        raise KeyError(name)

    @property
    def inputs(self) -> tuple[BufferInfo, ...]:
        return tuple(b for b in self.buffers if not b.is_output)

    @property
    def outputs(self) -> tuple[BufferInfo, ...]:
        return tuple(b for b in self.buffers if b.is_output)


def _int_array(attr, what: str) -> tuple[int, int, int]:
    if not isinstance(attr, DenseArrayBase):
        raise VyreError(f"kernel attribute {what} must be array<i32: x, y, z>")
    values = tuple(int(v) for v in attr.get_values())
    if len(values) != 3:
        raise VyreError(f"kernel attribute {what} must have 3 entries, got {values}")
    return values  # type: ignore[return-value]


def find_kernel(module: ModuleOp) -> gpu.FuncOp:
    """The single `gpu.func` kernel of a lowered module."""
    kernels = [
        op
        for op in module.walk()
        if isinstance(op, gpu.FuncOp) and BUFFERS_ATTR in op.attributes
    ]
    if len(kernels) != 1:
        raise VyreError(
            f"expected exactly one lowered vyre kernel (a gpu.func carrying "
            f"'{BUFFERS_ATTR}'), found {len(kernels)}; lower a vyre.kernel with "
            f"the vyre-to-gpu pipeline first"
        )
    return kernels[0]


def kernel_info(module: ModuleOp) -> KernelInfo:
    """Read the host-side description of the lowered kernel in `module`."""
    func = find_kernel(module)
    attrs = func.attributes
    for required in (ITEM_COUNT_ATTR, WORKGROUP_SIZE_ATTR, GRID_SIZE_ATTR):
        if required not in attrs:
            raise VyreError(f"lowered kernel @{func.sym_name.data} lacks '{required}'")
    arg_types = func.function_type.inputs.data
    entries = attrs[BUFFERS_ATTR]
    assert isinstance(entries, ArrayAttr)
    if len(entries.data) != len(arg_types):
        raise VyreError(
            f"'{BUFFERS_ATTR}' describes {len(entries.data)} buffers but "
            f"@{func.sym_name.data} takes {len(arg_types)} arguments"
        )
    buffers: list[BufferInfo] = []
    for entry, arg_type in zip(entries.data, arg_types, strict=True):
        assert isinstance(entry, DictionaryAttr) and isinstance(arg_type, MemRefType)
        fields = entry.data
        name = fields["name"]
        binding = fields["binding"]
        access = fields["access"]
        assert isinstance(name, StringAttr) and isinstance(access, StringAttr)
        assert isinstance(binding, IntegerAttr)
        count = 1
        for dim in arg_type.get_shape():
            count *= dim
        shape_attr = fields.get("shape")
        shape = (
            tuple(int(v) for v in shape_attr.get_values())
            if isinstance(shape_attr, DenseArrayBase)
            else (count,)
        )
        buffers.append(
            BufferInfo(name.data, binding.value.data, access.data, count, shape)
        )
    item_count = attrs[ITEM_COUNT_ATTR]
    assert isinstance(item_count, IntegerAttr)
    return KernelInfo(
        name=func.sym_name.data,
        buffers=tuple(buffers),
        item_count=item_count.value.data,
        workgroup_size=_int_array(attrs[WORKGROUP_SIZE_ATTR], WORKGROUP_SIZE_ATTR),
        grid_size=_int_array(attrs[GRID_SIZE_ATTR], GRID_SIZE_ATTR),
        func=func,
        loop_iterations=loop_iterations(func.body),
    )
