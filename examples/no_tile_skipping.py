"""A `vyre-opt --plugin` example: a pass in its own file.

    vyre-opt k.mlir --plugin examples/no_tile_skipping.py -p no-tile-skipping,vyre-to-gpu

`no-tile-skipping` drops the compile-time `tile_classes` of every masked
skeleton, so every tile runs the masked code: the same result (an empty tile
computed with every key masked changes nothing), useful to measure what tile
skipping buys or to rule it out when debugging a mask.
"""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from vyre_xdsl.dialects.vyre import TiledOnlineSoftmaxOp


@dataclass(frozen=True)
class NoTileSkippingPass(ModulePass):
    name = "no-tile-skipping"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for skeleton in op.walk():
            if isinstance(skeleton, TiledOnlineSoftmaxOp) and skeleton.has_mask:
                skeleton.tile_classes = None
