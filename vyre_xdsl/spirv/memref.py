"""memref -> SPIR-V variables, access chains, loads and stores.

- kernel arguments: one StorageBuffer variable per buffer (set 0, binding from
  `vyre.buffers`), a Block struct holding a runtime array of f32 with
  ArrayStride 4 and Offset 0 (of 16-bit uints with ArrayStride 2 for an f16
  or bf16 buffer, spirv/half.py); read buffers are NonWritable. The kernels of a
  program share the variable of a binding (one declaration, several entry
  points).
- `memref.alloc` in memory space 3: a Workgroup array, one per workgroup
  (an array of vectors where it is read with vector.load; of uvec4s where
  16-bit elements are only written by lanes 16 bytes at a time with
  vector.store and read and written by matrix ops: `wide_access`).
  Other allocs and allocas: a Function array (private to the lane); the
  vyre-promote-scratch pass decides which scratch arrays are private.
"""

from __future__ import annotations

from xdsl.dialects import memref, vector
from xdsl.dialects.builtin import IntegerAttr, MemRefType
from xdsl.ir import Block, Operation, SSAValue

from vyre_xdsl.dialects.constants import WORKGROUP_MEMORY_SPACE
from vyre_xdsl.dialects.gpu_mma import SubgroupMmaLoadMatrixOp, SubgroupMmaStoreMatrixOp
from vyre_xdsl.errors import VyreError
from vyre_xdsl.index_forms import known_multiple
from vyre_xdsl.spirv.emitter import WORD_BYTES, MemoryObject
from vyre_xdsl.spirv.half import half_kind
from vyre_xdsl.spirv.spec import Capability, Decoration, Op, StorageClass


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
    """Map each argument of the kernel to the storage buffer variable of its
    binding, declaring it on first use in the program."""
    b = e.b
    shared = e.program.storage_buffers
    for arg, buffer in zip(body.args, e.info.buffers, strict=True):
        ty = _static_shape(arg, f"buffer {buffer.name!r}")
        half = half_kind(ty.element_type)
        if half is not None:
            # 16-bit elements, loaded and stored as they are (spirv/half.py)
            e.capability(Capability.StorageBuffer16BitAccess)
            element = b.type_int(16, False)
        else:
            element = e.type_of(ty.element_type, f"buffer {buffer.name!r} element")
        var = shared.get(buffer.binding)
        if var is None:
            var = _declare_buffer(e, buffer, element, 2 if half else 4)
            shared[buffer.binding] = var
        e.memories[arg] = MemoryObject(var, StorageClass.StorageBuffer, element,
                                       (b.constant_uint(0),), tuple(ty.get_shape()),
                                       half=half)


def _declare_buffer(e, buffer, element: int, stride: int = 4) -> int:
    b = e.b
    array = b.type_runtime_array(element, stride)
    block = b.type_block(array)
    pointer = b.type_pointer(StorageClass.StorageBuffer, block)
    var = b.global_variable(pointer, StorageClass.StorageBuffer)
    b.name(var, buffer.name)
    b.decorate(var, Decoration.DescriptorSet, 0)
    b.decorate(var, Decoration.Binding, buffer.binding)
    if buffer.is_input:  # outputs and temporaries are written
        b.decorate(var, Decoration.NonWritable)
    return var


WIDE_HALVES = 8  # 16-bit elements in a uvec4, the widest access of a lane


def _strides(shape) -> list[int]:
    strides, stride = [], 1
    for dim in reversed(shape):
        strides.append(stride)
        stride *= dim
    return strides[::-1]


