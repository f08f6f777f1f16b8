"""Which element of a subgroup's accumulator matrix each lane holds.

`gpu.subgroup_mma_extract_thread_local %m[i]` gives the calling lane's
element i of `m`; which row and column that is, SPIR-V leaves to the device
(SPV_KHR_cooperative_matrix: "implementation-dependent").  A kernel that
computes on a matrix's elements in registers (vyre-tensor-cores: the
softmax of S = Q Kᵀ, the rescaling of O) must know it, so a device profile
carries it, read from the device by running tools/mma_kernels.py's layout
kernel, and a kernel records the layout it was compiled for
(`#vyre.accumulator`, on its `vyre.launch`): the Vulkan runtime refuses a
device whose layout differs, and the interpreter executes the recorded
one.

What the kernels rely on, checked by `problem()`:

- the lanes' shares cover the matrix, each element once;
- a lane's elements lie in `row_count` rows, and element i lies in the
  lane's row `slots[i]` (rows in ascending order), the same i for every
  lane: a lane keeps one running max and denominator a row;
- the lanes that hold a row are the lane's partners under xor by the
  `masks` (a row's max and sum combine with one gpu.shuffle xor a mask).

Where the device's f16 A-operand ("AOp") matrix holds, in every lane, the
same elements as its accumulator, only in another order, the layout
records that order (`operand_a`): a lane then builds the A operand of
P V from its own elements of P, with no trip through workgroup memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

TILE = 16  # the accumulator's rows and columns (16x16, f32)


@dataclass(frozen=True)
class AccumulatorLayout:
    """`rows[l][i]`, `cols[l][i]`: where lane l's element i of a TILE x TILE
    accumulator is."""

    rows: tuple[tuple[int, ...], ...]
    cols: tuple[tuple[int, ...], ...]
    # element j of a lane's share of an f16 A-operand matrix is its
    # accumulator element operand_a[j] (None: unknown, or not so)
    operand_a: tuple[int, ...] | None = None

    @staticmethod
    def from_positions(positions: list[int] | tuple[int, ...], lanes: int,
                       operand_a: tuple[int, ...] | None = None) -> AccumulatorLayout:
        """From the flat `row * TILE + col` of each lane's elements, lane by
        lane (what the layout kernel writes)."""
        table = _shares(positions, lanes)
        return AccumulatorLayout(tuple(tuple(p // TILE for p in t) for t in table),
                                 tuple(tuple(p % TILE for p in t) for t in table),
                                 None if operand_a is None else tuple(operand_a))

    def with_operand(self, positions: list[int] | tuple[int, ...]) -> AccumulatorLayout:
        """This layout with `operand_a` read from an A-operand matrix's
        `positions` (as from_positions'), where each of its elements is, in
        every lane, the same element index of the accumulator; else
        without."""
        order = []
        for share, mine in zip(_shares(positions, self.lanes), self.lane_positions(),
                               strict=True):
            order.append(tuple(mine.index(p) if p in mine else -1 for p in share))
        uniform = len(set(order)) == 1 and sorted(order[0]) == list(range(self.length))
        return replace(self, operand_a=order[0] if uniform else None)

    def lane_positions(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(r * TILE + c for r, c in zip(rows, cols, strict=True))
                     for rows, cols in zip(self.rows, self.cols, strict=True))

    def operand_position(self, lane: int, j: int) -> tuple[int, int]:
        """The row and column of lane `lane`'s element j of an A operand."""
        assert self.operand_a is not None
        i = self.operand_a[j]
        return self.rows[lane][i], self.cols[lane][i]

    def fits(self, device: AccumulatorLayout | None) -> bool:
        """Whether a kernel compiled for this layout computes right on a
        device with layout `device` (it relies on `operand_a` only where it
        records one)."""
        return device is not None and (self.rows, self.cols) == (device.rows, device.cols) \
            and self.operand_a in (None, device.operand_a)

    def positions(self) -> tuple[int, ...]:
        return tuple(p for share in self.lane_positions() for p in share)

    @property
    def lanes(self) -> int:
        return len(self.rows)

    @property
    def length(self) -> int:
        """Elements a lane holds."""
        return len(self.rows[0])

    def lane_rows(self, lane: int) -> tuple[int, ...]:
        return tuple(sorted(set(self.rows[lane])))

    @property
    def row_count(self) -> int:
        return len(self.lane_rows(0))

    @property
    def slots(self) -> tuple[int, ...]:
        """Element i's row among the lane's `row_count` rows."""
        return tuple(self.lane_rows(0).index(r) for r in self.rows[0])

    @cached_property
    def masks(self) -> tuple[int, ...]:
        """Xor masks (powers of two) whose partners share the lane's rows."""
        sharing = {lane for lane in range(self.lanes)
                   if self.lane_rows(lane) == self.lane_rows(0)}
        return tuple(1 << bit for bit in range(self.lanes.bit_length() - 1)
                     if (1 << bit) in sharing)

    @cached_property
    def lane_bits(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """What each bit of a lane's index adds to the row and to the
        column of every one of its elements (rows[l][i] = rows[0][i] + the
        sum of row weights of l's set bits, columns likewise), so that a
        lane computes where its elements are; None for a layout not of
        that form."""
        weights = []
        for table in (self.rows, self.cols):
            bits = tuple(table[1 << k][0] - table[0][0] for k in range(self.lanes.bit_length() - 1))
            for lane in range(self.lanes):
                base = sum(w for k, w in enumerate(bits) if lane >> k & 1)
                if any(x != x0 + base for x, x0 in zip(table[lane], table[0], strict=True)):
                    return None
            weights.append(bits)
        return weights[0], weights[1]

    def problem(self) -> str | None:
        """Why kernels cannot compute on this layout's elements; None if
        they can."""
        lengths = {len(r) for r in self.rows} | {len(c) for c in self.cols}
        if len(lengths) != 1 or len(self.cols) != self.lanes:
            return "the lanes hold different numbers of elements"
        if sorted(self.positions()) != list(range(TILE * TILE)):
            return "the lanes' elements do not cover the matrix once each"
        if self.operand_a is not None and sorted(self.operand_a) != list(range(self.length)):
            return (f"operand_a {list(self.operand_a)} does not name each of a lane's "
                    f"{self.length} elements once")
        for lane in range(self.lanes):
            rows = self.lane_rows(lane)
            if tuple(rows.index(r) for r in self.rows[lane]) != self.slots:
                return (f"lane {lane} keeps its rows' elements at other positions "
                        f"than lane 0")
            group = {lane}
            for mask in self.masks:
                group |= {other ^ mask for other in group}
            holders = {other for other in range(self.lanes)
                       if set(self.lane_rows(other)) & set(rows)}
            if holders != group or any(self.lane_rows(o) != rows for o in group):
                return (f"the lanes that hold lane {lane}'s rows are not its "
                        f"partners under xor")
        return None


def _shares(positions, lanes: int) -> list[tuple[int, ...]]:
    share = len(positions) // lanes
    return [tuple(int(p) for p in positions[lane * share:(lane + 1) * share])
            for lane in range(lanes)]
