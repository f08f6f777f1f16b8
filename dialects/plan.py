"""`#vyre.plan<...>`: what `optimize=default` decided for one skeleton.

A skeleton that `default` runs on the device's matrix units gets
`vyre.tensor_cores = #vyre.tensor_cores<keys = 32, row_tiles = 4, stage =
true, prefetch = true, registers = true, stage_q = false, skip_rescale =
false, pieces = 1>` instead:
vyre-tensor-cores' tiling (its options of the same names), and no
`vyre.plan`; one that `default` expands into register blocks gets
`vyre.block_product = #vyre.block_product<lanes = 128, key_lanes = 8, rows
= 2, keys = 4>`: vyre-block-product's blocking, and no `vyre.plan` either;
MLA's latent attention on the matrix units gets `vyre.latent_tensor_cores =
#vyre.latent_tensor_cores<row_tiles = 1, splits = 8>`:
vyre-latent-tensor-cores' tiling.  A `vyre.kernel` recording a per-head
product (`#vyre.head_product`) that runs there gets
`vyre.projection_tensor_cores = #vyre.projection_tensor_cores<row_tiles =
2, col_blocks = 1>`: vyre-projection-tensor-cores' tiling.

vyre-plan (and vyre-to-gpu{optimize=default}, which runs it) records the
tuning's plan (vyre_xdsl.tuning) as the discardable attribute `vyre.plan`
of each `vyre.tiled_online_softmax`; the optimisation passes given `0`
("choose") for an option read their choice from it.  The fields, all
printed, in this order:

    device       the profile the plan was made for (vyre_xdsl.device)
    lanes        lanes per workgroup (vyre-resize-workgroup)
    tile_size    keys per tile (vyre-retile)
    kv_splits    invocations per item over its tiles (vyre-split-kv)
    merge        how the splits are merged: none (no split), workgroup,
                 kernel
    merge_teams  teams of invocations merging a column together in the
                 merge kernel (vyre-split-kv's `merge_teams`; 1 but there)
    dim_parts    lanes per item over its head dims (vyre-split-head-dim)
    dim_chunk    neighbouring dims a lane takes in turn (its `chunk`)
    rows         items per invocation (vyre-block-rows)
    stage_bytes  the workgroup memory K/V tiles may be staged in
                 (vyre-stage-kv-tiles; 0: not staged)
    unroll       the unroll depth (vyre-unroll-jam)
    interleave   the scratch arrays kept lane-minor in workgroup memory
                 (vyre-interleave-scratch)
    hoist_loads  the buffers whose loads are issued at the top of each
                 tile (vyre-hoist-tile-loads; [] for none)
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, IntAttr, StringAttr
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Operation, ParametrizedAttribute, SpacedOpaqueSyntaxAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from vyre_xdsl.dialects.vyre_regions import DIM_CHUNK
from vyre_xdsl.mma_layout import TILE

PLAN_ATTR = "vyre.plan"  # on a vyre.tiled_online_softmax
SCRATCH_ROLES = ("q_scratch", "score_tile", "o_acc")


class MergeKind(StrEnum):
    """Where the partial results of an item's kv splits are merged."""

    NONE = "none"  # not split
    WORKGROUP = "workgroup"  # in workgroup memory, by the split kernel
    KERNEL = "kernel"  # by a kernel of its own (vyre.merge_splits)


@irdl_attr_definition
class MergeKindAttr(EnumAttribute[MergeKind], SpacedOpaqueSyntaxAttribute):
    name = "vyre.merge_kind"


_INT_FIELDS = ("lanes", "tile_size", "kv_splits")
_LATER_INT_FIELDS = ("merge_teams", "dim_parts", "dim_chunk", "rows", "stage_bytes", "unroll")


def _data(parameter: str) -> property:
    """A property: the data of `parameter` (an IntAttr, StringAttr or enum)."""
    return property(lambda self: getattr(self, parameter).data)


def _verified(cls, parameters: Sequence[Attribute], parser: AttrParser,
              start: int) -> Sequence[Attribute]:
    """`parameters`, parsed from `start`, if they make a valid `cls`; else a
    parse error located at the attribute, not at its op."""
    try:
        cls.new(parameters)
    except VerifyException as error:
        parser.raise_error(str(error), start, parser.pos)
    return parameters