def wide_access(op: Operation) -> bool:
    """Whether `op` reads or writes a 16-bit memref in whole uvec4s, from
    an element provably a multiple of WIDE_HALVES: a vector.store of that
    many elements, or a matrix load or store whose rows start that many
    elements apart."""
    if isinstance(op, vector.StoreOp):
        memref, indices = op.base, op.indices
        if op.vector.type.get_shape() != (WIDE_HALVES,):
            return False
    elif isinstance(op, SubgroupMmaLoadMatrixOp | SubgroupMmaStoreMatrixOp):
        memref = op.srcMemref if isinstance(op, SubgroupMmaLoadMatrixOp) else op.dstMemref
        indices = op.indices
        if op.leadDimension.value.data % WIDE_HALVES:
            return False
    else:
        return False
    ty = memref.type
    if not isinstance(ty, MemRefType) or half_kind(ty.element_type) is None:
        return False
    return all(stride * known_multiple(index) % WIDE_HALVES == 0
               for stride, index in zip(_strides(ty.get_shape()), indices, strict=True))


def _only_wide_accesses(value: SSAValue) -> bool:
    return any(isinstance(use.operation, vector.StoreOp) for use in value.uses) and all(
        wide_access(use.operation) for use in value.uses)


# conversions ---------------------------------------------------------------

