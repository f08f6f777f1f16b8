"""The `gpu` ops of a lowered kernel, for one workgroup in lock-step."""

from __future__ import annotations

from xdsl.dialects import gpu
from xdsl.interpreter import ReturnedValues, impl, impl_terminator, register_impls

from vyre_xdsl.errors import VyreError
from vyre_xdsl.interp.base import LaneFunctions

_AXIS = {"x": 0, "y": 1, "z": 2}


@register_impls
class GpuFunctions(LaneFunctions):
    def _axis(self, op) -> int:
        axis = self.cache.get(op)
        if axis is None:
            axis = self.cache[op] = _AXIS[op.dimension.data.value]
        return axis

    @impl(gpu.ThreadIdOp)
    def run_thread_id(self, interpreter, op, args):
        return (self.state.thread_id[self._axis(op)],)

    @impl(gpu.BlockIdOp)
    def run_block_id(self, interpreter, op, args):
        return (self.state.block_id[self._axis(op)],)

    @impl(gpu.BlockDimOp)
    def run_block_dim(self, interpreter, op, args):
        return (self.state.block_dim[self._axis(op)],)

    @impl(gpu.GridDimOp)
    def run_grid_dim(self, interpreter, op, args):
        return (self.state.grid_dim[self._axis(op)],)

    @impl(gpu.GlobalIdOp)
    def run_global_id(self, interpreter, op, args):
        axis = self._axis(op)
        state = self.state
        return (
            state.block_id[axis] * state.block_dim[axis] + state.thread_id[axis],
        )

    @impl(gpu.BarrierOp)
    def run_barrier(self, interpreter, op, args):
        state = self.state
        mask = state.mask
        if mask is not None and not mask.all():
            arrived = int(mask.sum())
            raise VyreError(
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
