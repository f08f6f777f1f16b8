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

from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import Float32Type, IntegerType, i1, i32
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, SpacedOpaqueSyntaxAttribute, SSAValue
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    VarConstraint,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum


class ShuffleMode(StrEnum):
    """MLIR's `gpu::ShuffleMode`: which lane each lane reads."""

    XOR = "xor"
    UP = "up"
    DOWN = "down"
    IDX = "idx"


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

    T: ClassVar = VarConstraint("T", AnyAttr())
    value = operand_def(T)
    offset = operand_def(i32)
    width = operand_def(i32)
    result = result_def(T)
    valid = result_def(i1)
    mode = prop_def(ShuffleModeAttr)

    traits = traits_def(Pure())

    assembly_format = "$mode $value `,` $offset `,` $width attr-dict `:` type($value)"

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


def load_into(ctx: Context) -> None:
    """Make `gpu.shuffle` and its mode parseable in `ctx` (once)."""
    if ShuffleOp.name not in {op.name for op in ctx.loaded_ops}:
        ctx.load_op(ShuffleOp)
    if ShuffleModeAttr.name not in {attr.name for attr in ctx.loaded_attrs}:
        ctx.load_attr_or_type(ShuffleModeAttr)
