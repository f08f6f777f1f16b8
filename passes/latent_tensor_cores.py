"""vyre-latent-tensor-cores: MLA decode's latent attention on the matrix units.

MLA decode's attention kernel (vyre-absorb-mla{kernels=3}) scores a key by
two chained dot products, the query row's latent dims with the key's
latent row and its rope dims with the key's rope row, and adds the latent
rows weighted into a value row of kv_lora_rank dims.  All heads of a
sequence read the same keys, so 16 of them are the rows of one matrix
product, as FlashMLA computes it.  The pass expands a qualifying skeleton
(vyre_xdsl.tile_products.ChainedFragments) for workgroups of four
subgroups of 32 lanes that share `row_tiles` blocks of 16 rows, with MLIR's
gpu.subgroup_mma ops (16x16x16, f16 or bf16 in as the caches are, f32
accumulated), for a device whose accumulator layout and matrices of that
type its profile knows (`device`; vyre_xdsl.mma_layout):

- the workgroup first copies its rows' query dims, every dot product's in
  turn, into workgroup memory in the caches' type (`tc_query`); in f16
  each row at its own power of two (the largest |element| scaled to
  [2^14, 2^15), so an f32 query neither overflows nor loses its small
  rows in f16), S's elements scaled back (`tc_query_scale`, each row's
  inverse repeated over a 16 x 16 matrix, so that a lane reads its
  elements' rows' scales with the layout's own load); bf16 has f32's
  range and needs no scale;
- a tile has 64 keys, 16 for each subgroup: S = Q Kᵀ for its own 16 keys
  (depth / 16 products a row block), the scores fragment's epilogue and
  the recurrence (vyre_xdsl.recurrence) on S's elements; a row's tile max
  over the four subgroups through workgroup memory (`tc_row_max`, one
  barrier), each lane's weights rounded to 16 bits into `tc_weights`
  (another);
- each subgroup owns a quarter of the value dims: O, 16 rows x v_dim / 4
  a row block, stays a matrix carried by the tile loop, rescaled element
  by element, and O += P V reads the whole tile's weights and the
  subgroup's columns of its latent rows;
- each lane sums its own elements' weights; after the last tile a row's
  denominator is summed over its lanes and the four subgroups
  (`tc_row_sum`).

With `stage=true` the workgroup stages the key rows instead, and a tile
has 16 keys: each subgroup copies its share of the tile's 16x16 blocks
(every dot product's key rows, which hold the value rows too: MLA's values
are its latent rows), 16 bytes a lane (mma_elements.StagedBlock; the query
rows too, 8 dims a lane, so every write of `tc_stage` is whole uvec4s in
SPIR-V), into one of two buffers of `tc_stage` (rows padded
against bank conflicts, mma_elements.conflict_free_stride), the next tile's
blocks loaded before this one is computed and stored after it, behind one
barrier.  The query's 16-dim blocks are split among the subgroups and held
as A operands in registers (read once from `tc_stage` before the first
tile): each subgroup computes its part of S from the staged keys and stores
it to `tc_scores`; after a barrier every subgroup sums the four parts in
their order, so all compute the same softmax, with no maxima or sums to
exchange, and build P in registers (the layout's `operand_a`); O += P V
reads the subgroup's value dims from the staged rows.  A tile the sequence
ends in has its rows past the end cleared first (0 * inf is NaN).  The
global loads are then those of whole 16x16 blocks, once for K and V
together (docs/performance.md, "Eighteenth session").

With `row_groups=2` (staged only) a workgroup is two groups of four
subgroups (256 lanes), each group owning its own `row_tiles` row blocks as
one group does, the two sharing each staged tile: a tile's blocks are
staged by all eight subgroups, half as many each, and every row's sums
keep their order (the same bits as one group).  The rows of a workgroup
must read the same keys (32 heads of a sequence or more).

With `skip_rescale=true` O's rescale (every element of O's matrices times
its row's rescale) sits in a branch that a subgroup skips where none of its
rows moved its running max: each rescale is then 1 and x * 1 is x, so the
result is the same, bit for bit (vyre-tensor-cores' option of that name).

With `splits` P > 1 each row block's tiles are split into P runs over as
many workgroups (flash-decoding): the kernel stores each run's partial m,
l and O for a `vyre.merge_splits` kernel (vyre_xdsl.kv_split.merge_in_kernel,
as vyre-split-kv's, each invocation merging vyre_xdsl.tuning.merge_dims
dims), with l and O times the splits' power of two
(numerics.partial_weight_scale), as the merge expects.

With run-time lengths (kv_lens) a tile past the sequence's end is skipped
and the tile it ends in drops the keys past the end: their scores by
their column (each lane reads its elements' columns from `tc_columns`
with the layout's own load), their values by never multiplying their
rows (P V skips a run of 16 keys past the end and copies the one holding
the end into `tc_value_block` with the rows past it zero: a row there may
hold anything, and 0 * inf is NaN).  A paged cache qualifies where each
run of 16 keys lies in one page (a page size that is a multiple of 16);
each run looks its page up once.

The fragments qualify as chained tile products: a score that is a
function of the last dot product alone, query rows read from buffers (the
row of each item), key and value rows contiguous for each run of 16 keys
in f16 or bf16 buffers, the same for each workgroup's rows; head dims of every
dot product multiples of 16, v_head_dim of 64, the keys of 64, the items
of the workgroup's rows (staged: the value rows the first dot product's
key rows, the query's blocks a multiple of 4, and P buildable in
registers); no mask, lse, hooks or earlier splits.  Results differ from
the per-lane kernel's in the order of the sums (the matrix unit's), in the
query read in 16 bits and in the weights P V reads rounded to 16 bits (as
FlashMLA does); docs/performance.md gives the tolerances.
`vyre-latent-tensor-cores` leaves a skeleton that does not qualify as it
is; `{force=true}` reports why instead.  vyre-to-gpu's default plan takes
it where the skeleton qualifies on the device, with staged tiles where
they qualify (vyre_xdsl.tuning.latent_tiling; `#vyre.latent_tensor_cores`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects import arith, gpu
from xdsl.dialects.builtin import Float16Type, IntegerAttr, ModuleOp, UnitAttr, f32, i32, i64
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl import recurrence, tuning
from vyre_xdsl.device import GENERIC, DeviceProfile, device_profile
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import F32_MIN
from vyre_xdsl.dialects.gpu_mma import (
    MMAOperand,
    SubgroupMmaComputeOp,
    SubgroupMmaLoadMatrixOp,
    SubgroupMmaStoreMatrixOp,
)
from vyre_xdsl.dialects.launch import ACCUMULATOR_ATTR, AccumulatorAttr, record_skeleton
from vyre_xdsl.dialects.plan import LATENT_ROW_GROUPS, LatentTensorCoresAttr
from vyre_xdsl.errors import pass_error
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.kv_split import merge_in_kernel
from vyre_xdsl.mma_elements import (
    COPY_HALVES,
    F32_BYTES,
    HALF_BYTES,
    LANES,
    SUBGROUP,
    SUBGROUPS,
    MatrixElements,
    StagedBlock,
    add,
    as_index,
    conflict_free_stride,
    copies_by_lanes,
    expand_skeletons,
    half_problem,
    lane_place,
    layout_problem,
    may_be_minus_inf,
    spread_blocks,
    stage_blocks,
    tile_matrix,
)
from vyre_xdsl.mma_layout import TILE, AccumulatorLayout
from vyre_xdsl.numerics import partial_weight_scale
from vyre_xdsl.tile_products import (
    ChainedFragments,
    Unfit,
    clone_value,
    require_multiples,
    require_plain,
)
from vyre_xdsl.unrolling import DONT_UNROLL_ATTR, ROLLED_ATTR

KEYS = TILE * SUBGROUPS  # a tile's keys: each subgroup scores 16
# a staged query row's largest |element| is scaled into [2^14, 2^15): its
# products with f16 keys (< 2^16) summed over any row stay far below f32's
# range, and f16 keeps the row's smaller elements
QUERY_TOP_EXPONENT = 14
F32_EXACT = 2 ** 24  # the integers f32 holds exactly
F32_BIAS, F32_MANTISSA = 127, 23
# a biased exponent at least this makes both the scale and its inverse normal
LOWEST_EXPONENT = QUERY_TOP_EXPONENT + 1


@dataclass(frozen=True)
class LatentTiling:
    """How the expansion spreads the work: `row_tiles` blocks of 16 rows a
    workgroup, each row block's tiles split over `splits` workgroups, the
    key rows staged by the workgroup or not (`stage`); `skip_rescale`: O's
    rescale in a branch that a subgroup skips where none of its rows moved
    its max."""

    row_tiles: int = 1
    splits: int = 1
    stage: bool = False
    skip_rescale: bool = False
    row_groups: int = 1

    @property
    def rows(self) -> int:
        """Query rows of a workgroup (they read the same keys)."""
        return TILE * self.row_tiles * self.row_groups

    @property
    def lanes(self) -> int:
        """A workgroup's lanes: four subgroups for each group of row blocks."""
        return LANES * self.row_groups

    @staticmethod
    def of(attr: LatentTensorCoresAttr) -> LatentTiling:
        """The tiling a plan records (`#vyre.latent_tensor_cores`)."""
        return LatentTiling(attr.row_tiles, attr.splits, attr.stage, attr.skip_rescale,
                            attr.row_groups)

    def attr(self) -> LatentTensorCoresAttr:
        return LatentTensorCoresAttr(self.row_tiles, self.splits, self.stage,
                                     self.skip_rescale, self.row_groups)

    @property
    def keys(self) -> int:
        """Keys a tile: the workgroup's 16 staged ones, else 16 a subgroup."""
        return TILE if self.stage else KEYS

    def workgroup_bytes(self, depth: int, row_count: int, v_dim: int, ragged: bool,
                        scaled: bool = True) -> int:
        """The expansion's workgroup memory: the rows' 16-bit queries and
        (`scaled`, f16) their scales, the tile's weights, the rows' maxima
        and sums over the subgroups, the m and l a split exports, and with
        run-time lengths the accumulator's columns and each subgroup's
        block of values cut at the sequence's end; staged, two tiles of
        key rows (the query rows first) and each subgroup's part of S (the
        split's m and l after the last tile) in place of the weights,
        maxima, sums, exports and cut values."""
        f32s = self.rows * TILE * (1 if scaled else 0) + (TILE * TILE if ragged else 0)
        if self.stage:  # two staged tiles (the query first), each subgroup's S
            halves = max(self.rows * depth, 2 * TILE * conflict_free_stride(depth))
            return HALF_BYTES * halves + F32_BYTES * (f32s + SUBGROUPS * self.rows * TILE)
        if self.splits > 1:
            f32s += 2 * self.rows * TILE
        exchange = 2 * SUBGROUPS * SUBGROUP * self.row_tiles * row_count
        cut = TILE * v_dim if ragged else 0
        return (HALF_BYTES * (self.rows * (depth + KEYS) + cut)
                + F32_BYTES * (f32s + exchange))