@irdl_attr_definition
class PlanAttr(ParametrizedAttribute):
    """One skeleton's plan (module docstring)."""

    name = "vyre.plan"

    device_attr: StringAttr
    lanes_attr: IntAttr
    tile_size_attr: IntAttr
    kv_splits_attr: IntAttr
    merge_attr: MergeKindAttr
    merge_teams_attr: IntAttr
    dim_parts_attr: IntAttr
    dim_chunk_attr: IntAttr
    rows_attr: IntAttr
    stage_bytes_attr: IntAttr
    unroll_attr: IntAttr
    interleave_attr: ArrayAttr[StringAttr]
    hoist_loads_attr: ArrayAttr[StringAttr]

    def __init__(
        self, device: str, lanes: int, tile_size: int, kv_splits: int, merge: str,
        dim_parts: int, stage_bytes: int, unroll: int, interleave: Sequence[str] = (),
        rows: int = 1, dim_chunk: int = DIM_CHUNK, merge_teams: int = 1,
        hoist_loads: Sequence[str] = (),
    ):
        super().__init__(
            StringAttr(device), IntAttr(lanes), IntAttr(tile_size), IntAttr(kv_splits),
            MergeKindAttr(MergeKind(merge)), IntAttr(merge_teams), IntAttr(dim_parts),
            IntAttr(dim_chunk),
            IntAttr(rows),
            IntAttr(stage_bytes),
            IntAttr(unroll), ArrayAttr(StringAttr(name) for name in interleave),
            ArrayAttr(StringAttr(name) for name in hoist_loads),
        )

    # the parameters' values (their attributes' data)
    device = _data("device_attr")
    lanes = _data("lanes_attr")
    tile_size = _data("tile_size_attr")
    kv_splits = _data("kv_splits_attr")
    merge = _data("merge_attr")
    merge_teams = _data("merge_teams_attr")
    dim_parts = _data("dim_parts_attr")
    dim_chunk = _data("dim_chunk_attr")
    rows = _data("rows_attr")
    stage_bytes = _data("stage_bytes_attr")
    unroll = _data("unroll_attr")

    @property
    def interleave(self) -> tuple[str, ...]:
        return tuple(name.data for name in self.interleave_attr)

    @property
    def hoist_loads(self) -> tuple[str, ...]:
        return tuple(name.data for name in self.hoist_loads_attr)

    def verify(self) -> None:
        _require_positive(self, ("lanes", "tile_size", "kv_splits", "merge_teams",
                                 "dim_parts", "dim_chunk", "rows", "unroll"))
        if self.stage_bytes < 0:
            raise VerifyException(f"#vyre.plan: stage_bytes must be >= 0, got {self.stage_bytes}")
        for field in ("merge_teams", "dim_parts", "dim_chunk"):
            if getattr(self, field) & (getattr(self, field) - 1):
                raise VerifyException(
                    f"#vyre.plan: {field} must be a power of two, got {getattr(self, field)}"
                )
        if (self.kv_splits > 1) != (self.merge != MergeKind.NONE):
            raise VerifyException(
                f"#vyre.plan: merge must be none exactly when kv_splits is 1 (kv_splits "
                f"{self.kv_splits}, merge {self.merge.value})"
            )
        if self.merge_teams > 1 and (self.merge != MergeKind.KERNEL
                                     or self.kv_splits % self.merge_teams):
            raise VerifyException(
                f"#vyre.plan: merge_teams {self.merge_teams} needs merge = kernel and must "
                f"divide kv_splits ({self.kv_splits}): teams share a merge kernel's splits"
            )
        unknown = [name for name in self.interleave if name not in SCRATCH_ROLES]
        if unknown:
            raise VerifyException(
                f"#vyre.plan: interleave names scratch arrays of the skeleton "
                f"({', '.join(SCRATCH_ROLES)}), got {', '.join(unknown)}"
            )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        def field(key: str, first: bool = False) -> None:
            """`, key =` (without the comma before the first)."""
            if not first:
                parser.parse_punctuation(",")
            parser.parse_keyword(key)
            parser.parse_punctuation("=")

        def integers(keys: Sequence[str]) -> list[IntAttr]:
            values = []
            for key in keys:
                field(key)
                values.append(
                    IntAttr(parser.parse_integer(allow_boolean=False, allow_negative=True))
                )
            return values

        start = parser.pos
        parser.parse_punctuation("<")
        field("device", first=True)
        device = StringAttr(parser.parse_str_literal())
        ints = integers(_INT_FIELDS)
        field("merge")
        merge = MergeKindAttr(MergeKindAttr.parse_parameter(parser))
        later = integers(_LATER_INT_FIELDS)
        field("interleave")
        names = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: StringAttr(parser.parse_identifier())
        )
        field("hoist_loads")
        hoisted = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: StringAttr(parser.parse_str_literal())
        )
        parser.parse_punctuation(">")
        return _verified(cls, (device, *ints, merge, *later, ArrayAttr(names),
                               ArrayAttr(hoisted)), parser, start)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f'<device = "{self.device}"')
        for key in _INT_FIELDS:
            printer.print_string(f", {key} = {getattr(self, key)}")
        printer.print_string(f", merge = {self.merge.value}")
        for key in _LATER_INT_FIELDS:
            printer.print_string(f", {key} = {getattr(self, key)}")
        printer.print_string(f", interleave = [{', '.join(self.interleave)}]")
        hoisted = ", ".join(f'"{name}"' for name in self.hoist_loads)
        printer.print_string(f", hoist_loads = [{hoisted}]>")


