"""What the expansions onto subgroup matrices (vyre-tensor-cores,
vyre-latent-tensor-cores) share: the workgroup they run in, the check of a
device's accumulator layout, and the computation on a lane's elements of a
matrix where that layout puts them (vyre_xdsl.mma_layout)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith
from xdsl.dialects.builtin import f16
from xdsl.ir import SSAValue

from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import F16_SMALLEST
from vyre_xdsl.dialects.gpu_mma import (
    MMAMatrixType,
    SubgroupMmaConstantMatrixOp,
    SubgroupMmaExtractThreadLocalOp,
    SubgroupMmaInsertThreadLocalOp,
)
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.mma_layout import AccumulatorLayout

SUBGROUP = 32  # lanes of a subgroup: the H200's, and its matrices' layout
SUBGROUPS = 4  # subgroups of a workgroup
F16_BYTES = 2
LANES = SUBGROUP * SUBGROUPS


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

    def constant(self, b: IRBuilder, value: float, matrix: MMAMatrixType) -> SSAValue:
        element = b.f32(value)
        if matrix.element_type == f16:
            element = self.narrow(b, element)
        return b.emit(SubgroupMmaConstantMatrixOp(element, matrix)).results[0]

    @staticmethod
    def narrow(b: IRBuilder, value: SSAValue) -> SSAValue:
        """`value` rounded to f16 (nearest even)."""
        return b.emit(arith.TruncFOp(value, f16)).results[0]

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

    def row_total(self, b: IRBuilder, value: SSAValue,
                  combine: Callable[[IRBuilder, SSAValue, SSAValue], SSAValue]) -> SSAValue:
        """`value` combined over the lanes that share this lane's rows."""
        for mask in self.layout.masks:
            value = combine(b, b.shuffle_xor(value, mask, self.width), value)
        return value


def add(b: IRBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.addf(x, y)


def as_index(b: IRBuilder, value: int | SSAValue) -> SSAValue:
    return b.index(value) if isinstance(value, int) else value


def at_least_smallest_f16(b: IRBuilder, weight: SSAValue, may_be_zero: bool) -> SSAValue:
    """`weight`, raised to the smallest f16 where it would round to 0: a
    kept key's weight is never 0 (bounded_exp_arg), so an infinite value
    times it is infinite, as in the oracle, not NaN.  The exact 0 of a
    dropped key passes (`may_be_zero`); a NaN weight may not (a device
    compiler may make this a max), but the row's denominator, summed from
    the weight itself, carries it to the row's outputs."""
    smallest = b.f32(F16_SMALLEST)
    tiny = b.cmpf(weight, smallest, "olt")
    if may_be_zero:
        tiny = b.andi(tiny, b.cmpf(weight, b.f32(0.0), "ogt"))
    return b.select(tiny, smallest, weight)


def may_be_minus_inf(score: SSAValue) -> bool:
    return not isinstance(score.owner, vyre.BoundedScoreOp)
