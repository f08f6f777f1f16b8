"""What the expansions onto subgroup matrices (vyre-tensor-cores,
vyre-latent-tensor-cores) share: the workgroup they run in, the check of a
device's accumulator layout, the computation on a lane's elements of a
matrix where that layout puts them (vyre_xdsl.mma_layout), and the copy of
a tile's rows into workgroup memory in 16x16 blocks: 16 bytes a lane where
the elements are 16-bit and the rows 16-byte aligned, else as C matrices."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import arith, vector
from xdsl.dialects.builtin import BFloat16Type, Float16Type, VectorType, f32, i32
from xdsl.ir import Attribute, SSAValue

from vyre_xdsl import recurrence
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import F16_SMALLEST, F32_MIN, MIN_POSITIVE
from vyre_xdsl.dialects.gpu_mma import (
    MMAMatrixType,
    MMAOperand,
    SubgroupMmaConstantMatrixOp,
    SubgroupMmaExtractThreadLocalOp,
    SubgroupMmaInsertThreadLocalOp,
    SubgroupMmaLoadMatrixOp,
    SubgroupMmaStoreMatrixOp,
)
from vyre_xdsl.errors import pass_error
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.mma_layout import TILE, AccumulatorLayout
from vyre_xdsl.value_range import bounds, is_zero_constant

SUBGROUP = 32  # lanes of a subgroup: the H200's, and its matrices' layout
SUBGROUPS = 4  # subgroups of a workgroup
HALF_BYTES = 2  # an f16 or bf16 element
BF16_BITS = -(1 << 16)  # 0xFFFF0000 as an i32: the bits of an f32 a bf16 keeps
F32_BYTES = 4  # an accumulator's element
LANES = SUBGROUP * SUBGROUPS
HALF_TYPES = (Float16Type, BFloat16Type)  # what the matrices multiply
# max |out - oracle| / max |oracle| of the matrix expansions, by input type
# (docs/performance.md): the 16-bit operands they read (f16: relative 2^-11
# each; bf16 keeps 8 bits, 2^-9) and the matrix unit's order of sums
MATRIX_TOLERANCE = {"f16": 4e-3, "bf16": 1.6e-2}
# the same for f32 operands split into bf16 parts, by number of parts
# (vyre-tensor-cores' `pieces`): two keep an f32 to 2^-15 of it, three
# exactly, and the products of the smallest parts are left out
SPLIT_TOLERANCE = {2: 3e-4, 3: 1e-5}
# a lane's share of a staged 16x16 block of 16-bit elements: 16 bytes, one
# vector load and store where a C matrix's load and store take several
COPY_HALVES = TILE * TILE // SUBGROUP
# a matrix load from workgroup memory reads eight rows of 16 bytes at once;
# they fall into distinct banks where the rows are an odd number of 16
# bytes apart, else two or more of them wait for the same bank
BANK_ROW_BYTES = 16


def tile_matrix(element, use: MMAOperand) -> MMAMatrixType:
    """The subgroup's 16x16 matrix of `element`s for `use` in a product."""
    return MMAMatrixType([TILE, TILE], element, use)


