"""The subgroup matrix ops (dialects/gpu_mma.py), for one workgroup in
lock-step.

A `!gpu.mma_matrix` value is one matrix per subgroup of the workgroup
(`SubgroupMatrices`): how hardware spreads a matrix over its lanes is
hidden from the program, so the interpreter keeps it whole.  The ops are
subgroup-collective, as `gpu.shuffle`: every lane of a subgroup that runs
one runs it with the same indices (VyreError otherwise, where a GPU would
be undefined); a subgroup none of whose lanes is active skips it.

`gpu.subgroup_mma_extract/insert_thread_local` read and write a lane's
elements where the kernel's recorded accumulator layout
(`#vyre.accumulator`, vyre_xdsl.mma_layout) puts them, an A operand's by
its `operand_a`.

Numerics: D = A * B + C with A's and B's elements converted exactly to f32
(an f16 is an f32 exactly, and so is the product of two), C's too, and the
sum accumulated in f32 in numpy's order; hardware may sum in another order
or keep more bits, which the tolerance of tests/test_mma.py allows.  An f16
accumulator is rounded to f16 once, at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.interpreter import impl, register_impls

from vyre_xdsl.dialects.gpu_mma import (
    MMAElementwise,
    MMAMatrixType,
    MMAOperand,
    SubgroupMmaComputeOp,
    SubgroupMmaConstantMatrixOp,
    SubgroupMmaElementwiseOp,
    SubgroupMmaExtractThreadLocalOp,
    SubgroupMmaInsertThreadLocalOp,
    SubgroupMmaLoadMatrixOp,
    SubgroupMmaStoreMatrixOp,
)
from vyre_xdsl.errors import VyreError
from vyre_xdsl.interp.base import LaneFunctions
from vyre_xdsl.interp.lanes import dtype_of
from vyre_xdsl.interp.memref import Buffer, linear_index
from vyre_xdsl.mma_layout import TILE


# an f16 operation computed in f32 and rounded once is the f16 operation
# (f32 holds the exact sum and product of two f16s, and has the 2p + 2 bits
# that keep a quotient's double rounding exact)
_ELEMENTWISE = {
    MMAElementwise.ADDF: np.add,
    MMAElementwise.SUBF: np.subtract,
    MMAElementwise.MULF: np.multiply,
    MMAElementwise.DIVF: np.divide,
    MMAElementwise.NEGATEF: np.negative,
}


@dataclass(eq=False)
class SubgroupMatrices:
    """`tiles[s]`: the matrix of subgroup s (rows x columns)."""

    tiles: np.ndarray

    def __array__(self, *args, **kwargs):
        # what scf.if/scf.for do to merge the values of lanes that diverged
        raise VyreError(
            "a !gpu.mma_matrix value is merged lane by lane after lanes took "
            "different paths through scf.if/scf.for; the matrix ops are "
            "collective, so branch and loop around them uniformly over the "
            "subgroup"
        )


def merge_by_subgroup(state, cond: np.ndarray, taken: SubgroupMatrices,
                      not_taken: SubgroupMatrices) -> SubgroupMatrices:
    """The matrices of an scf.if whose lanes took branches by `cond`: each
    subgroup's from the branch its active lanes took, which must be one (the
    matrix ops are collective)."""
    size = state.subgroup_size
    tiles = not_taken.tiles.copy()
    lanes, active = state.lane_ids, state.active()
    cond = np.broadcast_to(cond, lanes.shape)
    for s in range(len(tiles)):
        running = active & ((lanes // size) == s)
        took = np.unique(cond[running])
        if len(took) > 1:
            raise VyreError(
                f"scf.if: the lanes of subgroup {s} of workgroup {state.describe_block()} "
                f"took different branches, which yield !gpu.mma_matrix values; the "
                f"matrix ops are collective, so branch around them uniformly over "
                f"the subgroup")
        if len(took) and took[0]:
            tiles[s] = taken.tiles[s]
    return SubgroupMatrices(tiles)


def _tile_offsets(rows: int, cols: int, lead: int, transpose: bool) -> np.ndarray:
    """Element (r, c)'s offset from the tile's first element in memory."""
    r, c = np.ogrid[:rows, :cols]
    return c * lead + r if transpose else r * lead + c


@register_impls
class MmaFunctions(LaneFunctions):
    def _per_subgroup(self, op, values, what: str = "indices") -> dict:
        """Subgroup -> its lanes' one value of `values` (a tile's flat
        index, a constant), for each subgroup with an active lane."""
        state = self.state
        size = state.subgroup_size
        subgroups = -(-state.lane_count // size)
        lanes = state.lane_ids
        active = state.active()
        values = np.broadcast_to(np.asarray(values), lanes.shape)
        result = {}
        for s in range(subgroups):
            members = (lanes // size) == s
            running = active & members
            if not running.any():
                continue
            if not running[members].all():
                raise VyreError(
                    f"{op.name}: only {int(running.sum())} of the "
                    f"{int(members.sum())} lanes of subgroup {s} of workgroup "
                    f"{state.describe_block()} run it; every lane of a subgroup "
                    f"must run the matrix ops together (they are collective)"
                )
            seen = np.unique(values[running])
            if len(seen) != 1:
                raise VyreError(
                    f"{op.name}: the lanes of subgroup {s} of workgroup "
                    f"{state.describe_block()} pass different {what} "
                    f"({', '.join(str(v) for v in seen[:4])}...); the operands "
                    f"of a subgroup's matrix op are uniform over the subgroup"
                )
            result[s] = seen[0]
        return result

    def _offsets(self, op, buf: Buffer, base: int, matrix: MMAMatrixType) -> np.ndarray:
        rows, cols = matrix.get_shape()
        offsets = base + _tile_offsets(rows, cols, op.leadDimension.value.data,
                                       op.transpose is not None)
        if buf.private:
            raise VyreError(
                f"{op.name}: {buf.name} is private to each lane; the matrix ops "
                f"read and write storage buffers and workgroup memory"
            )
        if offsets.max() >= buf.size:
            raise VyreError(
                f"{op.name}: the {rows}x{cols} tile at element {base} (leading "
                f"dimension {op.leadDimension.value.data}) reaches element "
                f"{int(offsets.max())} of {buf.name}, which has {buf.size}"
            )
        return offsets

    def _empty(self, matrix: MMAMatrixType) -> np.ndarray:
        subgroups = -(-self.state.lane_count // self.state.subgroup_size)
        # a subgroup that skips a load or constant has no matrix: NaN shows it
        return np.full((subgroups, *matrix.get_shape()), np.nan,
                       dtype_of(matrix.element_type))

    @impl(SubgroupMmaLoadMatrixOp)
    def run_load(self, interpreter, op: SubgroupMmaLoadMatrixOp, args):
        buf, *indices = args
        matrix = op.res.type
        tiles = self._empty(matrix)
        for s, base in self._per_subgroup(op, linear_index(buf, indices)).items():
            tiles[s] = buf.data[self._offsets(op, buf, int(base), matrix)]
        return (SubgroupMatrices(tiles),)

    @impl(SubgroupMmaStoreMatrixOp)
    def run_store(self, interpreter, op: SubgroupMmaStoreMatrixOp, args):
        value, buf, *indices = args
        if buf.read_only:
            raise VyreError(
                f"{op.name} writes to {buf.name}, which the kernel declares "
                f"access = \"read\" (docs/lowered-ir.md: read buffers are never "
                f"stored to)"
            )
        for s, base in self._per_subgroup(op, linear_index(buf, indices)).items():
            buf.data[self._offsets(op, buf, int(base), op.src.type)] = value.tiles[s]
        return ()

    @impl(SubgroupMmaComputeOp)
    def run_compute(self, interpreter, op: SubgroupMmaComputeOp, args):
        a, b, c = (m.tiles.astype(np.float32) for m in args)
        d = np.matmul(a, b) + c  # f32 products (exact) and sums
        return (SubgroupMatrices(d.astype(dtype_of(op.res.type.element_type))),)

    @impl(SubgroupMmaConstantMatrixOp)
    def run_constant(self, interpreter, op: SubgroupMmaConstantMatrixOp, args):
        (value,) = args
        tiles = self._empty(op.res.type)
        for s, element in self._per_subgroup(op, value, "values").items():
            tiles[s] = element
        return (SubgroupMatrices(tiles),)

    @impl(SubgroupMmaElementwiseOp)
    def run_elementwise(self, interpreter, op: SubgroupMmaElementwiseOp, args):
        result = _ELEMENTWISE[op.opType.data](*(m.tiles.astype(np.float32) for m in args))
        return (SubgroupMatrices(result.astype(dtype_of(op.res.type.element_type))),)

    def _lane_elements(self, op, index) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The subgroup, row and column of each running lane's element
        `index`, by the kernel's accumulator layout (of an A operand: its
        `operand_a`)."""
        state, layout = self.state, self.state.accumulator
        if layout is None:
            raise VyreError(
                f"{op.name}: the kernel records no accumulator layout (its "
                f"vyre.launch has no `accumulator`), so which element a lane "
                f"holds is unknown; record the layout it was compiled for")
        matrix = op.matrix.type
        if matrix.get_shape() != (TILE, TILE) or layout.lanes != state.subgroup_size:
            raise VyreError(
                f"{op.name}: the recorded layout is of a {TILE}x{TILE} matrix over "
                f"{layout.lanes} lanes; this is a {matrix.get_shape()} "
                f"matrix over subgroups of {state.subgroup_size}")
        operand = matrix.use == MMAOperand.A
        if (operand and layout.operand_a is None) or matrix.use == MMAOperand.B:
            raise VyreError(
                f"{op.name}: the kernel's recorded layout says where a lane's elements "
                f"of an accumulator{' and an A operand' if layout.operand_a else ''} "
                f"are, not of a \"{matrix.use}\" matrix; record its `operand_a`")
        subgroups = self._per_subgroup(op, index)  # one index a subgroup
        (position, *others) = {int(i) for i in subgroups.values()} or {0}
        if others or not 0 <= position < layout.length:
            raise VyreError(f"{op.name}: a lane holds elements 0 to {layout.length - 1}, "
                            f"and every lane takes the same one; not element(s) "
                            f"{sorted([position, *others])}")
        if operand:
            position = layout.operand_a[position]
        lanes = state.lane_ids[np.isin(state.lane_ids // state.subgroup_size,
                                       list(subgroups))]
        within = lanes % state.subgroup_size
        rows = np.array([r[position] for r in layout.rows])[within]
        cols = np.array([c[position] for c in layout.cols])[within]
        return lanes, rows, cols

    @impl(SubgroupMmaExtractThreadLocalOp)
    def run_extract(self, interpreter, op: SubgroupMmaExtractThreadLocalOp, args):
        matrix, index = args
        lanes, rows, cols = self._lane_elements(op, index)
        result = np.zeros(self.state.lane_count, matrix.tiles.dtype)
        result[lanes] = matrix.tiles[lanes // self.state.subgroup_size, rows, cols]
        return (result,)

    @impl(SubgroupMmaInsertThreadLocalOp)
    def run_insert(self, interpreter, op: SubgroupMmaInsertThreadLocalOp, args):
        value, matrix, index = args
        lanes, rows, cols = self._lane_elements(op, index)
        values = np.broadcast_to(np.asarray(value), self.state.lane_ids.shape)
        tiles = matrix.tiles.copy()
        tiles[lanes // self.state.subgroup_size, rows, cols] = values[lanes]
        return (SubgroupMatrices(tiles),)
