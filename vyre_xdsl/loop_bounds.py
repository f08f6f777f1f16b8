"""An upper bound on the loop iterations one invocation of a kernel runs.

lavapipe (llvmpipe) stops each shader invocation after 65535 loop iterations
in total, counted over all its loops, and silently skips the rest; the Vulkan
runtime uses this bound to refuse such a kernel there instead of returning a
wrong result.  The bound is exact for the skeleton's loops: the tile loops run
to `tile_len = min(tile_start + tile_size, seq_len) - tile_start`, which is
at most `tile_size`; a loop whose bound is read at run time counts the
trips its `vyre.max_trips` attribute allows (the tile loop of a kernel with
kv_lens: at most the static tile count).
"""

from __future__ import annotations

from collections.abc import Iterator

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue

from vyre_xdsl.dialects.constants import U32_MAX
from vyre_xdsl.dialects.vyre_regions import REGION_ARGS
from vyre_xdsl.dialects.vyre_skeleton import TiledOnlineSoftmaxOp

MAX_TRIPS_ATTR = "vyre.max_trips"  # inline_fragments' name: at most N trips


def constant_index(value: SSAValue) -> int | None:
    """The value of an integer `arith.constant`, else None."""
    op = value.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    return None


def loop_of(value: SSAValue) -> scf.ForOp | None:
    """The scf.for whose induction variable `value` is, else None."""
    if isinstance(value, BlockArgument) and value.index == 0:
        loop = value.block.parent_op()
        if isinstance(loop, scf.ForOp):
            return loop
    return None


def fragment_tile_length(value: SSAValue) -> int | None:
    """The skeleton's tile_size, if `value` is a fragment's `tile_len`
    argument (before vyre-inline-fragments records the bound on its loops)."""
    if not isinstance(value, BlockArgument):
        return None
    skeleton = value.block.parent_op()
    if not isinstance(skeleton, TiledOnlineSoftmaxOp):
        return None
    for name, region in skeleton.named_regions():
        if region.block is value.block and "tile_len" in REGION_ARGS[name]:
            if value is skeleton.region_arg(name, "tile_len"):
                return skeleton.shape()["tile_size"]
    return None


def upper_bound(value: SSAValue) -> int | None:
    """The largest value `value` (an index) can take, or None if unknown."""
    if (constant := constant_index(value)) is not None:
        return constant
    if isinstance(value, BlockArgument):
        loop = loop_of(value)
        if loop is None:
            return fragment_tile_length(value)
        top = upper_bound(loop.ub)
        return None if top is None else top - 1
    op = value.owner
    if isinstance(op, arith.MinUIOp):
        bounds = [b for b in (upper_bound(op.lhs), upper_bound(op.rhs)) if b is not None]
        return min(bounds) if bounds else None
    if isinstance(op, arith.AddiOp | arith.MuliOp):
        lhs, rhs = upper_bound(op.lhs), upper_bound(op.rhs)
        if lhs is None or rhs is None:
            return None
        return lhs + rhs if isinstance(op, arith.AddiOp) else lhs * rhs
    if isinstance(op, arith.SubiOp):
        return _clipped_length(op)
    if isinstance(op, arith.DivUIOp):
        top, divisor = upper_bound(op.lhs), constant_index(op.rhs)
        return None if top is None or not divisor else top // divisor
    if isinstance(op, arith.RemUIOp) and (divisor := constant_index(op.rhs)):
        top = upper_bound(op.lhs)
        return divisor - 1 if top is None else min(top, divisor - 1)
    return None


def _clipped_length(op: arith.SubiOp) -> int | None:
    """`min(start + size, end) - start` is at most `size`; else ub(a) - 0."""
    end = op.lhs.owner
    if isinstance(end, arith.MinUIOp):
        for side in (end.lhs, end.rhs):
            grown = side.owner
            if isinstance(grown, arith.AddiOp) and op.rhs in (grown.lhs, grown.rhs):
                size = grown.rhs if grown.lhs == op.rhs else grown.lhs
                if (bound := upper_bound(size)) is not None:
                    return bound
    return _difference_bound(op)