def problem(op: vyre.TiledOnlineSoftmaxOp, device: DeviceProfile,
            tiling: LatentTiling = LatentTiling()) -> str | None:
    """Why `op` cannot run on the matrix units of `device`, spread as
    `tiling` says; None if it can."""
    reason = layout_problem(device.accumulator_layout)
    if reason is not None:
        return reason
    if tiling.row_tiles < 1 or tiling.splits < 1:
        return f"row_tiles {tiling.row_tiles} and splits {tiling.splits} must be positive"
    if tiling.row_groups not in LATENT_ROW_GROUPS:
        return f"row_groups must be 1 or 2, got {tiling.row_groups}"
    if tiling.row_groups > 1 and not tiling.stage:
        return "row groups share the staged tiles: row_groups 2 needs stage=true"
    shape = op.shape()
    if tiling.rows > tiling.lanes or tiling.lanes % tiling.rows:
        # each row's query is staged by lanes // rows neighbouring lanes
        return (f"{tiling.rows} rows a workgroup: its {tiling.lanes} lanes stage them in "
                f"equal shares, so row_tiles must be 1, 2, 4 or 8")
    try:
        require_multiples((("v_head_dim", op.v_dim, TILE * SUBGROUPS),
                           ("the keys (seq_len)", shape["seq_len"], KEYS),
                           ("item_count", shape["item_count"], tiling.rows)))
        if shape["seq_len"] // KEYS < tiling.splits:
            raise Unfit(f"{tiling.splits} splits of {shape['seq_len'] // KEYS} tiles of "
                        f"{KEYS} keys")
        if op.ragged and shape["seq_len"] > F32_EXACT:
            raise Unfit(f"kv_len {shape['seq_len']} with kv_lens: keys are compared in f32, "
                        f"exact up to {F32_EXACT}")
        require_plain(op, lengths=True)
        fragments = ChainedFragments.of(op, tiling.rows, TILE)
    except Unfit as unfit:
        return str(unfit)
    for dot in fragments.dots:
        if dot.width % TILE:
            return f"a dot product of {dot.width} dims, not a multiple of {TILE}"
    if tiling.stage:
        reason = stage_problem(op, fragments, device.accumulator_layout)
        if reason is not None:
            return reason
    return half_problem((*(d.key.load.memref for d in fragments.dots), fragments.v.load.memref),
                        device.matrix_shapes)


def stage_problem(op: vyre.TiledOnlineSoftmaxOp, fragments: ChainedFragments,
                  layout: AccumulatorLayout) -> str | None:
    """Why the workgroup cannot stage the key rows (`stage`); None if it
    can: the value rows must be the first dot product's key rows (MLA's
    latent rows), the query's 16-dim blocks shared equally by the
    subgroups, and P built in registers from S's elements."""
    latent = fragments.dots[0]
    if op.v_dim > latent.width or not latent.key.same_rows(op, "scores", fragments.v,
                                                           "update"):
        return ("staged tiles hold the key rows only, so the value rows must be the "
                "first dot product's key rows")
    blocks = fragments.depth // TILE
    if blocks % SUBGROUPS:
        return (f"staged tiles split the query's {blocks} blocks of {TILE} dims over "
                f"{SUBGROUPS} subgroups: a multiple of {SUBGROUPS} is needed")
    if layout.operand_a is None:
        return ("staged tiles build P in registers, but the device's A operands do not "
                "hold a lane's accumulator elements")
    return None