TENSOR_CORES_ATTR = "vyre.tensor_cores"  # on a vyre.tiled_online_softmax
_TILING_INTS = ("keys", "row_tiles")
_TILING_FLAGS = ("stage", "prefetch", "registers", "stage_q", "skip_rescale", "rolled")
_TILING_LATER_INTS = ("pieces", "unroll")


@irdl_attr_definition
class TensorCoresAttr(ParametrizedAttribute):
    """One skeleton's plan on the matrix units: vyre-tensor-cores' tiling."""

    name = "vyre.tensor_cores"

    keys_attr: IntAttr
    row_tiles_attr: IntAttr
    stage_attr: IntAttr  # 0 or 1
    prefetch_attr: IntAttr  # 0 or 1
    registers_attr: IntAttr  # 0 or 1
    stage_q_attr: IntAttr  # 0 or 1
    skip_rescale_attr: IntAttr  # 0 or 1
    rolled_attr: IntAttr  # 0 or 1
    pieces_attr: IntAttr  # bf16 parts of an f32 operand (1: 16-bit operands)
    unroll_attr: IntAttr  # tiles a trip of the tile loop

    def __init__(self, keys: int, row_tiles: int, stage: bool, prefetch: bool,
                 registers: bool, stage_q: bool, skip_rescale: bool, rolled: bool = False,
                 pieces: int = 1, unroll: int = 1):
        super().__init__(IntAttr(keys), IntAttr(row_tiles), IntAttr(int(stage)),
                         IntAttr(int(prefetch)), IntAttr(int(registers)), IntAttr(int(stage_q)),
                         IntAttr(int(skip_rescale)), IntAttr(int(rolled)), IntAttr(pieces),
                         IntAttr(unroll))

    keys = _data("keys_attr")
    row_tiles = _data("row_tiles_attr")
    pieces = _data("pieces_attr")
    unroll = _data("unroll_attr")

    @property
    def stage(self) -> bool:
        return bool(self.stage_attr.data)

    @property
    def prefetch(self) -> bool:
        return bool(self.prefetch_attr.data)

    @property
    def registers(self) -> bool:
        return bool(self.registers_attr.data)

    @property
    def stage_q(self) -> bool:
        return bool(self.stage_q_attr.data)

    @property
    def skip_rescale(self) -> bool:
        return bool(self.skip_rescale_attr.data)

    @property
    def rolled(self) -> bool:
        return bool(self.rolled_attr.data)

    def verify(self) -> None:
        if self.keys < TILE or self.keys % TILE:
            raise VerifyException(
                f"#vyre.tensor_cores: keys must be a positive multiple of "
                f"{TILE}, got {self.keys}")
        _require_positive(self, ("row_tiles", "pieces", "unroll"))
        if self.prefetch and not self.stage:
            raise VerifyException(
                "#vyre.tensor_cores: prefetch double-buffers staged tiles, so it "
                "needs stage = true")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        start = parser.pos
        values: list[Attribute] = []
        parser.parse_punctuation("<")
        for i, key in enumerate((*_TILING_INTS, *_TILING_FLAGS, *_TILING_LATER_INTS)):
            if i:
                parser.parse_punctuation(",")
            parser.parse_keyword(key)
            parser.parse_punctuation("=")
            value = (int(parser.parse_boolean()) if key in _TILING_FLAGS
                     else parser.parse_integer(allow_boolean=False, allow_negative=True))
            values.append(IntAttr(value))
        parser.parse_punctuation(">")
        return _verified(cls, values, parser, start)

    def print_parameters(self, printer: Printer) -> None:
        flags = "".join(f", {key} = {str(getattr(self, key)).lower()}" for key in _TILING_FLAGS)
        later = "".join(f", {key} = {getattr(self, key)}" for key in _TILING_LATER_INTS)
        printer.print_string(f"<keys = {self.keys}, row_tiles = {self.row_tiles}{flags}{later}>")


