"""The typed contract between the compiler and its executors.

`convert-vyre-to-gpu` records what a runtime needs to launch a lowered
kernel as one `vyre.launch = #vyre.launch<...>` attribute on its `gpu.func`
(item count, workgroup and grid size, one `#vyre.buffer<...>` per argument,
and the `#vyre.skeleton<...>` it was expanded from), and the role of each of
the skeleton's workgroup arrays as `vyre.scratch = #vyre<scratch_role ...>`
on its `memref.alloc`.  Each attribute checks what it can check alone when it
is built or parsed; what ties it to the function body (argument types, the
grid covering the items, stores into read buffers) is the loader's
(`kernel_info`).  docs/lowered-ir.md describes every field.

Upstream MLIR parses these attributes as opaque attributes of an
unregistered dialect (`mlir-opt --allow-unregistered-dialect`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    IntAttr,
    NoneAttr,
    StringAttr,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Operation, ParametrizedAttribute, SpacedOpaqueSyntaxAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from vyre_xdsl.dialects.constants import BINDING_MAX, U32_MAX

if TYPE_CHECKING:
    from vyre_xdsl.mma_layout import AccumulatorLayout

LAUNCH_ATTR = "vyre.launch"  # on a lowered kernel's gpu.func
SCRATCH_ATTR = "vyre.role"  # on a skeleton's scratch array (vyre.scratch, memref.alloc)
SKELETON_ATTR = "vyre.skeleton"  # on a vyre.kernel, from inlining to lowering
# on a vyre.kernel, from vyre-tensor-cores to lowering: the accumulator
# layout its kernel computes on (vyre_xdsl.mma_layout)
ACCUMULATOR_ATTR = "vyre.accumulator"

U32_LIMIT = U32_MAX + 1  # item counts, sizes and extents are u32 on the device
BINDING_LIMIT = BINDING_MAX + 1  # bindings are recorded and emitted as i32


def _element_types() -> dict[str, Attribute]:
    """The buffer element types by dtype name (the vyre dialect's, which
    imports this module)."""
    from vyre_xdsl.dialects.vyre import BUFFER_ELEMENT_TYPES

    return BUFFER_ELEMENT_TYPES


class BufferAccess(StrEnum):
    """What a kernel does with a storage buffer."""

    READ = "read"  # an input: never stored to
    WRITE = "write"  # an output
    TEMP = "temp"  # allocated by the run, passes values between kernels


class ScratchRole(StrEnum):
    """Which of the compiler's workgroup arrays an allocation is."""

    Q_SCRATCH = "q_scratch"  # each lane's query row
    SCORE_TILE = "score_tile"  # each lane's scores of one key tile
    O_ACC = "o_acc"  # each lane's output accumulator
    KV_TILE = "kv_tile"  # a key or value tile staged by vyre-stage-kv-tiles


@irdl_attr_definition
class BufferAccessAttr(EnumAttribute[BufferAccess], SpacedOpaqueSyntaxAttribute):
    name = "vyre.access"


@irdl_attr_definition
class ScratchRoleAttr(EnumAttribute[ScratchRole], SpacedOpaqueSyntaxAttribute):
    name = "vyre.scratch_role"


# Parsing and printing of `key = value, ...` parameter lists --------------


def _parse_int(parser: AttrParser) -> IntAttr:
    return IntAttr(parser.parse_integer(allow_boolean=False))


def _parse_ints(parser: AttrParser) -> ArrayAttr[IntAttr]:
    return ArrayAttr(
        parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: _parse_int(parser)
        )
    )


def _ints(attr: ArrayAttr[IntAttr]) -> tuple[int, ...]:
    return tuple(v.data for v in attr)


