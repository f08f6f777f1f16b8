"""vyre-tensor-cores: a skeleton's tile products on the subgroups' matrix units.

The per-lane expansion (vyre-inline-fragments) gives each query row its own
lane, and every score a dot product of multiply-adds.  This pass expands a
qualifying skeleton instead for subgroups of 32 lanes, each owning
`row_tiles` blocks of 16 rows, with MLIR's gpu.subgroup_mma ops (16x16x16,
f16 or bf16 inputs, f32 accumulators), for a device whose accumulator
layout and matrices of that type its profile knows (`device`;
vyre_xdsl.mma_layout):

- S = Q Kᵀ for a tile of `keys` keys: for each 16 of them, head_dim / 16
  `gpu.subgroup_mma_compute` of a row block's Q (read once, before the tile
  loop) and the keys' K, read column-major; each K block serves every row
  block of the subgroup.
- the softmax on S's elements where they are: each lane takes its 8
  (`gpu.subgroup_mma_extract_thread_local`), applies the scores fragment's
  own epilogue (the ops between its dot product and its store, cloned with
  the dot product replaced by the element) and runs the recurrence
  (vyre_xdsl.recurrence) for each of its rows, a row's tile max combined
  over the lanes that hold it (`gpu.shuffle xor`, the layout's masks) in
  each tile, its denominator once after the last (each lane sums its own
  elements' weights); the weights, in the inputs' 16-bit type
  (MatrixElements.weight_operand: bf16 cut, the denominator summing the
  cut), are
  inserted into a matrix of it and stored to `tc_weights`, from where P V
  reads them as its
  A operand (a KHR matrix cannot change use); with `registers=true`, on a
  device whose A operands hold a lane's accumulator elements (the
  layout's `operand_a`), they are inserted into the A operand itself, and
  the tile has no weights to store, load or wait for.
- O stays a matrix carried by the tile loop: each lane rescales its
  elements by its rows' rescale, then O += P V on the matrix unit, each V
  block read once for every row block; at the end O's elements are divided
  by their rows' denominators and the 16-bit matrix stored to out.

With `stage=true` the workgroup's subgroups first copy the tile's K and V
rows (contiguous in their buffers) into workgroup memory, in 16x16 blocks
(16-bit ones 16 bytes a lane: mma_elements.StagedBlock), behind one more
barrier; all rows of a workgroup must then read the same
keys.  Rows there are padded by 16 bytes where they would be an even number
of 16 bytes apart (mma_elements.conflict_free_stride): a matrix load reads
eight rows of 16 bytes at once, which then fall in distinct banks.  With
`prefetch=true` as well, the staged tiles have two buffers:
each subgroup loads its blocks of the next tile into registers before it
computes this one and stores them into the other buffer after, so the
loads overlap the products and the tile needs two barriers, not three
(one, with P in registers).  With `stage_q=true` each subgroup copies its
rows of Q into workgroup memory once and reads Q's blocks there in every
tile instead of holding them in registers.  With `rolled=true` the tile
loop is marked for the device's compiler not to unroll (SPIR-V's
DontUnroll); with `unroll=N` it computes N tiles a trip, its body's
copies in order (the same result), the trips left over in a loop of one
a trip, both marked alike.  The kernel records the layout
on its launch (`#vyre.accumulator`): the interpreter executes it, the
Vulkan runtime checks the device's.

With `pieces=2` or `3` the inputs and the output are f32: each f32 operand
(Q's blocks once, K's and V's as they are staged, P's weights) is split
into that many bf16 parts (`split`), and each product of matrices is the
sum of the products of parts i and j with i + j < pieces, the smallest
first, on bf16 matrices; three parts keep all of f32's 24 bits, two keep
it to 2^-15 (SPLIT_TOLERANCE).  Each tile's P V is then summed from 0 and added to O
on the lanes, rounding to nearest, where the matrix unit's running sums
may not.  Splitting needs staged tiles and P and Q in registers.

With a mask (staged tiles only) each workgroup runs the tiles its rows
keep keys in, from the mask's classes (`tile_classes`, taken to this
tiling's rows and keys), its heaviest workgroups first (as
vyre-inline-fragments{heavy_first}); tiles outside its run of full ones
are partial: a lane evaluates the mask region for each element of S (its
row and key from the bits of its lane index, `AccumulatorLayout.lane_bits`)
and a dropped key scores -inf, so its weight is exactly 0.  P V must then
add nothing for it even against an infinite or NaN value, which a matrix
product cannot (0 x inf is NaN): in a partial tile whose staged values
hold one, the workgroup clears them to 0 between two barriers, and each
lane adds back, for each of its elements of O, the infinity or NaN that
the keys the mask keeps bring (read from the value buffer, in loops left
rolled: the path is rare).

The fragments qualify as tile products (vyre_xdsl.tile_products: the
builders' FlashAttention-2, masked or not, and with a score_mod only where
it never returns -inf, a soft-cap: a dropping score_mod's zero weights are
not the mask's, and the update keeps them exactly 0 even against an
infinite value, which the clearing above does not cover); q, k, v and out
are all f16 or all bf16 (bf16 multiplies bf16 matrices, which MLIR 22's
gpu dialect lacks: docs/lowered-ir.md); head_dim and v_head_dim
are multiples of 16, the keys of `keys`, the items of a workgroup's rows
(four subgroups'); the rows of a subgroup (of a workgroup, staged) read
the same keys and values; no kv splits, dim parts, rows per lane,
kv_lens, lse or hooks; a mask sees only the item and the key.

Results differ from the per-lane kernel's in the order of the dot
products' sums (the matrix unit's) and in the weights, which P·V reads
rounded to 16 bits (as FlashAttention does); docs/performance.md gives the
tolerances.  The kernel runs 32 invocations per row block in workgroups of
128 lanes.  `vyre-tensor-cores` leaves a skeleton that does not qualify as
it is; `{force=true}` reports why instead.  vyre-to-gpu's default plan
runs the expansion with the tuning's tiling (vyre_xdsl.tuning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects import arith, gpu, scf
from xdsl.dialects.builtin import (
    Float32Type,
    IntegerAttr,
    ModuleOp,
    UnitAttr,
    bf16,
    f32,
    i32,
    i64,
)
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl import recurrence
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import F32_MIN, MIN_POSITIVE
from vyre_xdsl.dialects.gpu_mma import (
    MMAMatrixType,
    MMAOperand,
    SubgroupMmaComputeOp,
    SubgroupMmaLoadMatrixOp,
    SubgroupMmaStoreMatrixOp,
)
from vyre_xdsl.dialects.launch import ACCUMULATOR_ATTR, AccumulatorAttr, record_skeleton
from vyre_xdsl.dialects.plan import TensorCoresAttr
from vyre_xdsl.device import GENERIC, DeviceProfile, device_profile
from vyre_xdsl.errors import pass_error
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.mma_elements import (
    HALF_BYTES,
    LANES,
    SPLIT_TOLERANCE,
    SUBGROUP,
    SUBGROUPS,
    MatrixElements,
    StagedBlock,
    add,
    as_index,
    buffer_types,
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
from vyre_xdsl.query_blocks import (
    block_bounds,
    block_ranges,
    period_of,
    resized_classes,
    retiled_classes,
)
from vyre_xdsl.tile_products import Fragments, RowAccess, Unfit, clone_value, qualify
from vyre_xdsl.unrolling import DONT_UNROLL_ATTR, ROLLED_ATTR, transform, unrolled_body
from vyre_xdsl.workgroup_order import heavy_first_order

HALF = TILE // 2  # dims of every 16 that each of a row's two lanes keeps
BF16_DROPPED = -(1 << 16)  # 0xFFFF0000: an f32's bits that bf16 keeps


@dataclass(frozen=True)
class Tiling:
    """How the expansion spreads the work: tiles of `keys` keys, `row_tiles`
    16-row blocks a subgroup, the K and V tiles `stage`d once per
    workgroup."""

    keys: int = TILE
    row_tiles: int = 1
    stage: bool = False
    # staged tiles double-buffered: the next tile's K and V loaded while
    # this one is computed, one barrier a tile fewer
    prefetch: bool = False
    # P built in registers as P V's A operand (needs the layout's operand_a)
    registers: bool = False
    # Q copied once into workgroup memory and read from there in each tile,
    # not held in registers through the loop
    stage_q: bool = False
    # O's rescale in a branch that the subgroup skips where none of its
    # rows moved its max (MatrixElements.rescaled)
    skip_rescale: bool = False
    # the tile loop marked for the device's compiler not to unroll
    # (DONT_UNROLL_ATTR: SPIR-V's DontUnroll)
    rolled: bool = False
    # f32 inputs as this many bf16 parts each, products of parts i and j
    # with i + j < pieces (1: the inputs are f16 or bf16 themselves)
    pieces: int = 1
    # tiles a trip of the tile loop computes (copies of its body; the
    # trips left over in a loop of one a trip), `rolled` marking both loops
    unroll: int = 1

    @property
    def buffers(self) -> int:
        """Copies of the staged tiles."""
        return 2 if self.prefetch else 1

    @property
    def subgroup_rows(self) -> int:
        return TILE * self.row_tiles

    @property
    def rows(self) -> int:
        """Query rows of a workgroup."""
        return self.subgroup_rows * SUBGROUPS

    @property
    def sharing(self) -> int:
        """Rows that must read the same keys and values."""
        return self.rows if self.stage else self.subgroup_rows

    @staticmethod
    def of(attr: TensorCoresAttr) -> Tiling:
        """The tiling a plan records (`#vyre.tensor_cores`)."""
        return Tiling(attr.keys, attr.row_tiles, attr.stage, attr.prefetch, attr.registers,
                      attr.stage_q, attr.skip_rescale, attr.rolled, attr.pieces, attr.unroll)

    def attr(self) -> TensorCoresAttr:
        return TensorCoresAttr(self.keys, self.row_tiles, self.stage, self.prefetch,
                               self.registers, self.stage_q, self.skip_rescale, self.rolled,
                               self.pieces, self.unroll)

    def workgroup_bytes(self, head_dim: int, v_dim: int) -> int:
        """The workgroup memory of the expansion: the 16-bit weights of its
        rows (but in registers), the staged K and V tiles, and its rows of Q
        (staged); the staged tiles in rows of conflict_free_stride."""
        staged = (self.buffers * self.keys
                  * (conflict_free_stride(head_dim) + conflict_free_stride(v_dim))
                  if self.stage else 0)
        weights = 0 if self.registers else self.rows * self.keys
        queries = self.rows * head_dim if self.stage_q else 0
        return HALF_BYTES * (weights + staged * self.pieces + queries)

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The (part of A, part of B) of each product, smallest first."""
        return [(i, order - i) for order in reversed(range(self.pieces))
                for i in range(order + 1)]


