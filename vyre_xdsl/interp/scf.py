"""`scf` under an active-lane mask.

`scf.if` with a uniform condition runs one region; with a lane-varying one it
runs each region under its sub-mask (skipping a region no active lane takes)
and merges the results lane by lane (subgroup matrices subgroup by
subgroup, each taking one branch). `scf.for` with uniform bounds iterates
once for all lanes; with lane-varying bounds it iterates until no active lane
is left, each iteration under the mask of the lanes still in the loop.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import scf
from xdsl.dialects.builtin import IntegerAttr
from xdsl.interpreter import (
    ReturnedValues,
    impl,
    impl_terminator,
    register_impls,
)

from vyre_xdsl.errors import op_error
from vyre_xdsl.interp.base import LaneFunctions
from vyre_xdsl.interp.lanes import dtype_of, is_uniform
from vyre_xdsl.interp.mma import SubgroupMatrices, merge_by_subgroup
from vyre_xdsl.loop_bounds import MAX_TRIPS_ATTR


@register_impls
class ScfFunctions(LaneFunctions):
    def _undefined_results(self, op):
        return tuple(dtype_of(r.type).type(0) for r in op.results)

    @impl(scf.IfOp)
    def run_if(self, interpreter, op: scf.IfOp, args):
        (cond,) = args
        if is_uniform(cond):
            region = op.true_region if cond else op.false_region
            if not region.blocks:
                return ()
            return interpreter.run_ssacfg_region(region, (), "scf.if")
        state = self.state
        outer = state.mask
        active = state.active()
        taken = active & cond
        not_taken = active & ~cond
        any_taken = bool(taken.any())
        any_not_taken = bool(not_taken.any())
        has_else = bool(op.false_region.blocks)
        if any_taken and not any_not_taken:
            return interpreter.run_ssacfg_region(op.true_region, (), "scf.if")
        if not any_taken:
            if any_not_taken and has_else:
                return interpreter.run_ssacfg_region(op.false_region, (), "scf.if")
            return self._undefined_results(op)
        try:
            state.mask = taken
            then_results = interpreter.run_ssacfg_region(op.true_region, (), "scf.if")
            if not has_else:
                return ()
            state.mask = not_taken
            else_results = interpreter.run_ssacfg_region(
                op.false_region, (), "scf.if"
            )
        finally:
            state.mask = outer
        return tuple(
            merge_by_subgroup(state, cond, t, e) if isinstance(t, SubgroupMatrices)
            else np.where(cond, t, e)
            for t, e in zip(then_results, else_results)
        )

    @impl(scf.ForOp)
    def run_for(self, interpreter, op: scf.ForOp, args):
        lb, ub, step, *loop_args = args
        body = op.body
        if not (is_uniform(lb) and is_uniform(ub) and is_uniform(step)):
            lb, ub, step = self._uniform_if_equal((lb, ub, step))
        if is_uniform(lb) and is_uniform(ub) and is_uniform(step):
            if lb >= ub:
                return tuple(loop_args)
            if step == 0:
                raise op_error(op, "scf.for with a step of 0 never terminates")
            make = lb.dtype.type
            values = tuple(loop_args)
            run = interpreter.run_ssacfg_region
            trips = range(int(lb), int(ub), int(step))
            _check_promised_trips(op, len(trips))
            for i in trips:
                values = run(body, (make(i), *values), "scf.for")
            return values
        return self._run_varying_for(interpreter, op, lb, ub, step, loop_args)

    def _uniform_if_equal(self, values):
        """Bounds that vary only in inactive lanes are uniform."""
        mask = self.state.mask
        out = []
        for v in values:
            if not is_uniform(v):
                live = v if mask is None else v[mask]
                if live.size and (live == live[0]).all():
                    v = live[0]
            out.append(v)
        return out

    def _run_varying_for(self, interpreter, op, lb, ub, step, loop_args):
        state = self.state
        outer = state.mask
        n = state.lane_count
        iv = np.array(np.broadcast_to(lb, (n,)))
        ub = np.broadcast_to(ub, (n,))
        step = np.broadcast_to(step, (n,))
        active = state.active() & (iv < ub)
        if np.any(active & (step == 0)):
            raise op_error(op, "scf.for with a step of 0 never terminates")
        if active.any():
            spans = (ub[active].astype(np.int64) - iv[active] + step[active] - 1)
            _check_promised_trips(op, int((spans // step[active]).max()))
        values = tuple(loop_args)
        try:
            while active.any():
                state.mask = active
                new = interpreter.run_ssacfg_region(op.body, (iv, *values), "scf.for")
                values = tuple(np.where(active, a, b) for a, b in zip(new, values))
                iv = np.where(active, iv + step, iv)
                active = active & (iv < ub)
        finally:
            state.mask = outer
        return values

    @impl_terminator(scf.YieldOp)
    def run_yield(self, interpreter, op, args):
        return ReturnedValues(args), ()


def _check_promised_trips(op: scf.ForOp, trips: int) -> None:
    """A loop whose `vyre.max_trips` promises fewer trips than it runs: the
    Vulkan runtime bounds the loop by the promise (loop_bounds.py)."""
    most = op.attributes.get(MAX_TRIPS_ATTR)
    if isinstance(most, IntegerAttr) and trips > most.value.data:
        raise op_error(op, f"scf.for runs {trips} trips where its {MAX_TRIPS_ATTR} "
                           f"promises at most {most.value.data}; raise the attribute")
