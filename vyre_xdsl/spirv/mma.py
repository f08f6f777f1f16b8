"""The subgroup matrix ops (dialects/gpu_mma.py) as SPV_KHR_cooperative_matrix
instructions (capability CooperativeMatrixKHR, and the Vulkan memory model
that the extension requires; Vulkan's VK_KHR_cooperative_matrix and
vulkanMemoryModel, which the runtime enables where the device has them):

    !gpu.mma_matrix<RxCxT, U>        OpTypeCooperativeMatrixKHR T Subgroup R C
                                     (AOp MatrixAKHR, BOp MatrixBKHR,
                                     COp MatrixAccumulatorKHR)
    subgroup_mma_load/store_matrix   OpCooperativeMatrixLoad/StoreKHR at the
                                     tile's first element, RowMajorKHR (with
                                     `transpose` ColumnMajorKHR), the leading
                                     dimension as the stride
    subgroup_mma_compute             OpCooperativeMatrixMulAddKHR
    subgroup_mma_constant_matrix     OpCompositeConstruct of the one value
    subgroup_mma_elementwise         OpFAdd, OpFSub, OpFMul, OpFDiv, OpFNegate
                                     on the matrices; mulf by a constant
                                     matrix OpMatrixTimesScalar
    subgroup_mma_extract_thread_local OpCompositeExtract of the lane's
                                     element (a constant index)
    subgroup_mma_insert_thread_local OpCompositeInsert

An f16 matrix is a matrix of SPIR-V f16 (capability Float16), a bf16 one
of SPV_KHR_bfloat16's `OpTypeFloat 16 BFloat16KHR` (capabilities
BFloat16TypeKHR and BFloat16CooperativeMatrixKHR; Vulkan's
VK_KHR_shader_bfloat16), loaded from and stored to the 16-bit elements of
an f16 or bf16 buffer (spirv/half.py) as they are: the cooperative-matrix
instructions read the array's elements as the matrix's component type,
the stride counting elements; a workgroup array that lanes fill 16 bytes
at a time is one of uvec4s (spirv/memref.py), addressed and strided in
uvec4s, as GLSL's coopMatLoad from a uvec4 array is.  A 16-bit scalar is
held as its bits in a uint (half.py), so the constant matrix narrows and
bitcasts it.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type
from xdsl.ir import Attribute, Operation

from vyre_xdsl.dialects.gpu_mma import (
    MMAElementwise,
    MMAMatrixType,
    MMAOperand,
    SubgroupMmaComputeOp,
    SubgroupMmaConstantMatrixOp,
    SubgroupMmaElementwiseOp,
    SubgroupMmaExtractThreadLocalOp,
    SubgroupMmaInsertThreadLocalOp,
    SubgroupMmaLoadMatrixOp,
    SubgroupMmaStoreMatrixOp,
)
from vyre_xdsl.errors import VyreError
from vyre_xdsl.loop_bounds import constant_index
from vyre_xdsl.mma_elements import BF16_BITS
from vyre_xdsl.spirv.memref import WIDE_HALVES, _memory, _pointer, flat_index, wide_pointer
from vyre_xdsl.spirv.spec import (
    Capability,
    CooperativeMatrixLayout,
    CooperativeMatrixUse,
    FPEncoding,
    MemoryModel,
    Op,
    Scope,
)

COOPERATIVE_MATRIX = "SPV_KHR_cooperative_matrix"
VULKAN_MEMORY_MODEL = "SPV_KHR_vulkan_memory_model"
BFLOAT16 = "SPV_KHR_bfloat16"
HALF_TYPES = (Float16Type, BFloat16Type)

_USE = {
    MMAOperand.A: CooperativeMatrixUse.MatrixAKHR,
    MMAOperand.B: CooperativeMatrixUse.MatrixBKHR,
    MMAOperand.C: CooperativeMatrixUse.MatrixAccumulatorKHR,
}


def _component_type(e, element: Attribute) -> int:
    if isinstance(element, Float16Type):
        e.capability(Capability.Float16)
        return e.b.type_float(16)
    if isinstance(element, BFloat16Type):
        e.capability(Capability.BFloat16TypeKHR)
        e.capability(Capability.BFloat16CooperativeMatrixKHR)
        e.extension(BFLOAT16)
        return e.b.type_float(16, FPEncoding.BFloat16KHR)
    if isinstance(element, Float32Type):
        return e.f32
    raise VyreError(f"the SPIR-V emitter has no {element} cooperative matrix")


def matrix_type(e, matrix: MMAMatrixType) -> int:
    """The OpTypeCooperativeMatrixKHR of `matrix`, declaring what it needs."""
    e.capability(Capability.CooperativeMatrixKHR)
    e.extension(COOPERATIVE_MATRIX)
    # SPV_KHR_cooperative_matrix in a Shader module requires the Vulkan
    # memory model (an extension before SPIR-V 1.5); the module's one
    # barrier, OpControlBarrier AcquireRelease|WorkgroupMemory, means the
    # same there
    e.capability(Capability.VulkanMemoryModel)
    e.extension(VULKAN_MEMORY_MODEL)
    e.b.set_memory_model(MemoryModel.Vulkan)
    rows, cols = matrix.get_shape()
    return e.b.type_cooperative_matrix(_component_type(e, matrix.element_type),
                                       Scope.Subgroup, rows, cols, _USE[matrix.use])


def _tile(e, op: Operation, memref, indices) -> tuple[int, int, int]:
    """Pointer to the tile's first element, layout and stride ids."""
    memory = _memory(e, memref, op)
    if memory.vector_width > 1:
        raise VyreError(
            f"'{op.name}': {memref.name_hint or 'its memref'} is also read with "
            f"vector.load; the emitter loads matrices from arrays of scalars"
        )
    stride = op.leadDimension.value.data
    if memory.wide:
        pointer = wide_pointer(e, memory, flat_index(e, op, memory, indices))
        stride //= WIDE_HALVES
    else:
        pointer = _pointer(e, op, memory, indices)
    layout = (CooperativeMatrixLayout.ColumnMajorKHR if op.transpose is not None
              else CooperativeMatrixLayout.RowMajorKHR)
    b = e.b
    return pointer, b.constant_uint(layout), b.constant_uint(stride)


