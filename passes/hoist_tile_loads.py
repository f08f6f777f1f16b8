"""vyre-hoist-tile-loads: a tile's loads of the named buffers issued at the
top of the tile.

The lowered decode kernels read a tile's keys, compute its scores and
softmax, then read its values (the update fragment's loop over the tile's
keys).  Where the device's compiler leaves the value loads at their use,
each waits out the memory latency on the softmax's critical path;
issued at the top of the tile, they overlap the key loads and the scores.
This pass moves, in every outermost loop of a kernel (the loop over
tiles), the loads of the kernel buffers `buffers` names (as their
`vyre.buffer`s are named; `v` for the values of vx.flash_attention_2)
to the start of the loop body, each with the index arithmetic it needs.
Loops of constant trip count (at most `MAX_TRIPS`) between the tile loop
and a load are unrolled first, so that every copy's load can move.

Only loads of buffers the kernel never writes move, together with
arithmetic and loads of such buffers (a page table); each within its own
iteration, so every value, and the order of every floating-point
operation, is unchanged: results are bit-identical.  A load whose index
needs anything else (a carried value, a scratch array) stays where it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, gpu, memref, scf, vector
from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import is_side_effect_free

from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import launch_of, lowered_kernels, only_loaded
from vyre_xdsl.loop_bounds import constant_index
from vyre_xdsl.unrolling import transform, unrolled_body

MAX_TRIPS = 64  # the longest inner loop unrolled so that its loads can move
HOISTED_ATTR = "vyre.hoisted_loads"  # on a tile loop: how many loads went to its top
LOADS = (memref.LoadOp, vector.LoadOp)
# effect-free but for a zero divisor, which moving them within the block they
# run in unconditionally does not change
DIVISIONS = (arith.DivUIOp, arith.RemUIOp, arith.DivSIOp, arith.RemSIOp)


def named_buffers(func: gpu.FuncOp, names: tuple[str, ...]) -> set[SSAValue]:
    """The buffer arguments of lowered kernel `func` named `names` that it
    only loads from."""
    return {
        arg for arg, described in zip(func.body.block.args, launch_of(func).buffers,
                                      strict=False)
        if described.buffer_name.data in names and only_loaded(arg)
    }


def _loads(op: Operation, buffers: set[SSAValue]) -> list[Operation]:
    return [o for o in op.walk() if isinstance(o, LOADS) and o.operands[0] in buffers]


def _unroll_towards(tile: scf.ForOp, buffers: set[SSAValue]) -> None:
    """Unroll the constant-trip loops nested in `tile`'s body (through
    loops only) that hold loads of `buffers`, innermost first, up to the
    body."""
    while True:
        innermost = [
            (loop, trips) for loop in _nested_loops(tile.body.block)
            if _loads(loop, buffers) and not any(
                _loads(inner, buffers) for inner in _nested_loops(loop.body.block))
            and (trips := _constant_trips(loop)) is not None
        ]
        if not innermost:
            return
        for loop, trips in innermost:
            transform(loop, trips, unrolled_body(loop, trips))


def _nested_loops(block: Block) -> list[scf.ForOp]:
    """The loops in `block` and, through loops only, in theirs."""
    loops = []
    for op in block.ops:
        if isinstance(op, scf.ForOp):
            loops.append(op)
            loops.extend(_nested_loops(op.body.block))
    return loops


def _constant_trips(loop: scf.ForOp) -> int | None:
    lower, upper = constant_index(loop.lb), constant_index(loop.ub)
    if lower is None or upper is None or constant_index(loop.step) != 1:
        return None
    return upper - lower if 0 < upper - lower <= MAX_TRIPS else None


def _index_ops(load: Operation, block: Block, buffers: set[SSAValue]) -> list[Operation] | None:
    """The ops of `block` that `load`'s operands need, or None where one of
    them is not movable: only effect-free ops (and divisions) without
    regions, and loads of `buffers` or of other buffers the kernel only
    reads, qualify."""
    needed: set[Operation] = set()
    pending = [load]
    while pending:
        for operand in pending.pop().operands:
            owner = operand.owner
            if isinstance(operand, BlockArgument):
                if owner is block:  # the loop's carried values (its index is block arg 0)
                    if operand.index != 0:
                        return None
                continue
            if owner.parent_block() is not block or owner in needed:
                continue
            if isinstance(owner, LOADS):
                base = owner.operands[0]
                if not (base in buffers or (isinstance(base, BlockArgument)
                                            and only_loaded(base))):
                    return None
            elif owner.regions or not (is_side_effect_free(owner)
                                       or isinstance(owner, DIVISIONS)):
                return None
            needed.add(owner)
            pending.append(owner)
    return [op for op in block.ops if op in needed]


def hoist(tile: scf.ForOp, buffers: set[SSAValue]) -> int:
    """Move the loads of `buffers` in `tile`'s body, with what their
    indices need, to its top; the number of loads moved."""
    _unroll_towards(tile, buffers)
    block = tile.body.block
    moved: set[Operation] = set()
    loads = 0
    for load in [o for o in block.ops if isinstance(o, LOADS) and o.operands[0] in buffers]:
        needed = _index_ops(load, block, buffers)
        if needed is not None:
            moved.update(needed)
            moved.add(load)
            loads += 1
    anchor = next((o for o in block.ops if o not in moved), None)
    if anchor is None:
        return loads
    for op in [o for o in block.ops if o in moved]:
        op.detach()
        block.insert_op_before(op, anchor)
    return loads


@dataclass(frozen=True)
class HoistTileLoadsPass(ModulePass):
    """In each kernel's loop over tiles, issue the loads of the buffers
    named `buffers` at the top of the tile (bit-identical)."""

    name = "vyre-hoist-tile-loads"

    buffers: tuple[str, ...] = ("v",)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        funcs = lowered_kernels(op)
        declared = {b.buffer_name.data for f in funcs for b in launch_of(f).buffers}
        unknown = [name for name in self.buffers if name not in declared]
        if unknown:
            raise VyreError(
                f"vyre-hoist-tile-loads: buffers={','.join(unknown)} names no buffer of a "
                f"lowered kernel here; the kernels' buffers are "
                f"{', '.join(sorted(declared)) or 'none (lower the module first)'}"
            )
        for func in funcs:
            buffers = named_buffers(func, self.buffers)
            if not buffers:
                continue
            tiles = [
                loop for loop in func.walk()
                if isinstance(loop, scf.ForOp) and _loads(loop, buffers)
                and not _inside_loop(loop, func) and HOISTED_ATTR not in loop.attributes
            ]
            for tile in tiles:
                if loads := hoist(tile, buffers):
                    tile.attributes[HOISTED_ATTR] = IntegerAttr(loads, 64)


def _inside_loop(op: Operation, func: gpu.FuncOp) -> bool:
    parent = op.parent_op()
    while parent is not None and parent is not func:
        if isinstance(parent, scf.ForOp):
            return True
        parent = parent.parent_op()
    return False