def _difference_bound(op: arith.SubiOp) -> int | None:
    """ub(a) - b for `a - b` where b is a constant that no value of a is
    below, else None (index arithmetic wraps: 3 - 4 is no small number)."""
    top = upper_bound(op.lhs)
    if top is None:
        return None
    below = constant_index(op.rhs)
    if below is not None and below <= _lower_bound(op.lhs):
        return top - below
    return None


def _lower_bound(value: SSAValue) -> int:
    """The smallest value `value` (an index) can take: a constant's, a loop
    variable's lower bound's, a sum's or product's that cannot wrap (its
    upper bound fits 32 bits, the device's index), else 0."""
    if (constant := constant_index(value)) is not None:
        return constant
    if (loop := loop_of(value)) is not None:
        return _lower_bound(loop.lb)
    op = value.owner
    if isinstance(op, arith.AddiOp | arith.MuliOp):
        top = upper_bound(op.result)
        if top is None or top > U32_MAX:
            return 0
        lhs, rhs = _lower_bound(op.lhs), _lower_bound(op.rhs)
        return lhs + rhs if isinstance(op, arith.AddiOp) else lhs * rhs
    if isinstance(op, arith.MinUIOp):
        return min(_lower_bound(op.lhs), _lower_bound(op.rhs))
    return 0


def products_plus(value: SSAValue) -> Iterator[tuple[arith.MuliOp, SSAValue]]:
    """`(product, other)` for each way `value` is an arith.addi of an
    arith.muli `product` and `other` (either operand order)."""
    add = value.owner
    if isinstance(add, arith.AddiOp):
        for product, other in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
            if isinstance(product.owner, arith.MuliOp):
                yield product.owner, other


def _remainder_trips(loop: scf.ForOp) -> int | None:
    """A loop from `lb + ((ub - lb) / F) * F` to `ub` (the remainder of an
    unrolled loop, see vyre-unroll-jam) runs fewer than F iterations."""
    for mul, base in products_plus(loop.lb):
        div = mul.lhs.owner
        factor = constant_index(mul.rhs)
        if (
            isinstance(div, arith.DivUIOp)
            and factor
            and constant_index(div.rhs) == factor
            and isinstance(span := div.lhs.owner, arith.SubiOp)
            and span.lhs == loop.ub
            and span.rhs == base
        ):
            return factor - 1
    return None


def _trip_count(loop: scf.ForOp) -> int | None:
    if (remainder := _remainder_trips(loop)) is not None:
        return remainder
    top, step = upper_bound(loop.ub), constant_index(loop.step)
    bottom = constant_index(loop.lb) or 0
    most = loop.attributes.get(MAX_TRIPS_ATTR)
    if top is None and isinstance(most, IntegerAttr):
        # a bound recorded where the trip count is read at run time (the
        # tile loop of a kernel with kv_lens runs at most tile_count times)
        return most.value.data
    if top is None or not step:
        return None
    return max(0, -(-(top - bottom) // step))


def _total(parts) -> int | None:
    total = 0
    for part in parts:
        count = loop_iterations(part)
        if count is None:
            return None
        total += count
    return total


def loop_iterations(region_or_op: Region | Block | Operation) -> int | None:
    """Upper bound on the loop iterations one execution of it runs (each
    iteration of each loop counts once), or None if a trip count is unknown."""
    if isinstance(region_or_op, Region):
        return _total(region_or_op.blocks)
    if isinstance(region_or_op, Block):
        return _total(region_or_op.ops)
    op = region_or_op
    if isinstance(op, scf.ForOp):
        trips, body = _trip_count(op), loop_iterations(op.body)
        if trips is None or body is None:
            return None
        return trips * (1 + body)
    if isinstance(op, scf.IfOp):
        branches = [loop_iterations(r) for r in op.regions]
        return None if None in branches else max(branches, default=0)
    return _total(op.regions)
