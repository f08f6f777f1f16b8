"""MLIR's subgroup matrix ops (`gpu.subgroup_mma_*`) and their type
`!gpu.mma_matrix`, which xDSL 0.74's gpu dialect lacks.  Same names,
operands, properties and custom syntax as upstream MLIR 22, so lowered IR
that uses them still goes through `mlir-opt-22`:

    %a = gpu.subgroup_mma_load_matrix %buf[%i, %j] {leadDimension = 16 : index}
        : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
    %z = gpu.subgroup_mma_constant_matrix %zero : !gpu.mma_matrix<16x16xf32, "COp">
    %d = gpu.subgroup_mma_compute %a, %b, %z : !gpu.mma_matrix<16x16xf16, "AOp">,
        !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
    gpu.subgroup_mma_store_matrix %d, %out[%i, %j] {leadDimension = 16 : index}
        : !gpu.mma_matrix<16x16xf32, "COp">, memref<16x16xf32>

A matrix value belongs to the whole subgroup (every lane holds a share the
program cannot see): D = A * B + C with A MxK ("AOp"), B KxN ("BOp"), C and
D MxN ("COp").  Loads and stores read the tile at [i, j] of a row-major
memref whose rows are `leadDimension` elements apart; `transpose` loads
(stores) the tile's columns from (to) the memref's rows.

Elements are f16, bf16 or f32: MLIR 22 also has si8, ui8, i32 and f64
matrices (the interpreter and the SPIR-V emitter do not).  bf16 is the one
place this dialect goes beyond MLIR 22's: its gpu dialect rejects
`!gpu.mma_matrix<16x16xbf16, "AOp">` (and mma ops on bf16 memrefs), while
its SPIR-V dialect has bf16 cooperative matrices (SPV_KHR_bfloat16), as
PTX has bf16 mma.  A kernel with bf16 matrices is checked by mlir-opt-22
through its SPIR-V (docs/lowered-ir.md, "bf16 matrices").

Loaded into a context with `load_into(ctx)` (vyre_xdsl.make_context and
vyre-opt do), beside xDSL's own gpu dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    Float16Type,
    Float32Type,
    IndexType,
    IntAttr,
    IntegerAttr,
    MemRefType,
    StringAttr,
    UnitAttr,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import (
    Attribute,
    ParametrizedAttribute,
    SpacedOpaqueSyntaxAttribute,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum


class MMAOperand(StrEnum):
    """Which operand of D = A * B + C a matrix is (MLIR's spelling)."""

    A = "AOp"
    B = "BOp"
    C = "COp"


MMA_OPERANDS = tuple(MMAOperand)
MMA_ELEMENT_TYPES = (Float16Type, BFloat16Type, Float32Type)


@irdl_attr_definition
class MMAMatrixType(ParametrizedAttribute, TypeAttribute):
    """`!gpu.mma_matrix<ROWSxCOLSxELEMENT, "AOp" | "BOp" | "COp">`."""

    name = "gpu.mma_matrix"

    shape: ArrayAttr[IntAttr]
    element_type: Attribute
    operand: StringAttr

    def __init__(self, shape: Sequence[int], element_type: Attribute,
                 operand: MMAOperand | str):
        super().__init__(ArrayAttr(IntAttr(d) for d in shape), element_type,
                         StringAttr(str(operand)))

    def get_shape(self) -> tuple[int, int]:
        rows, cols = (d.data for d in self.shape)
        return rows, cols

    @property
    def use(self) -> MMAOperand:
        return MMAOperand(self.operand.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[Attribute, ...]:
        with parser.in_angle_brackets():
            dims = parser.parse_dimension_list()
            parser.parse_shape_delimiter()
            element = parser.parse_type()
            parser.parse_punctuation(",")
            operand = parser.parse_str_literal(" matrix operand (AOp, BOp or COp)")
        return ArrayAttr(IntAttr(d) for d in dims), element, StringAttr(operand)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string("x".join(str(d.data) for d in self.shape) + "x")
            printer.print_attribute(self.element_type)
            printer.print_string(f', "{self.operand.data}"')

    def verify(self) -> None:
        if len(self.shape) != 2 or any(d.data <= 0 for d in self.shape):
            raise VerifyException(
                f"!gpu.mma_matrix has 2 positive dimensions (rows x columns), "
                f"not {[d.data for d in self.shape]}"
            )
        if not isinstance(self.element_type, MMA_ELEMENT_TYPES):
            raise VerifyException(
                f"!gpu.mma_matrix elements must be f16, bf16 or f32 (the types "
                f"vyre executes), not {self.element_type}"
            )
        if self.operand.data not in MMA_OPERANDS:
            raise VerifyException(
                f'!gpu.mma_matrix operand must be "AOp", "BOp" or "COp", not '
                f'"{self.operand.data}"'
            )


def _matrix(value: SSAValue, what: str) -> MMAMatrixType:
    if not isinstance(value.type, MMAMatrixType):
        raise VerifyException(f"{what} must be a !gpu.mma_matrix, not {value.type}")
    return value.type


def _check_access(memref: SSAValue, indices: Sequence[SSAValue], matrix: MMAMatrixType,
                  lead_dimension: IntegerAttr, transpose: bool, verb: str) -> None:
    """What loads and stores share: one index a dimension, the memref's
    element type, a leading dimension that keeps the tile's rows apart."""
    memref_type = memref.type
    assert isinstance(memref_type, MemRefType)
    rank = memref_type.get_num_dims()
    preposition = "from" if verb == "loads" else "to"
    if len(indices) != rank:
        raise VerifyException(
            f"takes one index per dimension of {memref_type}: {rank}, not "
            f"{len(indices)}"
        )
    if memref_type.element_type != matrix.element_type:
        raise VerifyException(
            f"{verb} an {matrix.element_type} matrix {preposition} a memref of "
            f"{memref_type.element_type}: the element types must be the same "
            f"(convert the buffer, or use an {memref_type.element_type} matrix)"
        )
    rows, cols = matrix.get_shape()
    row_length = rows if transpose else cols
    lead = lead_dimension.value.data
    if lead < row_length:
        raise VerifyException(
            f"leadDimension {lead} is smaller than the {row_length} elements of a "
            f"stored tile row: the rows would overlap; pass the memref's row "
            f"length (at least {row_length})"
        )


def _access_properties(lead_dimension: int, transpose: bool) -> dict[str, Attribute]:
    properties: dict[str, Attribute] = {
        "leadDimension": IntegerAttr(lead_dimension, IndexType())}
    if transpose:
        properties["transpose"] = UnitAttr()
    return properties


@irdl_op_definition
class SubgroupMmaLoadMatrixOp(IRDLOperation):
    """The tile at `indices` of `srcMemref`, as a matrix of the subgroup."""

    name = "gpu.subgroup_mma_load_matrix"

    srcMemref = operand_def(MemRefType)
    indices = var_operand_def(IndexType())
    res = result_def(MMAMatrixType)
    leadDimension = prop_def(IntegerAttr[IndexType])
    transpose = opt_prop_def(UnitAttr)

    traits = traits_def(MemoryReadEffect())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$srcMemref `[` $indices `]` attr-dict `:` type($srcMemref) `->` type($res)"
    )

    def __init__(self, memref: SSAValue, indices: Sequence[SSAValue],
                 result_type: MMAMatrixType, lead_dimension: int,
                 transpose: bool = False):
        super().__init__(operands=[memref, indices], result_types=[result_type],
                         properties=_access_properties(lead_dimension, transpose))

    def verify_(self) -> None:
        _check_access(self.srcMemref, self.indices, _matrix(self.res, "the result"),
                      self.leadDimension, self.transpose is not None, "loads")


@irdl_op_definition
class SubgroupMmaStoreMatrixOp(IRDLOperation):
    """Stores a "COp" matrix to the tile at `indices` of `dstMemref`."""

    name = "gpu.subgroup_mma_store_matrix"

    src = operand_def(MMAMatrixType)
    dstMemref = operand_def(MemRefType)
    indices = var_operand_def(IndexType())
    leadDimension = prop_def(IntegerAttr[IndexType])
    transpose = opt_prop_def(UnitAttr)

    traits = traits_def(MemoryWriteEffect())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$src `,` $dstMemref `[` $indices `]` attr-dict `:` type($src) `,` "
        "type($dstMemref)"
    )

    def __init__(self, src: SSAValue, memref: SSAValue, indices: Sequence[SSAValue],
                 lead_dimension: int, transpose: bool = False):
        super().__init__(operands=[src, memref, indices],
                         properties=_access_properties(lead_dimension, transpose))

    def verify_(self) -> None:
        matrix = _matrix(self.src, "the stored value")
        if matrix.use != MMAOperand.C:
            raise VerifyException(
                f'stores only "COp" matrices (results of gpu.subgroup_mma_compute); '
                f'this one is "{matrix.use}"'
            )
        _check_access(self.dstMemref, self.indices, matrix, self.leadDimension,
                      self.transpose is not None, "stores")