def problem(op: vyre.TiledOnlineSoftmaxOp, device: DeviceProfile,
            tiling: Tiling = Tiling()) -> str | None:
    """Why `op` cannot run on the matrix units of `device`, spread as
    `tiling` says; None if it can."""
    layout = device.accumulator_layout
    reason = layout_problem(layout)
    if reason is not None:
        return reason
    assert layout is not None
    if tiling.registers and layout.operand_a is None:
        return ("the device's f16 A operands do not hold a lane's accumulator elements "
                "(no operand_a in its layout), so P cannot stay in registers")
    shape = op.shape()
    if tiling.keys < TILE or tiling.keys % TILE or tiling.row_tiles < 1:
        return (f"tiles of {tiling.keys} keys and {tiling.row_tiles} row blocks: keys "
                f"must be a positive multiple of {TILE}, row blocks positive")
    blocks = [tiling.keys // TILE * dim // TILE for dim in (shape["head_dim"], op.v_dim)]
    if tiling.prefetch and (not tiling.stage or any(n % SUBGROUPS for n in blocks)):
        return (f"prefetching needs staged tiles whose 16x16 blocks ({blocks[0]} of K, "
                f"{blocks[1]} of V) the {SUBGROUPS} subgroups share evenly")
    try:
        fragments = qualify(op, TILE, TILE, tiling.keys, tiling.rows, tiling.sharing,
                            masks=True)
    except Unfit as unfit:
        return str(unfit)
    if op.has_mask and (reason := mask_problem(op, layout, tiling, fragments.score)):
        return reason
    buffers = (op.q, *fragments.buffers, op.out)
    if tiling.pieces == 1:
        reason = half_problem(buffers, device.matrix_shapes)
        if reason and all(isinstance(b.type.element_type, Float32Type) for b in buffers):
            reason += " (f32 ones run split into bf16 parts: pieces=2 or 3)"
        return reason
    return split_problem(buffers, tiling, device)


def mask_problem(op: vyre.TiledOnlineSoftmaxOp, layout: AccumulatorLayout,
                 tiling: Tiling, score: SSAValue) -> str | None:
    """Why `op`'s mask cannot be applied to S's elements; None if it can."""
    if not tiling.stage:
        return ("a mask needs staged tiles (stage=true): a partial tile whose values "
                "hold an infinity or NaN has them cleared in workgroup memory")
    if layout.lane_bits is None:
        return ("the device's accumulator layout does not place a lane's elements by "
                "the bits of its index, so a lane cannot tell its elements' rows and keys")
    assert op.mask is not None
    if op.mask.block.args[1].uses:
        return "the mask reads its lane argument; a mask of the item and the key only"
    if may_be_minus_inf(score):
        return ("a mask with scores that may be -inf (a score_mod that drops keys): "
                "only the mask's dropped keys are kept out of P V")
    return None


def split_problem(buffers, tiling: Tiling, device: DeviceProfile) -> str | None:
    """Why f32 `buffers` cannot be split into `tiling.pieces` bf16 parts
    each; None if they can."""
    if any(not isinstance(b.type.element_type, Float32Type) for b in buffers):
        return f"pieces={tiling.pieces} splits f32 operands, not {buffer_types(buffers)}"
    if tiling.pieces not in SPLIT_TOLERANCE:
        return f"f32 operands split into 2 or 3 bf16 parts, not {tiling.pieces}"
    if not (tiling.stage and tiling.registers) or tiling.stage_q or tiling.skip_rescale:
        return ("split f32 operands need staged K and V tiles and P and Q in registers "
                "(stage, registers, no stage_q), and O rescaled in every tile (no "
                "skip_rescale)")
    if (TILE, TILE, TILE) not in device.matrix_shapes(bf16):
        return "the device has no 16x16x16 bf16 cooperative matrices"
    return None


class TensorCoreExpansion(MatrixElements):
    """The scf loop nest of one qualifying skeleton, emitted before it:
    each subgroup keeps its rows' S tiles and O in matrices, and computes
    the softmax on their elements where `layout` puts them."""

    def __init__(self, op: vyre.TiledOnlineSoftmaxOp, fragments: Fragments, tiling: Tiling,
                 layout: AccumulatorLayout, b: IRBuilder):
        self.op, self.f, self.tiling, self.layout = op, fragments, tiling, layout
        self.keys = tiling.keys
        shape = op.shape()
        self.head_dim, self.v_dim = shape["head_dim"], op.v_dim
        self.exp2 = op.exp2 is not None
        self.count = shape["seq_len"] // self.keys  # tiles
        half = self.half = bf16 if tiling.pieces > 1 else op.q.type.element_type
        self.out_type = op.out.type.element_type
        # rows of the staged K and V tiles, read as B operands; the A
        # operands' arrays (weights, Q) keep theirs: padded rows of the
        # latent attention's A operands ran slower (docs/performance.md)
        self.staged_strides = (conflict_free_stride(self.head_dim),
                               conflict_free_stride(self.v_dim))
        scratch = [] if tiling.registers else [("tc_weights", tiling.rows * self.keys, half)]
        if tiling.stage_q:  # the workgroup's rows of q
            scratch += [("tc_query_tile", tiling.rows * self.head_dim, half)]
        if tiling.stage:  # the workgroup's K and V tiles, copied once for its subgroups
            scratch += [(name, tiling.pieces * tiling.buffers * self.keys * stride, half)
                        for name, stride in zip(("tc_key_tile", "tc_value_tile"),
                                                self.staged_strides, strict=True)]
        arrays = [b.emit(vyre.ScratchOp(name, count, element)).results[0]
                  for name, count, element in scratch]
        self.weights = None if tiling.registers else arrays.pop(0)
        self.query_tile = arrays.pop(0) if tiling.stage_q else None
        self.staged = arrays
        self.lane = b.emit(vyre.LaneIndexOp()).results[0]
        invocation = b.emit(vyre.ItemIndexOp()).results[0]
        self.group = b.divui(self.lane, b.index(SUBGROUP), "subgroup")
        workgroup = b.divui(invocation, b.index(LANES), "workgroup")
        self.bounds: dict[str, SSAValue] = {}
        self.any_partial = False
        if op.has_mask:
            workgroup = self.mask_bounds(b, workgroup)
        first = b.muli(workgroup, b.index(tiling.rows))
        self.first = b.addi(first, b.muli(self.group, b.index(tiling.subgroup_rows)),
                            "first_row")
        # the subgroup's rows of tc_weights
        self.tile_base = b.muli(self.group, b.index(tiling.subgroup_rows * self.keys))
        self.width = b.subgroup_width()

    def mask_bounds(self, b: IRBuilder, workgroup: SSAValue) -> SSAValue:
        """The tiles the workgroup computes (`bounds`: its BlockRange, from
        the mask's classes for its rows and this tiling's tiles) and where
        its elements are (`element_rows`, `element_cols`: the row and the
        column of element i of a 16x16 block, offsets of its first); returns
        the workgroup whose rows it computes, the heaviest first
        (vyre_xdsl.workgroup_order), which changes no result."""
        op, tiling = self.op, self.tiling
        shape = op.shape()
        table = resized_classes(op.tile_class_table(), op.block_items, tiling.rows,
                                shape["item_count"])
        table = retiled_classes(table, shape["tile_size"], self.keys, shape["seq_len"]) or [
            [vyre.TILE_PARTIAL] * self.count for _ in table]
        ranges = block_ranges(table)
        self.any_partial = any(r.hi - r.lo > r.fhi - r.flo for r in ranges)
        order = heavy_first_order(ranges[:period_of(ranges)], 1, len(ranges), 1, 1)
        if order is not None:
            workgroup = order.emit(b, workgroup)
        self.bounds = block_bounds(b, ranges, workgroup)
        lane_bits = self.layout.lane_bits
        assert lane_bits is not None  # mask_problem
        within = b.remui(self.lane, b.index(SUBGROUP))
        bits = [b.remui(b.divui(within, b.index(1 << k)), b.index(2))
                for k in range(len(lane_bits[0]))]

        def offset(weights, first: tuple[int, ...]) -> list[SSAValue]:
            base = b.index(0)
            for bit, weight in zip(bits, weights, strict=True):
                if weight:
                    base = b.addi(base, b.muli(bit, b.index(weight)))
            return [b.addi(base, b.index(x)) for x in first]

        self.element_rows = offset(lane_bits[0], self.layout.rows[0])
        self.element_cols = offset(lane_bits[1], self.layout.cols[0])
        return workgroup

    def matrix(self, use: MMAOperand) -> MMAMatrixType:
        """A 16x16 matrix of the inputs' 16-bit type."""
        return tile_matrix(self.half, use)

    def emit(self, b: IRBuilder) -> None:
        op, head_dim, tiles = self.op, self.head_dim, range(self.tiling.row_tiles)
        c16 = self.matrix(MMAOperand.C)
        at_q = [[b.addi(self.row_at(b, r, head_dim), b.index(c * TILE))
                 for c in range(head_dim // TILE)] for r in tiles]
        if self.tiling.stage_q:  # each subgroup copies its own rows
            for r in tiles:
                for c, at in enumerate(at_q[r]):
                    block = b.emit(SubgroupMmaLoadMatrixOp(op.q, [at], c16, head_dim))
                    b.emit(SubgroupMmaStoreMatrixOp(
                        block.results[0], self.query_tile, [self.query_at(b, r, c)], head_dim))
            b.emit(gpu.BarrierOp())
            queries = None
        else:
            queries = [[self.operands(b, op.q, at, head_dim) for at in row] for row in at_q]
        c32 = tile_matrix(f32, MMAOperand.C)
        rows, outs = self.layout.row_count, self.v_dim // TILE
        state = [b.f32(F32_MIN)] * rows + [b.f32(0.0)] * rows
        state += [self.constant(b, 0.0, c32) for _ in range(outs)]
        per_tile = len(state)

        def tile(b: IRBuilder, index, carried):
            blocks = [_Rows(carried[r * per_tile:(r + 1) * per_tile], rows) for r in tiles]
            return [v for block in self.tile(b, queries, index, blocks) for v in block.values]

        lo, hi = (self.bounds["lo"], self.bounds["hi"]) if self.bounds else (0, self.count)
        if self.tiling.prefetch:  # the first tile in buffer lo % 2
            self.store_blocks(b, self.load_blocks(b, as_index(b, lo)),
                              b.remui(lo, b.index(2)) if self.bounds else 0)
            b.emit(gpu.BarrierOp())
        rolled = ({ROLLED_ATTR: UnitAttr(), DONT_UNROLL_ATTR: UnitAttr()}
                  if self.tiling.rolled else {})
        carried = b.loop(lo, hi, tile, state * self.tiling.row_tiles, hint="tile_idx",
                         attributes=rolled)
        loop = carried[0].owner
        for r in tiles:
            block = _Rows(carried[r * per_tile:(r + 1) * per_tile], rows)
            denominators = [recurrence.final_denominator(b, self.row_total(b, l, add))
                            for l in block.l]  # noqa: E741
            for c, o in enumerate(block.o):
                out = self.map_elements(
                    b, o, lambda b, value, slot: self.to_out(
                        b, recurrence.final_value(b, value, denominators[slot])),
                    tile_matrix(self.out_type, MMAOperand.C))
                b.emit(SubgroupMmaStoreMatrixOp(
                    out, op.out, [b.addi(self.row_at(b, r, self.v_dim), b.index(c * TILE))],
                    self.v_dim))
        factor = min(self.tiling.unroll, self.count)  # more copies than tiles: all of them
        if factor > 1:
            assert isinstance(loop, scf.ForOp)
            transform(loop, factor, unrolled_body(loop, factor), attributes=rolled)

    def operands(self, b: IRBuilder, source: SSAValue, at: SSAValue,
                 stride: int) -> list[SSAValue]:
        """The 16x16 block at `at` of `source` as A operands: itself, or
        its f32 elements' parts (`split`), each inserted where the layout's
        A operands hold them."""
        a16 = self.matrix(MMAOperand.A)
        if self.tiling.pieces == 1:
            return [b.emit(SubgroupMmaLoadMatrixOp(source, [at], a16, stride)).results[0]]
        c32 = tile_matrix(f32, MMAOperand.C)
        block = b.emit(SubgroupMmaLoadMatrixOp(source, [at], c32, stride)).results[0]
        return self.split_operands(b, self.elements(b, block), a16)

    def split(self, b: IRBuilder, value: SSAValue) -> list[SSAValue]:
        """`value` (f32) as `pieces` bf16 parts: each but the last its rest's
        first 8 bits (toward zero), the last its rest rounded; their sum is
        `value` to 2^-15 of it (two) or exactly (three, where the last
        part stays in bf16's range).  Every part has the
        value's sign, so an infinite operand times the parts sums to one
        infinity, not NaN: the rest of an infinite or NaN part is 0, and a
        later part that is 0 takes the smallest normal with the value's
        sign (an error of at most 2^-126 times the other operand)."""
        zero = b.f32(0.0)
        sign = b.select(b.cmpf(value, zero, "olt"), b.f32(-MIN_POSITIVE), b.f32(MIN_POSITIVE))
        parts = []
        for piece in range(self.tiling.pieces):
            if piece:
                value = b.select(b.cmpf(value, zero, "oeq"), sign, value)
            if piece + 1 == self.tiling.pieces:
                parts.append(self.narrow(b, value))
                break
            head = _toward_bf16(b, value)
            parts.append(self.narrow(b, head))  # exact
            rest = b.subf(value, head)
            value = b.select(b.cmpf(b.absf(rest), b.f32(math.inf), "olt"), rest, zero)
        return parts

    def split_operands(self, b: IRBuilder, values: list[SSAValue],
                       matrix: MMAMatrixType) -> list[SSAValue]:
        """`values` (a lane's accumulator elements, f32) split, as one A
        operand a part."""
        parts = [self.split(b, value) for value in values]
        return [self.assemble(b, [parts[i][piece] for i in self.layout.operand_a], matrix)
                for piece in range(self.tiling.pieces)]

    def to_out(self, b: IRBuilder, value: SSAValue) -> SSAValue:
        """`value` in the output's type."""
        return value if isinstance(self.out_type, Float32Type) else self.narrow(b, value)

    def query(self, b: IRBuilder, queries, r: int, c: int) -> list[SSAValue]:
        """Row block r's Q for dims 16 c to 16 c + 15 (its parts): held,
        or read from tc_query_tile."""
        if queries is not None:
            return queries[r][c]
        a16 = self.matrix(MMAOperand.A)
        return [b.emit(SubgroupMmaLoadMatrixOp(
            self.query_tile, [self.query_at(b, r, c)], a16, self.head_dim)).results[0]]

    def query_at(self, b: IRBuilder, r: int, c: int) -> SSAValue:
        """Where row block r's dims 16 c.. start in tc_query_tile."""
        row = b.addi(b.muli(self.group, b.index(self.tiling.subgroup_rows)), b.index(r * TILE))
        return b.addi(b.muli(row, b.index(self.head_dim)), b.index(c * TILE))

    def row_at(self, b: IRBuilder, r: int, width: int) -> SSAValue:
        """Where row block r of the subgroup starts in a row-major array of
        rows `width` long (q, out)."""
        return b.muli(b.addi(self.first, b.index(r * TILE)), b.index(width))

    def row_start(self, b: IRBuilder, access: RowAccess, region: str, tile_start) -> SSAValue:
        """Where the subgroup's first row reads key tile_start, dim 0."""
        return access.start(b, self.op, region, self.first, self.lane, tile_start)

    def tile(self, b: IRBuilder, queries, index, blocks: list[_Rows]) -> list[_Rows]:
        """Tile `index` of keys for each of the subgroup's row blocks: S,
        the softmax on its elements, O rescaled plus P V."""
        f, head_dim, v_dim, chunks = self.f, self.head_dim, self.v_dim, self.keys // TILE
        b16 = self.matrix(MMAOperand.B)
        c32 = tile_matrix(f32, MMAOperand.C)
        pending = []
        # rows of the staged tiles, else of the buffers
        k_stride, v_stride = self.staged_strides if self.staged else (head_dim, v_dim)
        tile_start = b.muli(index, b.index(self.keys), "tile_start")
        if self.tiling.prefetch:  # this tile is in buffer index % 2; load the next
            (k_source, v_source), parity = self.staged, b.remui(index, b.index(2))
            keys = b.muli(parity, b.index(self.keys * k_stride))
            values = b.muli(parity, b.index(self.keys * v_stride))
            last = b.subi(self.bounds["hi"], b.index(1)) if self.bounds else b.index(self.count - 1)
            pending = self.load_blocks(b, b.minui(b.addi(index, b.index(1)), last))
        elif self.staged:
            (k_source, v_source), keys, values = self.staged, b.index(0), b.index(0)
            self.store_blocks(b, self.load_blocks(b, index), 0)
            b.emit(gpu.BarrierOp())  # the tiles in place
        else:  # each subgroup reads the k and v buffers
            k_source, v_source = f.k.load.memref, f.v.load.memref
            keys = self.row_start(b, f.k, "scores", tile_start)
            values = self.row_start(b, f.v, "update", tile_start)
        partial = None  # whether this tile is masked
        if self.any_partial:
            partial = b.ori(b.cmpi(index, self.bounds["flo"], "ult"),
                            b.cmpi(index, self.bounds["fhi"], "uge"))
        totals = [[self.constant(b, 0.0, c32) for _ in range(chunks)] for _ in blocks]
        for k in range(chunks):  # S's 16 x 16 blocks, each K block read once
            for c in range(head_dim // TILE):
                at = b.addi(keys, b.index(k * TILE * k_stride + c * TILE))
                key = [b.emit(SubgroupMmaLoadMatrixOp(
                    k_source, [b.addi(at, b.index(piece * self.piece_size(k_stride)))], b16,
                    k_stride, transpose=True)).results[0] for piece in self.pieces]
                for r, block in enumerate(totals):
                    query = self.query(b, queries, r, c)
                    for i, j in self.tiling.pairs:
                        block[k] = b.emit(SubgroupMmaComputeOp(
                            query[i], key[j], block[k])).results[0]
        # P's 16 x 16 blocks, one per 16 keys, of each row block
        weights = [self.softmax(b, block, carried, r, partial, tile_start)
                   for r, (block, carried) in enumerate(zip(totals, blocks, strict=True))]
        if not self.tiling.registers:
            b.emit(gpu.BarrierOp())  # the subgroup's weights in place
            a16 = self.matrix(MMAOperand.A)
            weights = [[
                [b.emit(SubgroupMmaLoadMatrixOp(
                    self.weights, [b.addi(self.weights_at(b, r), b.index(k * TILE))], a16,
                    self.keys)).results[0]]
                for k in range(chunks)] for r in range(len(blocks))]
        cleared = None  # whether this tile's values had infinities or NaNs cleared
        if partial is not None:
            found = b.if_else(partial, lambda b: [self.non_finite(b, v_source, values)],
                              lambda b: [b.i32(0)])[0]
            cleared = b.cmpi(found, b.i32(0), "ne")
            b.if_then(cleared, lambda b: self.clear_non_finite(b, v_source, values))
        split = self.tiling.pieces > 1
        # split: this tile's P V summed from 0, then added to the rescaled O
        # in the lanes, rounding to nearest: the matrix unit's sums may
        # truncate, and O takes a sum from every tile
        outs = [list(carried.o) if split else
                self.rescaled(b, carried.o, carried.rescale, self.tiling.skip_rescale)
                for carried in blocks]
        for c in range(v_dim // TILE):  # each V block read once
            sums = [self.constant(b, 0.0, c32) if split else o[c] for o in outs]
            for k in range(chunks):
                at = b.addi(values, b.index(k * TILE * v_stride + c * TILE))
                value = [b.emit(SubgroupMmaLoadMatrixOp(
                    v_source, [b.addi(at, b.index(piece * self.piece_size(v_stride)))], b16,
                    v_stride)).results[0] for piece in self.pieces]
                for r in range(len(outs)):
                    for i, j in self.tiling.pairs:
                        sums[r] = b.emit(SubgroupMmaComputeOp(
                            weights[r][k][i], value[j], sums[r])).results[0]
            for r, (o, carried) in enumerate(zip(outs, blocks, strict=True)):
                o[c] = (self.rescaled_plus(b, o[c], carried.rescale, sums[r]) if split
                        else sums[r])
        if cleared is not None:  # the cleared values' infinities and NaNs added back
            flat = [o for row in outs for o in row]
            flat = b.if_else(cleared, lambda b: self.with_non_finite(b, flat, tile_start),
                             lambda b: flat)
            outs = [flat[r * len(row):(r + 1) * len(row)] for r, row in enumerate(outs)]
        if pending:  # the next tile into the other buffer, which no lane reads now
            self.store_blocks(b, pending, b.remui(b.addi(index, b.index(1)), b.index(2)))
        if self.staged or not self.tiling.registers:
            b.emit(gpu.BarrierOp())  # every read of the weights (and tiles) done
        return [_Rows.of(block.m_new, block.l_new, o)
                for block, o in zip(blocks, outs, strict=True)]

    def rescaled_plus(self, b: IRBuilder, o: SSAValue, rescale: list[SSAValue],
                      tile: SSAValue) -> SSAValue:
        """O's matrix `o`, each row times its rescale, plus `tile`."""
        values = [recurrence.next_accumulator(b, rescale[slot], x, y) for x, y, slot in zip(
            self.elements(b, o), self.elements(b, tile), self.layout.slots, strict=True)]
        return self.assemble(b, values, o.type)

    @property
    def pieces(self) -> range:
        return range(self.tiling.pieces)

    def piece_size(self, stride: int) -> int:
        """Elements from one part of a staged tile to the next."""
        return self.tiling.buffers * self.keys * stride

    def weights_at(self, b: IRBuilder, r: int) -> SSAValue:
        """Where row block r's weights start in tc_weights."""
        return b.addi(self.tile_base, b.index(r * TILE * self.keys))

    def softmax(self, b: IRBuilder, scores_blocks: list[SSAValue], carried: _Rows,
                r: int, partial: SSAValue | None, tile_start: SSAValue) -> list[SSAValue]:
        """Row block r's tile: its new running max, denominator and each row
        slot's rescale of O set on `carried` (m_new, l_new, rescale); returns
        its weights as f16 A operands, one for each 16 keys (with
        `registers`), else stores them to tc_weights and returns [].  Where
        the tile is `partial`, a key the mask drops scores -inf, which
        drops it (recurrence.score_weight)."""
        layout, rows = self.layout, self.layout.row_count
        scores = [[self.score(b, dot) for dot in self.elements(b, total)]
                  for total in scores_blocks]
        if partial is not None:
            flat = b.if_else(partial, lambda b: self.masked(b, scores, r, tile_start),
                             lambda b: [s for block in scores for s in block])
            scores = [flat[k * layout.length:(k + 1) * layout.length]
                      for k in range(len(scores))]
        may_drop = partial is not None or may_be_minus_inf(self.f.score)
        tile_max = self.tile_maxima(b, scores)
        m_new = [recurrence.running_max(b, t, old)
                 for t, old in zip(tile_max, carried.m, strict=True)]
        rescale = [recurrence.rescale_of(b, old, new, self.exp2)
                   for old, new in zip(carried.m, m_new, strict=True)]
        tile_sum = [b.f32(0.0)] * rows
        c16 = self.matrix(MMAOperand.C)
        a16 = self.matrix(MMAOperand.A)
        operands = []
        for k, block in enumerate(scores):
            weights = []
            for s, slot in zip(block, layout.slots, strict=True):
                weight = recurrence.score_weight(b, s, m_new[slot], self.exp2, may_drop)
                summed = weight
                if self.tiling.pieces == 1:
                    summed, weight = self.weight_operand(b, weight, may_drop)
                tile_sum[slot] = b.addf(tile_sum[slot], summed)
                weights.append(weight)
            if self.tiling.pieces > 1:
                operands.append(self.split_operands(b, weights, a16))
            elif self.tiling.registers:
                operands.append([self.assemble(
                    b, [weights[i] for i in layout.operand_a], a16)])
            else:
                b.emit(SubgroupMmaStoreMatrixOp(
                    self.assemble(b, weights, c16), self.weights,
                    [b.addi(self.weights_at(b, r), b.index(k * TILE))], self.keys))
        carried.m_new, carried.rescale = m_new, rescale
        carried.l_new = [recurrence.next_denominator(b, scale, old, t)
                         for scale, old, t in zip(rescale, carried.l, tile_sum, strict=True)]
        return operands

    def keep(self, b: IRBuilder, r: int, i: int, key: SSAValue) -> SSAValue:
        """Whether the mask keeps, for the row of row block r that holds
        this lane's element i, the key `key`."""
        item = b.addi(self.first, b.addi(b.index(r * TILE), self.element_rows[i]))
        assert self.op.mask is not None
        return b.splice(self.op.mask, [item, self.lane, key])[0]

    def masked(self, b: IRBuilder, scores: list[list[SSAValue]], r: int,
               tile_start: SSAValue) -> list[SSAValue]:
        """Row block r's `scores` (each 16 keys' elements), -inf where the
        mask drops the key."""
        minus_inf = b.f32(-math.inf)
        return [b.select(self.keep(b, r, i, b.addi(tile_start, b.addi(
                    b.index(k * TILE), self.element_cols[i]))), s, minus_inf)
                for k, block in enumerate(scores) for i, s in enumerate(block)]

    def value_blocks(self, b: IRBuilder, at: SSAValue):
        """(n, where it starts) of each 16x16 block n of the staged value
        tile at `at`, numbered as load_blocks spreads them."""
        across = self.v_dim // TILE
        stride = self.staged_strides[1]
        for n in range(self.keys // TILE * across):
            row, column = divmod(n, across)
            where = b.addi(at, b.index(row * TILE * stride + column * TILE))
            yield n, where

    def non_finite(self, b: IRBuilder, source: SSAValue, at: SSAValue) -> SSAValue:
        """1 (i32) where the staged value tile at `at` (its first part) has
        an infinity or NaN, else 0, the same in every lane of the
        workgroup: every subgroup reads the whole tile."""
        c16 = self.matrix(MMAOperand.C)
        stride = self.staged_strides[1]
        found = None
        for _, where in self.value_blocks(b, at):
            block = b.emit(SubgroupMmaLoadMatrixOp(source, [where], c16, stride)).results[0]
            for value in self.elements(b, block):
                wide = b.emit(arith.ExtFOp(value, f32)).results[0]
                bad = b.cmpf(b.absf(wide), b.f32(math.inf), "uge")
                found = bad if found is None else b.ori(found, bad)
        assert found is not None
        return self.any_lane(b, b.select(found, b.i32(1), b.i32(0)))

    def clear_non_finite(self, b: IRBuilder, source: SSAValue, at: SSAValue) -> None:
        """Set the infinite and NaN values of the staged tile at `at` (each
        of their parts) to 0, each subgroup its share of the blocks, so
        that P V, whose dropped keys weigh exactly 0, stays finite there;
        `with_non_finite` adds them back for the keys the mask keeps."""
        c16 = self.matrix(MMAOperand.C)
        stride = self.staged_strides[1]
        b.emit(gpu.BarrierOp())  # every subgroup has read the tile's flag

        def clear(b: IRBuilder, where: SSAValue) -> None:
            parts = [b.addi(where, b.index(piece * self.piece_size(stride)))
                     for piece in self.pieces]
            blocks = [[b.emit(arith.ExtFOp(x, f32)).results[0] for x in self.elements(
                b, b.emit(SubgroupMmaLoadMatrixOp(source, [p], c16, stride)).results[0])]
                for p in parts]
            finite = [b.cmpf(b.absf(x), b.f32(math.inf), "olt") for x in blocks[0]]
            zero = b.f32(0.0)
            for p, values in zip(parts, blocks, strict=True):  # 16-bit values, exact
                cleared = [self.narrow(b, b.select(ok, x, zero))
                           for ok, x in zip(finite, values, strict=True)]
                b.emit(SubgroupMmaStoreMatrixOp(self.assemble(b, cleared, c16), source, [p],
                                                stride))

        for n, where in self.value_blocks(b, at):
            mine = b.cmpi(self.group, b.index(n % SUBGROUPS), "eq")
            b.if_then(mine, lambda b, where=where: clear(b, where))
        b.emit(gpu.BarrierOp())  # the tile cleared

    def with_non_finite(self, b: IRBuilder, outs: list[SSAValue],
                        tile_start: SSAValue) -> list[SSAValue]:
        """O's matrices `outs` (row block by row block) plus, in each
        element, what the tile's infinite and NaN values add to it: the sum
        of weight x value over the keys the mask keeps (each weighs more
        than 0) is +inf, -inf or NaN (both, or a NaN) where one of their
        values is, read from the value buffer."""
        f, blocks = self.f, self.v_dim // TILE
        source = f.v.load.memref
        first = self.row_start(b, f.v, "update", tile_start)
        inf = b.f32(math.inf)
        result = []
        for r in range(self.tiling.row_tiles):
            mine = outs[r * blocks:(r + 1) * blocks]
            elements = [self.elements(b, o) for o in mine]
            for i in range(self.layout.length):
                def key(b: IRBuilder, j, flags, i=i):
                    keep = self.keep(b, r, i, b.addi(tile_start, j))
                    row = b.addi(first, b.muli(j, b.index(self.v_dim)))
                    flags = list(flags)
                    for c in range(blocks):
                        value = b.load(source, b.addi(row, b.addi(
                            b.index(c * TILE), self.element_cols[i])))
                        nan = b.cmpf(value, value, "uno")
                        up = b.andi(keep, b.ori(nan, b.cmpf(value, inf, "oeq")))
                        down = b.andi(keep, b.ori(nan, b.cmpf(value, b.f32(-math.inf), "oeq")))
                        flags[2 * c] = b.ori(flags[2 * c], b.select(up, b.i32(1), b.i32(0)))
                        flags[2 * c + 1] = b.ori(flags[2 * c + 1],
                                                 b.select(down, b.i32(1), b.i32(0)))
                    return flags

                flags = b.loop(0, self.keys, key, [b.i32(0)] * (2 * blocks), hint="key",
                               attributes={ROLLED_ATTR: UnitAttr()})
                for c in range(blocks):
                    up = b.cmpi(flags[2 * c], b.i32(0), "ne")
                    down = b.cmpi(flags[2 * c + 1], b.i32(0), "ne")
                    added = b.select(up, b.select(down, b.f32(math.nan), inf),
                                     b.select(down, b.f32(-math.inf), b.f32(0.0)))
                    elements[c][i] = b.addf(elements[c][i], added)
            result += [self.assemble(b, values, o.type)
                       for values, o in zip(elements, mine, strict=True)]
        return result

    def load_blocks(self, b: IRBuilder, index) -> list[StagedBlock]:
        """Tile `index`'s K and V rows in 16x16 blocks spread over the
        workgroup's subgroups (mma_elements.spread_blocks)."""
        f, blocks = self.f, []
        start = b.muli(index, b.index(self.keys), "tile_start")
        for access, region, staged, width, stride in (
                (f.k, "scores", self.staged[0], self.head_dim, self.staged_strides[0]),
                (f.v, "update", self.staged[1], self.v_dim, self.staged_strides[1])):
            first = self.row_start(b, access, region, start)
            across = width // TILE
            source = access.load.memref
            place = None
            if self.tiling.pieces == 1 and copies_by_lanes(source.type.element_type, width,
                                                            stride):
                place = lane_place(b, b.remui(self.lane, b.index(SUBGROUP)))

            def block(b: IRBuilder, n: SSAValue, source=source, first=first, staged=staged,
                      width=width, stride=stride, across=across, place=place) -> StagedBlock:
                row, column = b.divui(n, b.index(across)), b.remui(n, b.index(across))
                column = b.muli(column, b.index(TILE))
                at_source = b.addi(first, b.addi(b.muli(row, b.index(TILE * width)), column))
                at = b.addi(b.muli(row, b.index(TILE * stride)), column)
                return StagedBlock(source, at_source, width, staged, at, stride, place)

            blocks += spread_blocks(b, self.keys // TILE * across, self.group, block)
        return blocks

    def store_blocks(self, b: IRBuilder, blocks: list[StagedBlock], buffer) -> None:
        """`load_blocks`' blocks into copy `buffer` of the staged tiles
        (split, each part into its own)."""
        def store(b: IRBuilder, block: StagedBlock, matrix: SSAValue) -> None:
            offset = b.muli(as_index(b, buffer), b.index(self.keys * block.stride))
            if self.tiling.pieces == 1:
                return block.store(b, matrix, offset)
            c16 = self.matrix(MMAOperand.C)
            parts = [self.split(b, value) for value in self.elements(b, matrix)]
            for piece in self.pieces:
                block.store(b, self.assemble(b, [p[piece] for p in parts], c16),
                            b.addi(offset, b.index(piece * self.piece_size(block.stride))))

        stage_blocks(b, blocks, store)

    def score(self, b: IRBuilder, dot: SSAValue) -> SSAValue:
        """The scores fragment's value with its dot product replaced by S's
        element `dot` (Fragments.of: it depends on nothing else of the
        fragment)."""
        return clone_value(b, self.f.score, {self.f.dot.results[0]: dot})


def _toward_bf16(b: IRBuilder, value: SSAValue) -> SSAValue:
    """`value` cut to bf16's 8 significant bits (toward zero; NaN kept)."""
    bits = b.emit(arith.BitcastOp(value, i32)).results[0]
    cut = b.emit(arith.BitcastOp(b.andi(bits, b.i32(BF16_DROPPED)), f32)).results[0]
    return b.select(b.cmpf(value, value, "uno"), value, cut)


class _Rows:
    """A row block's loop-carried state: each row slot's running max `m`
    and the lane's part of its denominator `l` (the sum of its own
    elements' weights, rescaled by the row's rescale: the parts of a row's
    lanes add up to the row's denominator, combined once, after the last
    tile), and O's matrices."""

    def __init__(self, values, rows: int):
        values = list(values)
        self.m, self.l, self.o = values[:rows], values[rows:2 * rows], values[2 * rows:]
        self.m_new: list[SSAValue] = []
        self.l_new: list[SSAValue] = []
        self.rescale: list[SSAValue] = []

    @staticmethod
    def of(m, l, o) -> _Rows:  # noqa: E741
        return _Rows([*m, *l, *o], len(m))

    @property
    def values(self) -> list[SSAValue]:
        return [*self.m, *self.l, *self.o]


def expand(op: vyre.TiledOnlineSoftmaxOp, layout: AccumulatorLayout,
           tiling: Tiling = Tiling()) -> None:
    """Replace `op` (which qualifies: `problem(op, device, tiling)` is None
    on a device whose accumulators are laid out as `layout`)
    by its expansion, computing on the elements of the accumulators where
    `layout` puts them."""
    kernel = op.parent_op()
    assert isinstance(kernel, vyre.KernelOp)
    fragments = Fragments.of(op, tiling.sharing)
    record_skeleton(op)
    # the A operands' layout only where the kernel relies on it
    recorded = layout if tiling.registers else replace(layout, operand_a=None)
    kernel.attributes[ACCUMULATOR_ATTR] = AccumulatorAttr.of(recorded)
    b = IRBuilder(InsertPoint.before(op))
    TensorCoreExpansion(op, fragments, tiling, layout, b).emit(b)
    unused = [op.q_scratch, op.score_tile, op.o_acc]
    Rewriter.erase_op(op, safe_erase=False)
    for array in unused:
        if not array.uses:
            Rewriter.erase_op(array.owner)
    items = op.shape()["item_count"]
    kernel.properties["item_count"] = IntegerAttr(items * SUBGROUP // tiling.subgroup_rows, i64)
    kernel.properties["workgroup_size"] = IntegerAttr(LANES, i64)


@dataclass(frozen=True)
class TensorCoresPass(ModulePass):
    """Expand every qualifying skeleton onto the subgroup matrix ops of
    `device` (a profile name, vyre_xdsl.device): tiles of `keys` keys (a
    multiple of 16), `row_tiles` blocks of 16 rows a subgroup, the K and V
    tiles read from global memory by each subgroup or, with `stage`,
    copied once per workgroup into workgroup memory (with `prefetch`, into
    two buffers, the next tile's loaded while this one is computed;
    `registers`: P built in registers as P V's A operand; `stage_q`: Q
    read from workgroup memory in each tile; `skip_rescale`: O rescaled
    only where a row of the subgroup's moved its max; `rolled`: the tile
    loop marked for the device's compiler not to unroll; `unroll`: tiles a
    trip of the tile loop; `pieces`: f32 operands split into 2 or 3 bf16
    parts; `force`: an error for a skeleton that does not qualify)."""

    name = "vyre-tensor-cores"

    device: str = GENERIC.name
    keys: int = TILE
    row_tiles: int = 1
    stage: bool = False
    prefetch: bool = False
    registers: bool = False
    stage_q: bool = False
    skip_rescale: bool = False
    rolled: bool = False
    pieces: int = 1
    unroll: int = 1
    force: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.keys < TILE or self.keys % TILE:
            raise pass_error(op, f"vyre-tensor-cores: keys must be a positive multiple "
                                 f"of {TILE}, got {self.keys}")
        for option in ("row_tiles", "unroll"):
            if getattr(self, option) < 1:
                raise pass_error(op, f"vyre-tensor-cores: {option} must be positive, got "
                                     f"{getattr(self, option)}")
        device = device_profile(self.device)
        tiling = Tiling(self.keys, self.row_tiles, self.stage, self.prefetch, self.registers,
                        self.stage_q, self.skip_rescale, self.rolled, self.pieces, self.unroll)
        expand_skeletons(
            op, self.name, self.force, "vyre IR", lambda skeleton: tiling,
            lambda skeleton, tiling: problem(skeleton, device, tiling),
            lambda skeleton, tiling: expand(skeleton, device.accumulator_layout, tiling))
