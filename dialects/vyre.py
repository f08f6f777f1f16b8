"""The `vyre` dialect: the tiled online-softmax skeleton as one op.

A `vyre.kernel` declares what a GPU program owns (storage buffers, workgroup
scratch arrays, workgroup size, item count).  Inside it, one
`vyre.tiled_online_softmax` holds the whole attention recurrence, with the two
decoder-specific fragments as regions: `scores` fills a tile's scores and
`update` folds the tile's values into the accumulator.  The stability helpers
of SEMANTICS.md are ops so that one change reaches every decoder.
"""

from __future__ import annotations

from xdsl.ir import Dialect

from vyre_xdsl.dialects.constants import BINDING_MAX, I64_MAX, I64_MIN, U32_MAX
from vyre_xdsl.dialects.launch import LAUNCH_ATTRIBUTES
from vyre_xdsl.dialects.mla import HeadProductAttr, MlaAttr
from vyre_xdsl.dialects.plan import PLAN_ATTRIBUTES
from vyre_xdsl.dialects.vyre_checks import (
    ACCESS_MODES,
    BUFFER_ELEMENT_TYPES,
    FLOAT_BUFFER_ELEMENT_TYPES,
    check_u32_product,
    parse_int_in_range,
)
from vyre_xdsl.dialects.vyre_kernel import BufferOp, KernelOp, ScratchOp, Skeleton
from vyre_xdsl.dialects.vyre_ops import (
    MERGE_FIELDS,
    STABILITY_OPS,
    BoundedExpArgOp,
    BoundedScoreOp,
    FlushTinyOp,
    ItemIndexOp,
    LaneIndexOp,
    MergeSplitsOp,
    PositiveDenominatorOp,
    StabilityOp,
)
from vyre_xdsl.dialects.vyre_regions import (
    DIM_CHUNK,
    EPILOGUE_ARGS,
    MASK_ARGS,
    PROLOGUE_ARGS,
    REGION_ARGS,
    SCORES_ARGS,
    SHAPE_FIELDS,
    TILE_CLASS_NAMES,
    TILE_EMPTY,
    TILE_FULL,
    TILE_PARTIAL,
    UPDATE_ARGS,
    _parse_region_with_args,
    hook_types,
    part_dims,
    region_types,
    tile_count_for,
)
from vyre_xdsl.dialects.vyre_skeleton import (
    TiledOnlineSoftmaxOp,
    TileWeightOp,
    YieldOp,
    is_empty_hook,
    trivial_hook,
)

__all__ = [
    "ACCESS_MODES",
    "BINDING_MAX",
    "BUFFER_ELEMENT_TYPES",
    "DIM_CHUNK",
    "EPILOGUE_ARGS",
    "FLOAT_BUFFER_ELEMENT_TYPES",
    "I64_MAX",
    "I64_MIN",
    "MASK_ARGS",
    "MERGE_FIELDS",
    "PROLOGUE_ARGS",
    "REGION_ARGS",
    "SCORES_ARGS",
    "SHAPE_FIELDS",
    "STABILITY_OPS",
    "TILE_CLASS_NAMES",
    "TILE_EMPTY",
    "TILE_FULL",
    "TILE_PARTIAL",
    "U32_MAX",
    "UPDATE_ARGS",
    "BoundedExpArgOp",
    "BoundedScoreOp",
    "BufferOp",
    "FlushTinyOp",
    "ItemIndexOp",
    "KernelOp",
    "LaneIndexOp",
    "MergeSplitsOp",
    "PositiveDenominatorOp",
    "ScratchOp",
    "Skeleton",
    "StabilityOp",
    "TileWeightOp",
    "TiledOnlineSoftmaxOp",
    "Vyre",
    "YieldOp",
    "_parse_region_with_args",
    "check_u32_product",
    "hook_types",
    "is_empty_hook",
    "parse_int_in_range",
    "part_dims",
    "region_types",
    "tile_count_for",
    "trivial_hook",
]

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
    [*LAUNCH_ATTRIBUTES, *PLAN_ATTRIBUTES, MlaAttr, HeadProductAttr],
)
