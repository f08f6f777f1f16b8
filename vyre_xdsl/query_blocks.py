"""A mask's `tile_classes` for query blocks of another size: passes that
change how many items a block holds (vyre-resize-workgroup, vyre-block-rows)
recompute the table with `resized_classes`."""

from __future__ import annotations

from xdsl.dialects.builtin import DenseArrayBase, i8

from vyre_xdsl.dialects import vyre


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
