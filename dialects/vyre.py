"""The `vyre` dialect: the tiled online-softmax skeleton as one op.

A `vyre.kernel` declares what a GPU program owns (storage buffers, workgroup
scratch arrays, workgroup size, item count).  Inside it, one
`vyre.tiled_online_softmax` holds the whole attention recurrence, with the two
decoder-specific fragments as regions: `scores` fills a tile's scores and
`update` folds the tile's values into the accumulator.  The stability helpers
of SEMANTICS.md are ops so that one change reaches every decoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    MemRefType,
    NoneAttr,
    StringAttr,
    UnitAttr,
    SymbolNameConstraint,
    bf16,
    f16,
    f32,
    i1,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    AnyAttr,
    AttrSizedOperandSegments,
    IRDLOperation,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    opt_region_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import (
    HasParent,
    IsolatedFromAbove,
    IsTerminator,
    NoTerminator,
    Pure,
    SymbolOpInterface,
)
from xdsl.utils.exceptions import VerifyException

from vyre_xdsl.dialects.launch import LAUNCH_ATTRIBUTES, BufferAccess
from vyre_xdsl.dialects.structure import (
    check_dominance,
    check_fragment_barriers,
    check_no_definitions,
    check_no_stores_to,
    check_shared_buffers,
)

U32_MAX = 2**32 - 1
BINDING_MAX = 2**31 - 1  # lowered kernels record bindings as i32
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


I64_MIN, I64_MAX = -(2**63), 2**63 - 1


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
    value: SSAValue, role: str, element_types: Sequence[Attribute] = (f32,)
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
        raise VerifyException(
            f"{role} must be a static 1-D memref of f32, f16 or bf16 (e.g. "
            f"memref<4096xf32> or memref<4096xbf16>: the builders' dtype=), got "
            f"{memref}"
        )
    return memref


def _check_buffer_vector(value: SSAValue, role: str) -> MemRefType:
    """A storage buffer's memref: static, 1-D, of f32, f16 or bf16."""
    return _check_f32_vector(value, role, FLOAT_BUFFER_ELEMENT_TYPES)


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


# --------------------------------------------------------------------------
# Kernel, buffers and scratch
# --------------------------------------------------------------------------


@irdl_op_definition
class KernelOp(IRDLOperation):
    """A GPU program: `item_count` invocations in workgroups of
    `workgroup_size` lanes, over the buffers and scratch declared in its body.

        vyre.kernel @name items 4096 workgroup_size 64 { ... }
    """

    name = "vyre.kernel"

    sym_name = prop_def(SymbolNameConstraint())
    item_count = prop_def(IntegerAttr)
    workgroup_size = prop_def(IntegerAttr)
    body = region_def("single_block")

    traits = traits_def(IsolatedFromAbove(), NoTerminator(), SymbolOpInterface())

    def __init__(self, name: str, item_count: int, workgroup_size: int = 64):
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "item_count": IntegerAttr(item_count, i64),
                "workgroup_size": IntegerAttr(workgroup_size, i64),
            },
            regions=[Region(Block())],
        )

    @classmethod
    def parse(cls, parser: Parser) -> KernelOp:
        name = parser.parse_symbol_name()
        parser.parse_keyword("items")
        item_count = parse_int_in_range(parser, "the kernel's item count")
        parser.parse_keyword("workgroup_size")
        workgroup_size = parse_int_in_range(parser, "the kernel's workgroup_size")
        attributes = parser.parse_optional_attr_dict_with_keyword()
        body = parser.parse_region()
        if not body.blocks:
            body.add_block(Block())
        return cls.create(
            properties={
                "sym_name": name,
                "item_count": IntegerAttr(item_count, i64),
                "workgroup_size": IntegerAttr(workgroup_size, i64),
            },
            attributes=attributes.data if attributes else {},
            regions=[body],
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string(
            f" items {_int(self.item_count)} workgroup_size {_int(self.workgroup_size)}"
        )
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)

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
        skeletons = [
            op for op in self.body.block.ops
            if isinstance(op, TiledOnlineSoftmaxOp | MergeSplitsOp)
        ]
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
    binding = prop_def(IntegerAttr)
    access = prop_def(StringAttr)
    shape = prop_def(DenseArrayBase)
    result = result_def(MemRefType)

    traits = traits_def(HasParent(KernelOp))

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
                "access": StringAttr(access),
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
        if self.access.data not in ACCESS_MODES:
            raise VerifyException(
                f"buffer '{name}' has access \"{self.access.data}\"; use \"read\" "
                f"for an input, \"write\" for an output or \"temp\" for a buffer "
                f"that passes values between kernels"
            )
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

    @classmethod
    def parse(cls, parser: Parser) -> BufferOp:
        name = parser.parse_str_literal(" for the buffer name")
        parser.parse_keyword("binding", " after the buffer name")
        binding = parse_int_in_range(parser, "the buffer binding", 0)
        access = parser.parse_keyword_in(ACCESS_MODES, " for the buffer access")
        shape = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE,
            lambda: parse_int_in_range(parser, "a buffer shape entry", 0),
        )
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        result_type = parser.parse_type()
        op = cls.create(
            properties={
                "sym_name": StringAttr(name),
                "binding": IntegerAttr(binding, i64),
                "access": StringAttr(access),
                "shape": DenseArrayBase.from_list(i64, shape),
            },
            attributes=attrs,
            result_types=[result_type],
        )
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.sym_name.data)
        printer.print_string(f" binding {_int(self.binding)} {self.access.data} [")
        printer.print_string(", ".join(str(d) for d in self.logical_shape))
        printer.print_string("]")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)


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

    def __init__(self, name: str, count: int) -> None:
        super().__init__(
            properties={"sym_name": StringAttr(name)},
            result_types=[MemRefType(f32, [count])],
        )
        self.result.name_hint = name

    def verify_(self) -> None:
        name = self.sym_name.data
        memref = _check_f32_vector(self.result, f"scratch '{name}'")
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


# --------------------------------------------------------------------------
# The skeleton
# --------------------------------------------------------------------------

SCORES_ARGS = ("item", "lane", "tile_start", "tile_len", "q_scratch", "score_tile")
UPDATE_ARGS = (
    "item",
    "lane",
    "tile_start",
    "tile_len",
    "m_new",
    "rescale",
    "score_tile",
    "o_acc",
)
MASK_ARGS = ("item", "lane", "kv_idx")
PROLOGUE_ARGS = ("item", "lane", "q_scratch", "o_acc")
EPILOGUE_ARGS = ("item", "lane", "o_acc")
SHAPE_FIELDS = ("item_count", "seq_len", "head_dim", "tile_size", "tile_count")