def _scaled(half) -> bool:
    """Whether query rows staged in `half` need their own power of two: in
    f16, not in bf16, which has f32's range (a row scaled up could even
    overflow against a bf16 key beyond f16's range)."""
    return isinstance(half, Float16Type)


class LatentExpansion(MatrixElements):
    """The scf loop nest of one qualifying skeleton, emitted before it."""

    def __init__(self, op: vyre.TiledOnlineSoftmaxOp, fragments: ChainedFragments,
                 tiling: LatentTiling, layout: AccumulatorLayout, b: IRBuilder):
        self.op, self.f, self.latent, self.layout = op, fragments, tiling, layout
        shape = op.shape()
        self.depth, self.v_dim = fragments.depth, op.v_dim
        self.group_dims = self.v_dim // SUBGROUPS  # the value dims of a subgroup
        self.exp2 = op.exp2 is not None
        self.keys = tiling.keys
        self.tiles = shape["seq_len"] // self.keys
        # splits as the tuning's tiles of KEYS keys part them
        self.per_split = -(-shape["seq_len"] // KEYS // tiling.splits) * (KEYS // self.keys)
        self.blocks = shape["item_count"] // tiling.rows  # workgroups of each split
        rows, exchange = tiling.rows, SUBGROUPS * SUBGROUP * tiling.row_tiles * layout.row_count
        half = self.half = fragments.v.load.memref.type.element_type
        self.scaled = _scaled(half)
        self.stride = conflict_free_stride(self.depth)  # a staged key row's
        # lanes copy the query rows and the tiles' blocks into tc_stage 16
        # bytes each, so that workgroup memory is written in whole uvec4s
        self.copies = tiling.stage and copies_by_lanes(
            half, self.depth, self.stride, *(dot.width for dot in fragments.dots))
        if tiling.stage:  # the query rows first, then the tiles, two buffers
            scratch = [("tc_stage", max(rows * self.depth, 2 * TILE * self.stride), half),
                       ("tc_scores", SUBGROUPS * rows * TILE, f32)]
        else:
            scratch = [("tc_query", rows * self.depth, half)]
        if self.scaled:
            scratch.append(("tc_query_scale", rows * TILE, f32))
        if not tiling.stage:
            scratch += [("tc_weights", rows * KEYS, half), ("tc_row_max", exchange, f32),
                        ("tc_row_sum", exchange, f32)]
        if tiling.splits > 1 and not tiling.stage:  # each row's m and l, for the merge
            scratch.append(("tc_rows", 2 * rows * TILE, f32))
        self.ragged = op.ragged
        if self.ragged:  # the accumulator's columns; values cut at the end
            scratch.append(("tc_columns", TILE * TILE, f32))
            if not tiling.stage:
                scratch.append(("tc_value_block", SUBGROUPS * TILE * self.group_dims, half))
        arrays = {name: b.emit(vyre.ScratchOp(name, count, element)).results[0]
                  for name, count, element in scratch}
        (self.query_tile, self.weights, self.row_max, self.row_sum) = (
            arrays.get(name) for name in ("tc_query", "tc_weights", "tc_row_max", "tc_row_sum"))
        self.staged, self.partial_scores = arrays.get("tc_stage"), arrays.get("tc_scores")
        if self.staged is not None:
            self.query_tile = self.staged
        self.query_scale = arrays.get("tc_query_scale")
        # staged, tc_scores: read before the last tile's barrier, free after
        self.exported = arrays.get("tc_rows", self.partial_scores)
        self.columns_tile, self.value_block = arrays.get("tc_columns"), arrays.get(
            "tc_value_block")
        self.lane = b.emit(vyre.LaneIndexOp()).results[0]
        invocation = b.emit(vyre.ItemIndexOp()).results[0]
        # with row groups, a subgroup's place in its group (its query
        # blocks, value dims and part of S) and its group's row blocks
        self.subgroup = b.divui(self.lane, b.index(SUBGROUP), "subgroup")
        self.group, self.row_base = self.subgroup, None
        if tiling.row_groups > 1:
            self.group = b.remui(self.subgroup, b.index(SUBGROUPS), "group_subgroup")
            self.row_base = b.muli(b.divui(self.subgroup, b.index(SUBGROUPS)),
                                   b.index(tiling.row_tiles), "row_base")
        self.sublane = b.remui(self.lane, b.index(SUBGROUP), "sublane")
        # a split's workgroups are neighbours: a sequence's row blocks read
        # the same keys at about the same time
        workgroup = b.divui(invocation, b.index(tiling.lanes))
        self.split = b.divui(workgroup, b.index(self.blocks), "split")
        self.first = b.muli(b.remui(workgroup, b.index(self.blocks)), b.index(rows),
                            "first_row")
        self.mine = self.first  # this subgroup's first row
        if self.row_base is not None:
            self.mine = b.addi(self.first, b.muli(self.row_base, b.index(TILE)), "my_row")
        self.width = b.subgroup_width()
        if self.ragged:  # the row block's sequence's keys
            seq = b.divui(self.first, b.index(op.seq_items), "seq")
            self.length = b.load_clamped_index(op.kv_lens, seq, shape["seq_len"])
            self.length.name_hint = "kv_len"

    def block_at(self, b: IRBuilder, r: int, size: int) -> SSAValue:
        """Where this subgroup's row block r starts in an array of `size`
        elements a row block."""
        at = b.index(r * size)
        return at if self.row_base is None else b.addi(b.muli(self.row_base, b.index(size)), at)

    def emit(self, b: IRBuilder) -> None:
        self.stage_queries(b)
        c32, rows = tile_matrix(f32, MMAOperand.C), self.layout.row_count
        # each row block's elements' query scales, by the accumulator's layout
        scales = [self.slot_values(b, b.emit(SubgroupMmaLoadMatrixOp(
            self.query_scale, [self.block_at(b, r, TILE * TILE)], c32, TILE)).results[0])
            if self.scaled else None for r in range(self.latent.row_tiles)]
        self.columns = None
        if self.ragged:  # each of this lane's elements' column, as f32
            self.columns = self.elements(b, b.emit(SubgroupMmaLoadMatrixOp(
                self.columns_tile, [b.index(0)], c32, TILE)).results[0])
        outs = self.group_dims // TILE
        state = [b.f32(F32_MIN)] * rows + [b.f32(0.0)] * rows
        state += [self.constant(b, 0.0, c32) for _ in range(outs)]
        per_block = len(state)
        first_tile = b.muli(self.split, b.index(self.per_split), "first_tile")
        if self.latent.stage:
            return self.emit_staged(b, first_tile, scales, state)

        def tile(b: IRBuilder, i, carried):
            index = b.addi(first_tile, i, "tile_idx")
            blocks = [carried[r * per_block:(r + 1) * per_block]
                      for r in range(self.latent.row_tiles)]

            def run(b: IRBuilder, partial: bool = False):
                return self.tile(b, index, blocks, scales, partial)

            if self.ragged:  # tiles past the sequence's end are skipped, its last cut
                start = b.muli(index, b.index(KEYS))

                def live(b: IRBuilder):
                    whole = b.cmpi(b.addi(start, b.index(KEYS)), self.length, "ule")
                    return b.if_else(whole, run, lambda b: run(b, True))

                return b.if_else(b.cmpi(start, self.length, "ult"), live,
                                 lambda b: list(carried))
            if self.tiles % self.latent.splits == 0:
                return run(b)
            return b.if_else(b.cmpi(index, b.index(self.tiles), "ult"), run,
                             lambda b: list(carried))

        carried = b.loop(0, self.per_split, tile, state * self.latent.row_tiles,
                         hint="split_tile")
        self.finish(b, [carried[r * per_block:(r + 1) * per_block]
                        for r in range(self.latent.row_tiles)])

    def emit_staged(self, b: IRBuilder, lo: SSAValue, scales, state) -> None:
        """The tile loop with staged tiles: this subgroup's blocks of the
        query's dims held in registers, the split's tiles of 16 keys from
        `lo` double-buffered in tc_stage."""
        a16, count = tile_matrix(self.half, MMAOperand.A), self.depth // TILE // SUBGROUPS
        dims = b.muli(self.group, b.index(TILE))  # the subgroup's first block
        queries = [[b.emit(SubgroupMmaLoadMatrixOp(
            self.staged, [b.addi(b.addi(dims, self.block_at(b, r, TILE * self.depth)),
                                 b.index(j * SUBGROUPS * TILE))],
            a16, self.depth)).results[0] for j in range(count)]
            for r in range(self.latent.row_tiles)]
        b.emit(gpu.BarrierOp())  # every query read before the tiles overwrite it
        hi = b.addi(lo, b.index(self.per_split))
        if self.per_split * self.latent.splits != self.tiles:
            hi = b.minui(hi, b.index(self.tiles))
        if self.ragged:  # no tile past the sequence's end
            hi = b.minui(hi, b.divui(b.addi(self.length, b.index(TILE - 1)), b.index(TILE)))
        self.store_stage(b, self.load_stage(b, b.minui(lo, b.index(self.tiles - 1))), 0)
        b.emit(gpu.BarrierOp())  # the first tile in buffer 0
        per_block = len(state)

        def tile(b: IRBuilder, index, carried):
            blocks = [carried[r * per_block:(r + 1) * per_block]
                      for r in range(self.latent.row_tiles)]
            return self.staged_tile(b, index, lo, hi, queries, blocks, scales)

        # left rolled by the driver too: unrolled, the attention took
        # 1.04-1.23 times as long (docs/performance.md, "Thirtieth session")
        carried = b.loop(lo, hi, tile, state * self.latent.row_tiles, hint="split_tile",
                         attributes={DONT_UNROLL_ATTR: UnitAttr()})
        self.finish(b, [carried[r * per_block:(r + 1) * per_block]
                        for r in range(self.latent.row_tiles)])

    def staged_tile(self, b: IRBuilder, index, lo, hi, queries, blocks,
                    scales) -> list[SSAValue]:
        """Tile `index` of 16 keys, staged in buffer (index - lo) % 2: this
        subgroup's part of S (its query blocks), S summed over the subgroups
        in their order, the softmax (the same in every subgroup), O
        rescaled plus P V over the subgroup's value dims; the next tile's
        rows loaded before and staged in the other buffer after."""
        layout, rows = self.layout, self.layout.row_count
        a16, b16 = tile_matrix(self.half, MMAOperand.A), tile_matrix(self.half, MMAOperand.B)
        c32 = tile_matrix(f32, MMAOperand.C)
        parity = b.remui(b.subi(index, lo), b.index(2))
        base = b.muli(parity, b.index(TILE * self.stride), "stage_base")
        pending = self.load_stage(b, b.minui(b.addi(index, b.index(1)),
                                             b.subi(hi, b.index(1))))
        tile_start = b.muli(index, b.index(TILE), "tile_start")
        keep = [None] * layout.length
        if self.ragged:  # keys past the end: rows cleared, scores dropped
            ends = b.cmpi(b.addi(tile_start, b.index(TILE)), self.length, "ugt")
            b.if_then(ends, lambda b: self.clear_past_end(b, base, tile_start))
            left = b.subf(_to_f32(b, self.length), _to_f32(b, tile_start))
            keep = [b.cmpf(column, left, "olt") for column in self.columns]
        dims = b.muli(self.group, b.index(TILE))
        totals = [self.constant(b, 0.0, c32) for _ in blocks]
        for j in range(len(queries[0])):  # each K block read once
            at = b.addi(base, b.addi(dims, b.index(j * SUBGROUPS * TILE)))
            key = b.emit(SubgroupMmaLoadMatrixOp(self.staged, [at], b16, self.stride,
                                                 transpose=True)).results[0]
            for r, total in enumerate(totals):
                totals[r] = b.emit(SubgroupMmaComputeOp(queries[r][j], key, total)).results[0]
        for r, total in enumerate(totals):
            b.emit(SubgroupMmaStoreMatrixOp(total, self.partial_scores, [
                b.addi(self.block_at(b, r, SUBGROUPS * TILE * TILE),
                       b.muli(self.group, b.index(TILE * TILE)))], TILE))
        b.emit(gpu.BarrierOp())  # every subgroup's part of S in place
        may_drop = may_be_minus_inf(self.f.score)
        last = self.f.dots[-1].loop.results[0]
        new_blocks, weights = [], []
        for r, (carried, scale) in enumerate(zip(blocks, scales, strict=True)):
            parts = [self.elements(b, b.emit(SubgroupMmaLoadMatrixOp(
                self.partial_scores, [b.addi(self.block_at(b, r, SUBGROUPS * TILE * TILE),
                                             b.index(g * TILE * TILE))], c32,
                TILE)).results[0]) for g in range(SUBGROUPS)]
            scores = []
            for i, (slot, kept) in enumerate(zip(layout.slots, keep, strict=True)):
                s = parts[0][i]
                for part in parts[1:]:
                    s = b.addf(s, part[i])
                if scale is not None:
                    s = b.mulf(s, scale[slot])
                s = clone_value(b, self.f.score, {last: s})
                scores.append(s if kept is None else b.select(kept, s, b.f32(F32_MIN)))
            tile_max = self.tile_maxima(b, [scores])
            state, rescale, row = self.weigh(b, scores, carried, tile_max, keep, may_drop,
                                             may_drop or self.ragged)
            weights.append(self.assemble(b, [row[i] for i in layout.operand_a], a16))
            new_blocks.append((state, self.rescaled(b, carried[2 * rows:], rescale,
                                                    self.latent.skip_rescale)))
        values = b.addi(base, b.muli(self.group, b.index(self.group_dims)))
        for c in range(self.group_dims // TILE):  # each V block read once
            value = b.emit(SubgroupMmaLoadMatrixOp(
                self.staged, [b.addi(values, b.index(c * TILE))], b16, self.stride)).results[0]
            for r, (_state, outs) in enumerate(new_blocks):
                outs[c] = b.emit(SubgroupMmaComputeOp(weights[r], value, outs[c])).results[0]
        self.store_stage(b, pending, b.subi(b.index(1), parity))
        b.emit(gpu.BarrierOp())  # the next tile in place, this one's S read
        return [v for state, outs in new_blocks for v in (*state, *outs)]

    def load_stage(self, b: IRBuilder, index) -> list[StagedBlock]:
        """Tile `index`'s key rows, each dot product's in 16x16 blocks spread
        over the subgroups (mma_elements.spread_blocks), side by side in a
        staged row."""
        blocks, offset = [], 0
        tile_start = b.muli(index, b.index(TILE))
        place = lane_place(b, self.sublane) if self.copies else None
        for dot in self.f.dots:
            start = dot.key.start(b, self.op, "scores", self.first, self.lane, tile_start)

            def block(b: IRBuilder, n: SSAValue, dot=dot, start=start,
                      offset=offset) -> StagedBlock:
                column = b.muli(n, b.index(TILE))
                return StagedBlock(dot.key.load.memref, b.addi(start, column), dot.width,
                                   self.staged, b.addi(column, b.index(offset)), self.stride,
                                   place)

            blocks += spread_blocks(b, dot.width // TILE, self.subgroup, block,
                                    SUBGROUPS * self.latent.row_groups)
            offset += dot.width
        return blocks

    def store_stage(self, b: IRBuilder, blocks: list[StagedBlock], buffer) -> None:
        """`load_stage`'s blocks into buffer `buffer` (0 or 1) of tc_stage."""
        base = b.muli(as_index(b, buffer), b.index(TILE * self.stride))
        stage_blocks(b, blocks, lambda b, block, matrix: block.store(b, matrix, base))

    def clear_past_end(self, b: IRBuilder, base, tile_start) -> None:
        """The rows of the staged tile at `base` past the sequence's end set
        to 0 (a row there may hold anything, and P V's 0 * inf is NaN)."""
        chunk = COPY_HALVES if self.copies else 1  # elements a lane clears at once
        size = TILE * self.stride // chunk

        def one(b: IRBuilder, e, _):
            at = b.muli(b.addi(self.lane, b.muli(e, b.index(lanes))), b.index(chunk))
            past = b.cmpi(b.addi(tile_start, b.divui(at, b.index(self.stride))), self.length,
                          "uge")
            if size % lanes:
                past = b.andi(past, b.cmpi(at, b.index(size * chunk), "ult"))
            zero, at = b.f32(0.0), b.addi(base, at)
            b.if_then(past, lambda b: b.store_vector([zero] * chunk, self.staged, at)
                      if self.copies else b.store(zero, self.staged, at))
            return []

        lanes = self.latent.lanes
        b.loop(0, -(-size // lanes), one, hint="clear_e",
               attributes={ROLLED_ATTR: UnitAttr()})
        b.emit(gpu.BarrierOp())  # cleared before any subgroup reads the tile

    def stage_queries(self, b: IRBuilder) -> None:
        """Copy the workgroup's query rows into tc_query in the inputs'
        16-bit type; in f16 each at its own power of two, whose inverse
        goes to tc_query_scale."""
        op, rows = self.op, self.latent.rows
        lanes = self.latent.lanes // rows  # a row's lanes, neighbours
        row = b.divui(self.lane, b.index(lanes), "query_row")
        part = b.remui(self.lane, b.index(lanes))
        item = b.addi(self.first, row)

        def each_dim(b: IRBuilder, fn, carried):
            """fn(b, dot, dim, offset, carried) over the row's dims this lane copies."""
            offset = 0
            for dot in self.f.dots:
                def step(b: IRBuilder, k, values, dot=dot, offset=offset):
                    dim = b.addi(part, b.muli(k, b.index(lanes)))
                    return fn(b, dot, dim, offset, values)

                carried = b.loop(0, dot.width // lanes, step, carried, hint="query_d")
                offset += dot.width
            return carried

        scale = self.row_scale(b, each_dim, item, row, part, lanes) if self.scaled else None

        def query(b: IRBuilder, dot, dim) -> SSAValue:
            value = b.load(dot.query.load.memref, dot.query.at(b, op, item, dim))
            return value if scale is None else b.mulf(value, scale)

        def copy(b: IRBuilder, dot, dim, offset, values):
            at = b.addi(b.muli(row, b.index(self.depth)), b.addi(dim, b.index(offset)))
            b.store(query(b, dot, dim), self.query_tile, at)
            return []

        if self.copies:
            self.copy_query_chunks(b, query, row, part, lanes)
        else:
            each_dim(b, copy, [])
        if self.ragged:  # element (r, c) of tc_columns is c
            for i in range(TILE * TILE // self.latent.lanes):
                at = b.addi(self.lane, b.index(i * self.latent.lanes))
                b.store(_to_f32(b, b.remui(at, b.index(TILE))), self.columns_tile, at)
        b.emit(gpu.BarrierOp())

    def copy_query_chunks(self, b: IRBuilder, query, row, part, lanes: int) -> None:
        """The query row `row` into tc_stage in chunks of COPY_HALVES dims,
        chunk `part + k * lanes` of each dot product's dims this lane's;
        `query(b, dot, dim)` gives a dim's value."""
        offset = 0
        for dot in self.f.dots:
            chunks = dot.width // COPY_HALVES

            def step(b: IRBuilder, k, _, dot=dot, offset=offset, chunks=chunks):
                chunk = b.addi(part, b.muli(k, b.index(lanes)))

                def one(b: IRBuilder):
                    dim = b.muli(chunk, b.index(COPY_HALVES))
                    values = [query(b, dot, b.addi(dim, b.index(j))) for j in range(COPY_HALVES)]
                    at = b.addi(b.muli(row, b.index(self.depth)), b.addi(dim, b.index(offset)))
                    b.store_vector(values, self.query_tile, at)

                if chunks % lanes:
                    b.if_then(b.cmpi(chunk, b.index(chunks), "ult"), one)
                else:
                    one(b)
                return []

            b.loop(0, -(-chunks // lanes), step, hint="query_chunk")
            offset += dot.width

    def row_scale(self, b: IRBuilder, each_dim, item, row, part, lanes: int) -> SSAValue:
        """The power of two that puts query row `item`'s largest |element|
        into [2^14, 2^15) (its lanes, `part` of `lanes`, combine their
        parts); its inverse stored to the row's 16 entries of
        tc_query_scale."""
        op = self.op

        def largest(b: IRBuilder, dot, dim, _offset, values):
            value = b.absf(b.load(dot.query.load.memref, dot.query.at(b, op, item, dim)))
            return [recurrence.max_step(b, value, values[0])]

        (top,) = each_dim(b, largest, [b.f32(0.0)])
        mask = 1
        while mask < lanes:
            top = recurrence.max_step(b, b.shuffle_xor(top, mask, self.width), top)
            mask *= 2
        exponent = _value(b, arith.ShRUIOp(_value(b, arith.BitcastOp(top, i32)),
                                           _i32(b, F32_MANTISSA)))
        exponent = _value(b, arith.MaxUIOp(exponent, _i32(b, LOWEST_EXPONENT)))
        # scale 2^(14 - e), its inverse 2^(e - 14), built from their exponents
        scale = _power_of_two(b, _value(b, arith.SubiOp(
            _i32(b, QUERY_TOP_EXPONENT + 2 * F32_BIAS), exponent)))
        inverse = _power_of_two(b, _value(b, arith.SubiOp(
            exponent, _i32(b, QUERY_TOP_EXPONENT))))
        columns = TILE // lanes

        def store_scale(b: IRBuilder, c, _):
            column = b.addi(b.muli(part, b.index(columns)), c)
            b.store(inverse, self.query_scale, b.addi(b.muli(row, b.index(TILE)), column))
            return []

        b.loop(0, columns, store_scale, hint="scale_c")
        return scale

    def slot_values(self, b: IRBuilder, matrix: SSAValue) -> list[SSAValue]:
        """One element of each of this lane's row slots of a matrix whose
        rows repeat one value."""
        elements = self.elements(b, matrix)
        return [elements[self.layout.slots.index(s)] for s in range(self.layout.row_count)]

    def exchange_at(self, b: IRBuilder, r: int, slot: int, group) -> SSAValue:
        """Where subgroup `group`'s lane like this one keeps row block r's
        slot `slot` in tc_row_max and tc_row_sum."""
        at = (r * self.layout.row_count + slot) * SUBGROUPS
        return b.addi(b.muli(b.addi(b.index(at), as_index(b, group)), b.index(SUBGROUP)),
                      self.sublane)

    def across_subgroups(self, b: IRBuilder, array, values: list[list[SSAValue]],
                         combine) -> list[list[SSAValue]]:
        """Each row slot's value (complete over the subgroup's lanes) combined
        over the four subgroups, in their order, through `array`."""
        for r, slots in enumerate(values):
            for slot, value in enumerate(slots):
                b.store(value, array, self.exchange_at(b, r, slot, self.group))
        b.emit(gpu.BarrierOp())
        combined = []
        for r, slots in enumerate(values):
            row = []
            for slot in range(len(slots)):
                total = b.load(array, self.exchange_at(b, r, slot, 0))
                for g in range(1, SUBGROUPS):
                    total = combine(b, b.load(array, self.exchange_at(b, r, slot, g)), total)
                row.append(total)
            combined.append(row)
        return combined

    def tile(self, b: IRBuilder, index, blocks, scales, partial: bool = False) -> list[SSAValue]:
        """Tile `index` of 64 keys: this subgroup's 16 keys' scores, the
        softmax over the whole tile, O rescaled plus P V over its dims; a
        `partial` tile (the sequence ends in it) drops the keys past the
        end, whose rows are never multiplied (P V skips or cuts them)."""
        op, layout, rows = self.op, self.layout, self.layout.row_count
        a16, b16 = tile_matrix(self.half, MMAOperand.A), tile_matrix(self.half, MMAOperand.B)
        c16, c32 = tile_matrix(self.half, MMAOperand.C), tile_matrix(f32, MMAOperand.C)
        tile_start = b.muli(index, b.index(KEYS), "tile_start")
        keys = b.addi(tile_start, b.muli(self.group, b.index(TILE)))
        totals = [self.constant(b, 0.0, c32) for _ in blocks]
        offset = 0
        for dot in self.f.dots:
            start = dot.key.start(b, op, "scores", self.first, self.lane, keys)
            for c in range(dot.width // TILE):
                key = b.emit(SubgroupMmaLoadMatrixOp(
                    dot.key.load.memref, [b.addi(start, b.index(c * TILE))], b16, dot.width,
                    transpose=True)).results[0]
                for r in range(len(totals)):
                    at = b.index(r * TILE * self.depth + offset + c * TILE)
                    query = b.emit(SubgroupMmaLoadMatrixOp(
                        self.query_tile, [at], a16, self.depth)).results[0]
                    totals[r] = b.emit(SubgroupMmaComputeOp(query, key, totals[r])).results[0]
            offset += dot.width
        may_drop = may_be_minus_inf(self.f.score)
        last = self.f.dots[-1].loop.results[0]
        keep = [None] * layout.length
        if partial:  # a key is kept before the sequence's end
            left = b.subf(_to_f32(b, self.length), _to_f32(b, keys))
            keep = [b.cmpf(column, left, "olt") for column in self.columns]
        scores = []
        for total, scale in zip(totals, scales, strict=True):
            block = []
            for s, slot, kept in zip(self.elements(b, total), layout.slots, keep, strict=True):
                if scale is not None:
                    s = b.mulf(s, scale[slot])
                s = clone_value(b, self.f.score, {last: s})
                block.append(s if kept is None else b.select(kept, s, b.f32(F32_MIN)))
            scores.append(block)
        local = [self.tile_maxima(b, [block]) for block in scores]
        tile_max = self.across_subgroups(b, self.row_max, local,
                                         recurrence.max_step)
        new_blocks, rescales = [], []
        for r, (block, carried) in enumerate(zip(scores, blocks, strict=True)):
            state, rescale, weights = self.weigh(b, block, carried, tile_max[r], keep,
                                                 may_drop, may_drop or partial)
            at = b.addi(b.index(r * TILE * KEYS), b.muli(self.group, b.index(TILE)))
            b.emit(SubgroupMmaStoreMatrixOp(self.assemble(b, weights, c16), self.weights,
                                            [at], KEYS))
            new_blocks.append(state)
            rescales.append(rescale)
        b.emit(gpu.BarrierOp())  # the tile's weights in place
        outs = [self.rescaled(b, carried[2 * rows:], rescale, self.latent.skip_rescale)
                for carried, rescale in zip(blocks, rescales, strict=True)]
        weights = [[b.emit(SubgroupMmaLoadMatrixOp(
            self.weights, [b.index(r * TILE * KEYS + k * TILE)], a16, KEYS)).results[0]
            for k in range(SUBGROUPS)] for r in range(len(blocks))]
        # where each 16 keys' rows start (a page holds whole runs of 16),
        # at the subgroup's dims
        values = [b.addi(self.f.v.start(b, op, "update", self.first, self.lane,
                                        b.addi(tile_start, b.index(k * TILE))),
                         b.muli(self.group, b.index(self.group_dims)))
                  for k in range(SUBGROUPS)]
        if partial:
            outs = self.cut_values(b, tile_start, values, weights, outs)
        else:
            for c in range(self.group_dims // TILE):  # each V block read once
                for k in range(SUBGROUPS):
                    self.add_values(b, self.value_block_of(b, values, k, c), weights, outs, k, c)
        return [v for block, o in zip(new_blocks, outs, strict=True) for v in (*block, *o)]

    def weigh(self, b: IRBuilder, scores, carried, tile_max, keep, may_drop: bool,
              may_be_zero: bool):
        """A row block's tile of `scores` (this lane's elements; `keep`: each
        kept, or None) against its carried m and l, with each row slot's
        whole tile max: (m_new + l_new, each slot's rescale of O, the
        weights rounded to the 16-bit type)."""
        rows = self.layout.row_count
        m, l = carried[:rows], carried[rows:2 * rows]  # noqa: E741
        m_new = [recurrence.running_max(b, t, old) for t, old in zip(tile_max, m, strict=True)]
        rescale = [recurrence.rescale_of(b, old, new, self.exp2)
                   for old, new in zip(m, m_new, strict=True)]
        tile_sum, weights = [b.f32(0.0)] * rows, []
        for s, slot, kept in zip(scores, self.layout.slots, keep, strict=True):
            weight = recurrence.score_weight(b, s, m_new[slot], self.exp2, may_drop, keep=kept)
            summed, weight = self.weight_operand(b, weight, may_be_zero)
            tile_sum[slot] = b.addf(tile_sum[slot], summed)
            weights.append(weight)
        l_new = [recurrence.next_denominator(b, x, old, t)
                 for x, old, t in zip(rescale, l, tile_sum, strict=True)]
        return [*m_new, *l_new], rescale, weights

    def value_block_of(self, b: IRBuilder, values, k: int, c: int) -> SSAValue:
        """The B operand of the tile's keys 16 k.. and the subgroup's dims
        16 c.. (`values[k]`: where key 16 k's dims start)."""
        at = b.addi(values[k], b.index(c * TILE))
        return b.emit(SubgroupMmaLoadMatrixOp(self.f.v.load.memref, [at], tile_matrix(
            self.half, MMAOperand.B), self.v_dim)).results[0]

    @staticmethod
    def add_values(b: IRBuilder, value: SSAValue, weights, outs, k: int, c: int) -> None:
        """O[r][c] += P[r][k] V for each row block r."""
        for r, o in enumerate(outs):
            o[c] = b.emit(SubgroupMmaComputeOp(weights[r][k], value, o[c])).results[0]

    def cut_values(self, b: IRBuilder, tile_start, values, weights, outs):
        """P V over a tile the sequence ends in: each 16 keys before the end
        as in a whole tile, the 16 that hold the end copied into the
        subgroup's tc_value_block with the rows past it zero (a row there
        may hold anything: 0 * inf would be NaN), those after it not at all."""
        count, length = len(outs[0]), self.length
        for k in range(SUBGROUPS):
            start = b.addi(tile_start, b.index(k * TILE))
            flat = [o for row in outs for o in row]

            def whole(b: IRBuilder, k=k):
                made = [list(row) for row in outs]
                for c in range(count):
                    self.add_values(b, self.value_block_of(b, values, k, c), weights, made, k, c)
                return [o for row in made for o in row]

            def cut(b: IRBuilder, k=k, start=start):
                made = [list(row) for row in outs]
                base = b.muli(self.group, b.index(TILE * self.group_dims))
                self.copy_cut(b, start, base)
                b.emit(gpu.BarrierOp())  # the subgroup's block in place
                for c in range(count):
                    value = b.emit(SubgroupMmaLoadMatrixOp(
                        self.value_block, [b.addi(base, b.index(c * TILE))],
                        tile_matrix(self.half, MMAOperand.B), self.group_dims)).results[0]
                    self.add_values(b, value, weights, made, k, c)
                return [o for row in made for o in row]

            def some(b: IRBuilder, start=start, whole=whole, cut=cut):
                ends_after = b.cmpi(b.addi(start, b.index(TILE)), length, "ule")
                return b.if_else(ends_after, whole, cut)

            flat = b.if_else(b.cmpi(start, length, "ult"), some, lambda b, f=flat: f)
            outs = [flat[r * count:(r + 1) * count] for r in range(len(outs))]
        return outs

    def copy_cut(self, b: IRBuilder, start, base) -> None:
        """The 16 keys from `start` of the subgroup's value dims into
        tc_value_block at `base`, as 0 past the sequence's end."""
        op, width = self.op, self.group_dims

        def one(b: IRBuilder, e, _):
            at = b.addi(b.muli(e, b.index(SUBGROUP)), self.sublane)
            key = b.addi(start, b.divui(at, b.index(width)))
            row = self.f.v.start(b, op, "update", self.first, self.lane, key)
            source = b.addi(row, b.addi(b.muli(self.group, b.index(width)),
                                        b.remui(at, b.index(width))))
            value = b.load(self.f.v.load.memref, source)
            kept = b.select(b.cmpi(key, self.length, "ult"), value, b.f32(0.0))
            b.store(kept, self.value_block, b.addi(base, at))
            return []

        b.loop(0, TILE * width // SUBGROUP, one, hint="cut_e")

    def finish(self, b: IRBuilder, blocks) -> None:
        """The rows' denominators over every lane and subgroup, then out
        (O / l), or a split's partial m, l and O for the merge."""
        rows = self.layout.row_count
        sums = [[self.row_total(b, part, add) for part in carried[rows:2 * rows]]
                for carried in blocks]
        if not self.latent.stage:  # staged, each subgroup's rows saw every key
            sums = self.across_subgroups(b, self.row_sum, sums, add)
        op, splits = self.op, self.latent.splits
        c32 = tile_matrix(f32, MMAOperand.C)
        at_dims = b.muli(self.group, b.index(self.group_dims))
        if splits == 1:
            element = op.out.type.element_type
            result = tile_matrix(element, MMAOperand.C)
            for r, (carried, total) in enumerate(zip(blocks, sums, strict=True)):
                denominators = [recurrence.final_denominator(b, t) for t in total]

                def final(b: IRBuilder, value, slot, d=denominators):
                    value = recurrence.final_value(b, value, d[slot])
                    return value if element == f32 else self.narrow(b, value)

                for c, o in enumerate(carried[2 * rows:]):
                    row = b.addi(self.mine, b.index(r * TILE))
                    at = b.addi(b.muli(row, b.index(self.v_dim)),
                                b.addi(at_dims, b.index(c * TILE)))
                    b.emit(SubgroupMmaStoreMatrixOp(self.map_elements(b, o, final, result),
                                                    op.out, [at], self.v_dim))
            return
        scale = partial_weight_scale(op.shape()["seq_len"])
        m_buffer, l_buffer = op.partials
        for r, (carried, total) in enumerate(zip(blocks, sums, strict=True)):
            for c, o in enumerate(carried[2 * rows:]):
                row = b.addi(b.muli(b.addi(self.mine, b.index(r * TILE)), b.index(splits)),
                             self.split)
                at = b.addi(b.muli(row, b.index(self.v_dim)), b.addi(at_dims, b.index(c * TILE)))
                scaled = self.map_elements(b, o, lambda b, x, _slot: b.mulf(x, b.f32(scale)))
                b.emit(SubgroupMmaStoreMatrixOp(scaled, op.out, [at], splits * self.v_dim))

            def export(b: IRBuilder, r=r, carried=carried, total=total):
                for i, values in enumerate((carried[:rows],
                                            [b.mulf(t, b.f32(scale)) for t in total])):
                    matrix = self.assemble(b, [values[s] for s in self.layout.slots], c32)
                    at = b.addi(b.index(i * self.latent.rows * TILE),
                                self.block_at(b, r, TILE * TILE))
                    b.emit(SubgroupMmaStoreMatrixOp(matrix, self.exported, [at], TILE))

            b.if_then(b.cmpi(self.group, b.index(0), "eq"), export)
        b.emit(gpu.BarrierOp())  # each row's m and l in place

        def publish(b: IRBuilder):
            row = b.addi(b.muli(b.addi(self.first, self.lane), b.index(splits)), self.split)
            for i, buffer in enumerate((m_buffer, l_buffer)):
                at = b.addi(b.index(i * self.latent.rows * TILE),
                            b.muli(self.lane, b.index(TILE)))
                b.store(b.load(self.exported, at), buffer, row)

        b.if_then(b.cmpi(self.lane, b.index(self.latent.rows), "ult"), publish)


def _i32(b: IRBuilder, value: int) -> SSAValue:
    return _value(b, arith.ConstantOp(IntegerAttr(value, i32)))


def _value(b: IRBuilder, op) -> SSAValue:
    return b.emit(op).results[0]


def _to_f32(b: IRBuilder, index: SSAValue) -> SSAValue:
    """An index below 2^24 as an exact f32."""
    return _value(b, arith.UIToFPOp(_value(b, arith.IndexCastOp(index, i32)), f32))


def _power_of_two(b: IRBuilder, biased: SSAValue) -> SSAValue:
    """The f32 2^(biased - 127), from its biased exponent (1 .. 254)."""
    bits = _value(b, arith.ShLIOp(biased, _i32(b, F32_MANTISSA)))
    return _value(b, arith.BitcastOp(bits, f32))


def expand(module: ModuleOp, op: vyre.TiledOnlineSoftmaxOp, layout: AccumulatorLayout,
           tiling: LatentTiling = LatentTiling()) -> None:
    """Replace `op` (which qualifies: `problem(op, device, tiling)` is None
    on a device whose accumulators are laid out as `layout`) by its
    expansion; with splits, give it partials and a merge kernel."""
    kernel = op.parent_op()
    assert isinstance(kernel, vyre.KernelOp)
    fragments = ChainedFragments.of(op, tiling.rows, TILE)
    if tiling.splits > 1:
        op.properties["kv_splits"] = IntegerAttr(tiling.splits, i64)
        dims = tuning.merge_dims(op.shape()["item_count"], op.v_dim)
        merge_in_kernel(module, kernel, op, tiling.splits, dims, tuning.skeleton_merge_teams(
            op, tiling.splits, kernel.lanes, dims))
    record_skeleton(op)
    # staged, P is built in registers as the A operand's elements
    kernel.attributes[ACCUMULATOR_ATTR] = AccumulatorAttr.of(
        layout if tiling.stage else replace(layout, operand_a=None))
    b = IRBuilder(InsertPoint.before(op))
    LatentExpansion(op, fragments, tiling, layout, b).emit(b)
    unused = [op.q_scratch, op.score_tile, op.o_acc]
    Rewriter.erase_op(op, safe_erase=False)
    for array in unused:
        if not array.uses:
            Rewriter.erase_op(array.owner)
    workgroups = op.shape()["item_count"] // tiling.rows * tiling.splits
    kernel.properties["item_count"] = IntegerAttr(workgroups * tiling.lanes, i64)
    kernel.properties["workgroup_size"] = IntegerAttr(tiling.lanes, i64)


@dataclass(frozen=True)
class LatentTensorCoresPass(ModulePass):
    """Expand every qualifying skeleton (MLA's latent attention) onto the
    subgroup matrix ops of `device` (a profile name, vyre_xdsl.device):
    `row_tiles` blocks of 16 rows a subgroup, in `row_groups` (1 or 2,
    staged) groups of four subgroups, each row block's keys split
    over `splits` workgroups (0: the tuning's, vyre_xdsl.tuning.latent_splits),
    merged by a kernel of their own; `stage`: the key rows staged by the
    workgroup; `skip_rescale`: O's rescale skipped by a subgroup whose rows
    kept their maxima; `force`: an error for a skeleton that does not
    qualify."""

    name = "vyre-latent-tensor-cores"

    device: str = GENERIC.name
    row_tiles: int = 1
    splits: int = 0
    stage: bool = False
    skip_rescale: bool = False
    row_groups: int = 1
    force: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.row_tiles < 1 or self.splits < 0:
            raise pass_error(op, f"vyre-latent-tensor-cores: row_tiles must be positive and "
                                 f"splits 0 (choose) or positive, got row_tiles="
                                 f"{self.row_tiles} splits={self.splits}")
        device = device_profile(self.device)
        expand_skeletons(
            op, self.name, self.force, "vyre IR after vyre-absorb-mla{kernels=3}", self.tiling,
            lambda skeleton, tiling: fitting_problem(skeleton, device, tiling),
            lambda skeleton, tiling: expand(op, skeleton, device.accumulator_layout, tiling))

    def tiling(self, op: vyre.TiledOnlineSoftmaxOp) -> LatentTiling:
        if self.splits:
            return LatentTiling(self.row_tiles, self.splits, self.stage, self.skip_rescale,
                                self.row_groups)
        return split_tiling(op, self.row_tiles, self.stage, self.skip_rescale,
                            self.row_groups)


def split_tiling(op: vyre.TiledOnlineSoftmaxOp, row_tiles: int, stage: bool = False,
                 skip_rescale: bool = False, row_groups: int = 1) -> LatentTiling:
    """`row_tiles` blocks of rows a subgroup, in `row_groups` groups of
    four subgroups (`stage`: staged tiles; `skip_rescale`), split as the
    tuning says (vyre_xdsl.tuning.latent_splits)."""
    shape, rows = op.shape(), TILE * row_tiles * row_groups
    return LatentTiling(row_tiles, tuning.latent_splits(
        max(shape["item_count"] // rows, 1), shape["seq_len"] // KEYS), stage, skip_rescale,
        row_groups)


def fitting_problem(op: vyre.TiledOnlineSoftmaxOp, device: DeviceProfile,
                    tiling: LatentTiling) -> str | None:
    """problem(), and then whether the expansion's workgroup memory fits."""
    reason = problem(op, device, tiling)
    if reason is None and (used := workgroup_bytes(op, tiling, device)) > \
            device.shared_memory_bytes:
        reason = (f"its workgroup memory ({used} bytes) exceeds the device's "
                  f"{device.shared_memory_bytes}")
    return reason


def workgroup_bytes(op: vyre.TiledOnlineSoftmaxOp, tiling: LatentTiling, device) -> int:
    """The expansion's workgroup memory for `op` (which qualifies)."""
    fragments = ChainedFragments.of(op, tiling.rows, TILE)
    return tiling.workgroup_bytes(fragments.depth, device.accumulator_layout.row_count,
                                  op.v_dim, op.ragged,
                                  _scaled(fragments.v.load.memref.type.element_type))