BLOCK_PRODUCT_ATTR = "vyre.block_product"  # on a vyre.tiled_online_softmax
_BLOCKING_FIELDS = ("lanes", "key_lanes", "rows", "keys")


@irdl_attr_definition
class BlockProductAttr(ParametrizedAttribute):
    """One skeleton's plan as register blocks: vyre-block-product's
    blocking (its options of the same names)."""

    name = "vyre.block_product"

    lanes_attr: IntAttr
    key_lanes_attr: IntAttr
    rows_attr: IntAttr
    keys_attr: IntAttr

    def __init__(self, lanes: int, key_lanes: int, rows: int, keys: int):
        super().__init__(IntAttr(lanes), IntAttr(key_lanes), IntAttr(rows), IntAttr(keys))

    lanes = _data("lanes_attr")
    key_lanes = _data("key_lanes_attr")
    rows = _data("rows_attr")
    keys = _data("keys_attr")

    def verify(self) -> None:
        _require_positive(self, _BLOCKING_FIELDS)
        if self.key_lanes & (self.key_lanes - 1) or self.lanes % self.key_lanes:
            raise VerifyException(
                f"#vyre.block_product: key_lanes ({self.key_lanes}) must be a power of "
                f"two that divides lanes ({self.lanes})")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        return _parse_int_fields(cls, parser, _BLOCKING_FIELDS)

    def print_parameters(self, printer: Printer) -> None:
        _print_int_fields(self, printer, _BLOCKING_FIELDS)


LATENT_TENSOR_CORES_ATTR = "vyre.latent_tensor_cores"  # on a vyre.tiled_online_softmax
_LATENT_INTS = ("row_tiles", "splits", "row_groups")
# vyre-latent-tensor-cores' groups of four subgroups a workgroup
LATENT_ROW_GROUPS = (1, 2)
_LATENT_FLAGS = ("stage", "skip_rescale")


@irdl_attr_definition
class LatentTensorCoresAttr(ParametrizedAttribute):
    """One skeleton's plan as MLA's latent attention on the matrix units:
    vyre-latent-tensor-cores' tiling (its options of the same names)."""

    name = "vyre.latent_tensor_cores"

    row_tiles_attr: IntAttr
    splits_attr: IntAttr
    row_groups_attr: IntAttr
    stage_attr: IntAttr  # 0 or 1
    skip_rescale_attr: IntAttr  # 0 or 1

    def __init__(self, row_tiles: int, splits: int, stage: bool = False,
                 skip_rescale: bool = False, row_groups: int = 1):
        super().__init__(IntAttr(row_tiles), IntAttr(splits), IntAttr(row_groups),
                         IntAttr(int(stage)), IntAttr(int(skip_rescale)))

    row_tiles = _data("row_tiles_attr")
    splits = _data("splits_attr")
    row_groups = _data("row_groups_attr")

    @property
    def stage(self) -> bool:
        return bool(self.stage_attr.data)

    @property
    def skip_rescale(self) -> bool:
        return bool(self.skip_rescale_attr.data)

    def verify(self) -> None:
        _require_positive(self, _LATENT_INTS)
        if self.row_groups not in LATENT_ROW_GROUPS:
            raise VerifyException(f"#{self.name}: row_groups must be one of "
                                  f"{LATENT_ROW_GROUPS}, got {self.row_groups}")
        if self.row_groups > 1 and not self.stage:
            raise VerifyException(f"#{self.name}: row groups share the staged tiles: "
                                  f"row_groups {self.row_groups} needs stage = true")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        return _parse_int_fields(cls, parser, (*_LATENT_INTS, *_LATENT_FLAGS), _LATENT_FLAGS)

    def print_parameters(self, printer: Printer) -> None:
        _print_int_fields(self, printer, (*_LATENT_INTS, *_LATENT_FLAGS), _LATENT_FLAGS)


