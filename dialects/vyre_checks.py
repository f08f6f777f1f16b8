"""Checks and tables the vyre ops share: buffer element types, integer
literals in range, u32 products, the memref shapes of buffers and scratch."""

from __future__ import annotations

from collections.abc import Sequence

from typing import ClassVar

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, MemRefType, bf16, f16, f32, i32, i64
from xdsl.ir import Attribute, Block, SSAValue
from xdsl.irdl import IRDLOperation
from xdsl.irdl.declarative_assembly_format import (
    AttributeVariable,
    CustomDirective,
    ParsingState,
    PrintingState,
    RegionVariable,
    irdl_custom_directive,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from vyre_xdsl.dialects.constants import I64_MAX, I64_MIN, U32_MAX
from vyre_xdsl.dialects.launch import BufferAccess

# read: an input; write: an output; temp: a buffer the program allocates to
# pass values from one kernel of a module to a later one (neither passed in
# nor returned)
ACCESS_MODES = tuple(access.value for access in BufferAccess)
# The element types of a storage buffer, by the names the builders take
# (`dtype=`): inputs and outputs may be half precision, everything the
# recurrence keeps (scores, m, l, scratch, accumulator) stays f32.
# "i32" buffers hold integers a decoder reads (sequence lengths, page
# tables): read-only, loaded as i32 and converted with arith.index_cast.
BUFFER_ELEMENT_TYPES = {"f32": f32, "f16": f16, "bf16": bf16, "i32": i32}
FLOAT_BUFFER_ELEMENT_TYPES = (f32, f16, bf16)


def _int(attr: IntegerAttr) -> int:
    return attr.value.data



def parse_int_in_range(
    parser: Parser, what: str, low: int = I64_MIN, high: int = I64_MAX,
    type_name: str = "i64",
) -> int:
    """An integer literal within [low, high], else a ParseError at the literal
    that names `what`.  Custom parsers must not let xDSL's attribute
    constructors see an out-of-range value: they raise a plain ValueError,
    which plain xDSL parsing (xdsl-opt) would not turn into a diagnostic."""
    start = parser.pos
    value = parser.parse_integer(
        allow_boolean=False, allow_negative=True, context_msg=f" for {what}"
    )
    if not low <= value <= high:
        if value < 0 and low >= 0:
            problem = f"must not be negative, got {value}"
        else:
            problem = (
                f"{value} is out of range for type {type_name} "
                f"(expected {low}..{high})"
            )
        end = parser.pos
        text = parser.lexer.input.content[start:end]
        parser.raise_error(f"{what} {problem}", start, start + len(text.rstrip()))
    return value


def _element_count(memref: MemRefType) -> int:
    count = 1
    for dim in memref.get_shape():
        count *= dim
    return count


def check_u32_product(what: str, factors: Sequence[tuple[str, int]], fix: str) -> int:
    """The product of `factors`, or a VerifyException when it leaves u32."""
    product = 1
    for _, value in factors:
        product *= value
    if product > U32_MAX:
        expression = " * ".join(f"{name} ({value})" for name, value in factors)
        raise VerifyException(
            f"{what} = {expression} = {product} does not fit in u32 "
            f"(max {U32_MAX}); {fix}"
        )
    return product


def _check_f32_vector(
    value: SSAValue, role: str, element_types: Sequence[Attribute] = (f32,), example: str = ""
) -> MemRefType:
    memref = value.type
    if (
        not isinstance(memref, MemRefType)
        or memref.element_type not in element_types
        or len(memref.get_shape()) != 1
        or memref.get_shape()[0] < 1
    ):
        if len(element_types) == 1:
            raise VerifyException(
                f"{role} must be a static 1-D memref of f32 (e.g. memref<4096xf32>), "
                f"got {memref}"
            )
        *most, last = (str(t) for t in element_types)
        raise VerifyException(
            f"{role} must be a static 1-D memref of {', '.join(most)} or {last} "
            f"(e.g. memref<4096xf32>{example}), got {memref}"
        )
    return memref


def _check_buffer_vector(value: SSAValue, role: str) -> MemRefType:
    """A storage buffer's memref: static, 1-D, of f32, f16 or bf16."""
    return _check_f32_vector(value, role, FLOAT_BUFFER_ELEMENT_TYPES,
                             " or memref<4096xbf16>: the builders' dtype=")


def _check_i32_vector(value: SSAValue, role: str) -> MemRefType:
    """A static 1-D memref of i32 (an integer buffer)."""
    memref = value.type
    if (
        not isinstance(memref, MemRefType)
        or memref.element_type != i32
        or len(memref.get_shape()) != 1
        or memref.get_shape()[0] < 1
    ):
        raise VerifyException(
            f"{role} must be a static 1-D memref of i32 (e.g. memref<4xi32>), got {memref}"
        )
    return memref



@irdl_custom_directive
class Int64(CustomDirective):
    """An i64 property as a bare integer literal.  Out of range, it is a
    ParseError at the literal that names the op and field: the declarative
    format's own integers leave the range check to IntegerAttr, whose plain
    error plain xDSL parsing (xdsl-opt) reports without a location."""

    value: AttributeVariable
    LOW: ClassVar[int] = I64_MIN

    def what(self, state: ParsingState) -> str:
        op = state.op_type.name.split(".")[-1]
        return f"{op} {self.value.name.replace('_', ' ')}"

    def parse(self, parser: Parser, state: ParsingState) -> None:
        value = parse_int_in_range(parser, self.what(state), self.LOW)
        self.value.set(state, IntegerAttr(value, i64))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        attr = self.value.get(op)
        assert isinstance(attr, IntegerAttr)
        printer.print_string(str(attr.value.data))


@irdl_custom_directive
class OptionalInt64(Int64):
    """An optional i64 property as a bare integer literal: the anchor of an
    optional group, present where the property is set."""

    value: AttributeVariable

    def is_present(self, op: IRDLOperation) -> bool:
        return self.value.get(op) is not None

    def is_anchorable(self) -> bool:
        return True

    def is_optional_like(self) -> bool:
        return True


@irdl_custom_directive
class NonNegativeInt64(Int64):
    """An i64 property that must not be negative (a binding)."""

    value: AttributeVariable
    LOW: ClassVar[int] = 0


@irdl_custom_directive
class Shape(CustomDirective):
    """A DenseArrayBase of i64 as `[4, 2]`, each entry >= 0."""

    value: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        op = state.op_type.name.split(".")[-1]
        dims = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE,
            lambda: parse_int_in_range(parser, f"{op} shape entry", 0),
        )
        self.value.set(state, DenseArrayBase.from_list(i64, dims))

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        attr = self.value.get(op)
        assert isinstance(attr, DenseArrayBase)
        printer.print_string(f"[{', '.join(str(int(d)) for d in attr.get_values())}]")


@irdl_custom_directive
class SingleBlockBody(CustomDirective):
    """A region of one block with no arguments, where `{ }` parses as one
    empty block (the declarative format's region variable parses it as no
    block, which a single-block region refuses)."""

    body: RegionVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        region = parser.parse_region()
        if not region.blocks:
            region.add_block(Block())
        self.body.set(state, region)

    def print(self, printer: Printer, state: PrintingState, op: IRDLOperation) -> None:
        state.print_whitespace(printer)
        printer.print_region(self.body.get(op), print_entry_block_args=False)