def conflict_free_stride(width: int, element_bytes: int = HALF_BYTES) -> int:
    """The row stride, in elements, for a workgroup array of rows `width`
    elements long that B operands are loaded from (staged K and V tiles):
    `width`, padded by 16 bytes where its rows would be an even number of
    16 bytes apart."""
    row_bytes = width * element_bytes
    if row_bytes % BANK_ROW_BYTES or (row_bytes // BANK_ROW_BYTES) % 2:
        return width
    return width + BANK_ROW_BYTES // element_bytes


def buffer_types(buffers) -> str:
    """`buffers` named with their element types, for a refusal."""
    return ", ".join(f"{b.name_hint} {b.type.element_type}" for b in buffers)


def half_problem(buffers, shape_of_device) -> str | None:
    """Why `buffers` cannot be a matrix expansion's 16-bit inputs and
    output on a device whose cooperative-matrix shapes for an element type
    `shape_of_device(element)` gives; None if they can: all f16 or all
    bf16, with 16x16x16 products of that type."""
    buffers = list(dict.fromkeys(buffers))
    elements = {buffer.type.element_type for buffer in buffers}
    if len(elements) > 1 or not isinstance(next(iter(elements)), HALF_TYPES):
        return (f"the matrices' operands must be all f16 or all bf16, not "
                f"{buffer_types(buffers)}")
    (element,) = elements
    if (TILE, TILE, TILE) not in shape_of_device(element):
        return f"the device has no 16x16x16 {element} cooperative matrices"
    return None


def expand_skeletons(module, pass_name: str, force: bool, where: str,
                     tiling_of: Callable, problem_of: Callable, expand_one: Callable) -> None:
    """A matrix expansion pass's loop: expand each skeleton of `module`
    whose `problem_of(skeleton, tiling_of(skeleton))` is None; with
    `force`, a module without skeletons (`where` says what IR it takes)
    or a skeleton that does not qualify is an error naming why."""
    skeletons = [s for s in module.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]
    if force and not skeletons:  # e.g. after vyre-to-gpu: nothing to report on
        raise pass_error(module, f"{pass_name}: force=true, but the module holds no "
                                 f"vyre.tiled_online_softmax to expand; run it on {where}, "
                                 f"before vyre-to-gpu")
    for skeleton in skeletons:
        tiling = tiling_of(skeleton)
        reason = problem_of(skeleton, tiling)
        if reason is None:
            expand_one(skeleton, tiling)
        elif force:
            raise pass_error(skeleton, f"{pass_name}: this skeleton cannot run on subgroup "
                                       f"matrix ops: {reason}")


def layout_problem(layout: AccumulatorLayout | None) -> str | None:
    """Why an expansion cannot compute on the elements of a device's
    accumulators laid out as `layout`; None if it can."""
    if layout is None:
        return "the device profile has no accumulator layout (no cooperative matrices)"
    reason = layout.problem()
    if reason is not None or layout.lanes != SUBGROUP:
        return (f"the device's accumulator layout does not suit the expansion: "
                f"{reason or f'{layout.lanes} lanes, not {SUBGROUP}'}")
    return None


class MatrixElements:
    """A lane's elements of the subgroup's matrices, where `layout` puts
    them; `width` is the subgroup's shuffle width."""

    layout: AccumulatorLayout
    width: SSAValue
    half: Attribute  # the f16 or bf16 of the products' inputs

    def constant(self, b: IRBuilder, value: float, matrix: MMAMatrixType) -> SSAValue:
        element = b.f32(value)
        if isinstance(matrix.element_type, HALF_TYPES):
            element = self.narrow(b, element)
        return b.emit(SubgroupMmaConstantMatrixOp(element, matrix)).results[0]

    def narrow(self, b: IRBuilder, value: SSAValue) -> SSAValue:
        """`value` rounded to the inputs' 16-bit type (nearest even)."""
        return b.emit(arith.TruncFOp(value, self.half)).results[0]

    def weight_operand(self, b: IRBuilder, weight: SSAValue,
                       may_be_zero: bool) -> tuple[SSAValue, SSAValue]:
        """A tile's f32 `weight` as P V reads it (at_least_smallest, then in
        the 16-bit type) and as the row's denominator sums it.  bf16 keeps
        the f32's top 16 bits, which every device converts exactly in one
        step (rounding them to nearest took ten integer instructions a
        weight, docs/performance.md), and the denominator sums the weight
        so cut, so that both weigh each key alike: the cut alone moved
        every output toward 0.  f16 rounds to nearest (the devices'
        conversion), the denominator summing the f32 weight."""
        raised = self.at_least_smallest(b, weight, may_be_zero)
        if not isinstance(self.half, BFloat16Type):
            return weight, self.narrow(b, raised)
        bits = b.emit(arith.BitcastOp(raised, i32)).results[0]
        cut = b.emit(arith.BitcastOp(b.andi(bits, b.i32(BF16_BITS)), f32)).results[0]
        return cut, self.narrow(b, cut)

    def at_least_smallest(self, b: IRBuilder, weight: SSAValue, may_be_zero: bool) -> SSAValue:
        """`weight`, raised to the smallest value of the 16-bit type where
        it would round to 0 (f16's smallest subnormal; bf16's smallest
        normal, since a device may flush f32 subnormals): a kept key's
        weight is never 0 (bounded_exp_arg), so an infinite value times it
        is infinite, as in the oracle, not NaN.  The exact 0 of a dropped
        key passes (`may_be_zero`); a NaN weight may not (a device compiler
        may make this a max), but the row's denominator, summed from the
        weight itself, carries it to the row's outputs."""
        value = F16_SMALLEST if isinstance(self.half, Float16Type) else MIN_POSITIVE
        kept = weight
        if may_be_zero and isinstance(weight.owner, arith.SelectOp) \
                and is_zero_constant(weight.owner.lhs):  # a dropped key's 0, else this
            kept = weight.owner.rhs
        if bounds(kept)[0] >= value:  # exp(-80) and more: never below it
            return weight
        smallest = b.f32(value)
        tiny = b.cmpf(weight, smallest, "olt")
        if may_be_zero:
            tiny = b.andi(tiny, b.cmpf(weight, b.f32(0.0), "ogt"))
        return b.select(tiny, smallest, weight)

    def elements(self, b: IRBuilder, matrix: SSAValue) -> list[SSAValue]:
        """This lane's elements of an f32 accumulator matrix."""
        return [b.emit(SubgroupMmaExtractThreadLocalOp(matrix, b.index(i))).results[0]
                for i in range(self.layout.length)]

    def map_elements(self, b: IRBuilder, matrix: SSAValue,
                     fn: Callable[[IRBuilder, SSAValue, int], SSAValue],
                     result: MMAMatrixType | None = None) -> SSAValue:
        """`fn(element, its row slot)` of each of this lane's elements of
        `matrix`, as a matrix of type `result` (default: matrix's)."""
        values = [fn(b, value, slot)
                  for value, slot in zip(self.elements(b, matrix), self.layout.slots,
                                         strict=True)]
        return self.assemble(b, values, result or matrix.type)

    def assemble(self, b: IRBuilder, values: list[SSAValue],
                 matrix: MMAMatrixType) -> SSAValue:
        built = self.constant(b, 0.0, matrix)
        for i, value in enumerate(values):
            built = b.emit(SubgroupMmaInsertThreadLocalOp(value, built, b.index(i))).results[0]
        return built

    def rescaled(self, b: IRBuilder, matrices: list[SSAValue],
                 rescale: list[SSAValue], skip: bool) -> list[SSAValue]:
        """A row block's O `matrices`, each row times its rescale (`rescale`
        by row slot); with `skip`, in a branch that the subgroup skips
        where every one of its rows keeps its running max (each rescale is
        1): x * 1 is x, so the result is the same, bit for bit, without
        the products."""
        def scaled(b: IRBuilder) -> list[SSAValue]:
            return [self.map_elements(b, o, lambda b, x, slot: b.mulf(rescale[slot], x))
                    for o in matrices]

        if not skip:
            return scaled(b)
        one = b.f32(1.0)
        moved = None
        for scale in rescale:  # une: a NaN rescale moved too
            flag = b.cmpf(scale, one, "une")
            moved = flag if moved is None else b.ori(moved, flag)
        # any lane's, so the branch is uniform; lanes that share rows agree
        moved = self.any_lane(b, b.select(moved, b.i32(1), b.i32(0)), self.layout.masks)
        return b.if_else(b.cmpi(moved, b.i32(0), "ne"), scaled, lambda b: matrices)

    def any_lane(self, b: IRBuilder, flag: SSAValue, agreed: tuple[int, ...] = ()) -> SSAValue:
        """The i32 `flag` or-ed over the subgroup's lanes (but over the xor
        masks in `agreed`, whose partners hold the same flag)."""
        for lanes in _powers_of_two_below(SUBGROUP):
            if lanes not in agreed:
                flag = b.ori(flag, b.shuffle_xor(flag, lanes, self.width))
        return flag

    def tile_maxima(self, b: IRBuilder, blocks: list[list[SSAValue]]) -> list[SSAValue]:
        """Each row slot's max over this lane's scores in `blocks` (lists
        of a lane's elements), combined over the lanes that share its rows."""
        maxima = [b.f32(F32_MIN)] * self.layout.row_count
        for block in blocks:
            for s, slot in zip(block, self.layout.slots, strict=True):
                maxima[slot] = recurrence.max_step(b, s, maxima[slot])
        return [self.row_total(b, m, recurrence.max_step) for m in maxima]

    def row_total(self, b: IRBuilder, value: SSAValue,
                  combine: Callable[[IRBuilder, SSAValue, SSAValue], SSAValue]) -> SSAValue:
        """`value` combined over the lanes that share this lane's rows."""
        for mask in self.layout.masks:
            value = combine(b, b.shuffle_xor(value, mask, self.width), value)
        return value


def copies_by_lanes(element: Attribute, *row_lengths: int) -> bool:
    """Whether blocks of `element`s from and to rows of these lengths (in
    elements) are copied by the lanes 16 bytes each (`lane_place`): 16-bit
    elements, every row 16-byte aligned."""
    return isinstance(element, HALF_TYPES) and all(n % COPY_HALVES == 0 for n in row_lengths)


def lane_place(b: IRBuilder, sublane: SSAValue) -> tuple[SSAValue, SSAValue]:
    """The row and first column of the 16 bytes of a 16x16 block of 16-bit
    elements that lane `sublane` of a subgroup copies: a half row each, the
    first 16 lanes the rows' first halves, so that each quarter of the
    subgroup stores rows an odd number of 16 bytes apart (padded staged
    rows, `conflict_free_stride`) in distinct banks."""
    return (b.remui(sublane, b.index(TILE)),
            b.muli(b.divui(sublane, b.index(TILE)), b.index(COPY_HALVES)))


@dataclass
class StagedBlock:
    """A 16x16 block of a tile that the workgroup stages: loaded from
    `source` (rows `width` apart) at `at_source`, stored at `at` of a copy
    in `staged` (rows `stride` apart).  With `place` (`lane_place`) each
    lane copies its 16 bytes as a vector, else the subgroup copies the
    block as a C matrix of its element type (exact)."""

    source: SSAValue
    at_source: SSAValue
    width: int
    staged: SSAValue
    at: SSAValue
    stride: int
    place: tuple[SSAValue, SSAValue] | None = None
    value: SSAValue | None = None  # loaded
    guard: SSAValue | None = None  # stored only where this holds

    def _lane_offset(self, b: IRBuilder, row_length: int) -> SSAValue:
        row, column = self.place
        return b.addi(b.muli(row, b.index(row_length)), column)

    def load(self, b: IRBuilder) -> SSAValue:
        element = self.source.type.element_type
        if self.place is None:
            return b.emit(SubgroupMmaLoadMatrixOp(
                self.source, [self.at_source], tile_matrix(element, MMAOperand.C),
                self.width)).results[0]
        at = b.addi(self.at_source, self._lane_offset(b, self.width))
        return b.emit(vector.LoadOp(self.source, [at],
                                    VectorType(element, [COPY_HALVES]))).results[0]

    def store(self, b: IRBuilder, value: SSAValue, offset: SSAValue) -> None:
        """`value` (a `load`, or a C matrix where `place` is None) into
        the copy at `offset` of `staged`."""
        at = b.addi(offset, self.at)
        if self.place is None:
            b.emit(SubgroupMmaStoreMatrixOp(value, self.staged, [at], self.stride))
            return
        b.emit(vector.StoreOp(value, self.staged,
                              [b.addi(at, self._lane_offset(b, self.stride))]))


def spread_blocks(b: IRBuilder, count: int, group: SSAValue,
                  block: Callable[[IRBuilder, SSAValue], StagedBlock],
                  subgroups: int = SUBGROUPS) -> list[StagedBlock]:
    """`count` blocks of a tile spread over the workgroup's `subgroups`
    subgroups in turns, `block(b, n)` giving block n: this subgroup's
    (`group`), loaded now.  In a last turn that only some subgroups have,
    the others load the last block too (a load inside a branch would
    wait where the store is) and `stage_blocks` stores it under its
    guard."""
    blocks = []
    for turn in range(-(-count // subgroups)):
        n = b.addi(b.index(turn * subgroups), group)
        guard = None
        if (turn + 1) * subgroups > count:
            guard = b.cmpi(n, b.index(count), "ult")
            n = b.minui(n, b.index(count - 1))
        mine = block(b, n)
        mine.value, mine.guard = mine.load(b), guard
        blocks.append(mine)
    return blocks


def stage_blocks(b: IRBuilder, blocks: list[StagedBlock],
                 store: Callable[[IRBuilder, StagedBlock, SSAValue], None]) -> None:
    """`spread_blocks`' blocks stored by `store(b, block, its value)`, a
    guarded one where its guard holds."""
    for block in blocks:
        if block.guard is None:
            store(b, block, block.value)
        else:
            b.if_then(block.guard, lambda b, block=block: store(b, block, block.value))


def _powers_of_two_below(n: int) -> list[int]:
    return [1 << i for i in range((n - 1).bit_length())]


def add(b: IRBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.addf(x, y)


def as_index(b: IRBuilder, value: int | SSAValue) -> SSAValue:
    return b.index(value) if isinstance(value, int) else value


def may_be_minus_inf(score: SSAValue) -> bool:
    return not isinstance(score.owner, vyre.BoundedScoreOp)
