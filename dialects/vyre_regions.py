"""The signature of the skeleton's regions and the tables its fields index:
argument names by role, tile classes, how dim parts deal out head dims."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IndexType, f32
from xdsl.ir import Attribute, Region, SSAValue
from xdsl.parser import Parser

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
# The argument names of each region, by region name.
REGION_ARGS = {
    "scores": SCORES_ARGS,
    "update": UPDATE_ARGS,
    "mask": MASK_ARGS,
    "prologue": PROLOGUE_ARGS,
    "epilogue": EPILOGUE_ARGS,
}
SHAPE_FIELDS = ("item_count", "seq_len", "head_dim", "tile_size", "tile_count")

# Values of the `tile_classes` table: what a (query block, key tile) pair is.
TILE_EMPTY, TILE_FULL, TILE_PARTIAL = 0, 1, 2
TILE_CLASS_NAMES = {TILE_EMPTY: "empty", TILE_FULL: "full", TILE_PARTIAL: "partial"}


# With `dim_parts P`, an item's head dims are dealt to its P lanes in chunks
# of C dims (`dim_chunk C`, DIM_CHUNK without it: one vec4 of f32): dim d
# belongs to part (d // C) % P, so that the lanes of an item read
# neighbouring chunks of a K/V row (other banks of a staged tile) rather
# than rows' far halves (the same banks: a contiguous half per lane ran FA2
# at D=64 1.7 times slower).
DIM_CHUNK = 4


def part_dims(head_dim: int, parts: int, part: int, chunk: int = DIM_CHUNK) -> list[int]:
    """The dims that `part` of `parts` owns with `dim_parts` and chunks of
    `chunk` dims, in the order of its slots (slot i of its q_scratch and
    o_acc slices holds the i-th)."""
    if parts == 1:
        return list(range(head_dim))
    stride = parts * chunk
    return [
        first + part * chunk + e
        for first in range(0, head_dim, stride)
        for e in range(chunk)
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