# Values of the `tile_classes` table: what a (query block, key tile) pair is.
TILE_EMPTY, TILE_FULL, TILE_PARTIAL = 0, 1, 2
TILE_CLASS_NAMES = {TILE_EMPTY: "empty", TILE_FULL: "full", TILE_PARTIAL: "partial"}


# With `dim_parts P`, an item's head dims are dealt to its P lanes in chunks
# of DIM_CHUNK (one vec4): dim d belongs to part (d // DIM_CHUNK) % P, so
# that the lanes of an item read neighbouring chunks of a staged K/V row
# (other banks of workgroup memory) rather than rows' far halves (the same
# banks: a contiguous half per lane ran FA2 at D=64 1.7 times slower).
DIM_CHUNK = 4


def part_dims(head_dim: int, parts: int, part: int) -> list[int]:
    """The dims that `part` of `parts` owns with `dim_parts`, in the order
    of its slots (slot i of its q_scratch and o_acc slices holds the i-th)."""
    if parts == 1:
        return list(range(head_dim))
    stride = parts * DIM_CHUNK
    return [
        first + part * DIM_CHUNK + e
        for first in range(0, head_dim, stride)
        for e in range(DIM_CHUNK)
    ]


def region_types(
    q_scratch: SSAValue, score_tile: SSAValue, o_acc: SSAValue
) -> tuple[list[Attribute], list[Attribute]]:
    """The argument types of the `scores` and `update` regions."""
    index = IndexType()
    return (
        [index] * 4 + [q_scratch.type, score_tile.type],
        [index] * 4 + [f32, f32, score_tile.type, o_acc.type],
    )


def hook_types(q_scratch: SSAValue, o_acc: SSAValue) -> tuple[list[Attribute], list[Attribute]]:
    """The argument types of the `prologue` and `epilogue` regions."""
    index = IndexType()
    return [index, index, q_scratch.type, o_acc.type], [index, index, o_acc.type]


def _is_trivial(region: Region) -> bool:
    """A hook region that only yields (printed by omission)."""
    return isinstance(region.block.first_op, YieldOp)


def trivial_hook(arg_types: Sequence[Attribute], names: Sequence[str]) -> Region:
    block = Block(arg_types=arg_types)
    for arg, arg_name in zip(block.args, names, strict=True):
        arg.name_hint = arg_name
    block.add_op(YieldOp())
    return Region(block)


