"""The `gpu` ops of a lowered kernel, for one workgroup in lock-step.

Subgroups are runs of `LaneState.subgroup_size` consecutive lanes (32, or
the whole workgroup when it is smaller; see lanes.py). `gpu.shuffle` reads
within the lane's own subgroup; where the source lane is outside it, at or
beyond `width`, or inactive, `valid` is false and the lane keeps its own
value (MLIR leaves that value unspecified)."""

from __future__ import annotations

import numpy as np
from xdsl.dialects import gpu
from xdsl.interpreter import ReturnedValues, impl, impl_terminator, register_impls

from vyre_xdsl.dialects.gpu_shuffle import ShuffleMode, ShuffleOp
from vyre_xdsl.errors import op_error
from vyre_xdsl.interp.base import LaneFunctions
from vyre_xdsl.interp.lanes import INDEX_DTYPE, is_uniform

_AXIS = {"x": 0, "y": 1, "z": 2}


def _lane_state(field: str):
    """The impl of a gpu op that reads `field` of the LaneState along its
    dimension."""

    def run(self, interpreter, op, args):
        return (getattr(self.state, field)[self._axis(op)],)

    return run


@register_impls
class GpuFunctions(LaneFunctions):
    def _axis(self, op) -> int:
        axis = self.cache.get(op)
        if axis is None:
            axis = self.cache[op] = _AXIS[op.dimension.data.value]
        return axis

    run_thread_id = impl(gpu.ThreadIdOp)(_lane_state("thread_id"))
    run_block_id = impl(gpu.BlockIdOp)(_lane_state("block_id"))
    run_block_dim = impl(gpu.BlockDimOp)(_lane_state("block_dim"))
    run_grid_dim = impl(gpu.GridDimOp)(_lane_state("grid_dim"))

    @impl(gpu.GlobalIdOp)
    def run_global_id(self, interpreter, op, args):
        axis = self._axis(op)
        state = self.state
        return (
            state.block_id[axis] * state.block_dim[axis] + state.thread_id[axis],
        )

    @impl(gpu.SubgroupSizeOp)
    def run_subgroup_size(self, interpreter, op, args):
        return (INDEX_DTYPE.type(self.state.subgroup_size),)

    @impl(ShuffleOp)
    def run_shuffle(self, interpreter, op: ShuffleOp, args):
        value, offset, width = args
        state = self.state
        size = state.subgroup_size
        local = state.lane_ids % size
        # int64, so that `up` may go below lane 0 without wrapping
        offset = np.asarray(offset).astype(np.int64)
        mode = op.mode.data
        if mode == ShuffleMode.XOR:
            source = local ^ offset
        elif mode == ShuffleMode.UP:
            source = local - offset
        elif mode == ShuffleMode.DOWN:
            source = local + offset
        else:  # idx
            source = np.broadcast_to(offset, local.shape)
        source_lane = state.lane_ids - local + source
        limit = np.minimum(np.asarray(width).astype(np.int64), size)
        valid = (source >= 0) & (source < limit) & (source_lane < state.lane_count)
        source_lane = np.where(valid, source_lane, state.lane_ids)
        if state.mask is not None:
            valid &= state.mask[source_lane]
        if is_uniform(value):
            result = value  # every lane, valid or not, gets the same value
        else:
            result = np.where(valid, value[source_lane], value)
        return result, self._uniform_if_agreed(valid)

    def _uniform_if_agreed(self, flags: np.ndarray):
        """`flags` as one scalar when every active lane has the same one
        (inactive lanes' values are don't-care), which keeps an `scf.if` on
        it a single branch."""
        mask = self.state.mask
        live = flags if mask is None else flags[mask]
        if live.size and (live == live[0]).all():
            return np.bool_(live[0])
        return flags

    @impl(gpu.BarrierOp)
    def run_barrier(self, interpreter, op, args):
        state = self.state
        mask = state.mask
        if mask is not None and not mask.all():
            arrived = int(mask.sum())
            raise op_error(
                op,
                f"divergent gpu.barrier: only {arrived} of the {state.lane_count} "
                f"lanes of workgroup {state.describe_block()} reach it (the others "
                f"took another path through scf.if/scf.for); every lane of a "
                f"workgroup must execute the same barriers, or the kernel hangs "
                f"on a GPU"
            )
        # lanes run in lock-step: every lane's earlier memory operations are
        # done, so all of them meet here
        return ()

    @impl_terminator(gpu.ReturnOp)
    def run_return(self, interpreter, op, args):
        return ReturnedValues(args), ()