@irdl_op_definition
class SubgroupMmaComputeOp(IRDLOperation):
    """D = A * B + C, each product and sum in the accumulator's type or wider
    (see interp/mma.py)."""

    name = "gpu.subgroup_mma_compute"

    opA = operand_def(MMAMatrixType)
    opB = operand_def(MMAMatrixType)
    # C and the result: one type (MLIR's AllTypesMatch)
    T: ClassVar = VarConstraint("T", base(MMAMatrixType))
    opC = operand_def(T)
    res = result_def(T)
    a_transpose = opt_prop_def(UnitAttr)
    b_transpose = opt_prop_def(UnitAttr)

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$opA `,` $opB `,` $opC attr-dict `:` type($opA) `,` type($opB) `->` type($res)"
    )

    def __init__(self, a: SSAValue, b: SSAValue, c: SSAValue):
        super().__init__(operands=[a, b, c], result_types=[c.type])

    def verify_(self) -> None:
        a, b, c = (_matrix(v, f"operand {n}") for v, n in
                   ((self.opA, "A"), (self.opB, "B"), (self.opC, "C")))
        if (a.use, b.use, c.use) != tuple(MMA_OPERANDS):
            raise VerifyException(
                f'operands must be in the order AOp, BOp, COp, not {a.use}, {b.use}, '
                f'{c.use} (load each with the matching !gpu.mma_matrix operand)'
            )
        (m, k), (k2, n), (m2, n2) = a.get_shape(), b.get_shape(), c.get_shape()
        if k != k2 or m != m2 or n != n2:
            raise VerifyException(
                f"operand shapes do not satisfy matmul constraints: A is {m}x{k}, "
                f"B {k2}x{n}, C {m2}x{n2}; A must be MxK, B KxN and C MxN"
            )
        if a.element_type != b.element_type:
            raise VerifyException(
                f"A and B must have the same element type, not {a.element_type} "
                f"and {b.element_type}"
            )
        for flag in ("a_transpose", "b_transpose"):
            if getattr(self, flag) is not None:
                raise VerifyException(
                    f"{flag} is not supported by vyre's executors: load the "
                    f"operand with `transpose` instead"
                )


