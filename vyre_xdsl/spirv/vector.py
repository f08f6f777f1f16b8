"""vector -> SPIR-V: vector loads through a vector view of a storage buffer.

`vector.load %buf[%i] : memref<Nxf32>, vector<4xf32>` (made by
vyre-vectorize-loads) reads elements i .. i+3, at vector i / 4, so `i` must
be a provable multiple of 4.  A storage buffer is an array of f32; the load
goes through a second variable bound to the same binding, a runtime array
of vec4 (ArrayStride 16).  A vector of 4 or 8 f16/bf16 elements is read
as 2 or 4 32-bit words (a runtime array of uvec2 or uvec4), each word
holding two elements, the first in its low half (little-endian, as the
buffer stores them); `vector.extract` takes an element's 16 bits into the
low half of a uint, as a scalar load of a half buffer does (spirv/half.py).
Only buffers the kernel reads and never writes get a view (an aliased
view of a buffer written in the same kernel would need the Aliased
decoration and coherent order): `read` buffers, and `temp` ones that
an earlier kernel of the program wrote (a dispatch apart).  A buffer the
kernel writes only with vector stores of f32 (vyre-vectorize-stores) and
never reads is written through a view of its own (NonReadable), so each
store writes its 16 bytes at once.  A workgroup array
read as vectors is itself an array of vec4 (spirv/memref.py), its scalar
accesses going to vector components.

`vector.from_elements` packs its 16-bit elements two to a word the same
way, and `vector.store` writes a vector of 8 of them as one uvec4 to a
workgroup array of uvec4s (spirv/memref.py `wide_access`); anywhere else
it stores the elements one by one.
"""

from __future__ import annotations

from xdsl.dialects import vector
from xdsl.dialects.builtin import Float32Type, VectorType
from xdsl.ir import Operation, SSAValue

from vyre_xdsl.dialects.vector_from_elements import FromElementsOp
from vyre_xdsl.errors import VyreError
from vyre_xdsl.index_forms import is_multiple_of
from vyre_xdsl.kernel_info import only_loaded
from vyre_xdsl.spirv.emitter import MemoryObject
from vyre_xdsl.spirv.memref import _memory, element_pointer, flat_index, wide_pointer
from vyre_xdsl.spirv.half import half_kind
from vyre_xdsl.spirv.spec import Decoration, Op, StorageClass

HALVES_PER_WORD = 2
HALF_BITS = 16
HALF_MASK = (1 << HALF_BITS) - 1


def _vector_type(e, op: Operation, ty) -> tuple[int, int, int]:
    """(SPIR-V type id, elements, components) of a 1-d vector of 2 to 4 f32
    (a vec of as many), or of 4 or 8 f16/bf16 (a uvec of half as many)."""
    shape = ty.get_shape() if isinstance(ty, VectorType) else ()
    element = ty.get_element_type() if isinstance(ty, VectorType) else None
    if len(shape) == 1 and isinstance(element, Float32Type) and 2 <= shape[0] <= 4:
        return e.b.type_vector(e.f32, shape[0]), shape[0], shape[0]
    if len(shape) == 1 and half_kind(element) is not None and shape[0] in (4, 8):
        words = shape[0] // HALVES_PER_WORD
        return e.b.type_vector(e.uint, words), shape[0], words
    raise VyreError(
        f"'{op.name}': the SPIR-V emitter supports vectors of 2 to 4 f32 or of 4 or 8 "
        f"f16/bf16, got {ty}"
    )


def _described(e, buffer: SSAValue):
    """The kernel's description of its buffer argument `buffer`, or None."""
    return next(
        (info for arg, info in zip(e.func.body.blocks[0].args, e.info.buffers, strict=True)
         if arg == buffer),
        None,
    )


def _view(e, op: Operation, buffer: SSAValue, vector_type: int, width: int,
          dtype: str) -> MemoryObject:
    """The vector view of kernel buffer `buffer`, made on first use in the
    program (the kernels of a program share it, like the buffer)."""
    described = _described(e, buffer)
    if described is None:
        raise VyreError(f"'{op.name}': only kernel buffers can be loaded as vectors")
    if described.dtype != dtype:
        raise VyreError(
            f"'{op.name}': buffer {described.name!r} holds {described.dtype}, but the "
            f"vector load reads {dtype}"
        )
    if not (described.is_input or (described.access == "temp" and only_loaded(buffer))):
        raise VyreError(
            f"'{op.name}': buffer {described.name!r} is written by the kernel; "
            f"vector loads are only emitted for buffers it only reads"
        )
    return _view_variable(e, described, vector_type, width, Decoration.NonWritable)


def _view_variable(e, described, vector_type: int, width: int,
                   access: int) -> MemoryObject:
    """The program's view of `described`'s binding as an array of
    `vector_type` (`width` components of 4 bytes), decorated `access`
    (NonWritable for loads, NonReadable for stores)."""
    key = (described.binding, width, access)
    views = e.program.vector_views
    if key in views:
        return views[key]
    b = e.b
    array = b.type_runtime_array(vector_type, 4 * width)
    pointer = b.type_pointer(StorageClass.StorageBuffer, b.type_block(array))
    var = b.global_variable(pointer, StorageClass.StorageBuffer)
    suffix = "vec" if access == Decoration.NonWritable else "out_vec"
    b.name(var, f"{described.name}_{suffix}{width}")
    b.decorate(var, Decoration.DescriptorSet, 0)
    b.decorate(var, Decoration.Binding, described.binding)
    b.decorate(var, access)
    view = MemoryObject(var, StorageClass.StorageBuffer, vector_type,
                        (b.constant_uint(0),), ())
    views[key] = view
    return view