def tile_count_for(seq_len: int, tile_size: int) -> int:
    return -(-seq_len // tile_size)


def _parse_region_with_args(
    parser: Parser, region_name: str, arg_types: Sequence[Attribute]
) -> Region:
    """`(%a, %b, ...) { ... }`: argument names without types (they follow from
    the op's operands), then the region."""
    names = parser.parse_comma_separated_list(
        parser.Delimiter.PAREN, lambda: parser.parse_argument(expect_type=False)
    )
    if len(names) != len(arg_types):
        parser.raise_error(
            f"region '{region_name}' takes {len(arg_types)} arguments, got {len(names)}"
        )
    return parser.parse_region(
        [name.resolve(t) for name, t in zip(names, arg_types, strict=True)]
    )


@irdl_op_definition
class TiledOnlineSoftmaxOp(IRDLOperation):
    """The tiled online-softmax recurrence of SEMANTICS.md for every item.

    Per item: load the query row into `q_scratch`, then for each key tile run
    `scores` (fills `score_tile[lane*tile_size + j]` for j < tile_len), take
    the tile max, rescale, tile sum and `l`, run `update` (folds the tile's
    values into `o_acc`), and finally write `out = flush_tiny(o_acc / denom)`.

    Region arguments (all `index` but `m_new`/`rescale`: f32; scratch arrays
    are whole, a lane owns `lane * stride + offset`):
      scores(%item, %lane, %tile_start, %tile_len, %q_scratch, %score_tile)
      update(%item, %lane, %tile_start, %tile_len, %m_new, %rescale,
             %score_tile, %o_acc)
      mask(%item, %lane, %kv_idx)            (optional; yields an i1)
      prologue(%item, %lane, %q_scratch, %o_acc)
      epilogue(%item, %lane, %o_acc)

    The `prologue` runs once per item after the query row is loaded and
    `o_acc` zeroed, before the first tile; the `epilogue` after the last
    tile, before the output is written (a decoder that accumulates in
    another space projects into `o_acc` there).  Both are printed only when
    they do something; by default they only yield.

    With a `mask` region, key `kv_idx` counts for `item` only where the mask
    yields true: masked pairs enter neither the tile max, nor the tile sum,
    nor the update (the update reads weights through `vyre.tile_weight`,
    which is exactly 0 for them).  `tile_classes` (optional, i8, one entry
    per (query block of `workgroup_size` items, key tile), row-major) says
    which tiles are empty (0: skipped), full (1: no mask code) or partial
    (2: masked); without it every tile is partial.

    `exp2` (a unit property, set by vyre-use-exp2) says the scores are in
    log2 units: the recurrence then uses `math.exp2` where it uses `math.exp`.

    `kv_splits P` (set by vyre-split-kv; flash-decoding) gives each item P
    consecutive invocations of one workgroup: invocation `item * P + s`
    runs the recurrence (prologue to epilogue) over the s-th of P contiguous
    runs of tiles, and the P partial (m, l, o_acc) are merged in workgroup
    memory.  The kernel then runs `item_count * P` invocations.

    `partials(%m, %l)` (with kv_splits; set by vyre-split-kv{merge=kernel})
    leaves the merge to a later kernel (`vyre.merge_splits`): invocation i
    stores its m and l at `m[i]`, `l[i]` and its o_acc, not divided, as row
    i of `out`, which then holds item_count * P rows.  Nothing is shared
    between an item's invocations, so P need not divide the workgroup.

    `lse(%lse)` (optional) also writes each item's log-sum-exp, the natural
    log of its softmax denominator, `m + log(l)` (-inf where every key was
    dropped), to `lse[item]`.

    `kv_lens(%kv_lens) ... items_per_seq N` (optional, together): ragged
    key counts at run time.  `%kv_lens` is a read-only i32 buffer of
    item_count / N entries; item i belongs to sequence `i / N` (with
    kv_splits or dim_parts: the item, not the invocation), whose key count
    is `L = clamp(kv_lens[i / N], 0, seq_len)` (`seq_len` is then the most
    keys any sequence has).  The item runs `ceil(L / tile_size)` tiles,
    the last cut at L; a sequence of 0 keys outputs 0 (lse -inf).  The
    fragments see the same `tile_start`/`tile_len` as ever; a mask that
    depends on L loads it itself.  `tile_classes` cannot be given with it
    (a mask is evaluated on every tile: the classes would depend on L).

    `v_head_dim D` (optional; head_dim without
    it) is the width of the value rows: `o_acc` and `out` hold rows of D,
    the query rows stay head_dim wide.

    `dim_parts P` (set by vyre-split-head-dim) gives each item (each
    split, with partials) P consecutive invocations that split its head
    dims: invocation `item * P + p` (`(item * kv_splits + s) * P + p`;
    `lane % P == p`) owns the dims `part_dims(head_dim, P, p)`, and its
    q_scratch and o_acc slices hold only those, head_dim / P each (slot i:
    the i-th of its dims).  The scores fragment must give every part the
    whole score (vyre-split-head-dim adds the parts' dot products with
    gpu.shuffle), the update fragment updates the lane's own dims; a split's
    partial o row is written by its parts, m and l by part 0.  The kernel
    then runs `item_count * kv_splits * P` invocations.

    Accessors: `shape()`, `has_mask`, `tile_class_table()`, `exp2`,
    `q/out/q_scratch/score_tile/o_acc` (operands), `scores/update/mask/
    prologue/epilogue` (regions).
    """

    name = "vyre.tiled_online_softmax"

    q = operand_def(MemRefType)
    out = operand_def(MemRefType)
    q_scratch = operand_def(MemRefType)
    score_tile = operand_def(MemRefType)
    o_acc = operand_def(MemRefType)
    # (m, l) buffers of a split whose merge is another kernel's
    partials = var_operand_def(MemRefType)
    # where the log-sum-exp of each item goes, if anywhere
    lse = opt_operand_def(MemRefType)
    # each sequence's key count at run time (i32), if ragged
    kv_lens = opt_operand_def(MemRefType)

    item_count = prop_def(IntegerAttr)
    seq_len = prop_def(IntegerAttr)
    head_dim = prop_def(IntegerAttr)
    tile_size = prop_def(IntegerAttr)
    tile_count = prop_def(IntegerAttr)

    tile_classes = opt_prop_def(DenseArrayBase)
    # Scores are in log2 units (log2(e) folded into them): the recurrence
    # uses exp2 (set by vyre-use-exp2).
    exp2 = opt_prop_def(UnitAttr)
    # Each item's tiles are split over this many consecutive lanes, whose
    # partial results are merged (set by vyre-split-kv).
    kv_splits = opt_prop_def(IntegerAttr)
    # Each item's head dims are split over this many consecutive lanes (set
    # by vyre-split-head-dim).
    dim_parts = opt_prop_def(IntegerAttr)
    # The width of the value rows (o_acc, out) where it is not head_dim.
    v_head_dim = opt_prop_def(IntegerAttr)
    # Items per sequence, with kv_lens: item i's key count is kv_lens[i / N].
    items_per_seq = opt_prop_def(IntegerAttr)

    scores = region_def("single_block")
    update = region_def("single_block")
    prologue = region_def("single_block")
    epilogue = region_def("single_block")
    mask = opt_region_def("single_block")

    traits = traits_def(HasParent(KernelOp))
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(
        self,
        q: SSAValue,
        out: SSAValue,
        q_scratch: SSAValue,
        score_tile: SSAValue,
        o_acc: SSAValue,
        *,
        item_count: int,
        seq_len: int,
        head_dim: int,
        tile_size: int,
        with_mask: bool = False,
        tile_classes: Sequence[int] | None = None,
        v_head_dim: int | None = None,
        lse: SSAValue | None = None,
        kv_lens: SSAValue | None = None,
        items_per_seq: int | None = None,
    ) -> None:
        scores_types, update_types = region_types(q_scratch, score_tile, o_acc)
        scores = Region(Block(arg_types=scores_types))
        update = Region(Block(arg_types=update_types))
        named = [(scores, SCORES_ARGS), (update, UPDATE_ARGS)]
        mask: list[Region] = []
        if with_mask:
            mask = [Region(Block(arg_types=[IndexType()] * 3))]
            named.append((mask[0], MASK_ARGS))
        for region, names in named:
            for arg, arg_name in zip(region.block.args, names, strict=True):
                arg.name_hint = arg_name
        prologue_types, epilogue_types = hook_types(q_scratch, o_acc)
        prologue = trivial_hook(prologue_types, PROLOGUE_ARGS)
        epilogue = trivial_hook(epilogue_types, EPILOGUE_ARGS)
        values = {
            "item_count": item_count,
            "seq_len": seq_len,
            "head_dim": head_dim,
            "tile_size": tile_size,
            "tile_count": tile_count_for(seq_len, tile_size),
        }
        properties: dict[str, Attribute] = {
            k: IntegerAttr(v, i64) for k, v in values.items()
        }
        if tile_classes is not None:
            properties["tile_classes"] = DenseArrayBase.from_list(i8, list(tile_classes))
        if v_head_dim is not None and v_head_dim != head_dim:
            properties["v_head_dim"] = IntegerAttr(v_head_dim, i64)
        if items_per_seq is not None:
            properties["items_per_seq"] = IntegerAttr(items_per_seq, i64)
        super().__init__(
            operands=[q, out, q_scratch, score_tile, o_acc, [], [lse] if lse else [],
                      [kv_lens] if kv_lens else []],
            properties=properties,
            regions=[scores, update, prologue, epilogue, mask],
        )

    def shape(self) -> dict[str, int]:
        """item_count, seq_len, head_dim, tile_size, tile_count as ints."""
        return {field: _int(getattr(self, field)) for field in SHAPE_FIELDS}

    @property
    def v_dim(self) -> int:
        """The width of the value rows: o_acc's slices and out's rows."""
        return _int(self.v_head_dim) if self.v_head_dim is not None else _int(self.head_dim)

    def set_partials(self, out: SSAValue, m: SSAValue, l: SSAValue) -> None:  # noqa: E741
        """Leave the merge to another kernel: write partial rows to `out`,
        m and l to their buffers (vyre-split-kv{merge=kernel})."""
        lse = [self.lse] if self.lse is not None else []
        kv_lens = [self.kv_lens] if self.kv_lens is not None else []
        self.operands = [self.q, out, self.q_scratch, self.score_tile, self.o_acc, m, l,
                         *lse, *kv_lens]
        self.properties["operandSegmentSizes"] = DenseArrayBase.from_list(
            i32, [1, 1, 1, 1, 1, 2, len(lse), len(kv_lens)]
        )

    def score_stride(self) -> int:
        """Elements of score_tile per lane: tile_size, or more after
        vyre-retile shrank the tiles (lane l's scores start at l * stride)."""
        kernel = self.parent_op()
        lanes = _int(kernel.workgroup_size) if isinstance(kernel, KernelOp) else 64
        return _element_count(self.score_tile.type) // lanes

    @property
    def splits(self) -> int:
        """How many invocations share an item's tiles (1: the seed's one)."""
        return 1 if self.kv_splits is None else _int(self.kv_splits)

    @property
    def parts(self) -> int:
        """Over how many invocations an item's head dims are split (1: none)."""
        return 1 if self.dim_parts is None else _int(self.dim_parts)

    @property
    def lanes_per_item(self) -> int:
        """Invocations per item: its kv splits or its dim parts."""
        return self.splits * self.parts

    @property
    def merges_in_kernel(self) -> bool:
        """Whether its split partials are left for a vyre.merge_splits kernel."""
        return len(self.partials) > 0

    @property
    def ragged(self) -> bool:
        """Whether each sequence's key count is read at run time (kv_lens)."""
        return self.kv_lens is not None

    @property
    def seq_items(self) -> int:
        """Items per sequence (items_per_seq), with kv_lens."""
        assert self.items_per_seq is not None
        return _int(self.items_per_seq)

    @property
    def has_mask(self) -> bool:
        """Whether the op has a `mask` region."""
        return self.mask is not None

    def tile_class_table(self) -> list[list[int]]:
        """`tile_classes` as rows [query block][tile]; every tile partial when
        the attribute is absent (empty tiles only exist with a mask)."""
        shape = self.shape()
        kernel = self.parent_op()
        lanes = _int(kernel.workgroup_size) if isinstance(kernel, KernelOp) else 64
        blocks = -(-shape["item_count"] // lanes)
        tiles = shape["tile_count"]
        if self.tile_classes is None:
            fill = TILE_PARTIAL if self.has_mask else TILE_FULL
            return [[fill] * tiles for _ in range(blocks)]
        flat = [int(v) for v in self.tile_classes.get_values()]
        return [flat[b * tiles : (b + 1) * tiles] for b in range(blocks)]

    # -- verification ------------------------------------------------------

    def verify_(self) -> None:
        shape = self.shape()
        for field in SHAPE_FIELDS[:4]:
            if shape[field] < 1:
                raise VerifyException(
                    f"'{field}' must be > 0, got {shape[field]}; every dimension "
                    f"of the skeleton must be positive"
                )
            if shape[field] > U32_MAX:
                raise VerifyException(
                    f"'{field}' = {shape[field]} does not fit in u32 (max {U32_MAX}); "
                    f"use a smaller value"
                )
        expected_tiles = tile_count_for(shape["seq_len"], shape["tile_size"])
        if shape["tile_count"] != expected_tiles:
            raise VerifyException(
                f"'tile_count' is {shape['tile_count']} but ceil(seq_len / tile_size)"
                f" = ceil({shape['seq_len']} / {shape['tile_size']}) = "
                f"{expected_tiles}; set tile_count {expected_tiles}"
            )
        kernel = self.parent_op()
        assert isinstance(kernel, KernelOp)
        lanes = _int(kernel.workgroup_size)
        self._verify_splits(shape, lanes)
        self._verify_dim_parts(shape, lanes)
        invocations = shape["item_count"] * self.lanes_per_item
        if invocations != _int(kernel.item_count):
            if self.lanes_per_item == 1:
                raise VerifyException(
                    f"'item_count' is {shape['item_count']} but the enclosing kernel "
                    f"runs {_int(kernel.item_count)} items; make them equal"
                )
            field, value = (
                ("kv_splits", self.splits) if self.splits > 1 else ("dim_parts", self.parts)
            )
            raise VerifyException(
                f"with {field} {value} the kernel runs item_count * "
                f"{field} = {invocations} invocations, "
                f"not {_int(kernel.item_count)}; set the kernel's items to that"
            )
        self._verify_sizes(shape, lanes)
        scores_types, update_types = region_types(
            self.q_scratch, self.score_tile, self.o_acc
        )
        prologue_types, epilogue_types = hook_types(self.q_scratch, self.o_acc)
        self._verify_region(self.scores, "scores", SCORES_ARGS, scores_types)
        self._verify_region(self.update, "update", UPDATE_ARGS, update_types)
        self._verify_region(self.prologue, "prologue", PROLOGUE_ARGS, prologue_types)
        self._verify_region(self.epilogue, "epilogue", EPILOGUE_ARGS, epilogue_types)
        for region in (self.scores, self.update, self.prologue, self.epilogue):
            yielded = region.block.last_op
            if isinstance(yielded, YieldOp) and yielded.values:
                raise VerifyException(
                    "the scores, update, prologue and epilogue regions end with a "
                    "plain vyre.yield (no values); only the mask region yields an i1"
                )
        check_fragment_barriers(
            [r for r in (self.scores, self.update, self.prologue, self.epilogue, self.mask)
             if r is not None],
            invocations % lanes == 0, f"{invocations} invocations, {lanes} lanes a workgroup",
        )
        if self.has_mask:
            self._verify_mask(lanes)
        elif self.tile_classes is not None:
            raise VerifyException(
                "'tile_classes' needs a mask region: without a mask every tile is full"
            )

    def _verify_splits(self, shape: dict[str, int], lanes: int) -> None:
        splits = self.splits
        if self.merges_in_kernel:
            self._verify_partials(shape)
        if splits == 1:
            return
        if self.has_mask:
            raise VerifyException(
                "'kv_splits' cannot be combined with a mask region (tile skipping "
                "is decided per block of items, not per split)"
            )
        if splits > shape["tile_count"]:
            raise VerifyException(
                f"'kv_splits' is {splits} but there are only {shape['tile_count']} "
                f"tiles to split; use at most {shape['tile_count']}"
            )
        if self.merges_in_kernel:
            return  # no workgroup merge: any split count
        if splits < 1 or lanes % splits:
            raise VerifyException(
                f"'kv_splits' is {splits}; it must divide the workgroup size "
                f"({lanes}), so that an item's splits share a workgroup"
            )
        if (shape["item_count"] * splits) % lanes:
            raise VerifyException(
                f"with kv_splits {splits}, item_count * kv_splits = "
                f"{shape['item_count'] * splits} must be a multiple of the workgroup "
                f"size ({lanes}): every lane takes part in the merge's barrier"
            )

    def _verify_dim_parts(self, shape: dict[str, int], lanes: int) -> None:
        parts = self.parts
        if self.dim_parts is None:
            return
        if parts < 2 or parts & (parts - 1):
            raise VerifyException(
                f"'dim_parts' is {parts}; it must be a power of two >= 2 (the "
                f"parts' dot products are added pairwise across lanes)"
            )
        if self.splits > 1 and not self.merges_in_kernel:
            raise VerifyException(
                "'dim_parts' combines with 'kv_splits' only where the splits' "
                "partials are merged by another kernel (partials(%m, %l)): the "
                "merge in workgroup memory takes whole rows"
            )
        if self.v_dim != shape["head_dim"]:
            raise VerifyException(
                f"'dim_parts' needs value rows as wide as the query rows (v_head_dim "
                f"{self.v_dim}, head_dim {shape['head_dim']}): a lane keeps the same "
                f"dims of both"
            )
        if shape["head_dim"] % (parts * DIM_CHUNK):
            raise VerifyException(
                f"'dim_parts' is {parts} but head_dim ({shape['head_dim']}) is not a "
                f"multiple of dim_parts * {DIM_CHUNK} = {parts * DIM_CHUNK} (the "
                f"parts take turns over chunks of {DIM_CHUNK} dims)"
            )
        if lanes % parts:
            raise VerifyException(
                f"'dim_parts' is {parts}; it must divide the workgroup size "
                f"({lanes}), so that an item's parts share a subgroup"
            )
        if not (_is_trivial(self.prologue) and _is_trivial(self.epilogue)):
            raise VerifyException(
                "'dim_parts' cannot be combined with a prologue or epilogue (the "
                "hooks see the whole o_acc of an item)"
            )

    def _verify_partials(self, shape: dict[str, int]) -> None:
        if len(self.partials) != 2 or self.splits == 1:
            raise VerifyException(
                "'partials' takes two buffers, (m, l), and needs kv_splits >= 2: "
                "they hold the partial results of an item's splits"
            )
        wanted = shape["item_count"] * self.splits
        for role, value in zip(("m", "l"), self.partials, strict=True):
            owner = value.owner
            if not isinstance(owner, BufferOp) or owner.access.data != "temp":
                raise VerifyException(
                    f"partials operand '{role}' must be a vyre.buffer with access "
                    f"\"temp\" (a later kernel merges it)"
                )
            count = _element_count(_check_f32_vector(value, f"partials operand '{role}'"))
            if count != wanted:
                raise VerifyException(
                    f"partials buffer '{owner.sym_name.data}' ({role}) holds {count} "
                    f"f32 but item_count * kv_splits = {wanted}; size it "
                    f"memref<{wanted}xf32>"
                )

    def _verify_mask(self, lanes: int) -> None:
        assert self.mask is not None
        self._verify_region(self.mask, "mask", MASK_ARGS, [IndexType()] * 3)
        yielded = self.mask.block.last_op
        assert isinstance(yielded, YieldOp)
        if len(yielded.values) != 1 or yielded.values[0].type != i1:
            raise VerifyException(
                "region 'mask' must end with `vyre.yield %keep : i1` (true keeps "
                "the (item, kv_idx) pair)"
            )
        score_tile = self.update.block.args[UPDATE_ARGS.index("score_tile")]
        if score_tile.first_use is not None:
            raise VerifyException(
                "with a mask, the update region must read weights through "
                "vyre.tile_weight (exactly 0 for masked keys), not load "
                "%score_tile itself"
            )
        if self.tile_classes is not None:
            shape = self.shape()
            blocks = -(-shape["item_count"] // lanes)
            wanted = blocks * shape["tile_count"]
            values = [int(v) for v in self.tile_classes.get_values()]
            if len(values) != wanted:
                raise VerifyException(
                    f"'tile_classes' has {len(values)} entries but there are "
                    f"{blocks} query blocks x {shape['tile_count']} tiles = {wanted}"
                )
            if any(v not in TILE_CLASS_NAMES for v in values):
                raise VerifyException(
                    "'tile_classes' entries must be 0 (empty), 1 (full) or 2 (partial)"
                )

    def _verify_sizes(self, shape: dict[str, int], lanes: int) -> None:
        v_name = "head_dim" if self.v_head_dim is None else "v_head_dim"
        widths = {"q": ("head_dim", shape["head_dim"]), "out": (v_name, self.v_dim)}
        out_rows = shape["item_count"] * (self.splits if self.merges_in_kernel else 1)
        for role, value, access in (("q", self.q, "read"), ("out", self.out, "write")):
            width_name, width = widths[role]
            row_elements = check_u32_product(
                "q/out size" if self.v_head_dim is None else f"{role} size",
                [("item_count", shape["item_count"]), (width_name, width)],
                f"reduce item_count or {width_name}",
            )
            owner = value.owner
            if not isinstance(owner, BufferOp) or owner.access.data not in (access, "temp"):
                raise VerifyException(
                    f"operand '{role}' must be a vyre.buffer with access "
                    f"\"{access}\" (or \"temp\", between the kernels of a module)"
                )
            memref_type = _check_buffer_vector(value, f"operand '{role}'")
            count, element = _element_count(memref_type), memref_type.element_type
            if role == "out" and out_rows != shape["item_count"]:
                if count != out_rows * width:
                    raise VerifyException(
                        f"buffer '{owner.sym_name.data}' (out) holds {count} {element} "
                        f"but with partials it takes one row per split: item_count * "
                        f"kv_splits * {width_name} = {out_rows * width}"
                    )
            elif count != row_elements:
                raise VerifyException(
                    f"buffer '{owner.sym_name.data}' ({role}) holds {count} {element} "
                    f"but item_count * {width_name} = {row_elements}; size it "
                    f"memref<{row_elements}x{element}>"
                )
        if self.lse is not None:
            self._verify_lse(shape)
        self._verify_kv_lens(shape)
        parts = self.parts
        q_dims = ("head_dim", shape["head_dim"]) if parts == 1 else (
            "head_dim / dim_parts", shape["head_dim"] // parts)
        o_dims = (v_name, self.v_dim) if parts == 1 else (
            f"{v_name} / dim_parts", self.v_dim // parts)
        for role, value, stride in (
            ("q_scratch", self.q_scratch, q_dims),
            ("score_tile", self.score_tile, ("tile_size", shape["tile_size"])),
            ("o_acc", self.o_acc, o_dims),
        ):
            if not isinstance(value.owner, ScratchOp):
                raise VerifyException(f"operand '{role}' must be a vyre.scratch")
            wanted = check_u32_product(
                f"scratch '{role}' size",
                [("workgroup_size", lanes), stride],
                f"reduce {stride[0].split()[0]}",
            )
            count = _element_count(_check_f32_vector(value, f"operand '{role}'"))
            if role == "score_tile" and count > wanted and count % lanes == 0:
                continue  # a wider lane slice (vyre-retile keeps the fragments' stride)
            if count != wanted:
                raise VerifyException(
                    f"scratch '{role}' holds {count} f32 but workgroup_size * "
                    f"{stride[0]} = {wanted}; size it memref<{wanted}xf32>"
                )

    def _verify_lse(self, shape: dict[str, int]) -> None:
        assert self.lse is not None
        owner = self.lse.owner
        if not isinstance(owner, BufferOp) or owner.access.data != "write":
            raise VerifyException(
                "operand 'lse' must be a vyre.buffer with access \"write\""
            )
        count = _element_count(_check_f32_vector(self.lse, "operand 'lse'"))
        if count != shape["item_count"]:
            raise VerifyException(
                f"buffer '{owner.sym_name.data}' (lse) holds {count} f32 but there "
                f"are {shape['item_count']} items, one log-sum-exp each; size it "
                f"memref<{shape['item_count']}xf32>"
            )
        if self.merges_in_kernel:
            raise VerifyException(
                "'lse' cannot be combined with partials(%m, %l): the kernel that "
                "merges the splits does not write the log-sum-exp; merge in the "
                "workgroup or do not split"
            )

    def _verify_kv_lens(self, shape: dict[str, int]) -> None:
        if self.kv_lens is None:
            if self.items_per_seq is not None:
                raise VerifyException(
                    "'items_per_seq' needs a kv_lens(%lens) operand: it says which "
                    "entry of kv_lens gives an item's key count"
                )
            return
        if self.items_per_seq is None:
            raise VerifyException(
                "kv_lens(%lens) needs 'items_per_seq N': item i's key count is "
                "kv_lens[i / N]"
            )
        per_seq = _int(self.items_per_seq)
        if per_seq < 1 or shape["item_count"] % per_seq:
            raise VerifyException(
                f"'items_per_seq' is {per_seq}; it must be > 0 and divide item_count "
                f"({shape['item_count']}): every sequence has as many items"
            )
        owner = self.kv_lens.owner
        if not isinstance(owner, BufferOp) or owner.access.data != "read":
            raise VerifyException(
                "operand 'kv_lens' must be a vyre.buffer with access \"read\""
            )
        count = _element_count(_check_i32_vector(self.kv_lens, "operand 'kv_lens'"))
        sequences = shape["item_count"] // per_seq
        if count != sequences:
            raise VerifyException(
                f"buffer '{owner.sym_name.data}' (kv_lens) holds {count} i32 but there "
                f"are item_count / items_per_seq = {sequences} sequences, one key "
                f"count each; size it memref<{sequences}xi32>"
            )
        if self.tile_classes is not None:
            raise VerifyException(
                "'tile_classes' cannot be combined with kv_lens: the key count is "
                "only known at run time, so every tile of a mask is partial (leave "
                "tile_classes out)"
            )

    def _verify_region(
        self,
        region: Region,
        region_name: str,
        arg_names: Sequence[str],
        arg_types: Sequence[Attribute],
    ) -> None:
        block = region.block
        got = [arg.type for arg in block.args]
        if got != list(arg_types):
            expected = ", ".join(
                f"%{n}: {t}" for n, t in zip(arg_names, arg_types, strict=True)
            )
            raise VerifyException(
                f"region '{region_name}' must take ({expected}), got "
                f"({', '.join(str(t) for t in got)})"
            )
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException(
                f"region '{region_name}' must end with vyre.yield, got "
                f"{last.name if last else 'an empty block'}"
            )

    # -- custom syntax -----------------------------------------------------

    @classmethod
    def parse(cls, parser: Parser) -> TiledOnlineSoftmaxOp:
        operands: list[UnresolvedOperand] = []
        for keyword in ("q", "out"):
            parser.parse_keyword(keyword)
            parser.parse_punctuation("(")
            operands.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        lse: list[UnresolvedOperand] = []
        if parser.parse_optional_keyword("lse"):
            parser.parse_punctuation("(")
            lse.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        kv_lens: list[UnresolvedOperand] = []
        if parser.parse_optional_keyword("kv_lens"):
            parser.parse_punctuation("(")
            kv_lens.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        parser.parse_keyword("scratch")
        operands.extend(
            parser.parse_comma_separated_list(
                parser.Delimiter.PAREN, parser.parse_unresolved_operand
            )
        )
        if len(operands) != 5:
            parser.raise_error(
                "expected three scratch operands: (q_scratch, score_tile, o_acc)"
            )
        partials: list[UnresolvedOperand] = []
        if parser.parse_optional_keyword("partials"):
            partials = parser.parse_comma_separated_list(
                parser.Delimiter.PAREN, parser.parse_unresolved_operand
            )
        properties: dict[str, Attribute] = {}
        for field in SHAPE_FIELDS:
            parser.parse_keyword(field)
            properties[field] = IntegerAttr(parse_int_in_range(parser, field), i64)
        if parser.parse_optional_keyword("tile_classes"):
            classes = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE,
                lambda: parse_int_in_range(parser, "a tile class", -128, 127, "i8"),
            )
            properties["tile_classes"] = DenseArrayBase.from_list(i8, classes)
        if parser.parse_optional_keyword("exp2"):
            properties["exp2"] = UnitAttr()
        for field in ("kv_splits", "dim_parts", "v_head_dim", "items_per_seq"):
            if parser.parse_optional_keyword(field):
                properties[field] = IntegerAttr(parse_int_in_range(parser, field), i64)
        attributes = parser.parse_optional_attr_dict_with_keyword()
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, parser.parse_type
        )
        wanted = 5 + len(partials) + len(lse) + len(kv_lens)
        if len(types) != wanted:
            parser.raise_error(
                f"expected {wanted} operand types (q, out, 3 "
                f"scratch{', partials' if partials else ''}{', lse' if lse else ''}"
                f"{', kv_lens' if kv_lens else ''})"
            )
        resolved = parser.resolve_operands(
            operands + partials + lse + kv_lens, types, parser.pos
        )
        properties["operandSegmentSizes"] = DenseArrayBase.from_list(
            i32, [1, 1, 1, 1, 1, len(partials), len(lse), len(kv_lens)]
        )
        # Region argument types follow from the operands (see region_types).
        regions = []
        for region_name, arg_types in zip(
            ("scores", "update"), region_types(*resolved[2:5]), strict=True
        ):
            parser.parse_keyword(region_name)
            regions.append(_parse_region_with_args(parser, region_name, arg_types))
        mask = None
        if parser.parse_optional_keyword("mask"):
            arg_types = [IndexType()] * len(MASK_ARGS)
            mask = _parse_region_with_args(parser, "mask", arg_types)
        for (hook, names), arg_types in zip(
            (("prologue", PROLOGUE_ARGS), ("epilogue", EPILOGUE_ARGS)),
            hook_types(resolved[2], resolved[4]),
            strict=True,
        ):
            if parser.parse_optional_keyword(hook):
                regions.append(_parse_region_with_args(parser, hook, arg_types))
            else:
                regions.append(trivial_hook(arg_types, names))
        if mask is not None:
            regions.append(mask)
        return cls.create(
            operands=resolved,
            properties=properties,
            attributes=attributes.data if attributes else {},
            regions=regions,
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" q(")
        printer.print_operand(self.q)
        printer.print_string(") out(")
        printer.print_operand(self.out)
        if self.lse is not None:
            printer.print_string(") lse(")
            printer.print_operand(self.lse)
        if self.kv_lens is not None:
            printer.print_string(") kv_lens(")
            printer.print_operand(self.kv_lens)
        printer.print_string(") scratch(")
        printer.print_list(
            (self.q_scratch, self.score_tile, self.o_acc), printer.print_operand
        )
        printer.print_string(")")
        if self.merges_in_kernel:
            printer.print_string(" partials(")
            printer.print_list(self.partials, printer.print_operand)
            printer.print_string(")")
        with printer.indented(2):
            printer._print_new_line()
            printer.print_string(
                " ".join(f"{field} {value}" for field, value in self.shape().items())
            )
            if self.tile_classes is not None:
                values = ", ".join(str(int(v)) for v in self.tile_classes.get_values())
                printer.print_string(f" tile_classes [{values}]")
            if self.exp2 is not None:
                printer.print_string(" exp2")
            if self.kv_splits is not None:
                printer.print_string(f" kv_splits {self.splits}")
            if self.dim_parts is not None:
                printer.print_string(f" dim_parts {self.parts}")
            if self.v_head_dim is not None:
                printer.print_string(f" v_head_dim {self.v_dim}")
            if self.items_per_seq is not None:
                printer.print_string(f" items_per_seq {_int(self.items_per_seq)}")
            printer.print_op_attributes(self.attributes, print_keyword=True)
            printer._print_new_line()
            printer.print_string(": (")
            printer.print_list(self.operand_types, printer.print_attribute)
            printer.print_string(")")
        named = [("scores", self.scores), ("update", self.update)]
        if self.has_mask:
            named.append(("mask", self.mask))
        for hook_name, hook in (("prologue", self.prologue), ("epilogue", self.epilogue)):
            if not _is_trivial(hook):
                named.append((hook_name, hook))
        for region_name, region in named:
            printer._print_new_line()
            printer.print_string(f"{region_name}(")
            printer.print_list(
                region.block.args, lambda arg: printer.print_block_argument(arg, False)
            )
            printer.print_string(") ")
            printer.print_region(region, print_entry_block_args=False)


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends a fragment region of vyre.tiled_online_softmax."""

    name = "vyre.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator(), HasParent(TiledOnlineSoftmaxOp))
    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, *values: SSAValue | Operation) -> None:
        super().__init__(operands=[list(values)])


@irdl_op_definition
class TileWeightOp(IRDLOperation):
    """The softmax weight of key `j` of the current tile, for use in the
    `update` region: `exp(bounded_exp_arg(score_tile[lane*tile_size + j] -
    m_new))`, and exactly 0.0 for a key the mask excludes.
    vyre-inline-fragments expands it (the recurrence owns this formula).

        %w = vyre.tile_weight %j : f32
    """

    name = "vyre.tile_weight"
    j = operand_def(IndexType)
    result = result_def(f32)
    assembly_format = "$j attr-dict `:` type($result)"

    def __init__(self, j: SSAValue | Operation) -> None:
        super().__init__(operands=[j], result_types=[f32])
        self.result.name_hint = "weight"

    def verify_(self) -> None:
        parent = self.parent_op()
        while parent is not None and not isinstance(parent, TiledOnlineSoftmaxOp):
            parent = parent.parent_op()
        if parent is None or not parent.update.is_ancestor(self):
            raise VerifyException(
                "vyre.tile_weight is only valid inside the update region of "
                "vyre.tiled_online_softmax"
            )


MERGE_FIELDS = ("item_count", "splits", "head_dim")


@irdl_op_definition
class MergeSplitsOp(IRDLOperation):
    """The merge of a flash-decoding split left to its own kernel (the
    skeleton's `partials`): for every item and output dim d,

        out[item, d] = the workgroup merge of SplitMerge over the
                       `splits` partial (m, l, o[row, d]), rows item*splits + s

    in the same order of operations as the merge in workgroup memory, so
    that both give the same bits.  One invocation per (item, d): the kernel
    runs item_count * head_dim items.  vyre-inline-fragments expands it.

        vyre.merge_splits m(%m) l(%l) o(%o) out(%out)
            item_count 16 splits 64 head_dim 512 : (memref<1024xf32>, ...)
    """

    name = "vyre.merge_splits"

    m = operand_def(MemRefType)
    l = operand_def(MemRefType)  # noqa: E741 - the recurrence's name
    o = operand_def(MemRefType)
    out = operand_def(MemRefType)
    item_count = prop_def(IntegerAttr)
    splits = prop_def(IntegerAttr)
    head_dim = prop_def(IntegerAttr)
    exp2 = opt_prop_def(UnitAttr)

    traits = traits_def(HasParent(KernelOp))

    def __init__(
        self, m: SSAValue, l: SSAValue, o: SSAValue, out: SSAValue, *,  # noqa: E741
        item_count: int, splits: int, head_dim: int, exp2: bool = False,
    ) -> None:
        properties: dict[str, Attribute] = {
            "item_count": IntegerAttr(item_count, i64),
            "splits": IntegerAttr(splits, i64),
            "head_dim": IntegerAttr(head_dim, i64),
        }
        if exp2:
            properties["exp2"] = UnitAttr()
        super().__init__(operands=[m, l, o, out], properties=properties)

    def shape(self) -> dict[str, int]:
        return {field: _int(getattr(self, field)) for field in MERGE_FIELDS}

    def verify_(self) -> None:
        shape = self.shape()
        for field, value in shape.items():
            if not 1 <= value <= U32_MAX:
                raise VerifyException(f"'{field}' must be in [1, 2^32), got {value}")
        rows = shape["item_count"] * shape["splits"]
        for role, value, access, count in (
            ("m", self.m, ("temp",), rows),
            ("l", self.l, ("temp",), rows),
            ("o", self.o, ("temp",), rows * shape["head_dim"]),
            ("out", self.out, ("write", "temp"), shape["item_count"] * shape["head_dim"]),
        ):
            owner = value.owner
            if not isinstance(owner, BufferOp) or owner.access.data not in access:
                wanted = " or ".join(f'"{a}"' for a in access)
                raise VerifyException(
                    f"operand '{role}' must be a vyre.buffer with access {wanted}"
                )
            check = _check_buffer_vector if role == "out" else _check_f32_vector
            got = _element_count(check(value, f"operand '{role}'"))
            if got != count:
                raise VerifyException(
                    f"buffer '{owner.sym_name.data}' ({role}) holds {got} f32 but the "
                    f"merge of {shape['item_count']} items x {shape['splits']} splits "
                    f"x {shape['head_dim']} dims needs {count}; size it "
                    f"memref<{count}xf32>"
                )
        kernel = self.parent_op()
        assert isinstance(kernel, KernelOp)
        invocations = shape["item_count"] * shape["head_dim"]
        if _int(kernel.item_count) != invocations:
            raise VerifyException(
                f"the merge runs one invocation per (item, dim): set the kernel's "
                f"items to item_count * head_dim = {invocations}, not "
                f"{_int(kernel.item_count)}"
            )

    @classmethod
    def parse(cls, parser: Parser) -> MergeSplitsOp:
        operands: list[UnresolvedOperand] = []
        for keyword in ("m", "l", "o", "out"):
            parser.parse_keyword(keyword)
            parser.parse_punctuation("(")
            operands.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        properties: dict[str, Attribute] = {}
        for field in MERGE_FIELDS:
            parser.parse_keyword(field)
            properties[field] = IntegerAttr(parse_int_in_range(parser, field), i64)
        if parser.parse_optional_keyword("exp2"):
            properties["exp2"] = UnitAttr()
        attributes = parser.parse_optional_attr_dict_with_keyword()
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, parser.parse_type
        )
        if len(types) != 4:
            parser.raise_error("expected four operand types (m, l, o, out)")
        return cls.create(
            operands=parser.resolve_operands(operands, types, parser.pos),
            properties=properties,
            attributes=attributes.data if attributes else {},
        )

    def print(self, printer: Printer) -> None:
        for keyword, value in zip(("m", "l", "o", "out"), self.operands, strict=True):
            printer.print_string(f" {keyword}(")
            printer.print_operand(value)
            printer.print_string(")")
        printer.print_string(
            "".join(f" {field} {value}" for field, value in self.shape().items())
        )
        if self.exp2 is not None:
            printer.print_string(" exp2")
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" : (")
        printer.print_list(self.operand_types, printer.print_attribute)
        printer.print_string(")")


# --------------------------------------------------------------------------
# Invocation indices (what vyre-inline-fragments leaves for the GPU lowering)
# --------------------------------------------------------------------------


@irdl_op_definition
class ItemIndexOp(IRDLOperation):
    """The global invocation index along x: the item this lane computes."""

    name = "vyre.item_index"
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__(result_types=[IndexType()])
        self.result.name_hint = "item"


@irdl_op_definition
class LaneIndexOp(IRDLOperation):
    """The lane index within the workgroup along x."""

    name = "vyre.lane_index"
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__(result_types=[IndexType()])
        self.result.name_hint = "lane"


# --------------------------------------------------------------------------
# Stability helpers (NaN is evidence: it is never hidden)
# --------------------------------------------------------------------------


class StabilityOp(IRDLOperation):
    """An f32 -> f32 stability helper of SEMANTICS.md."""

    T: ClassVar = VarConstraint("T", AnyAttr())
    input = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input)"

    def __init__(self, value: SSAValue | Operation) -> None:
        super().__init__(operands=[value], result_types=[SSAValue.get(value).type])

    def verify_(self) -> None:
        if self.input.type != f32:
            raise VerifyException(
                f"takes an f32 score, got {self.input.type}; the stability "
                f"helpers are defined on f32 only (convert the value first)"
            )


@irdl_op_definition
class BoundedScoreOp(StabilityOp):
    """`v if isnan(v) else finite_or(v, -80.0)`"""

    name = "vyre.bounded_score"


@irdl_op_definition
class BoundedExpArgOp(StabilityOp):
    """`v if isnan(v) else clamp(finite_or(v, -80.0), -80.0, 0.0)`"""

    name = "vyre.bounded_exp_arg"


@irdl_op_definition
class PositiveDenominatorOp(StabilityOp):
    """`v if isnan(v) else (v if isfinite(v) and v > MIN_POSITIVE else MIN_POSITIVE)`"""

    name = "vyre.positive_denominator"


@irdl_op_definition
class FlushTinyOp(StabilityOp):
    """`0.0 if abs(v) <= MIN_POSITIVE else v` (NaN passes through)"""

    name = "vyre.flush_tiny"


STABILITY_OPS = (BoundedScoreOp, BoundedExpArgOp, PositiveDenominatorOp, FlushTinyOp)

Vyre = Dialect(
    "vyre",
    [
        KernelOp,
        BufferOp,
        ScratchOp,
        TiledOnlineSoftmaxOp,
        YieldOp,
        TileWeightOp,
        MergeSplitsOp,
        ItemIndexOp,
        LaneIndexOp,
        *STABILITY_OPS,
    ],
    [*LAUNCH_ATTRIBUTES],
)