@irdl_op_definition
class SubgroupMmaConstantMatrixOp(IRDLOperation):
    """A matrix whose every element is `value`."""

    name = "gpu.subgroup_mma_constant_matrix"

    value = operand_def(Attribute)
    res = result_def(MMAMatrixType)

    traits = traits_def(Pure())

    def __init__(self, value: SSAValue, result_type: MMAMatrixType,
                 attributes: dict[str, Attribute] | None = None):
        super().__init__(operands=[value], result_types=[result_type],
                         attributes=attributes)

    # `$value attr-dict : type($res)`, the value's type being the elements'
    # (MLIR's TypesMatchWith, which the declarative format cannot infer)
    @classmethod
    def parse(cls, parser: Parser) -> SubgroupMmaConstantMatrixOp:
        value = parser.parse_unresolved_operand()
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        type_pos = parser.pos
        result_type = parser.parse_type()
        if not isinstance(result_type, MMAMatrixType):
            parser.raise_error(f"expected a !gpu.mma_matrix type, not {result_type}",
                               type_pos)
        value = parser.resolve_operand(value, result_type.element_type)
        return cls(value, result_type, attributes)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.value)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.res.type)

    def verify_(self) -> None:
        matrix = _matrix(self.res, "the result")
        if self.value.type != matrix.element_type:
            raise VerifyException(
                f"the value has type {self.value.type}, the matrix elements "
                f"{matrix.element_type}: they must be the same"
            )