def _parse_fields(
    parser: AttrParser, fields: dict[str, Callable[[], Attribute]], what: str
) -> dict[str, Attribute]:
    """`<key = value, ...>` with the keys of `fields` (each at most once,
    in any order); a key not given is left out of the result."""
    found: dict[str, Attribute] = {}

    def entry() -> None:
        at = parser.pos
        key = parser.parse_identifier(f" (a field of {what})")
        if key not in fields:
            parser.raise_error(
                f"{what} has no field '{key}'; its fields are {', '.join(fields)}",
                at, parser.pos,
            )
        if key in found:
            parser.raise_error(f"field '{key}' of {what} given twice", at, parser.pos)
        parser.parse_punctuation("=")
        found[key] = fields[key]()

    parser.parse_comma_separated_list(parser.Delimiter.ANGLE, entry)
    return found


def _require(parser: AttrParser, found: dict, keys: Sequence[str], what: str) -> None:
    missing = [key for key in keys if key not in found]
    if missing:
        parser.raise_error(f"{what} needs field(s) {', '.join(missing)}")


def _print_fields(printer: Printer, fields: Sequence[tuple[str, Attribute]]) -> None:
    """`<key = value, ...>`: an int, a list of ints, an enum's value (bare),
    or an attribute."""

    def one(field: tuple[str, Attribute]) -> None:
        key, value = field
        printer.print_string(f"{key} = ")
        if isinstance(value, EnumAttribute):
            printer.print_string(value.data.value)
        elif isinstance(value, IntAttr):
            printer.print_string(str(value.data))
        elif isinstance(value, ArrayAttr) and all(isinstance(v, IntAttr) for v in value):
            printer.print_string(f"[{', '.join(map(str, _ints(value)))}]")
        else:
            printer.print_attribute(value)

    with printer.in_angle_brackets():
        printer.print_list(fields, one)


class _Keyed:
    """Parameters written `<key = value, ...>`, a key per parameter in
    declaration order, in any order, each once; a parameter in
    `OPTIONAL` may be left out (NoneAttr).  Parsed values are verified as the
    attribute, so a bad one is a parse error at its parameters (xDSL would
    blame the whole op)."""

    OPTIONAL: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def value_parsers(cls, parser: AttrParser) -> dict[str, Callable[[], Attribute]]:
        """A parser of each parameter's value, by key, in declaration order."""
        raise NotImplementedError

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        what, start = f"#{cls.name}", parser.pos
        fields = cls.value_parsers(parser)
        found = _parse_fields(parser, fields, what)
        _require(parser, found, [k for k in fields if k not in cls.OPTIONAL], what)
        params = tuple(found.get(k, NoneAttr()) for k in fields)
        try:
            cls.new(params)
        except VerifyException as error:
            parser.raise_error(str(error), start, parser.pos)
        return params

    def print_parameters(self, printer: Printer) -> None:
        keys = type(self).value_parsers(None)  # only its keys: nothing is parsed
        _print_fields(printer, [
            (k, v) for k, v in zip(keys, self.parameters, strict=True)
            if not isinstance(v, NoneAttr)
        ])


# The attributes -----------------------------------------------------------


