"""`memref` on numpy arrays, with lock-step gathers and scatters.

Three kinds of memory:
- storage buffers (the kernel's arguments): the caller's flat numpy arrays,
  shared by every lane of every workgroup (zero-copy);
- workgroup memory (`memref.alloc` in memory space 3): one array per
  workgroup, shared by its lanes;
- private memory (any other `memref.alloc` / `memref.alloca`): one row per
  lane.
Loads gather and stores scatter under the active-lane mask; an access out of
bounds by an active lane raises VyreError.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects import memref
from xdsl.dialects.builtin import IntegerAttr, MemRefType
from xdsl.interpreter import impl, register_impls

from vyre_xdsl.dialects.constants import WORKGROUP_MEMORY_SPACE
from vyre_xdsl.errors import VyreError, op_error
from vyre_xdsl.interp.base import LaneFunctions
from vyre_xdsl.interp.lanes import LaneState, dtype_of, is_uniform


@dataclass(eq=False)
class Buffer:
    """A memref value: flat data plus its static shape.

    `data` is 1-D for shared memory (storage buffers, workgroup memory) and
    2-D `[lane, element]` for private memory."""

    data: np.ndarray
    shape: tuple[int, ...]
    private: bool
    name: str
    read_only: bool = False

    @property
    def size(self) -> int:
        return self.data.shape[-1]


def memory_space(type_attr: MemRefType) -> int | None:
    space = type_attr.memory_space
    if isinstance(space, IntegerAttr):
        return space.value.data
    return None


def _fill(dtype: np.dtype):
    # workgroup and private memory are undefined at launch: poison floats
    # with NaN so that a read before a write shows up in the output
    return np.nan if dtype.kind == "f" else 0


def gather(state: LaneState, op, buf: Buffer, index):
    """Each active lane's element `index` of `buf` (a lane vector, or a
    scalar where every lane reads the same shared element)."""
    mask = state.mask
    data = buf.data
    try:
        if not buf.private:
            if mask is None or is_uniform(index):
                return data[index]
            out = np.zeros(state.lane_count, dtype=data.dtype)
            out[mask] = data[index[mask]]
            return out
        lanes = state.lane_ids
        if mask is None:
            return data[lanes, index]
        out = np.zeros(state.lane_count, dtype=data.dtype)
        index = np.broadcast_to(index, lanes.shape)
        out[mask] = data[lanes[mask], index[mask]]
        return out
    except IndexError:
        raise out_of_bounds(state, op, buf, index, mask) from None


def out_of_bounds(state: LaneState, op, buf: Buffer, index, mask) -> VyreError:
    index = np.asarray(index)
    if mask is not None and index.ndim:
        index = index[mask]
    bad = index[index >= buf.size] if index.ndim else index
    return op_error(
        op,
        f"{op.name}: index {int(np.max(bad))} is out of bounds for "
        f"{buf.name} of {buf.size} elements "
        f"(workgroup {state.describe_block()})"
    )


def scatter(state: LaneState, op, buf: Buffer, index, value) -> None:
    """Each active lane's `value` into element `index` of `buf`."""
    if buf.read_only:
        raise VyreError(
            f"{op.name} writes to {buf.name}, which the kernel declares "
            f"access = \"read\" (docs/lowered-ir.md: read buffers are never "
            f"stored to)"
        )
    mask = state.mask
    data = buf.data
    try:
        if not buf.private:
            if is_uniform(index) and not is_uniform(value):
                # every active lane writes the same element: in lock-step
                # order the last active lane's value lands
                active = np.flatnonzero(state.active())
                data[index] = value[active[-1]]
            elif mask is None or is_uniform(index):
                data[index] = value
            else:
                data[index[mask]] = value if is_uniform(value) else value[mask]
            return
        lanes = state.lane_ids
        if mask is None:
            data[lanes, index] = value
        else:
            index = np.broadcast_to(index, lanes.shape)
            data[lanes[mask], index[mask]] = value if is_uniform(value) else value[mask]
    except IndexError:
        raise out_of_bounds(state, op, buf, index, mask) from None


def linear_index(buf: Buffer, indices):
    """The flat element index of `indices` into `buf` (one index: already
    flat)."""
    if len(indices) == 1:
        return indices[0]
    if len(indices) != len(buf.shape):
        raise VyreError(
            f"{buf.name} has rank {len(buf.shape)} but is indexed with "
            f"{len(indices)} indices"
        )
    flat = None
    for index, extent in zip(indices, buf.shape):
        if np.any(np.asarray(index) >= extent):
            raise VyreError(
                f"index {np.max(index)} out of bounds for a dimension of "
                f"size {extent} of {buf.name}"
            )
        flat = index if flat is None else flat * np.uint32(extent) + index
    return flat if flat is not None else np.uint32(0)


@register_impls
class MemRefFunctions(LaneFunctions):
    def _alloc(self, op, args, kind: str):
        type_attr = op.memref.type
        assert isinstance(type_attr, MemRefType)
        dtype = dtype_of(type_attr.get_element_type())
        shape = list(type_attr.get_shape())
        dynamic = iter(args)
        for i, extent in enumerate(shape):
            if extent < 0:
                size = next(dynamic)
                if not is_uniform(size):
                    raise VyreError(
                        f"{op.name} with a lane-varying dynamic size is not "
                        f"supported by the interpreter"
                    )
                shape[i] = int(size)
        count = int(np.prod(shape)) if shape else 1
        state = self.state
        shared = (
            kind == "alloc" and memory_space(type_attr) == WORKGROUP_MEMORY_SPACE
        )
        name = f"{'workgroup' if shared else 'private'} {op.name} : {type_attr}"
        if shared:
            data = np.full(count, _fill(dtype), dtype=dtype)
        else:
            data = np.full((state.lane_count, count), _fill(dtype), dtype=dtype)
        return (Buffer(data, tuple(shape), not shared, name),)

    @impl(memref.AllocOp)
    def run_alloc(self, interpreter, op: memref.AllocOp, args):
        return self._alloc(op, args, "alloc")

    @impl(memref.AllocaOp)
    def run_alloca(self, interpreter, op: memref.AllocaOp, args):
        return self._alloc(op, args, "alloca")

    @impl(memref.DeallocOp)
    def run_dealloc(self, interpreter, op, args):
        return ()

    @impl(memref.LoadOp)
    def run_load(self, interpreter, op: memref.LoadOp, args):
        buf: Buffer = args[0]
        index = args[1] if len(args) == 2 else linear_index(buf, args[1:])
        return (gather(self.state, op, buf, index),)

    @impl(memref.StoreOp)
    def run_store(self, interpreter, op: memref.StoreOp, args):
        buf: Buffer = args[1]
        index = args[2] if len(args) == 3 else linear_index(buf, args[2:])
        scatter(self.state, op, buf, index, args[0])
        return ()
