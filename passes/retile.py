"""vyre-retile: run the skeleton over smaller key tiles.

The tile size trades the work between tiles (the tile max, rescale and sum
of every tile) against what one tile keeps live: its scores and, once the
loops over a tile are unrolled, every key's partial sums.  A decoder picks
it when it is built (`vx.flash_attention_2(tile_size=64)`); this pass
changes it afterwards, to a divisor of the built size, so a kernel can be
tuned for a device without being rebuilt:

- the op's `tile_size` and `tile_count` change; the fragments do not (they
  address the tile through tile_start and tile_len, and the lane's score
  slice keeps its built stride, recorded as `score_stride`);
- a mask's `tile_classes` are refined: each new tile takes the class of the
  built tile it lies in (an empty or full tile's parts are empty or full; a
  partial tile's parts are evaluated key by key, which is always exact).

The online softmax then rescales at other points, so results change within
rounding (docs/performance.md); `vx.reference.*(tile_size=new)` gives them
exactly.  `tile_size=0` (the default) takes the size from the skeleton's
`#vyre.plan` (vyre-plan), or, without one, asks the tuning
(`vyre_xdsl.tuning.tile_size`, for the limits that vyre-split-kv and
vyre-split-head-dim will be given): shorter tiles leave registers for the
query row and the accumulator, and a kernel whose splits a kernel merges
wants a tile per split (docs/performance.md says why each size).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from vyre_xdsl import tuning
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.plan import plan_of
from vyre_xdsl.errors import pass_error
from vyre_xdsl.query_blocks import retiled_classes, set_classes


def retile(op: vyre.TiledOnlineSoftmaxOp, tile_size: int) -> None:
    """Set `op`'s tile size to `tile_size`, a divisor of its own."""
    shape = op.shape()
    tile_count = vyre.tile_count_for(shape["seq_len"], tile_size)
    if op.tile_classes is not None:
        rows = retiled_classes(op.tile_class_table(), shape["tile_size"], tile_size,
                               shape["seq_len"])
        assert rows is not None  # tile_size divides the built size
        set_classes(op, rows)
    if tile_size != op.scores_per_lane:  # the fragments keep their stride
        op.properties["score_stride"] = IntegerAttr(op.scores_per_lane, i64)
    op.properties["tile_size"] = IntegerAttr(tile_size, i64)
    op.properties["tile_count"] = IntegerAttr(tile_count, i64)


@dataclass(frozen=True)
class RetilePass(ModulePass):
    """Shrink the key tiles of every skeleton to `tile_size` (a divisor of
    the built size; 0: the recorded plan's, else the tuning's for the device
    limits that vyre-split-kv and vyre-split-head-dim will be given)."""

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
                wanted = self.chosen(skeleton)
                if wanted is None or wanted == shape["tile_size"]:
                    continue
            if wanted < 1 or shape["tile_size"] % wanted:
                raise pass_error(
                    skeleton,
                    f"vyre-retile: tile_size {wanted} must be a positive divisor of the "
                    f"built tile size {shape['tile_size']}",
                )
            retile(skeleton, wanted)

    def chosen(self, skeleton: vyre.TiledOnlineSoftmaxOp) -> int | None:
        recorded = plan_of(skeleton)
        if recorded is not None:
            return recorded.tile_size
        return tuning.tile_size(skeleton, skeleton.lanes, self.shared_memory_bytes, self.max_parts)
