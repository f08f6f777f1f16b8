"""A mask's `tile_classes` for query blocks and key tiles of other sizes,
and the tiles each query block computes: passes that change how many items
a block holds (vyre-resize-workgroup, vyre-block-rows) recompute the table
with `resized_classes`, those that change the tiles (vyre-retile,
vyre-tensor-cores) with `retiled_classes`; the expansions branch on
`block_ranges`, read at run time by `block_bounds`."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import DenseArrayBase, i8
from xdsl.ir import SSAValue

from vyre_xdsl.dialects import vyre
from vyre_xdsl.ir_builder import IRBuilder


def merged_class(classes: list[int]) -> int:
    """The class of a tile for a block made of blocks with these classes."""
    if all(c == vyre.TILE_EMPTY for c in classes):
        return vyre.TILE_EMPTY
    if all(c == vyre.TILE_FULL for c in classes):
        return vyre.TILE_FULL
    return vyre.TILE_PARTIAL


def resized_classes(table: list[list[int]], block: int, size: int, items: int):
    """The tile-class rows for blocks of `size` items, from rows for blocks
    of `block` items (each new block takes the classes of the blocks it
    covers: empty or full where all were, else partial, which is evaluated
    key by key and so always exact)."""
    blocks = -(-items // size)
    rows = []
    for new in range(blocks):
        first, last = new * size // block, ((new + 1) * size - 1) // block
        covered = table[first : min(last, len(table) - 1) + 1]
        rows.append([merged_class(list(column)) for column in zip(*covered, strict=True)])
    return rows


def set_classes(skeleton: vyre.TiledOnlineSoftmaxOp, rows: list[list[int]]) -> None:
    """Store `rows` as the skeleton's flat `tile_classes`."""
    skeleton.properties["tile_classes"] = DenseArrayBase.from_list(
        i8, [cls for row in rows for cls in row]
    )


def retiled_classes(table: list[list[int]], tile_size: int, keys: int,
                    seq_len: int) -> list[list[int]] | None:
    """The tile-class rows for tiles of `keys` keys, from rows for tiles of
    `tile_size`: a part of a tile takes its class, a tile of several tiles
    their merged class; None where neither size divides the other."""
    count = -(-seq_len // keys)
    if tile_size % keys == 0:
        parts = tile_size // keys
        return [[cls for cls in row for _ in range(parts)][:count] for row in table]
    if keys % tile_size:
        return None
    group = keys // tile_size
    return [[merged_class(row[t * group:(t + 1) * group]) for t in range(count)]
            for row in table]


@dataclass(frozen=True)
class BlockRange:
    """The tiles a query block computes: [lo, hi) are not skipped, [flo, fhi)
    of them run without mask code; the others in [lo, hi) are masked."""

    lo: int
    hi: int
    flo: int
    fhi: int


def block_ranges(table: list[list[int]]) -> list[BlockRange]:
    """Per query block: the span of non-empty tiles and the longest run of
    full tiles.  An empty tile inside the span is computed with the mask
    (every key masked: exactly the same result as skipping it)."""
    ranges = []
    for row in table:
        computed = [t for t, c in enumerate(row) if c != vyre.TILE_EMPTY]
        lo, hi = (computed[0], computed[-1] + 1) if computed else (0, 0)
        best, start = (0, 0), None
        for t, c in enumerate([*row, vyre.TILE_EMPTY]):
            if c == vyre.TILE_FULL and start is None:
                start = t
            elif c != vyre.TILE_FULL and start is not None:
                if t - start > best[1] - best[0]:
                    best = (start, t)
                start = None
        ranges.append(BlockRange(lo, hi, *best))
    return ranges


def period_of(rows: list) -> int:
    """The smallest p with rows[b] == rows[b % p] for every b."""
    for p in range(1, len(rows)):
        if all(rows[b] == rows[b % p] for b in range(p, len(rows))):
            return p
    return max(len(rows), 1)


def block_bounds(b: IRBuilder, ranges: list[BlockRange], key: SSAValue) -> dict[str, SSAValue]:
    """lo/hi/flo/fhi of query block `key`, from the compile-time `ranges`
    (select chains keyed by the block, or its period)."""
    period = period_of(ranges)
    if period < len(ranges):
        key = b.remui(key, b.index(period))
    bounds: dict[str, SSAValue] = {}
    is_block: dict[int, SSAValue] = {}
    for field in ("lo", "hi", "flo", "fhi"):
        column = [getattr(r, field) for r in ranges[:period]]
        default = max(set(column), key=column.count)
        value = b.index(default)
        for block_id, x in enumerate(column):
            if x != default:
                if block_id not in is_block:
                    is_block[block_id] = b.cmpi(key, b.index(block_id), "eq")
                value = b.select(is_block[block_id], b.index(x), value)
        value.name_hint = f"tiles_{field}"
        bounds[field] = value
    return bounds
