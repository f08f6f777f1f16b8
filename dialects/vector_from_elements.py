"""`vector.from_elements`, MLIR's vector built from scalars, which xDSL
0.74's vector dialect lacks.  Same name, operands and custom syntax as
upstream MLIR, so lowered IR that uses it still goes through `mlir-opt-22`:

    %v = vector.from_elements %a, %b, %c, %d : vector<4xbf16>

The matrix expansions build a lane's 16 bytes of 16-bit elements with it
before one `vector.store` writes them to workgroup memory.  It is loaded
into a context with `load_into(ctx)` (vyre_xdsl.make_context and vyre-opt
do), beside xDSL's own vector dialect.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.context import Context
from xdsl.dialects.builtin import VectorType
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class FromElementsOp(IRDLOperation):
    """`vector.from_elements %e0, ..., %eN-1 attr-dict : vector<NxT>`: a
    1-d vector of its operands, in order."""

    name = "vector.from_elements"

    elements = var_operand_def()
    result = result_def(VectorType)

    traits = traits_def(Pure())

    def __init__(self, elements: Sequence[SSAValue]) -> None:
        super().__init__(operands=[elements],
                         result_types=[VectorType(elements[0].type, [len(elements)])])

    def verify_(self) -> None:
        ty = self.result.type
        assert isinstance(ty, VectorType)
        if ty.get_shape() != (len(self.elements),):
            raise VerifyException(
                f"builds a vector of {len(self.elements)} elements, not {ty}")
        element: Attribute = ty.get_element_type()
        for value in self.elements:
            if value.type != element:
                raise VerifyException(f"an element of type {value.type} in a {ty}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.elements, printer.print_operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> FromElementsOp:
        elements = parser.parse_comma_separated_list(parser.Delimiter.NONE,
                                                     parser.parse_unresolved_operand)
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        at = parser.pos
        ty = parser.parse_type()
        if not isinstance(ty, VectorType) or len(ty.get_shape()) != 1:
            parser.raise_error(f"expected a 1-d vector type, got {ty}", at, parser.pos)
        operands = parser.resolve_operands(elements, [ty.get_element_type()] * len(elements),
                                           parser.pos)
        op = cls(operands)
        op.attributes |= attributes
        return op


def load_into(ctx: Context) -> None:
    """Make `vector.from_elements` parseable in `ctx` (once)."""
    if FromElementsOp.name not in {op.name for op in ctx.loaded_ops}:
        ctx.load_op(FromElementsOp)
