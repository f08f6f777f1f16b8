"""The ops that declare what a vyre program owns: `vyre.kernel` (a GPU
program), its storage buffers (`vyre.buffer`) and its workgroup scratch
arrays (`vyre.scratch`)."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    IntegerAttr,
    MemRefType,
    NoneAttr,
    StringAttr,
    SymbolNameConstraint,
    f32,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    prop_def,
    region_def,
    result_def,
    traits_def,
)
from xdsl.traits import HasParent, IsolatedFromAbove, NoTerminator, OpTrait, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

from vyre_xdsl.dialects.constants import BINDING_MAX, DEFAULT_LANES, U32_MAX
from vyre_xdsl.dialects.launch import BufferAccess, BufferAccessAttr
from vyre_xdsl.dialects.structure import (
    check_dominance,
    check_no_definitions,
    check_no_stores_to,
    check_shared_buffers,
)
from vyre_xdsl.dialects.vyre_checks import (
    FLOAT_BUFFER_ELEMENT_TYPES,
    Int64,
    NonNegativeInt64,
    Shape,
    SingleBlockBody,
    _check_buffer_vector,
    _check_f32_vector,
    _check_i32_vector,
    _element_count,
    _int,
    check_u32_product,
)


class Skeleton(OpTrait):
    """The computation of a vyre.kernel (vyre.tiled_online_softmax,
    vyre.merge_splits): a kernel holds at most one."""


@irdl_op_definition
class KernelOp(IRDLOperation):
    """A GPU program: `item_count` invocations in workgroups of
    `workgroup_size` lanes, over the buffers and scratch declared in its body.

        vyre.kernel @name items 4096 workgroup_size 64 { ... }
    """

    name = "vyre.kernel"

    sym_name = prop_def(SymbolNameConstraint())
    item_count = prop_def(IntegerAttr[I64])
    workgroup_size = prop_def(IntegerAttr[I64])
    body = region_def("single_block")

    traits = traits_def(IsolatedFromAbove(), NoTerminator(), SymbolOpInterface())

    assembly_format = (
        "$sym_name `items` custom<Int64>($item_count) "
        "`workgroup_size` custom<Int64>($workgroup_size) attr-dict-with-keyword "
        "custom<SingleBlockBody>($body)"
    )
    custom_directives = (Int64, SingleBlockBody)

    def __init__(
        self, name: str, item_count: int, workgroup_size: int = DEFAULT_LANES
    ):
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "item_count": IntegerAttr(item_count, i64),
                "workgroup_size": IntegerAttr(workgroup_size, i64),
            },
            regions=[Region(Block())],
        )

    @property
    def lanes(self) -> int:
        """Lanes of a workgroup: `workgroup_size` as an int."""
        return _int(self.workgroup_size)

    @property
    def items(self) -> int:
        """Invocations the kernel runs: `item_count` as an int."""
        return _int(self.item_count)

    @property
    def buffers(self) -> list[BufferOp]:
        return [op for op in self.body.block.ops if isinstance(op, BufferOp)]

    @property
    def scratch_arrays(self) -> list[ScratchOp]:
        return [op for op in self.body.block.ops if isinstance(op, ScratchOp)]

    def verify_(self) -> None:
        for field in ("item_count", "workgroup_size"):
            value = _int(getattr(self, field))
            if value < 1:
                raise VerifyException(f"'{field}' must be > 0, got {value}")
            if value > U32_MAX:
                raise VerifyException(
                    f"'{field}' = {value} does not fit in u32 (max {U32_MAX}); "
                    f"use a smaller value"
                )
        names: dict[str, Operation] = {}
        bindings: dict[int, str] = {}
        for op in self.body.block.ops:
            if not isinstance(op, BufferOp | ScratchOp):
                continue
            name = op.sym_name.data
            if name in names:
                raise VerifyException(
                    f"two buffers or scratch arrays are named '{name}'; give each "
                    f"a distinct name"
                )
            names[name] = op
            if isinstance(op, BufferOp):
                binding = _int(op.binding)
                if binding in bindings:
                    raise VerifyException(
                        f"buffers '{bindings[binding]}' and '{name}' both use "
                        f"binding {binding}; give each buffer its own binding"
                    )
                bindings[binding] = name
        self._verify_program_buffers()
        skeletons = [op for op in self.body.block.ops if op.has_trait(Skeleton)]
        if len(skeletons) > 1:
            raise VerifyException(
                f"kernel @{self.sym_name.data} holds {len(skeletons)} skeletons "
                f"({', '.join(op.name for op in skeletons)}); a kernel runs one: put "
                f"each in a vyre.kernel of its own (a module's kernels run in order)"
            )
        # what xDSL leaves unchecked: SSA order, definitions, stores to inputs
        check_no_definitions(self, f"kernel @{self.sym_name.data}")
        check_dominance(self)
        read_only = {b.result: b.sym_name.data for b in self.buffers if b.access.data == "read"}
        check_no_stores_to(self, read_only.get)

    def _verify_program_buffers(self) -> None:
        """The kernels of one module run as a program over one set of
        buffers (check_shared_buffers): checked against the earlier ones."""
        parent = self.parent_block()
        if parent is None:
            return
        earlier = []
        for kernel in parent.ops:
            if kernel is self:
                break
            if isinstance(kernel, KernelOp):
                earlier.append((kernel.sym_name.data, kernel.shared_buffers()))
        check_shared_buffers(earlier, self.sym_name.data, self.shared_buffers())

    def shared_buffers(self) -> list[tuple[str, int, str, tuple[int, ...], str]]:
        """Its buffers as the kernels of a program must agree on them."""
        return [
            (b.sym_name.data, _int(b.binding), b.access.data, tuple(b.logical_shape),
             str(b.result.type.element_type))
            for b in self.buffers
        ]


@irdl_op_definition
class BufferOp(IRDLOperation):
    """A storage buffer of the kernel: a flat array of f32, f16, bf16 or i32
    (BUFFER_ELEMENT_TYPES; loads of a half one are widened to f32 with
    arith.extf, stores to it rounded with arith.truncf; an i32 one is
    read-only, integers such as sequence lengths) bound at `binding`,
    read-only (`read`), written (`write`, an output) or `temp` (allocated
    by the runtime, zeroed, passing values between the kernels of one
    module: a kernel may read and write it), with its logical shape.

        %q = vyre.buffer "q" binding 0 read [64, 32] : memref<2048xf32>
    """

    name = "vyre.buffer"

    sym_name = prop_def(StringAttr)
    binding = prop_def(IntegerAttr[I64])
    access = prop_def(BufferAccessAttr)
    shape = prop_def(DenseArrayBase[I64])
    result = result_def(MemRefType)

    traits = traits_def(HasParent(KernelOp))

    assembly_format = (
        "$sym_name `binding` custom<NonNegativeInt64>($binding) $access "
        "custom<Shape>($shape) attr-dict `:` type($result)"
    )
    custom_directives = (NonNegativeInt64, Shape)

    def __init__(
        self, name: str, binding: int, access: str, shape: Sequence[int],
        element_type: Attribute = f32,
    ) -> None:
        count = 1
        for dim in shape:
            count *= dim
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "binding": IntegerAttr(binding, i64),
                "access": BufferAccessAttr(BufferAccess(access)),
                "shape": DenseArrayBase.from_list(i64, list(shape)),
            },
            result_types=[MemRefType(element_type, [count])],
        )
        self.result.name_hint = name

    @property
    def is_output(self) -> bool:
        return self.access.data == "write"

    @property
    def logical_shape(self) -> tuple[int, ...]:
        return tuple(int(v) for v in self.shape.get_values())

    def verify_(self) -> None:
        name = self.sym_name.data
        memref = self.result.type
        if isinstance(memref, MemRefType) and memref.element_type == i32:
            memref = _check_i32_vector(self.result, f"buffer '{name}'")
            if self.access.data != "read":
                raise VerifyException(
                    f"buffer '{name}' holds i32 and has access \"{self.access.data}\"; "
                    f"integer buffers are inputs only: use access \"read\""
                )
        else:
            memref = _check_buffer_vector(self.result, f"buffer '{name}'")
        if _int(self.binding) < 0:
            raise VerifyException(f"buffer '{name}' has a negative binding")
        if _int(self.binding) > BINDING_MAX:
            raise VerifyException(
                f"buffer '{name}' has binding {_int(self.binding)}; bindings are "
                f"32-bit in the lowered kernel: use one in [0, {BINDING_MAX}]"
            )
        shape = self.logical_shape
        if not shape or any(dim < 1 for dim in shape):
            raise VerifyException(
                f"buffer '{name}' has shape {list(shape)}; every dimension must be > 0"
            )
        count = check_u32_product(
            f"buffer '{name}' size",
            [(f"dim{i}", dim) for i, dim in enumerate(shape)],
            "shrink the buffer",
        )
        if count != _element_count(memref):
            raise VerifyException(
                f"buffer '{name}' has shape {list(shape)} ({count} elements) but "
                f"type {memref}; make the memref hold exactly {count} {memref.element_type}"
            )


def buffer_operand(
    value: SSAValue, what: str, access: tuple[str, ...], note: str = ""
) -> BufferOp:
    """The vyre.buffer behind the operand `what`, if its access is one of
    `access`; else a VerifyException (`note` says why)."""
    owner = value.owner
    if not isinstance(owner, BufferOp) or owner.access.data not in access:
        wanted = " or ".join(f'"{a}"' for a in access)
        raise VerifyException(f"{what} must be a vyre.buffer with access {wanted}{note}")
    return owner


def sized_buffer_operand(
    value: SSAValue, role: str, access: tuple[str, ...], count: int, needs: str,
    prefix: str = "", note: str = "", vector=_check_f32_vector, element: str = "f32",
) -> BufferOp:
    """`buffer_operand`, of `count` elements (`needs` says why that many),
    checked by `vector` (`_check_f32_vector`, or one for `element`)."""
    what = f"{prefix}operand '{role}'"
    owner = buffer_operand(value, what, access, note)
    got = _element_count(vector(value, what))
    if got != count:
        raise VerifyException(
            f"{prefix}buffer '{owner.sym_name.data}' ({role}) holds {got} {element} but "
            f"{needs}; size it memref<{count}x{element}>"
        )
    return owner


@irdl_op_definition
class ScratchOp(IRDLOperation):
    """A workgroup scratch array: one per workgroup, shared by its lanes.
    Besides the skeleton's three (operands of vyre.tiled_online_softmax), a
    decoder may declare its own and use them from its fragments (e.g. MLA's
    absorbed `q_lat` and `o_lat`); each holds at most u32 elements.

        %o_acc = vyre.scratch "o_acc" : memref<2048xf32>
    """

    name = "vyre.scratch"

    sym_name = prop_def(StringAttr)
    result = result_def(MemRefType)

    traits = traits_def(HasParent(KernelOp))

    assembly_format = "$sym_name attr-dict `:` type($result)"

    def __init__(self, name: str, count: int, element: Attribute = f32) -> None:
        super().__init__(
            properties={"sym_name": StringAttr(name)},
            result_types=[MemRefType(element, [count])],
        )
        self.result.name_hint = name

    def verify_(self) -> None:
        name = self.sym_name.data
        # f16, bf16: a tile that the subgroup matrix ops read (vyre-tensor-cores)
        memref = _check_f32_vector(self.result, f"scratch '{name}'",
                                   FLOAT_BUFFER_ELEMENT_TYPES)
        count = _element_count(memref)
        if count > U32_MAX:
            raise VerifyException(
                f"scratch '{name}' holds {count} f32, which does not fit in u32 "
                f"(max {U32_MAX}); shrink it (a per-lane scratch array holds "
                f"workgroup_size * its per-lane length)"
            )
        if not isinstance(memref.memory_space, NoneAttr):
            raise VerifyException(
                f"scratch '{name}' must be in the default memory space; "
                f"convert-vyre-to-gpu places it in workgroup memory"
            )