PROJECTION_TENSOR_CORES_ATTR = "vyre.projection_tensor_cores"  # on a vyre.kernel
_PROJECTION_INTS = ("row_tiles", "col_blocks")


@irdl_attr_definition
class ProjectionTensorCoresAttr(ParametrizedAttribute):
    """One kernel's plan as a per-head product on the matrix units:
    vyre-projection-tensor-cores' tiling (its options of the same names)."""

    name = "vyre.projection_tensor_cores"

    row_tiles_attr: IntAttr
    col_blocks_attr: IntAttr

    def __init__(self, row_tiles: int, col_blocks: int):
        super().__init__(IntAttr(row_tiles), IntAttr(col_blocks))

    row_tiles = _data("row_tiles_attr")
    col_blocks = _data("col_blocks_attr")

    def verify(self) -> None:
        _require_positive(self, _PROJECTION_INTS)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        return _parse_int_fields(cls, parser, _PROJECTION_INTS)

    def print_parameters(self, printer: Printer) -> None:
        _print_int_fields(self, printer, _PROJECTION_INTS)


def _require_positive(attr: ParametrizedAttribute, fields: tuple[str, ...]) -> None:
    """Each of `attr`'s integer `fields` at least 1."""
    for key in fields:
        if getattr(attr, key) < 1:
            raise VerifyException(
                f"#{attr.name}: {key} must be >= 1, got {getattr(attr, key)}")


def _parse_int_fields(cls, parser: AttrParser, fields: tuple[str, ...],
                      flags: tuple[str, ...] = ()) -> Sequence[Attribute]:
    """`<field = integer, ...>` of `fields` in order (`flags` among them
    true or false), verified as a `cls`."""
    start = parser.pos
    values: list[Attribute] = []
    parser.parse_punctuation("<")
    for i, key in enumerate(fields):
        if i:
            parser.parse_punctuation(",")
        parser.parse_keyword(key)
        parser.parse_punctuation("=")
        values.append(IntAttr(int(parser.parse_boolean()) if key in flags else
                              parser.parse_integer(allow_boolean=False, allow_negative=True)))
    parser.parse_punctuation(">")
    return _verified(cls, values, parser, start)


def _print_int_fields(attr: Attribute, printer: Printer, fields: tuple[str, ...],
                      flags: tuple[str, ...] = ()) -> None:
    def text(key: str) -> str:
        value = getattr(attr, key)
        return str(value).lower() if key in flags else str(value)

    printer.print_string(f"<{', '.join(f'{key} = {text(key)}' for key in fields)}>")


PLAN_ATTRIBUTES = (PlanAttr, MergeKindAttr, TensorCoresAttr, BlockProductAttr,
                   LatentTensorCoresAttr, ProjectionTensorCoresAttr)
# the plans that expand a skeleton (it gets no vyre.plan)
EXPANSION_ATTRS = (TENSOR_CORES_ATTR, LATENT_TENSOR_CORES_ATTR, BLOCK_PRODUCT_ATTR)


def plan_of(op: Operation) -> PlanAttr | None:
    """The plan recorded on a skeleton, if any."""
    attr = op.attributes.get(PLAN_ATTR)
    return attr if isinstance(attr, PlanAttr) else None