def _write_view(e, op: vector.StoreOp, width: int) -> MemoryObject | None:
    """The vector view `op` stores through: where its buffer is a kernel
    buffer of f32 that every write of the kernel stores as such vectors at
    a provable multiple of `width`, and that the kernel never reads; None
    (element-wise stores) otherwise."""
    described = _described(e, op.base)
    if described is None or described.dtype != "f32" or described.is_input:
        return None
    for use in op.base.uses:
        store = use.operation
        if not (isinstance(store, vector.StoreOp) and use.index == 1
                and store.vector.type.get_shape() == (width,)
                and len(store.indices) == 1 and is_multiple_of(store.indices[0], width)):
            return None
    vector_type = e.b.type_vector(e.f32, width)
    return _view_variable(e, described, vector_type, width, Decoration.NonReadable)


def _load(e, op: Operation) -> None:
    buffer, *indices = op.operands
    vector_type, width, components = _vector_type(e, op, op.results[0].type)
    if len(indices) != 1:
        raise VyreError(f"'{op.name}': only 1-d buffers can be loaded as vectors")
    if not is_multiple_of(indices[0], width):
        raise VyreError(
            f"'{op.name}': its index is not provably a multiple of {width}; "
            f"a vector view of a buffer only addresses aligned elements"
        )
    memory = e.memories.get(buffer)
    if memory is not None and memory.vector_width == width and components == width:
        view = memory  # a workgroup array of vectors
        storage_class = memory.storage_class
    else:
        element_type = op.results[0].type.get_element_type()
        view = _view(e, op, buffer, vector_type, components, half_kind(element_type) or "f32")
        storage_class = StorageClass.StorageBuffer
    fn = e.fn
    element = fn.op(Op.UDiv, e.uint, e.value(indices[0]), e.b.constant_uint(width))
    pointer_type = e.b.type_pointer(storage_class, vector_type)
    pointer = fn.op(Op.AccessChain, pointer_type, view.variable, *view.prefix, element)
    e.bind(op.results[0], fn.op(Op.Load, vector_type, pointer))


def _extract(e, op: Operation) -> None:
    if op.dynamic_position or len(op.static_position.get_values()) != 1:
        raise VyreError(f"'{op.name}': only one static position is supported")
    (position,) = op.static_position.get_values()
    source = e.value(op.operands[0])
    if half_kind(op.results[0].type) is None:
        result_type = e.type_of(op.results[0].type, f"'{op.name}' result")
        e.bind(op.results[0], e.fn.op(Op.CompositeExtract, result_type, source, position))
        return
    word_index, high = divmod(position, HALVES_PER_WORD)
    word = e.fn.op(Op.CompositeExtract, e.uint, source, word_index)
    if high:
        half = e.fn.op(Op.ShiftRightLogical, e.uint, word, e.b.constant_uint(HALF_BITS))
    else:
        half = e.fn.op(Op.BitwiseAnd, e.uint, word, e.b.constant_uint(HALF_MASK))
    e.bind(op.results[0], half)


def _from_elements(e, op: FromElementsOp) -> None:
    vector_type, width, components = _vector_type(e, op, op.result.type)
    parts = [e.value(element) for element in op.elements]
    if components != width:  # two halves' bits a word, the first low
        fn = e.fn
        parts = [fn.op(Op.BitwiseOr, e.uint, low,
                       fn.op(Op.ShiftLeftLogical, e.uint, high, e.b.constant_uint(HALF_BITS)))
                 for low, high in zip(parts[::2], parts[1::2], strict=True)]
    e.bind(op.result, e.fn.op(Op.CompositeConstruct, vector_type, *parts))


def _store(e, op: vector.StoreOp) -> None:
    _, width, components = _vector_type(e, op, op.vector.type)
    memory = _memory(e, op.base, op)
    index = flat_index(e, op, memory, op.indices)
    fn, value = e.fn, e.value(op.vector)
    if memory.wide:  # every write of it is such a store (memref.wide_access)
        fn.emit(Op.Store, wide_pointer(e, memory, index), value)
        return
    view = _write_view(e, op, width) if memory.storage_class == StorageClass.StorageBuffer \
        and components == width and isinstance(op.vector.type.get_element_type(),
                                                Float32Type) else None
    if view is not None:
        element = fn.op(Op.UDiv, e.uint, index, e.b.constant_uint(width))
        pointer_type = e.b.type_pointer(StorageClass.StorageBuffer, view.element_type)
        fn.emit(Op.Store, fn.op(Op.AccessChain, pointer_type, view.variable, *view.prefix,
                                element), value)
        return
    for k in range(width):  # element by element
        if components == width:
            element = fn.op(Op.CompositeExtract, memory.element_type, value, k)
        else:
            word_index, high = divmod(k, HALVES_PER_WORD)
            element = fn.op(Op.CompositeExtract, e.uint, value, word_index)
            if high:
                element = fn.op(Op.ShiftRightLogical, e.uint, element,
                                e.b.constant_uint(HALF_BITS))
            element = fn.op(Op.UConvert, memory.element_type, element)
        at = index if k == 0 else fn.op(Op.IAdd, e.uint, index, e.b.constant_uint(k))
        fn.emit(Op.Store, element_pointer(e, memory, at), element)


HANDLERS = {
    vector.LoadOp: _load,
    vector.ExtractOp: _extract,
    vector.StoreOp: _store,
    FromElementsOp: _from_elements,
}