def _load(e, op: SubgroupMmaLoadMatrixOp) -> None:
    result_type = matrix_type(e, op.res.type)
    pointer, layout, stride = _tile(e, op, op.srcMemref, op.indices)
    e.bind(op.res, e.fn.op(Op.CooperativeMatrixLoadKHR, result_type, pointer,
                           layout, stride))


def _store(e, op: SubgroupMmaStoreMatrixOp) -> None:
    pointer, layout, stride = _tile(e, op, op.dstMemref, op.indices)
    e.fn.emit(Op.CooperativeMatrixStoreKHR, pointer, e.value(op.src), layout, stride)


def _compute(e, op: SubgroupMmaComputeOp) -> None:
    result_type = matrix_type(e, op.res.type)
    e.bind(op.res, e.fn.op(Op.CooperativeMatrixMulAddKHR, result_type,
                           e.value(op.opA), e.value(op.opB), e.value(op.opC)))


def _component(e, scalar) -> int:
    """`scalar` as a value of a matrix's component type."""
    value = e.value(scalar)
    if isinstance(scalar.type, HALF_TYPES):  # its bits in a uint (half.py)
        fn = e.fn
        bits = fn.op(Op.UConvert, e.b.type_int(16, False), value)
        value = fn.op(Op.Bitcast, _component_type(e, scalar.type), bits)
    return value


def _constant(e, op: SubgroupMmaConstantMatrixOp) -> None:
    result_type = matrix_type(e, op.res.type)
    e.bind(op.res, e.fn.op(Op.CompositeConstruct, result_type, _component(e, op.value)))


