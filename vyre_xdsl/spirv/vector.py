"""vector -> SPIR-V: vector loads through a vector view of a storage buffer.

`vector.load %buf[%i] : memref<Nxf32>, vector<4xf32>` (made by
vyre-vectorize-loads) reads elements i .. i+3, at vector i / 4, so `i` must
be a provable multiple of 4.  A storage buffer is an array of f32; the load
goes through a second variable bound to the same binding, a runtime array
of vec4 (ArrayStride 16).  Only read-only buffers get a view (an aliased
view of a written buffer would need the Aliased decoration and coherent
order).  A workgroup array read as vectors is itself an array of vec4
(spirv/memref.py), its scalar accesses going to vector components.
"""

from __future__ import annotations

from xdsl.dialects import vector
from xdsl.dialects.builtin import Float32Type, VectorType
from xdsl.ir import Operation, SSAValue

from vyre_xdsl.errors import VyreError
from vyre_xdsl.index_forms import is_multiple_of
from vyre_xdsl.spirv.emitter import MemoryObject
from vyre_xdsl.spirv.spec import Decoration, Op, StorageClass


def _vector_type(e, op: Operation, ty) -> tuple[int, int]:
    """(SPIR-V type id, width) of a 1-d f32 vector of 2..4 elements."""
    if (
        not isinstance(ty, VectorType)
        or len(ty.get_shape()) != 1
        or not isinstance(ty.get_element_type(), Float32Type)
        or not 2 <= ty.get_shape()[0] <= 4
    ):
        raise VyreError(
            f"'{op.name}': the SPIR-V emitter supports vectors of 2 to 4 f32, got {ty}"
        )
    width = ty.get_shape()[0]
    return e.b.type_vector(e.f32, width), width


def _view(e, op: Operation, buffer: SSAValue, vector_type: int, width: int) -> MemoryObject:
    """The vector view of kernel buffer `buffer`, made on first use in the
    program (the kernels of a program share it, like the buffer)."""
    described = next(
        (info for arg, info in zip(e.func.body.blocks[0].args, e.info.buffers, strict=True)
         if arg == buffer),
        None,
    )
    if described is None:
        raise VyreError(f"'{op.name}': only kernel buffers can be loaded as vectors")
    if described.dtype != "f32":
        raise VyreError(
            f"'{op.name}': buffer {described.name!r} holds {described.dtype}; vector "
            f"loads are only emitted for f32 buffers (vyre-vectorize-loads leaves "
            f"half-precision loads scalar)"
        )
    if not described.is_input:
        raise VyreError(
            f"'{op.name}': buffer {described.name!r} is written by the kernel; "
            f"vector loads are only emitted for read-only buffers"
        )
    key = (described.binding, width)
    views = e.program.vector_views
    if key in views:
        return views[key]
    b = e.b
    array = b.type_runtime_array(vector_type, 4 * width)
    pointer = b.type_pointer(StorageClass.StorageBuffer, b.type_block(array))
    var = b.global_variable(pointer, StorageClass.StorageBuffer)
    b.name(var, f"{described.name}_vec{width}")
    b.decorate(var, Decoration.DescriptorSet, 0)
    b.decorate(var, Decoration.Binding, described.binding)
    b.decorate(var, Decoration.NonWritable)
    view = MemoryObject(var, StorageClass.StorageBuffer, vector_type,
                        (b.constant_uint(0),), ())
    views[key] = view
    return view


def _load(e, op: Operation) -> None:
    buffer, *indices = op.operands
    vector_type, width = _vector_type(e, op, op.results[0].type)
    if len(indices) != 1:
        raise VyreError(f"'{op.name}': only 1-d buffers can be loaded as vectors")
    if not is_multiple_of(indices[0], width):
        raise VyreError(
            f"'{op.name}': its index is not provably a multiple of {width}; "
            f"a vector view of a buffer only addresses aligned elements"
        )
    memory = e.memories.get(buffer)
    if memory is not None and memory.vector_width == width:
        view = memory  # a workgroup array of vectors
        storage_class = memory.storage_class
    else:
        view = _view(e, op, buffer, vector_type, width)
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
    result_type = e.type_of(op.results[0].type, f"'{op.name}' result")
    e.bind(op.results[0], e.fn.op(Op.CompositeExtract, result_type,
                                  e.value(op.operands[0]), position))


HANDLERS = {
    vector.LoadOp: _load,
    vector.ExtractOp: _extract,
}
