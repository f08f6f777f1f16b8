"""`gpu.shuffle`, MLIR's subgroup shuffle, which xDSL 0.74's gpu dialect
lacks.  Same name, operands and custom syntax as upstream MLIR, so lowered
IR that uses it still goes through `mlir-opt-22`:

    %r, %valid = gpu.shuffle xor %value, %offset, %width : f32

Lane l of the subgroup reads `value` from lane `l ^ offset` (xor), `l - offset`
(up), `l + offset` (down) or `offset` (idx); `valid` says whether that lane
is below `width`.  As in MLIR, `width` is the number of lanes taking part.
vyre's passes pass `gpu.subgroup_size` (index_cast to i32), the only width
our SPIR-V emitter accepts: SPIR-V's shuffles have no width, they span the
subgroup.  (MLIR's own SPIR-V conversion accepts only a constant width equal
to the target's subgroup size instead.)

The mode is MLIR's enum attribute, so the generic form is MLIR's too:

    %r, %valid = "gpu.shuffle"(%value, %offset, %width)
        <{mode = #gpu<shuffle_mode xor>}> : (f32, i32, i32) -> (f32, i1)

It is loaded into a context with `load_into(ctx)` (vyre_xdsl.make_context and
vyre-opt do), beside xDSL's own gpu dialect.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import Float32Type, IntegerType, i1, i32
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, SpacedOpaqueSyntaxAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum


class ShuffleMode(StrEnum):
    """MLIR's `gpu::ShuffleMode`: which lane each lane reads."""

    XOR = "xor"
    UP = "up"
    DOWN = "down"
    IDX = "idx"


SHUFFLE_MODES = tuple(ShuffleMode)


@irdl_attr_definition
class ShuffleModeAttr(EnumAttribute[ShuffleMode], SpacedOpaqueSyntaxAttribute):
    """`#gpu<shuffle_mode xor>`: MLIR 22 wants this attribute, not a string,
    in the op's properties (a string makes `mlir-opt` reject the generic
    form)."""

    name = "gpu.shuffle_mode"


@irdl_op_definition
class ShuffleOp(IRDLOperation):
    """`gpu.shuffle MODE %value, %offset, %width attr-dict : T` (T = f32 or
    i32)."""

    name = "gpu.shuffle"

    value = operand_def(Attribute)
    offset = operand_def(i32)
    width = operand_def(i32)
    result = result_def(Attribute)
    valid = result_def(i1)
    mode = prop_def(ShuffleModeAttr)

    traits = traits_def(Pure())

    def __init__(
        self,
        value: SSAValue,
        offset: SSAValue,
        width: SSAValue,
        mode: ShuffleMode = ShuffleMode.XOR,
        attributes: dict[str, Attribute] | None = None,
    ) -> None:
        super().__init__(
            operands=[value, offset, width],
            result_types=[value.type, i1],
            properties={"mode": ShuffleModeAttr(ShuffleMode(mode))},
            attributes=attributes,
        )

    def verify_(self) -> None:
        value_type = self.value.type
        if not (isinstance(value_type, Float32Type) or value_type == IntegerType(32)):
            raise VerifyException(f"shuffles an f32 or i32 value, not {value_type}")
        if self.result.type != value_type:
            raise VerifyException(
                f"result type {self.result.type} must be the value's type {value_type}"
            )

    @classmethod
    def parse(cls, parser: Parser) -> ShuffleOp:
        mode_pos = parser.pos
        mode = parser.parse_identifier(" shuffle mode")
        if mode not in SHUFFLE_MODES:
            parser.raise_error(
                f"shuffle mode must be one of {', '.join(SHUFFLE_MODES)}", mode_pos
            )
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        offset = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        width = parser.parse_unresolved_operand()
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        value_type = parser.parse_type()
        value, offset, width = parser.resolve_operands(
            [value, offset, width], [value_type, i32, i32], parser.pos
        )
        return cls(value, offset, width, ShuffleMode(mode), attributes)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.mode.data} ")
        printer.print_list((self.value, self.offset, self.width), printer.print_operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.value.type)


def load_into(ctx: Context) -> None:
    """Make `gpu.shuffle` and its mode parseable in `ctx` (once)."""
    if ShuffleOp.name not in {op.name for op in ctx.loaded_ops}:
        ctx.load_op(ShuffleOp)
    if ShuffleModeAttr.name not in {attr.name for attr in ctx.loaded_attrs}:
        ctx.load_attr_or_type(ShuffleModeAttr)
