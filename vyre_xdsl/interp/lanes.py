"""Lock-step (SIMT) execution state shared by this project's interpreter
functions.

A workgroup's lanes run in lock-step: every SSA value is either a numpy
scalar (the same for every lane: *uniform*) or a numpy vector with one entry
per lane. `LaneState.mask` says which lanes are active; `None` means all of
them. Values of inactive lanes are don't-care: they are never stored, never
loaded through, and merged away by `scf.if` / `scf.for`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
)
from xdsl.ir import Attribute

from vyre_xdsl.errors import VyreError
from vyre_xdsl.mma_layout import AccumulatorLayout

# `index` is a u32 on the device (docs/lowered-ir.md).
INDEX_DTYPE = np.dtype(np.uint32)

# The interpreter's subgroup: this many consecutive lanes of a workgroup (by
# linear lane id), or the whole workgroup when it is smaller. 32 is an NVIDIA
# warp; devices differ (lavapipe has 8), which MLIR allows: gpu.subgroup_size
# is only known at run time, so a correct kernel works with any of them.
SUBGROUP_SIZE = 32

_INT_DTYPES = {
    1: np.dtype(np.bool_),
    8: np.dtype(np.uint8),
    16: np.dtype(np.uint16),
    32: np.dtype(np.uint32),
    64: np.dtype(np.uint64),
}
_SIGNED = {
    np.dtype(np.uint8): np.dtype(np.int8),
    np.dtype(np.uint16): np.dtype(np.int16),
    np.dtype(np.uint32): np.dtype(np.int32),
    np.dtype(np.uint64): np.dtype(np.int64),
    np.dtype(np.bool_): np.dtype(np.bool_),
}


def dtype_of(type_attr: Attribute) -> np.dtype:
    """The numpy dtype that holds a value of the given scalar MLIR type."""
    if isinstance(type_attr, Float32Type):
        return np.dtype(np.float32)
    if isinstance(type_attr, IndexType):
        return INDEX_DTYPE
    if isinstance(type_attr, IntegerType):
        width = type_attr.width.data
        if width in _INT_DTYPES:
            return _INT_DTYPES[width]
    if isinstance(type_attr, Float64Type):
        return np.dtype(np.float64)
    if isinstance(type_attr, Float16Type):
        return np.dtype(np.float16)
    if isinstance(type_attr, BFloat16Type):
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    raise VyreError(f"the interpreter does not support values of type {type_attr}")


def signed(x):
    """The two's-complement signed view of an unsigned integer value."""
    return x.view(_SIGNED[x.dtype])


def is_uniform(x) -> bool:
    return not isinstance(x, np.ndarray) or x.ndim == 0


def select(cond, a, b):
    """Lane-wise select that never evaluates lanes it does not pick."""
    if is_uniform(cond):
        return a if cond else b
    return np.where(cond, a, b)


@dataclass
class LaneState:
    """The launch and the workgroup being executed."""

    workgroup_size: tuple[int, int, int]
    grid_size: tuple[int, int, int]
    lane_count: int = 0
    lane_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    subgroup_size: int = 0  # min(SUBGROUP_SIZE, lane_count)
    thread_id: tuple = ()
    block_id: tuple = (INDEX_DTYPE.type(0),) * 3
    block_dim: tuple = ()
    grid_dim: tuple = ()
    mask: np.ndarray | None = None  # None: every lane of the workgroup active
    ops_executed: int = 0
    # the kernel's recorded accumulator layout (KernelInfo.accumulator)
    accumulator: AccumulatorLayout | None = None

    def __post_init__(self) -> None:
        wx, wy, wz = self.workgroup_size
        self.lane_count = wx * wy * wz
        self.subgroup_size = min(SUBGROUP_SIZE, self.lane_count)
        lanes = np.arange(self.lane_count, dtype=np.int64)
        self.lane_ids = lanes
        u = INDEX_DTYPE.type

        def axis(values: np.ndarray, extent: int):
            # an extent-1 axis is uniform (a scalar 0), which keeps values
            # derived from it uniform and loops over it un-masked
            if extent == 1:
                return u(0)
            return values.astype(INDEX_DTYPE)

        self.thread_id = (
            axis(lanes % wx, wx),
            axis((lanes // wx) % wy, wy),
            axis(lanes // (wx * wy), wz),
        )
        self.block_dim = tuple(u(n) for n in self.workgroup_size)
        self.grid_dim = tuple(u(n) for n in self.grid_size)

    def start_workgroup(self, block: tuple[int, int, int]) -> None:
        self.block_id = tuple(INDEX_DTYPE.type(b) for b in block)
        self.mask = None

    def active(self) -> np.ndarray:
        """The active-lane mask as a full boolean vector."""
        if self.mask is None:
            return np.ones(self.lane_count, dtype=np.bool_)
        return self.mask

    def describe_block(self) -> str:
        return "(" + ", ".join(str(int(b)) for b in self.block_id) + ")"