_ELEMENTWISE = {
    MMAElementwise.ADDF: Op.FAdd,
    MMAElementwise.SUBF: Op.FSub,
    MMAElementwise.MULF: Op.FMul,
    MMAElementwise.DIVF: Op.FDiv,
    MMAElementwise.NEGATEF: Op.FNegate,
}


def _elementwise(e, op: SubgroupMmaElementwiseOp) -> None:
    result_type = matrix_type(e, op.res.type)
    kind = op.opType.data
    if kind == MMAElementwise.MULF:
        # a product with a constant matrix scales by its value (as MLIR's
        # convert-gpu-to-spirv does): no second matrix to read
        for matrix, scale in (op.args, op.args[::-1]):
            if isinstance(scale.owner, SubgroupMmaConstantMatrixOp):
                e.bind(op.res, e.fn.op(Op.MatrixTimesScalar, result_type,
                                       e.value(matrix), _component(e, scale.owner.value)))
                return
    e.bind(op.res, e.fn.op(_ELEMENTWISE[kind], result_type,
                           *(e.value(arg) for arg in op.args)))


def _position(op) -> int:
    position = constant_index(op.indices[0])
    if position is None:
        raise VyreError(f"'{op.name}': the element's index must be a constant "
                        f"(SPIR-V's OpCompositeExtract/Insert take a literal)")
    return position


def _extract_thread_local(e, op: SubgroupMmaExtractThreadLocalOp) -> None:
    fn, element = e.fn, op.res.type
    value = fn.op(Op.CompositeExtract, _component_type(e, element), e.value(op.matrix),
                  _position(op))
    if isinstance(element, HALF_TYPES):  # to its bits in a uint (half.py)
        value = fn.op(Op.UConvert, e.uint,
                      fn.op(Op.Bitcast, e.b.type_int(16, False), value))
    e.bind(op.res, value)


def _is_bf16_exactly(value) -> bool:
    """Whether f32 `value` is a bf16 exactly: an f32 with its low 16 bits
    cleared (mma_elements.MatrixElements.weight_operand)."""
    cast = value.owner
    if not isinstance(cast, arith.BitcastOp):
        return False
    cut = cast.input.owner
    return isinstance(cut, arith.AndIOp) and any(
        constant_index(operand) == BF16_BITS for operand in cut.operands)


def _insert_thread_local(e, op: SubgroupMmaInsertThreadLocalOp) -> None:
    narrowed = op.value.owner
    if (isinstance(narrowed, arith.TruncFOp) and isinstance(narrowed.input.type, Float32Type)
            and (isinstance(op.value.type, Float16Type) or _is_bf16_exactly(narrowed.input))
            and all(isinstance(use.operation, SubgroupMmaInsertThreadLocalOp)
                    for use in op.value.uses)):
        # an f32 rounded into matrices only: the device's own conversion
        # (one instruction; Vulkan leaves its rounding to the device: f16
        # rounds to nearest on NVIDIA).  bf16 only where no rounding is
        # left to do: NVIDIA's driver truncates, and half.py's rounding to
        # nearest costs ten integer instructions (docs/performance.md)
        value = e.fn.op(Op.FConvert, _component_type(e, op.value.type),
                        e.value(narrowed.input))
    else:
        value = _component(e, op.value)
    e.bind(op.res, e.fn.op(Op.CompositeInsert, matrix_type(e, op.res.type), value,
                           e.value(op.matrix), _position(op)))


HANDLERS = {
    SubgroupMmaLoadMatrixOp: _load,
    SubgroupMmaStoreMatrixOp: _store,
    SubgroupMmaComputeOp: _compute,
    SubgroupMmaConstantMatrixOp: _constant,
    SubgroupMmaElementwiseOp: _elementwise,
    SubgroupMmaExtractThreadLocalOp: _extract_thread_local,
    SubgroupMmaInsertThreadLocalOp: _insert_thread_local,
}