class MMAElementwise(StrEnum):
    """MLIR's `gpu::MMAElementwiseOp`: what subgroup_mma_elementwise does."""

    ADDF = "addf"
    MULF = "mulf"
    SUBF = "subf"
    MAXF = "maxf"
    MINF = "minf"
    DIVF = "divf"
    ADDI = "addi"
    MULI = "muli"
    SUBI = "subi"
    DIVS = "divs"
    DIVU = "divu"
    NEGATEF = "negatef"
    NEGATES = "negates"
    EXTF = "extf"


# what vyre executes: SPV_KHR_cooperative_matrix's arithmetic on whole
# matrices (no per-element max or min), on float matrices
ELEMENTWISE_ARITY = {
    MMAElementwise.ADDF: 2,
    MMAElementwise.SUBF: 2,
    MMAElementwise.MULF: 2,
    MMAElementwise.DIVF: 2,
    MMAElementwise.NEGATEF: 1,
}


@irdl_attr_definition
class MMAElementwiseAttr(EnumAttribute[MMAElementwise], SpacedOpaqueSyntaxAttribute):
    """`#gpu<mma_element_wise addf>`, as MLIR 22 wants it in the properties."""

    name = "gpu.mma_element_wise"


@irdl_op_definition
class SubgroupMmaElementwiseOp(IRDLOperation):
    """`gpu.subgroup_mma_elementwise KIND %args : (T, ...) -> T`: an
    element-wise operation on whole matrices."""

    name = "gpu.subgroup_mma_elementwise"

    args = var_operand_def(MMAMatrixType)
    res = result_def(MMAMatrixType)
    opType = prop_def(MMAElementwiseAttr)

    traits = traits_def(Pure())

    def __init__(self, kind: MMAElementwise | str, args: Sequence[SSAValue],
                 result_type: Attribute | None = None,
                 attributes: dict[str, Attribute] | None = None):
        super().__init__(
            operands=[args],
            result_types=[args[0].type if result_type is None else result_type],
            properties={"opType": MMAElementwiseAttr(MMAElementwise(kind))},
            attributes=attributes,
        )

    def verify_(self) -> None:
        kind = self.opType.data
        arity = ELEMENTWISE_ARITY.get(kind)
        if arity is None:
            raise VerifyException(
                f"vyre executes subgroup_mma_elementwise "
                f"{', '.join(ELEMENTWISE_ARITY)} only (float arithmetic on whole "
                f"cooperative matrices), not {kind}: store the matrix and compute "
                f"on its elements"
            )
        if len(self.args) != arity:
            raise VerifyException(
                f"{kind} takes {arity} matrix operand(s), not {len(self.args)}"
            )
        for arg in self.args:
            if arg.type != self.res.type:
                raise VerifyException(
                    f"{kind}'s operands and result have one type: an operand is "
                    f"{arg.type}, the result {self.res.type}"
                )

    @classmethod
    def parse(cls, parser: Parser) -> SubgroupMmaElementwiseOp:
        kind_pos = parser.pos
        kind = parser.parse_identifier(" element-wise operation")
        if kind not in tuple(MMAElementwise):
            parser.raise_error(
                f"element-wise operation must be one of "
                f"{', '.join(MMAElementwise)}", kind_pos)
        args = parser.parse_comma_separated_list(
            parser.Delimiter.NONE, parser.parse_unresolved_operand)
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        types_pos = parser.pos
        function = parser.parse_function_type()
        if len(function.inputs) != len(args) or len(function.outputs) != 1:
            parser.raise_error(
                f"expected ({', '.join(['type'] * len(args))}) -> type", types_pos)
        resolved = parser.resolve_operands(args, function.inputs.data, types_pos)
        return cls(kind, resolved, function.outputs.data[0], attributes)

    def print(self, printer: Printer) -> None:
        printer.print_string(f"  {self.opType.data} ")  # MLIR's two spaces
        printer.print_list(self.args, printer.print_operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : (")
        printer.print_list((a.type for a in self.args), printer.print_attribute)
        printer.print_string(") -> ")
        printer.print_attribute(self.res.type)


def _thread_local(matrix: MMAMatrixType, indices: Sequence[SSAValue], element: Attribute,
                  what: str) -> None:
    if len(indices) != 1:
        raise VerifyException(
            f"takes one index, the element's position in the lane's share, not "
            f"{len(indices)}")
    if element != matrix.element_type:
        raise VerifyException(
            f"{what} has type {element}, the matrix elements {matrix.element_type}: "
            f"they must be the same")


@irdl_op_definition
class SubgroupMmaExtractThreadLocalOp(IRDLOperation):
    """Element `indices[0]` of the calling lane's share of `matrix`: which
    row and column that is, the device decides (its accumulator layout,
    vyre_xdsl.mma_layout)."""

    name = "gpu.subgroup_mma_extract_thread_local"

    matrix = operand_def(MMAMatrixType)
    indices = var_operand_def(IndexType())
    res = result_def(Attribute)

    traits = traits_def(Pure())
    assembly_format = "$matrix `[` $indices `]` attr-dict `:` type($matrix) `->` type($res)"

    def __init__(self, matrix: SSAValue, index: SSAValue):
        assert isinstance(matrix.type, MMAMatrixType)
        super().__init__(operands=[matrix, [index]], result_types=[matrix.type.element_type])

    def verify_(self) -> None:
        _thread_local(_matrix(self.matrix, "the matrix"), self.indices, self.res.type,
                      "the result")


@irdl_op_definition
class SubgroupMmaInsertThreadLocalOp(IRDLOperation):
    """`matrix` with element `indices[0]` of the calling lane's share
    replaced by `value`."""

    name = "gpu.subgroup_mma_insert_thread_local"

    value = operand_def(Attribute)
    matrix = operand_def(MMAMatrixType)
    indices = var_operand_def(IndexType())
    res = result_def(MMAMatrixType)

    traits = traits_def(Pure())
    assembly_format = (
        "$value `,` $matrix `[` $indices `]` attr-dict `:` type($value) `,` "
        "type($matrix) `->` type($res)"
    )

    def __init__(self, value: SSAValue, matrix: SSAValue, index: SSAValue):
        super().__init__(operands=[value, matrix, [index]], result_types=[matrix.type])

    def verify_(self) -> None:
        matrix = _matrix(self.matrix, "the matrix")
        if self.res.type != matrix:
            raise VerifyException(
                f"the result has type {self.res.type}, the matrix {matrix}: they "
                f"must be the same")
        _thread_local(matrix, self.indices, self.value.type, "the value")


MMA_OPS = (
    SubgroupMmaLoadMatrixOp,
    SubgroupMmaStoreMatrixOp,
    SubgroupMmaComputeOp,
    SubgroupMmaConstantMatrixOp,
    SubgroupMmaElementwiseOp,
    SubgroupMmaExtractThreadLocalOp,
    SubgroupMmaInsertThreadLocalOp,
)


def load_into(ctx: Context) -> None:
    """Make the subgroup matrix ops and `!gpu.mma_matrix` parseable in
    `ctx` (once)."""
    loaded = {op.name for op in ctx.loaded_ops}
    for op in MMA_OPS:
        if op.name not in loaded:
            ctx.load_op(op)
    loaded = {attr.name for attr in ctx.loaded_attrs}
    for attr in (MMAMatrixType, MMAElementwiseAttr):
        if attr.name not in loaded:
            ctx.load_attr_or_type(attr)