def _alloc(e, op: Operation) -> None:
    result = op.results[0]
    ty = _static_shape(result, "memref.alloc")
    half = half_kind(ty.element_type)
    if half is not None:
        # 16-bit elements as in a half buffer (spirv/half.py); outside storage
        # buffers a 16-bit integer type needs Int16 (Vulkan's shaderInt16)
        e.capability(Capability.Int16)
        element = e.b.type_int(16, False)
    else:
        element = e.type_of(ty.element_type, "memref.alloc element")
    shape = tuple(ty.get_shape())
    count = 1
    for dim in shape:
        count *= dim
    b = e.b
    width = 1
    if (_memory_space(ty) == WORKGROUP_MEMORY_SPACE and half is not None
            and count % WIDE_HALVES == 0 and _only_wide_accesses(result)):
        # lanes copy whole uvec4s in: the array is one of uvec4s (matrix ops
        # address it as such too), so no lane writes part of a word
        uvec4 = b.type_vector(e.uint, WIDE_HALVES // 2)
        var = b.global_variable(
            b.type_pointer(StorageClass.Workgroup, b.type_array(uvec4, count // WIDE_HALVES)),
            StorageClass.Workgroup)
        e.workgroup_bytes += count * 2
        b.name(var, f"{e.info.name}.{result.name_hint or 'wide'}")
        e.memories[result] = MemoryObject(var, StorageClass.Workgroup, uvec4, (), shape,
                                          half=half, wide=True)
        return
    if _memory_space(ty) == WORKGROUP_MEMORY_SPACE:
        # Read as vectors somewhere: an array of vectors (a Workgroup
        # variable has no second, vector-typed view as a buffer binding has).
        width = vector_read_width(result)
        if width > 1 and count % width == 0:
            array = b.type_array(b.type_vector(element, width), count // width)
        else:
            width = 1
            array = b.type_array(element, count)
        var = b.global_variable(b.type_pointer(StorageClass.Workgroup, array),
                                StorageClass.Workgroup)
        e.workgroup_bytes += count * (2 if half else WORD_BYTES)
        sc = StorageClass.Workgroup
    else:
        array = b.type_array(element, count)
        var = e.fn.local_variable(b.type_pointer(StorageClass.Function, array))
        sc = StorageClass.Function
    if result.name_hint:  # a Workgroup variable is one kernel's: named after it too
        b.name(var, result.name_hint if sc == StorageClass.Function
               else f"{e.info.name}.{result.name_hint}")
    e.memories[result] = MemoryObject(var, sc, element, (), shape, width, half=half)


def vector_read_width(value: SSAValue) -> int:
    """The width of the vector.loads of `value` (1 if none)."""
    widths = {
        use.operation.results[0].type.get_shape()[0]
        for use in value.uses
        if isinstance(use.operation, vector.LoadOp)
    }
    if len(widths) > 1:
        raise VyreError(
            f"{value.name_hint or 'a workgroup array'} is read as vectors of "
            f"several widths ({sorted(widths)}); the emitter supports one"
        )
    return widths.pop() if widths else 1


def _memory(e, value: SSAValue, op: Operation) -> MemoryObject:
    memory = e.memories.get(value)
    if memory is None:
        raise VyreError(
            f"'{op.name}': its memref must be a kernel argument or a memref.alloc "
            f"of this kernel (subviews, casts and function memrefs are not supported)"
        )
    return memory


def flat_index(e, op: Operation, memory: MemoryObject, indices) -> int:
    """The id of `indices`' element of `memory`, counted row-major."""
    fn, uint = e.fn, e.uint
    if len(indices) != len(memory.shape):
        raise VyreError(f"'{op.name}': {len(indices)} indices for a "
                        f"{len(memory.shape)}-d memref")
    index = None
    for idx, stride in zip(indices, _strides(memory.shape), strict=True):
        term = e.value(idx)
        if stride != 1:
            term = fn.op(Op.IMul, uint, term, e.b.constant_uint(stride))
        index = term if index is None else fn.op(Op.IAdd, uint, index, term)
    return index


def wide_pointer(e, memory: MemoryObject, index: int) -> int:
    """Pointer to the uvec4 of a wide array (`memory.wide`) that starts at
    element id `index`, a multiple of WIDE_HALVES."""
    element = e.fn.op(Op.UDiv, e.uint, index, e.b.constant_uint(WIDE_HALVES))
    return e.fn.op(Op.AccessChain, e.b.type_pointer(memory.storage_class, memory.element_type),
                   memory.variable, *memory.prefix, element)


def element_pointer(e, memory: MemoryObject, index: int) -> int:
    """Pointer to element id `index` of `memory` (not wide)."""
    fn, uint = e.fn, e.uint
    pointer_type = e.b.type_pointer(memory.storage_class, memory.element_type)
    if memory.vector_width > 1:
        width = e.b.constant_uint(memory.vector_width)
        slot = fn.op(Op.UDiv, uint, index, width)
        component = fn.op(Op.UMod, uint, index, width)
        return fn.op(Op.AccessChain, pointer_type, memory.variable, *memory.prefix,
                     slot, component)
    return fn.op(Op.AccessChain, pointer_type, memory.variable, *memory.prefix, index)


def _pointer(e, op: Operation, memory: MemoryObject, indices) -> int:
    if memory.wide:
        raise VyreError(f"'{op.name}': a workgroup array written 16 bytes a lane is "
                        f"only read and written by matrix ops and vector.store")
    return element_pointer(e, memory, flat_index(e, op, memory, indices))


def _load(e, op: Operation) -> None:
    target, *indices = op.operands
    memory = _memory(e, target, op)
    pointer = _pointer(e, op, memory, indices)
    loaded = e.fn.op(Op.Load, memory.element_type, pointer)
    if memory.half is not None:  # its 16 bits in a 32-bit uint
        loaded = e.fn.op(Op.UConvert, e.uint, loaded)
    e.bind(op.results[0], loaded)


def _store(e, op: Operation) -> None:
    value, target, *indices = op.operands
    memory = _memory(e, target, op)
    pointer = _pointer(e, op, memory, indices)
    stored = e.value(value)
    if memory.half is not None:
        if half_kind(value.type) != memory.half:
            raise VyreError(
                f"'{op.name}': stores a {value.type} value to a {memory.half} buffer"
            )
        stored = e.fn.op(Op.UConvert, memory.element_type, stored)
    e.fn.emit(Op.Store, pointer, stored)


def _dealloc(e, op: Operation) -> None:
    pass


HANDLERS = {
    memref.AllocOp: _alloc,
    memref.AllocaOp: _alloc,
    memref.LoadOp: _load,
    memref.StoreOp: _store,
    memref.DeallocOp: _dealloc,
}