@irdl_attr_definition
class BufferAttr(_Keyed, ParametrizedAttribute):
    """One storage buffer of a lowered kernel (argument i is `buffers[i]`):
    `#vyre.buffer<name = "q", binding = 0, access = read, shape = [64, 4],
    dtype = f32>`, and `data = array<...>` for a captured table."""

    name = "vyre.buffer"
    OPTIONAL = frozenset({"data"})

    buffer_name: StringAttr
    binding_attr: IntAttr
    access_attr: BufferAccessAttr
    shape_attr: ArrayAttr[IntAttr]
    dtype_attr: Attribute
    data_attr: DenseArrayBase | NoneAttr

    def __init__(
        self, name: str, binding: int, access: str, shape: Sequence[int], dtype: str,
        data: DenseArrayBase | None = None,
    ):
        super().__init__(
            StringAttr(name), IntAttr(binding), BufferAccessAttr(BufferAccess(access)),
            ArrayAttr(IntAttr(d) for d in shape), _element_types()[dtype],
            NoneAttr() if data is None else data,
        )

    @classmethod
    def value_parsers(cls, parser: AttrParser) -> dict[str, Callable[[], Attribute]]:
        return {
            "name": lambda: StringAttr(parser.parse_str_literal()),
            "binding": lambda: _parse_int(parser),
            "access": lambda: BufferAccessAttr(parser.parse_str_enum(BufferAccess)),
            "shape": lambda: _parse_ints(parser),
            "dtype": lambda: parser.parse_type(),
            "data": lambda: parser.parse_attribute(),
        }

    @property
    def binding(self) -> int:
        return self.binding_attr.data

    @property
    def access(self) -> str:
        return self.access_attr.data.value

    @property
    def shape(self) -> tuple[int, ...]:
        return _ints(self.shape_attr)

    @property
    def count(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count

    @property
    def dtype(self) -> str:
        return next(n for n, t in _element_types().items() if t == self.dtype_attr)

    @property
    def data(self) -> tuple | None:
        """A captured table's values (vx.run passes them when the caller does
        not), or None."""
        if isinstance(self.data_attr, NoneAttr):
            return None
        return tuple(self.data_attr.get_values())

    def verify(self) -> None:
        where = f"buffer '{self.buffer_name.data}'"
        if not self.buffer_name.data:
            raise VerifyException("a buffer needs a name")
        if not 0 <= self.binding < BINDING_LIMIT:
            raise VerifyException(
                f"{where}: binding {self.binding} is outside [0, 2^31); "
                f"bindings are i32 on the device"
            )
        if not self.shape or any(d < 0 for d in self.shape):
            raise VerifyException(
                f"{where}: shape {list(self.shape)} must have at least one "
                f"extent, none negative"
            )
        if self.dtype_attr not in _element_types().values():
            raise VerifyException(
                f"{where}: dtype {self.dtype_attr} is none of "
                f"{', '.join(_element_types())}"
            )
        data = self.data
        if data is not None and (self.access != BufferAccess.READ or len(data) != self.count):
            raise VerifyException(
                f"{where}: 'data' must be an array of its {self.count} elements on "
                f"a read buffer (a captured table), got {len(data)} on a "
                f"{self.access} buffer"
            )


SKELETON_FIELDS = ("items", "seq_len", "head_dim", "v_head_dim", "tile_size", "kv_splits", "dim_parts")


@irdl_attr_definition
class SkeletonAttr(_Keyed, ParametrizedAttribute):
    """The shape of the `vyre.tiled_online_softmax` a kernel was expanded
    from: `#vyre.skeleton<items = 64, seq_len = 64, head_dim = 4, v_head_dim
    = 4, tile_size = 16, kv_splits = 1, dim_parts = 1>` (after vyre-retile
    and the other rewrites: what the kernel computes, e.g. the tile size the
    oracle must use to be bit-exact)."""

    name = "vyre.skeleton"

    items: IntAttr
    seq_len: IntAttr
    head_dim: IntAttr
    v_head_dim: IntAttr
    tile_size: IntAttr
    kv_splits: IntAttr
    dim_parts: IntAttr

    def __init__(self, **values: int):
        super().__init__(*(IntAttr(values[f]) for f in SKELETON_FIELDS))

    @classmethod
    def value_parsers(cls, parser: AttrParser) -> dict[str, Callable[[], Attribute]]:
        return {f: (lambda: _parse_int(parser)) for f in SKELETON_FIELDS}

    def verify(self) -> None:
        for field, value in zip(SKELETON_FIELDS, self.parameters, strict=True):
            if not 1 <= value.data < U32_LIMIT:
                raise VerifyException(
                    f"#vyre.skeleton: '{field}' must be in [1, 2^32), got {value.data}"
                )


@irdl_attr_definition
class AccumulatorAttr(_Keyed, ParametrizedAttribute):
    """Which element of a 16x16 accumulator matrix each lane of a subgroup
    holds, as the kernel assumes it (vyre_xdsl.mma_layout):
    `#vyre.accumulator<lanes = 32, positions = [0, 1, 8, ...]>`, lane l's
    element i at `row * 16 + col` = positions[l * (256 / lanes) + i]; with
    `operand_a = [0, 1, 4, ...]` (where the kernel builds f16 A operands
    from its elements), element j of a lane's A operand is its element
    operand_a[j]."""

    name = "vyre.accumulator"
    OPTIONAL = frozenset({"operand_a"})

    lanes: IntAttr
    positions_attr: ArrayAttr[IntAttr]
    operand_a_attr: ArrayAttr[IntAttr] | NoneAttr

    def __init__(self, lanes: int, positions: Sequence[int],
                 operand_a: Sequence[int] | None = None):
        super().__init__(IntAttr(lanes), ArrayAttr(IntAttr(p) for p in positions),
                         NoneAttr() if operand_a is None
                         else ArrayAttr(IntAttr(j) for j in operand_a))

    @staticmethod
    def of(layout: AccumulatorLayout) -> AccumulatorAttr:
        return AccumulatorAttr(layout.lanes, layout.positions(), layout.operand_a)

    @classmethod
    def value_parsers(cls, parser: AttrParser) -> dict[str, Callable[[], Attribute]]:
        return {"lanes": lambda: _parse_int(parser), "positions": lambda: _parse_ints(parser),
                "operand_a": lambda: _parse_ints(parser)}

    @property
    def positions(self) -> tuple[int, ...]:
        return _ints(self.positions_attr)

    @property
    def layout(self) -> AccumulatorLayout:
        from vyre_xdsl.mma_layout import AccumulatorLayout

        operand = (None if isinstance(self.operand_a_attr, NoneAttr)
                   else _ints(self.operand_a_attr))
        return AccumulatorLayout.from_positions(self.positions, self.lanes.data, operand)

    def verify(self) -> None:
        from vyre_xdsl.mma_layout import TILE

        lanes, count = self.lanes.data, len(self.positions)
        if count != TILE * TILE:
            raise VerifyException(
                f"#vyre.accumulator: {count} positions; a {TILE}x{TILE} accumulator "
                f"has {TILE * TILE}, one for each of its elements")
        if lanes < 1 or count % lanes:
            raise VerifyException(
                f"#vyre.accumulator: {count} positions are not a whole share for "
                f"each of {lanes} lanes")
        reason = self.layout.problem()
        if reason is not None:
            raise VerifyException(f"#vyre.accumulator: {reason}")


@irdl_attr_definition
class LaunchAttr(_Keyed, ParametrizedAttribute):
    """How to launch a lowered kernel: `#vyre.launch<items = 100, workgroup =
    [64, 1, 1], grid = [2, 1, 1], buffers = [#vyre.buffer<...>, ...],
    skeleton = #vyre.skeleton<...>, accumulator = #vyre.accumulator<...>>`
    (skeleton: only where the kernel was expanded from one; accumulator:
    only where it computes on the elements of subgroup matrices)."""

    name = "vyre.launch"
    OPTIONAL = frozenset({"skeleton", "accumulator"})

    items: IntAttr
    workgroup: ArrayAttr[IntAttr]
    grid: ArrayAttr[IntAttr]
    buffers_attr: ArrayAttr[BufferAttr]
    skeleton_attr: SkeletonAttr | NoneAttr
    accumulator_attr: AccumulatorAttr | NoneAttr

    def __init__(
        self, item_count: int, workgroup_size: Sequence[int], grid_size: Sequence[int],
        buffers: Sequence[BufferAttr], skeleton: SkeletonAttr | None = None,
        accumulator: AccumulatorAttr | None = None,
    ):
        super().__init__(
            IntAttr(item_count), ArrayAttr(IntAttr(v) for v in workgroup_size),
            ArrayAttr(IntAttr(v) for v in grid_size), ArrayAttr(buffers),
            NoneAttr() if skeleton is None else skeleton,
            NoneAttr() if accumulator is None else accumulator,
        )

    @classmethod
    def value_parsers(cls, parser: AttrParser) -> dict[str, Callable[[], Attribute]]:
        return {
            "items": lambda: _parse_int(parser),
            "workgroup": lambda: _parse_ints(parser),
            "grid": lambda: _parse_ints(parser),
            "buffers": lambda: parser.parse_attribute(),
            "skeleton": lambda: parser.parse_attribute(),
            "accumulator": lambda: parser.parse_attribute(),
        }

    @property
    def item_count(self) -> int:
        return self.items.data

    @property
    def workgroup_size(self) -> tuple[int, int, int]:
        return _ints(self.workgroup)  # type: ignore[return-value]

    @property
    def grid_size(self) -> tuple[int, int, int]:
        return _ints(self.grid)  # type: ignore[return-value]

    @property
    def buffers(self) -> tuple[BufferAttr, ...]:
        return self.buffers_attr.data

    @property
    def skeleton(self) -> SkeletonAttr | None:
        return None if isinstance(self.skeleton_attr, NoneAttr) else self.skeleton_attr

    @property
    def accumulator(self) -> AccumulatorAttr | None:
        return None if isinstance(self.accumulator_attr, NoneAttr) else self.accumulator_attr

    def verify(self) -> None:
        if not 0 <= self.item_count < U32_LIMIT:
            raise VerifyException(
                f"#vyre.launch: items {self.item_count} is outside [0, 2^32)"
            )
        for field, values in (("workgroup", self.workgroup_size), ("grid", self.grid_size)):
            if len(values) != 3 or not all(1 <= v < U32_LIMIT for v in values):
                raise VerifyException(
                    f"#vyre.launch: '{field}' must be 3 sizes in [1, 2^32) (x, y, z), "
                    f"got {list(values)}"
                )
        for key, what in ((lambda b: b.binding, "binding"), (lambda b: b.buffer_name.data, "name")):
            seen = [key(b) for b in self.buffers]
            if len(set(seen)) != len(seen):
                raise VerifyException(
                    f"#vyre.launch: two buffers share a {what}: {seen}; give each "
                    f"buffer its own {what}"
                )


LAUNCH_ATTRIBUTES = (LaunchAttr, BufferAttr, SkeletonAttr, AccumulatorAttr, BufferAccessAttr,
                     ScratchRoleAttr)


def launch_of(op: Operation) -> LaunchAttr | None:
    """The launch recorded on a lowered kernel's gpu.func, if any."""
    attr = op.attributes.get(LAUNCH_ATTR)
    return attr if isinstance(attr, LaunchAttr) else None


def scratch_role(op: Operation) -> ScratchRole | None:
    """The skeleton role of a workgroup array (its vyre.scratch or
    memref.alloc op), if it has one."""
    attr = op.attributes.get(SCRATCH_ATTR)
    return attr.data if isinstance(attr, ScratchRoleAttr) else None


def record_skeleton(skeleton) -> None:
    """Record, before a `vyre.tiled_online_softmax` is expanded, its shape on
    its `vyre.kernel` and the role of each of its scratch arrays on the
    `vyre.scratch` op: convert-vyre-to-gpu carries both into the lowered
    kernel, where the skeleton is gone."""
    shape = skeleton.shape()
    kernel = skeleton.parent_op()
    kernel.attributes[SKELETON_ATTR] = SkeletonAttr(
        items=shape["item_count"], seq_len=shape["seq_len"], head_dim=shape["head_dim"],
        v_head_dim=skeleton.v_dim, tile_size=shape["tile_size"],
        kv_splits=skeleton.splits, dim_parts=skeleton.parts,
    )
    for role, array in (
        (ScratchRole.Q_SCRATCH, skeleton.q_scratch),
        (ScratchRole.SCORE_TILE, skeleton.score_tile),
        (ScratchRole.O_ACC, skeleton.o_acc),
    ):
        array.owner.attributes[SCRATCH_ATTR] = ScratchRoleAttr(role)
