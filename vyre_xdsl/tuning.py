"""The policy of `optimize="default"`: one plan per skeleton, for a device.

The optimisation passes are mechanisms: each rewrites the IR as its
options say.  What to ask of them is decided here, once, from a device
profile's limits (vyre_xdsl.device) and the skeleton as built:
`module_plans` predicts how each rewrite changes the facts the next
decision reads (workgroup lanes, tile count, splits), so no pass asks
another what it will do later.  vyre-plan records the result as
`#vyre.plan<...>` on each skeleton (dialects/plan.py) and the passes read
it; each choice is also a function of its own (`workgroup_lanes`,
`tile_size`, `kv_split`, `dim_parts`), which a pass run alone with `0`
("choose") and no recorded plan asks about the skeleton as it is then.

Why each choice is what it is, with the measurements behind it:
docs/performance.md ("Why the plan chooses what it does").
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import memref
from xdsl.dialects.builtin import ModuleOp

from vyre_xdsl.device import DeviceProfile
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.launch import BufferAccess
from vyre_xdsl.dialects.plan import (
    BLOCK_PRODUCT_ATTR,
    EXPANSION_ATTRS,
    LATENT_TENSOR_CORES_ATTR,
    PLAN_ATTR,
    PROJECTION_TENSOR_CORES_ATTR,
    TENSOR_CORES_ATTR,
    MergeKind,
    PlanAttr,
)
from vyre_xdsl.dim_split import DimLoops, find_dim_loops, split_problem
from vyre_xdsl.dtypes import HALF_DTYPES, INT_DTYPES, dtype_name
from vyre_xdsl.kv_split import merge_teams_problem, valid_splits, workgroup_merge_bytes
from vyre_xdsl.mma_elements import HALF_TYPES, SPLIT_TOLERANCE
from vyre_xdsl.mma_layout import TILE
from vyre_xdsl.row_widening import loads_shared

# Rows of at most SHORT_ROWS dims fit an invocation's registers with their
# accumulator; longer rows go over lanes (dim_parts) or shorter tiles.
SHORT_ROWS = 64
SHORT_ROW_TILE = 16  # keys per tile for rows of at most SHORT_ROWS dims
LONG_ROW_TILE = 8  # keys per tile for longer rows
LONG_ROW_WIDE_WORKGROUP_TILE = 16  # ... in workgroups of 128 lanes or more
LONG_ROW_SMALL_GRID_TILE = 4  # ... on a small grid
SPLIT_ROW_TILE = 32  # ... split over lanes (dim_parts)
MIN_SPLIT_TILE = 4  # the shortest tiles chosen to give kv splits a tile each
GRID_UNIT = 64  # lanes of the workgroups SMALL_GRID counts
SMS = 132  # an H200's streaming multiprocessors
SMALL_GRID = 2 * SMS  # workgroups of GRID_UNIT lanes: two per SM of an H200
LARGE_GRID_LANES = 128  # lanes per workgroup on larger grids
TARGET_INVOCATIONS = 4096  # kv splits until an item's invocations reach this
# Splits that a kernel merges go on to this many times the target (no
# barrier bounds them, and decode reads more of its cache at once), for
# rows of at most MORE_SPLITS_DIMS dims and MORE_SPLITS_KEYS keys, where
# that leaves each split MIN_SPLIT_KEYS to MAX_SPLIT_KEYS keys: GQA decode
# ran 1.6-2.5 times as fast there; with longer rows or splits, and MLA's
# latent rows, it ran slower (docs/performance.md, "More splits for decode");
# longer rows in f16/bf16 (MLA's latent rows) take them too, however many
# keys a split keeps: MLA decode in bf16 ran 1.1-1.8 times as fast
# (docs/performance.md, "More splits for half-precision latent rows"); so
# do rows that share their loads a few at a time (SHARED_ROWS below)
KERNEL_MERGE_FACTOR = 4
# a merge kernel's invocations each merge up to MERGE_DIMS of an item's
# dims while the kernel keeps MERGE_INVOCATIONS of them: its workgroups'
# launches, not its loads, bounded it (docs/performance.md, "Twenty-first
# session")
MERGE_DIMS = 8
MERGE_INVOCATIONS = 65536
# ... and its splits go to teams of invocations (vyre.merge_splits `teams`),
# up to MERGE_TEAMS, each walking at least MERGE_TEAM_SPLITS of them, each
# team's lanes at least MERGE_TEAM_COLUMNS neighbouring columns (a 32-byte
# sector of f32 partials a load): a kernel that walked 512 splits an
# invocation took a third of GQA decode's time at batch 1
# (docs/performance.md, "Twenty-fifth session")
MERGE_TEAMS = 16
MERGE_TEAM_SPLITS = 8
MERGE_TEAM_COLUMNS = 8
MIN_SPLIT_KEYS = 32
MAX_SPLIT_KEYS = 256
MORE_SPLITS_DIMS = 128
MORE_SPLITS_KEYS = 4096
STAGE_TILE_BYTES = 16 * 1024  # staged tiles at most this large on large grids
UNROLL = 32  # unroll depth
DEEP_UNROLL = 64  # ... with a mask, short rows, or split rows
LONG_ROW_BLOCK = 2  # items per invocation for long rows over lanes on large grids
# A lane's chunk of a row split over lanes, by the element type of the rows
# the fragments read: 8 dims of bf16 are a 16-byte load, and a row's two
# lanes read a whole 32-byte sector (bf16 GQA decode ran up to 1.56 times
# as fast); f16 ran slower in chunks of 8 (its conversions, not its loads,
# bound it), f32 reads 16 bytes in chunks of vyre.DIM_CHUNK
# (docs/performance.md, "Chunks of 16 bytes")
DIM_CHUNKS = {"bf16": 8}
# Rows whose splits a kernel merges and that share their key and value
# loads (GQA's query heads of one key head) run SHARED_ROWS to an invocation
# (vyre-block-rows), each over as many lanes as leave SHARED_ROW_DIMS dims
# to each, in tiles of SHARED_ROW_TILE keys: a K/V element loaded (and
# widened from bf16) once feeds four rows; GQA decode ran 1.5-2.5 times as
# fast (docs/performance.md, "A key head's query rows on one lane")
SHARED_ROWS = 4
SHARED_ROW_DIMS = 16
# tiles of 8 keys took 0.82-0.93 of the time of 16 from batch 8, 0.86-0.99
# at batch 1 (docs/performance.md, "Thirtieth session")
SHARED_ROW_TILE = 8
# ... but on grids of at most FEW_SHARED_ITEMS rows (batch 1's query
# heads), FEW_SHARED_ROWS rows over lanes of FEW_SHARED_ROW_DIMS dims: twice
# the lanes a row where rows are few; GQA decode at batch 1 ran 1.10-1.53
# times as fast (docs/performance.md, "Twenty-eighth session")
FEW_SHARED_ITEMS = 32
FEW_SHARED_ROWS = 2
FEW_SHARED_ROW_DIMS = 8
# ... and they take the splits beyond the target for rows of up to this
# many keys (MORE_SPLITS_KEYS for others): bf16 GQA decode at batch 8 with
# 16384 keys ran 2.3 times as fast, 3.2 with pages (docs/performance.md,
# "Longer rows split further"); where a few rows share (a key head's query
# heads), however many keys a split keeps: 2.6-5.7 times as fast where the
# splits had kept more than MAX_SPLIT_KEYS keys, at batch 8-128
# (docs/performance.md, "Splits as long as they need to be")
SHARED_MORE_SPLITS_KEYS = 32768

# Register blocks (vyre-block-product) on grids of at most this many
# workgroups of GRID_UNIT lanes: one head of 1024-4096 rows ran 1.5-4.4
# times as fast, two heads as fast, four or more slower (docs/performance.md)
BLOCK_PRODUCT_GRID = SMS // 2
BLOCK_PRODUCT_WORKGROUPS = 64  # the fewest workgroups a blocking must give

INTERLEAVED = ("q_scratch",)  # kept lane-minor on small grids with long rows


def tensor_core_tilings(row_dims: int, plain: bool = False):
    """vyre-tensor-cores' tilings for rows of `row_dims` dims (the longer of
    head_dim and v_head_dim), best first as measured on the H200
    (docs/performance.md, "Tensor cores"): more row blocks a subgroup read
    each K and V block for more rows, until O's matrices take too many
    registers; staged, prefetched tiles with P in registers were the
    fastest (32 keys and 2 row blocks at 64 dims, where 4 were 4% slower
    without a mask and nearly twice as slow causal, and with the tile loop
    rolled, where the driver's unrolling had made it 1.15 times as slow,
    two tiles a trip where `plain` (no mask, no score_mod: 7-10% faster,
    1-3% slower with one; docs/performance.md, "Thirty-second session");
    16 keys and 2 at 128, there skipping O's rescale where no row moved its
    max, and unrolled: rolled, it was 1.26 times as slow, at two tiles a
    trip still 1.08);
    a device whose A operands do not hold a lane's accumulator elements
    takes the next, with P through workgroup memory."""
    from vyre_xdsl.passes.tensor_cores import Tiling

    prefetched = dict(stage=True, prefetch=True)
    fallbacks = (Tiling(keys=32, stage=True), Tiling(keys=32, row_tiles=2), Tiling(keys=32))
    if row_dims <= SHORT_ROWS:
        return (Tiling(keys=32, row_tiles=2, registers=True, rolled=True,
                       unroll=2 if plain else 1, **prefetched),
                Tiling(keys=16, row_tiles=4, **prefetched),
                Tiling(keys=32, row_tiles=4, stage=True), Tiling(keys=32, row_tiles=4),
                Tiling(keys=32, row_tiles=2, stage=True), *fallbacks)
    return (Tiling(keys=16, row_tiles=2, registers=True, skip_rescale=True, **prefetched),
            Tiling(keys=16, row_tiles=2, registers=True, **prefetched),
            Tiling(keys=16, row_tiles=2, **prefetched),
            Tiling(keys=32, row_tiles=2, stage=True), Tiling(keys=64, row_tiles=2),
            *fallbacks)


# vyre-latent-tensor-cores: the most workgroups its splits make, one an SM
# (splits on an H100: docs/performance.md, "Twenty-first session"), and the
# fewest tiles of 64 keys a split keeps; the row blocks a workgroup takes,
# best first (docs/performance.md, "MLA's latent attention on the matrix
# units")
LATENT_WORKGROUPS = SMS
LATENT_SPLIT_TILES = 2
# (row blocks, staged tiles, groups of row blocks) a workgroup, in the
# order tried: two groups sharing each staged tile where a sequence's heads
# fill them, then one; staged tiles first (docs/performance.md, "Eighteenth
# session", "Twenty-third session")
LATENT_TILINGS = ((1, True, 2), (1, True, 1), (1, False, 1))
# rows of a head an item of MLA's projections computes, at most
# (vyre-absorb-mla{kernels=3 rows}; docs/performance.md)
PROJECTION_ROWS = 8


def projection_rows(batch: int) -> int:
    """vyre-absorb-mla's rows for a batch of `batch` sequences: the
    largest power of two up to PROJECTION_ROWS that divides it."""
    rows = 1
    while rows < PROJECTION_ROWS and batch % (2 * rows) == 0:
        rows *= 2
    return rows


# blocks of 16 sequences a workgroup of a projection on the matrix units
# computes, at most (vyre-projection-tensor-cores; each is 8 f32 registers
# a lane for each of a subgroup's column blocks)
PROJECTION_ROW_TILES = 8
PROJECTION_COL_BLOCKS = 1
# the workgroups a projection keeps while it gives each more row blocks:
# about four an SM (docs/performance.md, "Twenty-second session")
PROJECTION_WORKGROUPS = 512
# a transposed product (W_uk's) of fewer sequences than a matrix has rows
# stays on the lanes: most of its rows would be padding (faster at batch
# 1; docs/performance.md, "Twenty-third session")
PROJECTION_TRANSPOSED_SEQUENCES = TILE


def projection_tiling(sequences: int, others: int) -> tuple[int, int]:
    """vyre-projection-tensor-cores' (row_tiles, col_blocks) for a product
    over `sequences` rows a head, with `others` workgroups for each group
    of row blocks (heads x groups of columns): the most row blocks a
    workgroup, a power of two up to PROJECTION_ROW_TILES, that leave at
    least PROJECTION_WORKGROUPS workgroups (each weight is read once a
    workgroup); 1 where none does."""
    blocks, rows = -(-sequences // TILE), 1
    while (2 * rows <= min(blocks, PROJECTION_ROW_TILES)
           and -(-blocks // (2 * rows)) * others >= PROJECTION_WORKGROUPS):
        rows *= 2
    return rows, PROJECTION_COL_BLOCKS


def merge_dims(item_count: int, head_dim: int) -> int:
    """The dims each invocation of a merge kernel merges: the largest power
    of two up to MERGE_DIMS that divides head_dim and leaves at least
    MERGE_INVOCATIONS invocations (1 where none does)."""
    dims = 1
    while (2 * dims <= MERGE_DIMS and head_dim % (2 * dims) == 0
           and item_count * head_dim // (2 * dims) >= MERGE_INVOCATIONS):
        dims *= 2
    return dims


def merge_teams(splits: int, columns: int, lanes: int) -> int:
    """The teams of invocations of a merge kernel of `lanes` lanes a
    workgroup over `columns` columns (vyre.merge_splits): the largest power
    of two up to MERGE_TEAMS that leaves each team MERGE_TEAM_SPLITS of the
    `splits` and MERGE_TEAM_COLUMNS columns of a workgroup, dividing both."""
    teams = 1
    while (2 * teams <= MERGE_TEAMS and splits // (2 * teams) >= MERGE_TEAM_SPLITS
           and lanes // (2 * teams) >= MERGE_TEAM_COLUMNS
           and merge_teams_problem(splits, columns, lanes, 2 * teams) is None):
        teams *= 2
    return teams


def skeleton_merge_teams(op: vyre.TiledOnlineSoftmaxOp, splits: int, lanes: int,
                         dims: int = 0) -> int:
    """merge_teams for the kernel that merges `op`'s `splits` in workgroups
    of `lanes`, `dims` dims an invocation (0: merge_dims')."""
    items = op.shape()["item_count"]
    dims = dims or merge_dims(items, op.v_dim)
    return merge_teams(splits, items * op.v_dim // dims, lanes)


def latent_splits(row_blocks: int, tiles: int) -> int:
    """vyre-latent-tensor-cores' splits for `row_blocks` workgroups of rows
    over `tiles` tiles: the largest power of two that gives at most
    LATENT_WORKGROUPS workgroups, keeping LATENT_SPLIT_TILES tiles a split."""
    splits = 1
    while (row_blocks * 2 * splits <= LATENT_WORKGROUPS
           and tiles // (2 * splits) >= LATENT_SPLIT_TILES):
        splits *= 2
    return splits


def latent_tiling(op: vyre.TiledOnlineSoftmaxOp, device: DeviceProfile):
    """How `op` (MLA's latent attention, vyre-absorb-mla's) runs on
    `device`'s matrix units (a vyre-latent-tensor-cores LatentTiling), or
    None where it does not qualify or fit: the first of LATENT_TILINGS
    that does, split by latent_splits."""
    from vyre_xdsl.passes.latent_tensor_cores import fitting_problem, split_tiling

    for row_tiles, stage, row_groups in LATENT_TILINGS:
        tiling = split_tiling(op, row_tiles, stage, row_groups=row_groups)
        if fitting_problem(op, device, tiling) is None:
            return tiling
    return None


def f32_parts_problem(parts: int) -> str | None:
    """Why `parts` is not a choice of the plan's f32_parts; None if it is."""
    if parts == 0 or parts in SPLIT_TOLERANCE:
        return None
    return (f"f32_parts must be 0 (f32 on the lanes), 2 or 3 (bf16 parts of an f32 on "
            f"the matrix units), got {parts}")


def split_tilings(row_dims: int, parts: int, plain: bool = False):
    """vyre-tensor-cores' tilings for f32 operands split into `parts` bf16
    parts, for rows of `row_dims` dims, as measured (docs/performance.md,
    "Sixteenth session"): 16 keys and 2 row blocks, staged, P and Q in
    registers, prefetched with two parts; with three, none at more than 64
    dims, where the lanes were faster.  The tile loop rolled where `plain`
    (no mask, no score_mod): 4% faster with three parts, 22% with two at
    128 dims, 1% slower causal (docs/performance.md, "Thirty-second
    session")."""
    from vyre_xdsl.passes.tensor_cores import Tiling

    if parts == 3 and row_dims > SHORT_ROWS:
        return ()
    return (Tiling(keys=16, row_tiles=2, stage=True, prefetch=parts == 2, registers=True,
                   rolled=plain, pieces=parts),)


def scores_plainly(op: vyre.TiledOnlineSoftmaxOp) -> bool:
    """Whether `op` has no mask and its scores are tile products of no
    score_mod (vyre_xdsl.tile_products)."""
    from vyre_xdsl.tile_products import Fragments, Unfit

    if op.has_mask:
        return False
    try:
        return Fragments.of(op, 1).scaled_dot
    except Unfit:
        return False


def tensor_core_tiling(op: vyre.TiledOnlineSoftmaxOp, device: DeviceProfile,
                       f32_parts: int = 0):
    """How `op` runs on `device`'s matrix units (a vyre-tensor-cores
    Tiling), or None where it does not: its inputs are not f16 or bf16
    (nor f32 with `f32_parts`, which splits them into that many bf16
    parts), the device lacks 16x16x16 matrices of them or their layout, or
    no tiling qualifies and fits.  The first tiling that gives every SM a
    workgroup, else the one with the most workgroups (larger row blocks on
    too small a grid were slower: docs/performance.md); split f32 only on
    grids that fill the SMs (on smaller ones the lanes were faster).  bf16
    takes f16's tilings: on the H200 they ran as fast (docs/performance.md,
    "bf16 on the matrix units")."""
    from vyre_xdsl.passes.tensor_cores import problem

    shape = op.shape()
    head_dim, items = shape["head_dim"], shape["item_count"]
    row_dims = max(head_dim, op.v_dim)
    half = isinstance(op.q.type.element_type, HALF_TYPES)
    if half:
        tilings = tensor_core_tilings(row_dims, plain=scores_plainly(op))
    elif f32_parts:
        tilings = split_tilings(row_dims, f32_parts, plain=scores_plainly(op))
    else:
        return None
    usable = [t for t in tilings
              if t.workgroup_bytes(head_dim, op.v_dim) <= device.shared_memory_bytes
              and problem(op, device, t) is None]
    filling = [t for t in usable if items // t.rows >= SMS]
    if filling or not usable or not half:
        return filling[0] if filling else None
    return max(usable, key=lambda t: items // t.rows)  # the first of the most


def block_blockings(row_dims: int):
    """vyre-block-product's blockings for rows of `row_dims` dims, best
    first as measured on the H200 (docs/performance.md, "Register
    blocks"): two rows x four keys a lane, eight lanes a row, at up to 64
    dims; two rows x two keys, sixteen lanes a row, at 128 and where the
    first would give too few workgroups (1024 rows)."""
    from vyre_xdsl.passes.block_product import Blocking

    wide = Blocking(lanes=128, key_lanes=16, rows=2, keys=2)
    narrow = Blocking(lanes=128, key_lanes=8, rows=2, keys=4)
    return (narrow, wide) if row_dims <= SHORT_ROWS else (wide, narrow)


def block_blocking(op: vyre.TiledOnlineSoftmaxOp, device: DeviceProfile):
    """How `op` runs as register blocks on `device` (a vyre-block-product
    Blocking), or None where it does not: its grid is larger than
    BLOCK_PRODUCT_GRID, or no blocking qualifies, fits the device's
    workgroup memory, lanes and shuffles and gives BLOCK_PRODUCT_WORKGROUPS
    workgroups (fewer rows than that were not measured).  The first that
    does."""
    from vyre_xdsl.passes.block_product import problem

    if grid_workgroups(op) > BLOCK_PRODUCT_GRID:
        return None
    head_dim, items = op.shape()["head_dim"], op.shape()["item_count"]
    usable = [b for b in block_blockings(max(head_dim, op.v_dim))
              if b.workgroup_bytes(head_dim, op.v_dim) <= device.shared_memory_bytes
              and b.lanes <= device.max_workgroup_invocations
              and b.key_lanes <= device.shuffle_subgroup_size
              and problem(op, b) is None]
    filling = [b for b in usable if items // b.workgroup_rows >= BLOCK_PRODUCT_WORKGROUPS]
    return filling[0] if filling else None


def grid_workgroups(op: vyre.TiledOnlineSoftmaxOp) -> int:
    """How many workgroups of GRID_UNIT lanes `op`'s kernel needs (a kernel
    resized to 128 lanes counts as many as before: SMALL_GRID was measured
    in workgroups of 64)."""
    return -(-_kernel(op).items // GRID_UNIT)


def workgroup_lanes(kernel: vyre.KernelOp) -> int | None:
    """vyre-resize-workgroup's choice for `kernel`: LARGE_GRID_LANES for a
    kernel of one unsplit skeleton on a grid larger than SMALL_GRID, else
    None (keep its workgroups)."""
    skeletons = [s for s in kernel.body.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]
    if len(skeletons) != 1 or skeletons[0].splits > 1:
        return None
    if grid_workgroups(skeletons[0]) <= SMALL_GRID:
        return None
    return LARGE_GRID_LANES


def merges_in_kernel(
    op: vyre.TiledOnlineSoftmaxOp, lanes: int, target: int, shared_memory_bytes: int = 0
) -> bool:
    """Whether `merge=auto` merges `op`'s splits in a kernel: it has too
    few items to reach `target` invocations with a workgroup's worth of
    splits each, a merge in the workgroup would not fit
    `shared_memory_bytes`, or its rows are longer than SHORT_ROWS (a merge
    in the workgroup takes whole rows, which then stay on one lane each
    and spill, where a kernel's merge lets them go over lanes); and no
    hooks for every split to repeat and no mask (which is never split)."""
    if op.has_mask or not op.hooks_empty:  # every split runs hooks
        return False
    shape = op.shape()
    items = shape["item_count"]
    if wanted_splits(op, target, in_kernel=True) == 1:
        return False  # not split at all
    too_big = bool(shared_memory_bytes) and workgroup_merge_bytes(op, lanes) > shared_memory_bytes
    return items * lanes < target or too_big or shape["head_dim"] > SHORT_ROWS


def automatic_splits(
    op: vyre.TiledOnlineSoftmaxOp,
    lanes: int,
    target: int,
    in_kernel: bool = False,
    shared_memory_bytes: int = 0,
    tile_count: int | None = None,
) -> int:
    """The smallest valid power of two of at least wanted_splits (the
    largest valid one below it if none is); 1 for no split."""
    shape = op.shape()
    tiles = shape["tile_count"] if tile_count is None else tile_count
    wanted = wanted_splits(op, target, in_kernel)
    chosen, splits = 1, 2
    while wanted > 1 and splits <= (tiles if in_kernel else lanes):
        if valid_splits(op, lanes, splits, in_kernel, shared_memory_bytes, tiles) is None:
            chosen = splits
            if splits >= wanted:
                break
        splits *= 2
    return chosen


def wanted_splits(op: vyre.TiledOnlineSoftmaxOp, target: int, in_kernel: bool) -> int:
    """The power of two of splits that brings `op`'s items to `target`
    invocations; where a kernel merges the splits of rows of at most
    MORE_SPLITS_DIMS dims and MORE_SPLITS_KEYS keys, the one that brings
    them towards KERNEL_MERGE_FACTOR times that, if each split then keeps
    at least MIN_SPLIT_KEYS keys and at most MAX_SPLIT_KEYS; rows that
    share their loads (sharing_rows) take them up to SHARED_MORE_SPLITS_KEYS
    keys, and where they share a few at a time (few_rows_share), as longer
    rows in f16/bf16 do, whatever a split keeps; 1 for none."""
    shape = op.shape()
    items, keys = shape["item_count"], shape["seq_len"]
    wanted = 1
    while items * wanted < target:
        wanted *= 2
    if not in_kernel:
        return wanted
    long_half_rows = shape["head_dim"] > MORE_SPLITS_DIMS and read_dtype(op) in HALF_DTYPES
    rows = sharing_rows(op)
    max_keys = SHARED_MORE_SPLITS_KEYS if rows > 1 else MORE_SPLITS_KEYS
    if not (keys <= max_keys and (shape["head_dim"] <= MORE_SPLITS_DIMS or long_half_rows)):
        return wanted
    more = wanted
    while items * more < KERNEL_MERGE_FACTOR * target and keys // (2 * more) >= MIN_SPLIT_KEYS:
        more *= 2
    unbounded = long_half_rows or (rows > 1 and few_rows_share(op, rows))
    return more if more > wanted and (unbounded or keys // more <= MAX_SPLIT_KEYS) else wanted


def sharing_rows(op: vyre.TiledOnlineSoftmaxOp) -> int:
    """The most rows, a power of two up to SHARED_ROWS, that can run in one
    invocation sharing every load of a kernel buffer in both fragments
    (GQA's query heads of one key head), for rows of at most
    MORE_SPLITS_DIMS dims not given rows already; 1 for none."""
    if op.shape()["head_dim"] > MORE_SPLITS_DIMS or op.rows > 1:
        return 1
    rows = SHARED_ROWS
    while rows > 1 and not _shares_loads(op, rows):
        rows //= 2
    return rows


def few_rows_share(op: vyre.TiledOnlineSoftmaxOp, rows: int | None = None) -> bool:
    """Whether `op`'s rows share their loads in groups of two to
    SHARED_ROWS (decode's query heads of one key head) and no more: where
    more rows read each key (a head's query rows), a workgroup's staged
    tile serves them, and the grid has rows enough without more splits.
    `rows`: sharing_rows(op), if known."""
    rows = sharing_rows(op) if rows is None else rows
    return rows > 1 and not _shares_loads(op, 2 * rows)


def _shares_loads(op: vyre.TiledOnlineSoftmaxOp, rows: int) -> bool:
    return rows_problem(op, rows) is None and all(
        loads_shared(region.block, op.region_arg(name, "item"), rows)
        for name, region in (("scores", op.scores), ("update", op.update))
    )


def read_dtype(op: vyre.TiledOnlineSoftmaxOp) -> str | None:
    """The element type of the keys and values that `op`'s fragments read:
    the half-precision type of the kernel buffers they read if there is one
    (an absorbed MLA query is f32 beside a bf16 latent cache), else f32 if
    they read floats; None for none or for two half types."""
    read = {
        dtype_name(load.memref.type.element_type)
        for region in (op.scores, op.update) for load in region.walk()
        if isinstance(load, memref.LoadOp) and isinstance(load.memref.owner, vyre.BufferOp)
    } - set(INT_DTYPES)
    halves = read & set(HALF_DTYPES)
    if halves:
        return next(iter(halves)) if len(halves) == 1 else None
    return next(iter(read), None)


def kv_split(
    op: vyre.TiledOnlineSoftmaxOp,
    lanes: int,
    target: int = TARGET_INVOCATIONS,
    merge: str = "auto",
    shared_memory_bytes: int = 0,
    tile_count: int | None = None,
) -> tuple[int, bool]:
    """vyre-split-kv's choice: (P, whether a kernel merges) for `merge`
    (auto, workgroup or kernel); P = 1 for no split, also for a skeleton
    given rows already (vyre-block-rows ran first)."""
    if op.rows > 1:
        return 1, False
    in_kernel = merge == "kernel" or (
        merge == "auto" and merges_in_kernel(op, lanes, target, shared_memory_bytes)
    )
    splits = automatic_splits(op, lanes, target, in_kernel, shared_memory_bytes, tile_count)
    return splits, in_kernel and splits > 1


def dim_parts(
    op: vyre.TiledOnlineSoftmaxOp,
    lanes: int,
    splits: int,
    merges_in_kernel: bool,
    max_parts: int = 0,
    found: DimLoops | str | None = None,
) -> int:
    """vyre-split-head-dim's choice for `op` in workgroups of `lanes`, its
    tiles split `splits` ways: rows longer than SHORT_ROWS over as many
    lanes (a power of two) as leave SHORT_ROWS dims or fewer to each; rows
    of an unsplit kernel on a small grid over 2; fewer where `op` does not
    qualify for as many or the device shuffles across fewer than that
    (`max_parts`, 0: unbounded); 1 otherwise.  `found` is
    find_dim_loops(op), if known."""
    head_dim = op.shape()["head_dim"]
    parts = 1
    if head_dim > SHORT_ROWS:
        while head_dim > parts * SHORT_ROWS:
            parts *= 2
    elif splits == 1 and grid_workgroups(op) <= SMALL_GRID:
        parts = 2

    def fits(parts: int) -> bool:
        nonlocal found
        if max_parts and parts > max_parts:
            return False
        if split_problem(op, parts, lanes, splits, merges_in_kernel) is not None:
            return False
        if found is None:
            found = find_dim_loops(op)
        return isinstance(found, DimLoops)

    while parts > 1 and not fits(parts):
        parts //= 2
    return parts


def tiles_for_kernel_merge(op: vyre.TiledOnlineSoftmaxOp, target: int) -> int | None:
    """For a kernel whose splits a kernel merges: the largest tile, halving
    the built one down to MIN_SPLIT_TILE, that leaves a tile for each split
    it wants; None to keep the built tiles."""
    shape = op.shape()
    wanted = wanted_splits(op, target, in_kernel=True)
    tile = shape["tile_size"]
    while (
        tile % 2 == 0
        and tile // 2 >= MIN_SPLIT_TILE
        and vyre.tile_count_for(shape["seq_len"], tile) < wanted
    ):
        tile //= 2
    return tile if tile != shape["tile_size"] else None


def tile_size(
    op: vyre.TiledOnlineSoftmaxOp,
    lanes: int,
    shared_memory_bytes: int = 0,
    max_parts: int = 0,
    found: DimLoops | str | None = None,
) -> int | None:
    """vyre-retile's choice for `op` in workgroups of `lanes`, or None to
    keep its tiles; the limits are those vyre-split-kv and
    vyre-split-head-dim get (0: unbounded).  A kernel whose splits a kernel
    merges gets tiles short enough for a tile per split; one split and
    merged in the workgroup keeps its tiles; otherwise by row length, grid
    and whether the rows go over lanes."""
    if merges_in_kernel(op, lanes, TARGET_INVOCATIONS, shared_memory_bytes):
        return tiles_for_kernel_merge(op, TARGET_INVOCATIONS)
    if automatic_splits(op, lanes, TARGET_INVOCATIONS, False, shared_memory_bytes) > 1:
        return None
    if op.shape()["head_dim"] <= SHORT_ROWS:
        wanted = SHORT_ROW_TILE
    elif grid_workgroups(op) <= SMALL_GRID:
        wanted = LONG_ROW_SMALL_GRID_TILE
    elif dim_parts(op, lanes, op.splits, op.merges_in_kernel, max_parts, found) > 1:
        wanted = SPLIT_ROW_TILE
    elif lanes >= LARGE_GRID_LANES:
        wanted = LONG_ROW_WIDE_WORKGROUP_TILE
    else:
        wanted = LONG_ROW_TILE
    built = op.shape()["tile_size"]
    return wanted if built > wanted and built % wanted == 0 else None


def rows_problem(op: vyre.TiledOnlineSoftmaxOp, rows: int) -> str | None:
    """Why `op` cannot run `rows` items per invocation; None if it can."""
    items = op.shape()["item_count"]
    if rows < 1 or items % rows:
        return f"rows ({rows}) must divide item_count ({items})"
    if op.ragged and op.seq_items % rows:
        return (f"the rows of an invocation must share their sequence's key count, "
                f"but items_per_seq ({op.seq_items}) is not a multiple of {rows}")
    invocations = items // rows * op.lanes_per_item
    if op.splits > 1 and not op.merges_in_kernel and invocations % op.lanes:
        return (f"the splits merge in the workgroup, whose barrier needs every lane, "
                f"but {invocations} invocations do not fill workgroups of {op.lanes}")
    return None


def rows_per_lane(
    op: vyre.TiledOnlineSoftmaxOp, parts: int | None = None, small_grid: bool | None = None
) -> int:
    """vyre-block-rows' choice for `op` with `parts` dim parts (its own if
    None) on a small grid or not (its own kernel's if None): LONG_ROW_BLOCK
    rows for rows longer than SHORT_ROWS over lanes on a large grid, unsplit
    and unmasked; 1 otherwise."""
    if op.rows > 1:
        return op.rows  # given by a vyre-block-rows run before the plan
    parts = op.parts if parts is None else parts
    small_grid = grid_workgroups(op) <= SMALL_GRID if small_grid is None else small_grid
    long_rows_over_lanes = op.shape()["head_dim"] > SHORT_ROWS and parts > 1
    if (not long_rows_over_lanes or small_grid or op.splits > 1 or op.has_mask
            or op.ragged or rows_problem(op, LONG_ROW_BLOCK) is not None):
        return 1
    return LONG_ROW_BLOCK


def dim_chunk(op: vyre.TiledOnlineSoftmaxOp, parts: int | None = None) -> int:
    """vyre-split-head-dim's chunk for `op` split over `parts` lanes (its own
    if None): DIM_CHUNKS' for the type of the keys and values it reads
    (read_dtype), where the head dims divide into as many; else
    vyre.DIM_CHUNK."""
    parts = op.parts if parts is None else parts
    chunk = DIM_CHUNKS.get(read_dtype(op), vyre.DIM_CHUNK)
    return chunk if op.shape()["head_dim"] % (max(parts, 1) * chunk) == 0 else vyre.DIM_CHUNK


@dataclass
class _Prediction:
    """A skeleton after the vyre-level rewrites, as far as the later
    choices read it."""

    op: vyre.TiledOnlineSoftmaxOp
    lanes: int
    tile_size: int
    splits: int
    in_kernel: bool
    found: DimLoops | str

    @property
    def head_dim(self) -> int:
        return self.op.shape()["head_dim"]


def _predict(op: vyre.TiledOnlineSoftmaxOp, device: DeviceProfile) -> _Prediction:
    """vyre-resize-workgroup, vyre-retile and vyre-split-kv's choices for
    `op`, each from the facts the one before leaves."""
    shared, max_parts = device.shared_memory_bytes, device.max_dim_parts
    found = find_dim_loops(op)
    kernel = _kernel(op)
    lanes = workgroup_lanes(kernel) or kernel.lanes
    shape = op.shape()
    if op.splits > 1:  # split when built: nothing left to choose
        return _Prediction(op, lanes, shape["tile_size"], op.splits, op.merges_in_kernel, found)
    tile = tile_size(op, lanes, shared, max_parts, found) or shape["tile_size"]
    tiles = vyre.tile_count_for(shape["seq_len"], tile)
    splits, in_kernel = kv_split(op, lanes, shared_memory_bytes=shared, tile_count=tiles)
    return _Prediction(op, lanes, tile, splits, in_kernel, found)


def _parts(p: _Prediction, device: DeviceProfile) -> int:
    return dim_parts(p.op, p.lanes, p.splits, p.in_kernel, device.max_dim_parts, p.found)


def shared_rows(p: _Prediction, device: DeviceProfile) -> tuple[int, int, int, int] | None:
    """(rows, dim parts, tile, kv splits) for a skeleton whose splits a
    kernel merges and whose rows share their loads (sharing_rows): that
    many rows an invocation, each over head_dim / SHARED_ROW_DIMS lanes
    (few_shared_rows on a grid of few rows), in tiles of SHARED_ROW_TILE
    keys (its own where not a multiple), split as many ways as those tiles
    allow; None where fewer than two rows share their loads or the rows
    cannot go over that many lanes."""
    op = p.op
    if not (p.in_kernel and p.splits > 1):
        return None
    rows, parts = few_shared_rows(p, device, sharing_rows(op))
    if rows == 1 or parts < 2 or not isinstance(p.found, DimLoops) or not _parts_fit(
        p, device, parts
    ):
        return None
    tile = p.tile_size
    if tile > SHARED_ROW_TILE and tile % SHARED_ROW_TILE == 0:
        tile = SHARED_ROW_TILE
    splits = automatic_splits(
        op, p.lanes, TARGET_INVOCATIONS, True, device.shared_memory_bytes,
        vyre.tile_count_for(op.shape()["seq_len"], tile),
    )
    return rows, parts, tile, max(splits, p.splits)


def few_shared_rows(p: _Prediction, device: DeviceProfile, rows: int) -> tuple[int, int]:
    """(rows, dim parts) of shared rows: FEW_SHARED_ROWS over lanes of
    FEW_SHARED_ROW_DIMS on a grid of at most FEW_SHARED_ITEMS rows where
    the device's subgroups take that many parts, else `rows` over lanes
    of SHARED_ROW_DIMS."""
    few_parts = p.head_dim // FEW_SHARED_ROW_DIMS
    if rows > 1 and p.op.shape()["item_count"] <= FEW_SHARED_ITEMS and _parts_fit(
        p, device, few_parts
    ):
        return min(rows, FEW_SHARED_ROWS), few_parts
    return rows, p.head_dim // SHARED_ROW_DIMS


def _parts_fit(p: _Prediction, device: DeviceProfile, parts: int) -> bool:
    """Whether `p`'s rows, sharing their loads, can each go over `parts`
    lanes of one of `device`'s subgroups."""
    return parts <= device.max_dim_parts and split_problem(
        p.op, parts, p.lanes, p.splits, True) is None


def module_plans(module: ModuleOp, device: DeviceProfile) -> dict[vyre.TiledOnlineSoftmaxOp, PlanAttr]:
    """The plan of every skeleton of `module` (vyre IR, MLA absorbed) for
    `device`.  Staging, unrolling and interleaving act on the whole module
    (they run on the lowered IR), so every skeleton's plan has the same."""
    predicted = [_predict(s, device) for s in _skeletons(module)
                 if not set(EXPANSION_ATTRS) & s.attributes.keys()]
    parts = {p.op: 1 for p in predicted}
    rows = {p.op: p.op.rows for p in predicted}
    stage_bytes, unroll, interleave = 0, UNROLL, ()
    if any(p.op.ragged for p in predicted):
        # kv_lens: tile counts differ between the lanes of a workgroup, so
        # nothing that synchronises them in the tile loop (staged tiles) or
        # pattern-matches K/V addresses (paged) applies; unrolling does, and
        # rows over the lanes of one item (which share its length) where
        # no merge in the workgroup takes whole rows: unsplit, or merged by
        # a kernel
        parts = {p.op: _parts(p, device) if p.in_kernel or p.splits == 1 else 1
                 for p in predicted}
        if all(p.op.has_mask for p in predicted):
            unroll = DEEP_UNROLL
    elif any(p.splits > 1 for p in predicted):
        parts = {p.op: _parts(p, device) for p in predicted}
        unroll = DEEP_UNROLL
    elif predicted:
        small_grid = sum(grid_workgroups(p.op) for p in predicted) <= SMALL_GRID
        tile_bytes = {p.op: 4 * p.tile_size * p.head_dim for p in predicted}
        if all(tile_bytes[p.op] <= STAGE_TILE_BYTES or small_grid for p in predicted):
            parts = {p.op: _parts(p, device) for p in predicted}
            long_rows = all(p.head_dim // parts[p.op] > SHORT_ROWS for p in predicted)
            if not long_rows or all(p.op.has_mask for p in predicted):
                unroll = DEEP_UNROLL
            # the query rows kept in workgroup memory must leave room for a staged tile
            kept = _scratch_bytes(module, INTERLEAVED, {_kernel(p.op): p.lanes for p in predicted})
            if small_grid and long_rows and (
                kept + max(tile_bytes.values()) <= device.shared_memory_bytes
            ):
                interleave = INTERLEAVED
            else:
                kept = 0
            stage_bytes = device.shared_memory_bytes - kept
            rows = {p.op: rows_per_lane(p.op, parts[p.op], small_grid) for p in predicted}
    for p in predicted:
        if parts[p.op] > 1 and (shared := shared_rows(p, device)) is not None:
            rows[p.op], parts[p.op], p.tile_size, p.splits = shared
    hoisted = {p.op: update_buffers(p.op) if p.op.ragged and rows[p.op] > 1 else ()
               for p in predicted}
    return {
        p.op: PlanAttr(
            device.name, p.lanes, p.tile_size, p.splits,
            MergeKind.NONE if p.splits == 1 else
            MergeKind.KERNEL if p.in_kernel else MergeKind.WORKGROUP,
            parts[p.op], stage_bytes, unroll, interleave, rows[p.op],
            dim_chunk(p.op, parts[p.op]) if parts[p.op] > 1 else vyre.DIM_CHUNK,
            skeleton_merge_teams(p.op, p.splits, p.lanes) if p.in_kernel and p.splits > 1
            else 1,
            hoisted[p.op],
        )
        for p in predicted
    }


def update_buffers(op: vyre.TiledOnlineSoftmaxOp) -> tuple[str, ...]:
    """The names of the read-only buffers that `op`'s update fragment loads
    (the values; with pages, the page table too): issued at the top of each
    tile (vyre-hoist-tile-loads) where rows share their loads and lengths
    come at run time: bf16 GQA decode with run-time lengths took 0.71-0.87
    of its time from batch 8, with pages 0.93-1.02 (docs/performance.md,
    "Thirty-first session")."""
    names = []
    for load in op.update.walk():
        if isinstance(load, memref.LoadOp) and isinstance(
            buffer := load.memref.owner, vyre.BufferOp
        ) and buffer.access.data == BufferAccess.READ:
            names.append(buffer.sym_name.data)
    return tuple(dict.fromkeys(names))


def _scratch_bytes(
    module: ModuleOp, names: tuple[str, ...], lanes: dict[vyre.KernelOp, int]
) -> int:
    """The workgroup memory that the scratch arrays `names` take, per kernel
    at most, once each kernel runs workgroups of `lanes[kernel]` lanes."""
    per_kernel: dict[vyre.KernelOp, int] = {}
    for scratch in module.walk():
        if isinstance(scratch, vyre.ScratchOp) and scratch.sym_name.data in names:
            kernel = scratch.parent_op()
            assert isinstance(kernel, vyre.KernelOp)
            built = kernel.lanes
            (count,) = scratch.result.type.get_shape()
            if lanes.get(kernel, built) != built:
                count = count // built * lanes[kernel]  # as vyre-resize-workgroup
            per_kernel[kernel] = per_kernel.get(kernel, 0) + 4 * count
    return max(per_kernel.values(), default=0)


def _kernel(op: vyre.TiledOnlineSoftmaxOp) -> vyre.KernelOp:
    kernel = op.parent_op()
    assert isinstance(kernel, vyre.KernelOp)
    return kernel


def record_plans(module: ModuleOp, device: DeviceProfile,
                 f32_parts: int = 0) -> dict[vyre.TiledOnlineSoftmaxOp, PlanAttr]:
    """Compute the plans of `module`'s skeletons and record each on its
    skeleton: `vyre.tensor_cores` for those that run on `device`'s matrix
    units (tensor_core_tiling; f32 ones only with `f32_parts`, split into
    that many bf16 parts), `vyre.latent_tensor_cores` for MLA's latent
    attention there (latent_tiling), `vyre.projection_tensor_cores` on
    the kernels of per-head products there (projection_plan),
    `vyre.block_product` for those that
    run as register blocks (block_blocking), `vyre.plan` for the others,
    where the passes given `0` read it; returns the latter."""
    for skeleton in _skeletons(module):
        for name in EXPANSION_ATTRS:
            skeleton.attributes.pop(name, None)
        expansion, name = tensor_core_tiling(skeleton, device, f32_parts), TENSOR_CORES_ATTR
        if expansion is None:
            expansion, name = latent_tiling(skeleton, device), LATENT_TENSOR_CORES_ATTR
        if expansion is None:
            expansion, name = block_blocking(skeleton, device), BLOCK_PRODUCT_ATTR
        if expansion is not None:
            skeleton.attributes.pop(PLAN_ATTR, None)
            skeleton.attributes[name] = expansion.attr()
    for kernel in [k for k in module.walk() if isinstance(k, vyre.KernelOp)]:
        kernel.attributes.pop(PROJECTION_TENSOR_CORES_ATTR, None)
        if (tiling := projection_plan(kernel, device)) is not None:
            kernel.attributes[PROJECTION_TENSOR_CORES_ATTR] = tiling.attr()
    plans = module_plans(module, device)
    for skeleton, plan in plans.items():
        skeleton.attributes[PLAN_ATTR] = plan
    return plans


def projection_plan(kernel: vyre.KernelOp, device: DeviceProfile):
    """How `kernel`'s recorded per-head product runs on `device`'s matrix
    units (a vyre-projection-tensor-cores ProjectionTiling, rows as
    projection_tiling chooses), or None where it records none, does not
    qualify, or is a transposed product of fewer than
    PROJECTION_TRANSPOSED_SEQUENCES sequences."""
    from vyre_xdsl.passes.projection_tensor_cores import device_tiling, problem, record_of

    record = record_of(kernel)
    if record is None or (record.is_transposed
                          and record.dims()[0] < PROJECTION_TRANSPOSED_SEQUENCES):
        return None
    tiling = device_tiling(kernel)
    return tiling if problem(kernel, device, tiling) is None else None


def _skeletons(module: ModuleOp) -> list[vyre.TiledOnlineSoftmaxOp]:
    return [s for s in module.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]
