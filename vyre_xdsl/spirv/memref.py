"""memref -> SPIR-V variables, access chains, loads and stores.

- kernel arguments: one StorageBuffer variable per buffer (set 0, binding from
  `vyre.buffers`), a Block struct holding a runtime array of f32 with
  ArrayStride 4 and Offset 0; read buffers are NonWritable.
- `memref.alloc` in memory space 3: a Workgroup array, one per workgroup.
  Other allocs: a Function array (private to the lane).
- Private scratch: in a kernel without `gpu.barrier`, lanes cannot observe
  each other's workgroup-memory writes (that would be a data race), so a
  space-3 array that every access addresses as `thread_id.x * C + d` is
  private data in disguise; with `private_scratch` it becomes a C-element
  Function array indexed by `d`. This is what lets the seed layout (64 lanes
  x (2*head_dim + tile_size) f32) run where shared memory is 32 KiB
  (lavapipe) or 48 KiB (NVIDIA).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects.builtin import IntegerAttr, MemRefType
from xdsl.ir import Block, Operation, SSAValue

from vyre_xdsl.errors import VyreError
from vyre_xdsl.spirv.emitter import prop
from vyre_xdsl.spirv.emitter import MemoryObject
from vyre_xdsl.spirv.spec import Decoration, Op, StorageClass

WORKGROUP_SPACE = 3


def _static_shape(value: SSAValue, what: str) -> MemRefType:
    ty = value.type
    if not isinstance(ty, MemRefType):
        raise VyreError(f"{what}: expected a memref, got {ty}")
    shape = ty.get_shape()
    if any(dim < 0 for dim in shape) or not shape:
        raise VyreError(f"{what}: only static, ranked memrefs are supported, got {ty}")
    return ty


def _memory_space(ty: MemRefType) -> int:
    space = ty.memory_space
    if isinstance(space, IntegerAttr):
        return space.value.data
    return 0


def bind_buffers(e, body: Block) -> None:
    b = e.b
    buffers = e.info.buffers
    for arg, buffer in zip(body.args, buffers, strict=True):
        ty = _static_shape(arg, f"buffer {buffer.name!r}")
        element = e.type_of(ty.element_type, f"buffer {buffer.name!r} element")
        array = b.type_runtime_array(element, 4)
        block = b.type_block(array)
        pointer = b.type_pointer(StorageClass.StorageBuffer, block)
        var = b.global_variable(pointer, StorageClass.StorageBuffer)
        b.name(var, buffer.name)
        b.decorate(var, Decoration.DescriptorSet, 0)
        b.decorate(var, Decoration.Binding, buffer.binding)
        if not buffer.is_output:
            b.decorate(var, Decoration.NonWritable)
        e.memories[arg] = MemoryObject(var, StorageClass.StorageBuffer, element,
                                       (b.constant_uint(0),), tuple(ty.get_shape()))


# private scratch analysis ------------------------------------------------

@dataclass
class _Slice:
    stride: int
    addends: list[SSAValue] = field(default_factory=list)


def _constant_int(value: SSAValue) -> int | None:
    op = value.owner
    if isinstance(op, Operation) and op.name == "arith.constant":
        attr = prop(op, "value")
        if isinstance(attr, IntegerAttr):
            return attr.value.data
    return None


def _is_lane(value: SSAValue) -> bool:
    op = value.owner
    while isinstance(op, Operation) and op.name in ("arith.index_cast",
                                                    "arith.index_castui"):
        value = op.operands[0]
        op = value.owner
    if isinstance(op, Operation) and op.name == "gpu.thread_id":
        dim = prop(op, "dimension")
        return dim is not None and "x" in str(dim)
    return False


def _match_slice(value: SSAValue) -> _Slice | None:
    """`value` as thread_id.x * C + (sum of addends), if it has that form."""
    op = value.owner
    if not isinstance(op, Operation):
        return None
    if op.name == "arith.muli":
        a, c = op.operands
        for lane, const in ((a, c), (c, a)):
            stride = _constant_int(const)
            if stride is not None and stride > 0 and _is_lane(lane):
                return _Slice(stride)
        return None
    if op.name == "arith.addi":
        a, c = op.operands
        for base, extra in ((a, c), (c, a)):
            found = _match_slice(base)
            if found is not None:
                found.addends.append(extra)
                return found
    return None


def _has_barrier(op: Operation) -> bool:
    return any(inner.name == "gpu.barrier" for inner in op.walk())


def plan_scratch(e, body: Block) -> None:
    """Decide, before emission, which space-3 allocs become private arrays."""
    e.private_slices = {}  # (load/store op) -> list of addends
    e.private_allocs = {}  # alloc result -> stride
    if not e.private_scratch:
        return
    wg = e.info.workgroup_size
    if wg[1] != 1 or wg[2] != 1 or _has_barrier(e.func):
        return
    for op in e.func.walk():
        if op.name != "memref.alloc":
            continue
        result = op.results[0]
        ty = result.type
        if not isinstance(ty, MemRefType) or _memory_space(ty) != WORKGROUP_SPACE:
            continue
        shape = ty.get_shape()
        if len(shape) != 1:
            continue
        slices: dict[Operation, list[SSAValue]] = {}
        stride = None
        for use in result.uses:
            user = use.operation
            if user.name == "memref.load" and use.index == 0:
                found = _match_slice(user.operands[1])
            elif user.name == "memref.store" and use.index == 1:
                found = _match_slice(user.operands[2])
            else:
                found = None
            if found is None or (stride is not None and found.stride != stride):
                slices = {}
                break
            stride = found.stride
            slices[user] = found.addends
        if not slices or stride is None or stride * wg[0] != shape[0]:
            continue
        e.private_allocs[result] = stride
        e.private_slices.update(slices)


# conversions ---------------------------------------------------------------

def _alloc(e, op: Operation) -> None:
    result = op.results[0]
    ty = _static_shape(result, "memref.alloc")
    element = e.type_of(ty.element_type, "memref.alloc element")
    shape = tuple(ty.get_shape())
    count = 1
    for dim in shape:
        count *= dim
    b = e.b
    private = e.private_allocs.get(result)
    if private is not None:
        array = b.type_array(element, private)
        var = e.fn.local_variable(b.type_pointer(StorageClass.Function, array))
        sc = StorageClass.Function
    elif _memory_space(ty) == WORKGROUP_SPACE:
        array = b.type_array(element, count)
        var = b.global_variable(b.type_pointer(StorageClass.Workgroup, array),
                                StorageClass.Workgroup)
        sc = StorageClass.Workgroup
    else:
        array = b.type_array(element, count)
        var = e.fn.local_variable(b.type_pointer(StorageClass.Function, array))
        sc = StorageClass.Function
    if result.name_hint:
        b.name(var, result.name_hint)
    e.memories[result] = MemoryObject(var, sc, element, (), shape, private)


def _memory(e, value: SSAValue, op: Operation) -> MemoryObject:
    memory = e.memories.get(value)
    if memory is None:
        raise VyreError(
            f"'{op.name}': its memref must be a kernel argument or a memref.alloc "
            f"of this kernel (subviews, casts and function memrefs are not supported)"
        )
    return memory


def _pointer(e, op: Operation, memory: MemoryObject, indices) -> int:
    fn, uint = e.fn, e.uint
    if memory.private_stride is not None:
        addends = e.private_slices[op]
        if addends:
            index = e.value(addends[0])
            for extra in addends[1:]:
                index = fn.op(Op.IAdd, uint, index, e.value(extra))
        else:
            index = e.b.constant_uint(0)
    else:
        if len(indices) != len(memory.shape):
            raise VyreError(f"'{op.name}': {len(indices)} indices for a "
                            f"{len(memory.shape)}-d memref")
        index = None
        for position, idx in enumerate(indices):
            term = e.value(idx)
            stride = 1
            for dim in memory.shape[position + 1:]:
                stride *= dim
            if stride != 1:
                term = fn.op(Op.IMul, uint, term, e.b.constant_uint(stride))
            index = term if index is None else fn.op(Op.IAdd, uint, index, term)
    pointer_type = e.b.type_pointer(memory.storage_class, memory.element_type)
    return fn.op(Op.AccessChain, pointer_type, memory.variable, *memory.prefix, index)


def _load(e, op: Operation) -> None:
    memref, *indices = op.operands
    memory = _memory(e, memref, op)
    pointer = _pointer(e, op, memory, indices)
    e.bind(op.results[0], e.fn.op(Op.Load, memory.element_type, pointer))


def _store(e, op: Operation) -> None:
    value, memref, *indices = op.operands
    memory = _memory(e, memref, op)
    pointer = _pointer(e, op, memory, indices)
    e.fn.emit(Op.Store, pointer, e.value(value))


def _dealloc(e, op: Operation) -> None:
    pass


HANDLERS = {
    "memref.alloc": _alloc,
    "memref.alloca": _alloc,
    "memref.load": _load,
    "memref.store": _store,
    "memref.dealloc": _dealloc,
}
