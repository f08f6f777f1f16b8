"""vyre-retile: run the skeleton over smaller key tiles.

The tile size trades the work between tiles (the tile max, rescale and sum
of every tile) against what one tile keeps live: its scores and, once the
loops over a tile are unrolled, every key's partial sums.  A decoder picks
it when it is built (`vx.flash_attention_2(tile_size=64)`); this pass
changes it afterwards, to a divisor of the built size, so a kernel can be
tuned for a device without being rebuilt:

- the op's `tile_size` and `tile_count` change; the fragments do not (they
  address the tile through tile_start and tile_len, and the lane's score
  slice keeps its built stride, `score_stride()`);
- a mask's `tile_classes` are refined: each new tile takes the class of the
  built tile it lies in (an empty or full tile's parts are empty or full; a
  partial tile's parts are evaluated key by key, which is always exact).

The online softmax then rescales at other points, so results change within
rounding (docs/performance.md); `vx.reference.*(tile_size=new)` gives them
exactly.  `tile_size=0` (the default) chooses from measurements on the H200
(docs/performance.md), for kernels that vyre-split-kv does not split (MLA
decode ran 45% slower over 16-key tiles):
- rows of at most 64 dims: 16 keys (32 keys were about 10% faster than 64,
  unmasked and causal, and made staging pay off; 16 keys, unrolled 64 deep,
  another 2-11%, 4% causal);
- longer rows: 8 keys, or 4 on a grid of at most two workgroups per SM
  (head_dim 128: 26.9 -> 15.7 ms at 32 heads, 2.4 -> 1.7 ms at one head:
  the scores of a short tile leave registers for the query row and the
  accumulator); 16 in workgroups of 128 lanes (what vyre-resize-workgroup
  gives large grids: 15.0 ms, where 8 keys took 17.3); 32 where the
  default splits the rows over two lanes (vyre-split-head-dim's
  `automatic_parts`: 12.4 ms, where 16 keys took 13.5, 64 keys 15.6);
- a kernel whose splits vyre-split-kv merges in a kernel
  (`split_kv.merges_in_kernel`): tiles short enough that each split gets
  one (MLA decode's latent attention: 16 keys, 256 splits, 0.40 ms; one
  tile of 8 keys per split 0.43, of 4 keys 0.60, of 32 keys 0.74; two or
  more tiles per split 0.87-1.30).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, ModuleOp, i8, i64
from xdsl.passes import ModulePass

from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import pass_error

SHORT_ROW_TILE = 16  # keys per tile for rows of at most SHORT_ROWS dims
SHORT_ROWS = 64
LONG_ROW_TILE = 8  # keys per tile for longer rows
LONG_ROW_WIDE_WORKGROUP_TILE = 16  # ... in workgroups of 128 lanes or more
LONG_ROW_SMALL_GRID_TILE = 4  # ... on a small grid
SPLIT_ROW_TILE = 32  # ... split over two lanes by default (vyre-split-head-dim)
SMALL_GRID = 2 * 132  # workgroups; two per SM of an H200
MIN_SPLIT_TILE = 4  # the shortest tiles chosen to give splits enough tiles


GRID_UNIT = 64  # lanes of the workgroups SMALL_GRID counts


def grid_workgroups(op: vyre.TiledOnlineSoftmaxOp) -> int:
    """How many workgroups of GRID_UNIT lanes `op`'s kernel needs (a kernel
    resized to 128 lanes counts as many as before: SMALL_GRID was measured
    in workgroups of 64)."""
    kernel = op.parent_op()
    assert isinstance(kernel, vyre.KernelOp)
    return -(-kernel.item_count.value.data // GRID_UNIT)


def tiles_for_kernel_merge(op: vyre.TiledOnlineSoftmaxOp) -> int | None:
    """For a kernel whose splits vyre-split-kv merges in a kernel: the
    largest tile, halving the built one down to MIN_SPLIT_TILE, that leaves
    a tile for each split it wants; None to keep the built tiles."""
    from vyre_xdsl.passes.split_kv import TARGET_INVOCATIONS

    shape = op.shape()
    wanted_splits = 1
    while shape["item_count"] * wanted_splits < TARGET_INVOCATIONS:
        wanted_splits *= 2
    tile = shape["tile_size"]
    while (
        tile % 2 == 0
        and tile // 2 >= MIN_SPLIT_TILE
        and vyre.tile_count_for(shape["seq_len"], tile) < wanted_splits
    ):
        tile //= 2
    return tile if tile != shape["tile_size"] else None


def automatic_tile_size(
    op: vyre.TiledOnlineSoftmaxOp, shared_memory_bytes: int = 0, max_parts: int = 0
) -> int | None:
    """The measured choice for `op` (module docstring), or None to keep
    its tiles; the limits are those vyre-split-kv and vyre-split-head-dim
    get (0: unbounded)."""
    from vyre_xdsl.passes.split_head_dim import automatic_parts
    from vyre_xdsl.passes.split_kv import (
        TARGET_INVOCATIONS,
        automatic_splits,
        merges_in_kernel,
    )

    kernel = op.parent_op()
    assert isinstance(kernel, vyre.KernelOp)
    lanes = kernel.workgroup_size.value.data
    if merges_in_kernel(op, lanes, TARGET_INVOCATIONS, shared_memory_bytes):
        return tiles_for_kernel_merge(op)
    if automatic_splits(op, lanes, TARGET_INVOCATIONS, False, shared_memory_bytes) > 1:
        return None
    if op.shape()["head_dim"] <= SHORT_ROWS:
        wanted = SHORT_ROW_TILE
    elif grid_workgroups(op) <= SMALL_GRID:
        wanted = LONG_ROW_SMALL_GRID_TILE
    elif automatic_parts(op, max_parts) > 1:
        wanted = SPLIT_ROW_TILE
    elif lanes >= 128:
        wanted = LONG_ROW_WIDE_WORKGROUP_TILE
    else:
        wanted = LONG_ROW_TILE
    built = op.shape()["tile_size"]
    return wanted if built > wanted and built % wanted == 0 else None


def retile(op: vyre.TiledOnlineSoftmaxOp, tile_size: int) -> None:
    """Set `op`'s tile size to `tile_size`, a divisor of its own."""
    shape = op.shape()
    parts = shape["tile_size"] // tile_size
    tile_count = vyre.tile_count_for(shape["seq_len"], tile_size)
    if op.tile_classes is not None:
        rows = [
            [cls for cls in row for _ in range(parts)][:tile_count]
            for row in op.tile_class_table()
        ]
        op.properties["tile_classes"] = DenseArrayBase.from_list(
            i8, [cls for row in rows for cls in row]
        )
    op.properties["tile_size"] = IntegerAttr(tile_size, i64)
    op.properties["tile_count"] = IntegerAttr(tile_count, i64)


@dataclass(frozen=True)
class RetilePass(ModulePass):
    """Shrink the key tiles of every skeleton to `tile_size` (a divisor of
    the built size; 0: choose, for the device limits that vyre-split-kv and
    vyre-split-head-dim will be given)."""

    name = "vyre-retile"

    tile_size: int = 0
    shared_memory_bytes: int = 0
    max_parts: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for skeleton in [s for s in op.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]:
            shape = skeleton.shape()
            if skeleton.splits > 1 and self.tile_size == 0:
                continue  # split already: nothing left to choose
            if skeleton.splits > 1:
                raise pass_error(
                    skeleton,
                    "vyre-retile: run it before vyre-split-kv (the splits are runs of tiles)",
                )
            wanted = self.tile_size
            if wanted == 0:
                wanted = automatic_tile_size(
                    skeleton, self.shared_memory_bytes, self.max_parts
                )
                if wanted is None:
                    continue
            if wanted < 1 or shape["tile_size"] % wanted:
                raise pass_error(
                    skeleton,
                    f"vyre-retile: tile_size {wanted} must be a positive divisor of the "
                    f"built tile size {shape['tile_size']}",
                )
            retile(skeleton, wanted)
