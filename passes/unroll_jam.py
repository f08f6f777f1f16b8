"""vyre-unroll-jam: unroll loops, and jam the inner loops of unrolled copies.

One invocation of the seed's layout is a chain of dependent f32 adds (a dot
product, a weighted sum) inside loops: a GPU waits on each add.  This pass
gives it independent work to interleave, without changing any result:

- an innermost `scf.for` is unrolled by `factor` (the copies run in order;
  a loop of at most `factor` iterations is unrolled completely), unless it
  holds subgroup matrix products;
- an `scf.for` whose body is `pre; inner scf.for; post` (the inner loop
  innermost) is unrolled and jammed: the `factor` copies of the inner loop
  become one loop carrying every copy's values, so `factor` dot products or
  weighted sums advance side by side.

A loop over the dims of one chunk (`vyre.dim_chunk`: a lane's share of a
row split by vyre-split-head-dim) is unrolled first, jammed if it holds an
inner loop, so that the loop over the lane's chunks around it is then
unrolled or jammed as a loop over a whole row's dims would be.

A loop to a run-time bound of at most `factor` trips that runs once an
invocation (in no fragment and no loop of more than one trip: kv_lens' cut
tile) becomes one copy an iteration, each in an `scf.if` on its constant
index: no private array is then indexed by a run-time value, which would
keep it out of registers.

Every copy performs exactly its original operations in its original order,
so results are bit-identical.  Jamming moves the copies' `pre` and inner
loops ahead of earlier copies' `post`; it applies only where that cannot be
observed: `pre` and the inner loop only read memory (a paged cache's
block table, the keys), neither uses values carried by the outer loop, and
`post` writes no memory that they read (function arguments may alias each
other, except the distinct buffers of a lowered vyre kernel).  Loops need
a constant lower bound and step 1; a dynamic trip count gets a remainder
loop.  Fewer loop iterations also keep
kernels under lavapipe's per-invocation loop limit for longer.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, gpu, memref, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import is_side_effect_free

from vyre_xdsl import tuning
from vyre_xdsl.dialects.gpu_mma import SubgroupMmaComputeOp
from vyre_xdsl.dialects.launch import launch_of
from vyre_xdsl.dialects.vyre_skeleton import TiledOnlineSoftmaxOp
from vyre_xdsl.dim_split import CHUNK_LOOP_ATTR
from vyre_xdsl.errors import VyreError
from vyre_xdsl.loop_bounds import MAX_TRIPS_ATTR, constant_index, fragment_tile_length
from vyre_xdsl.unrolling import (
    ROLLED_ATTR,
    UNROLLED_ATTR,
    Copier,
    guarded_copies,
    new_body_block,
    transform,
    unrolled_body,
)


DIVISIONS = (arith.DivUIOp, arith.RemUIOp)  # effect-free but for a zero divisor


def _loops_in(op: Operation) -> list[scf.ForOp]:
    return [inner for inner in op.walk() if isinstance(inner, scf.ForOp) and inner is not op]


def _is_innermost(loop: scf.ForOp) -> bool:
    return not _loops_in(loop)


def _uses_any(ops: list[Operation], values: set[SSAValue]) -> bool:
    return any(
        operand in values for op in ops for inner in op.walk() for operand in inner.operands
    )


def _memrefs(ops: list[Operation], kind: type) -> set[SSAValue]:
    return {
        inner.memref
        for op in ops
        for inner in op.walk()
        if isinstance(inner, kind)
    }


def _distinct_buffers(value: SSAValue) -> bool:
    """Whether `value` is a kernel buffer of a lowered vyre kernel: each is
    its own storage buffer (docs/lowered-ir.md), so they never alias."""
    if not isinstance(value, BlockArgument):
        return False
    owner = value.block.parent_op()
    return isinstance(owner, gpu.FuncOp) and launch_of(owner) is not None


def _may_alias(a: SSAValue, b: SSAValue) -> bool:
    """Conservative: two function arguments may be the same memory (unless
    they are buffers of a lowered vyre kernel); an allocation is only itself."""
    if a == b:
        return True
    arguments = all(
        isinstance(v, BlockArgument) and isinstance(v.block.parent_op(), func.FuncOp | gpu.FuncOp)
        for v in (a, b)
    )
    return arguments and not (_distinct_buffers(a) and _distinct_buffers(b))


def _reads_at_most(op: Operation) -> bool:
    """Whether `op` has no effect but reading memory: a load, or an
    operation free of effects, including a division by a nonzero constant
    (xDSL gives remui unknown effects: a zero divisor is undefined)."""
    if is_side_effect_free(op) or isinstance(op, memref.LoadOp):
        return True
    divisor = constant_index(op.operands[1]) if isinstance(op, DIVISIONS) else None
    return bool(divisor)


@dataclass
class JamShape:
    pre: list[Operation]
    inner: scf.ForOp
    post: list[Operation]


def jam_shape(loop: scf.ForOp) -> JamShape | None:
    """`loop`'s body as pre; inner loop; post, if jamming it is exact."""
    ops = list(loop.body.block.ops)[:-1]  # without scf.yield
    loops = [i for i, op in enumerate(ops) if _loops_in(op) or isinstance(op, scf.ForOp)]
    if len(loops) != 1 or not isinstance(ops[loops[0]], scf.ForOp):
        return None
    inner = ops[loops[0]]
    if not _is_innermost(inner):
        return None
    pre, post = ops[: loops[0]], ops[loops[0] + 1 :]
    carried = set(loop.body.block.args[1:])
    if not all(_reads_at_most(op) for op in pre):
        return None
    if _memrefs([inner], memref.StoreOp) or _uses_any(pre + [inner], carried):
        return None
    written, read = _memrefs(post, memref.StoreOp), _memrefs(pre + [inner], memref.LoadOp)
    if any(_may_alias(w, r) for w in written for r in read):
        return None
    # The fused inner loop uses one copy's bounds: they must not vary.
    for bound in (inner.lb, inner.ub, inner.step):
        if bound.owner in pre and constant_index(bound) is None:
            return None
    return JamShape(pre, inner, post)


def _jammed_body(loop: scf.ForOp, shape: JamShape, factor: int) -> Block:
    """A body running `factor` consecutive iterations with their inner loops
    fused into one loop that carries every copy's values."""
    block = new_body_block(loop.body.block)
    copier = Copier(block)
    iv, *carried = block.args
    original_iv, *original_carried = loop.body.block.args
    inner = shape.inner
    mappings = []
    for k in range(factor):
        mapping = {original_iv: copier.offset(iv, k)}
        copier.clone(shape.pre, mapping)
        mappings.append(mapping)
    lower, upper, step = (mappings[0].get(v, v) for v in (inner.lb, inner.ub, inner.step))
    inits = [mapping.get(v, v) for mapping in mappings for v in inner.iter_args]
    width = len(inner.iter_args)
    fused_block = Block(arg_types=[IndexType(), *(v.type for v in inits)])
    fused_block.args[0].name_hint = inner.body.block.args[0].name_hint
    fused_copier = Copier(fused_block)
    fused_iv, *fused_carried = fused_block.args
    inner_iv, *inner_carried = inner.body.block.args
    *inner_ops, inner_yield = list(inner.body.block.ops)
    yielded = []
    for k, mapping in enumerate(mappings):
        body_mapping = dict(mapping)
        body_mapping[inner_iv] = fused_iv
        body_mapping.update(zip(inner_carried, fused_carried[k * width : (k + 1) * width]))
        fused_copier.clone(inner_ops, body_mapping)
        yielded += [body_mapping.get(v, v) for v in inner_yield.operands]
    fused_copier.emit(scf.YieldOp(*yielded))
    fused = copier.emit(scf.ForOp(lower, upper, step, inits, Region(fused_block)))
    if MAX_TRIPS_ATTR in inner.attributes:
        fused.attributes[MAX_TRIPS_ATTR] = inner.attributes[MAX_TRIPS_ATTR]
    values: list[SSAValue] = list(carried)
    *_, terminator = list(loop.body.block.ops)
    for k, mapping in enumerate(mappings):
        mapping.update(zip(inner.results, fused.results[k * width : (k + 1) * width]))
        mapping.update(zip(original_carried, values, strict=True))
        copier.clone(shape.post, mapping)
        values = [mapping.get(v, v) for v in terminator.operands]
    copier.emit(scf.YieldOp(*values))
    return block


def trip_bound(loop: scf.ForOp) -> int | None:
    """The most trips `loop` runs, where known: a constant trip count, or
    the most a loop over a tile can run (a fragment's loop to its tile_len,
    or one vyre-inline-fragments recorded)."""
    lower, upper = constant_index(loop.lb), constant_index(loop.ub)
    if lower is not None and upper is not None:
        return max(0, upper - lower)
    most = loop.attributes.get(MAX_TRIPS_ATTR)
    if isinstance(most, IntegerAttr):
        return most.value.data
    return fragment_tile_length(loop.ub)


def effective_factor(loop: scf.ForOp, factor: int) -> int:
    """`factor`, but no more than trip_bound: a short loop is unrolled
    completely instead of leaving it all to the remainder."""
    bound = trip_bound(loop)
    return factor if bound is None else min(factor, bound)


def _runs_once(loop: scf.ForOp) -> bool:
    """Whether `loop` runs at most once an invocation: in no scf.for that
    may run twice (a loop over a lane's one chunk of dims runs once), nor
    in a fragment (which runs once a tile)."""
    parent = loop.parent_op()
    while parent is not None:
        if isinstance(parent, TiledOnlineSoftmaxOp):
            return False
        if isinstance(parent, scf.ForOp) and ((trips := trip_bound(parent)) is None or trips > 1):
            return False
        parent = parent.parent_op()
    return True


def _eligible(loop: scf.ForOp) -> bool:
    return (
        constant_index(loop.step) == 1
        and constant_index(loop.lb) is not None
        and UNROLLED_ATTR not in loop.attributes
        and ROLLED_ATTR not in loop.attributes
        # a loop of subgroup matrix products (vyre-tensor-cores) already
        # gives the device independent work: copies would only take registers
        and not any(isinstance(o, SubgroupMmaComputeOp) for o in loop.body.walk())
    )


# A loop without a known trip count gets `factor` copies of its body: far
# beyond tuning.DEEP_UNROLL the IR (and the time to build it), not the
# kernel, grows; 2**31 never finished.
MAX_FACTOR = 256


@dataclass(frozen=True)
class UnrollJamPass(ModulePass):
    """Unroll innermost loops and unroll-and-jam loops around an innermost
    loop by `factor` (1 to MAX_FACTOR); results are bit-identical."""

    name = "vyre-unroll-jam"

    # the depth of `exact` (why: docs/performance.md)
    factor: int = tuning.UNROLL

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not 1 <= self.factor <= MAX_FACTOR:
            raise VyreError(f"vyre-unroll-jam: factor must be in [1, {MAX_FACTOR}], "
                            f"got {self.factor}")
        if self.factor == 1:
            return
        self.unroll_chunks(op)
        self.guard_short_loops(op, jammed=True)
        jams, plain = [], []
        for loop in op.walk():
            if not isinstance(loop, scf.ForOp) or not _eligible(loop):
                continue
            if (shape := jam_shape(loop)) is not None:
                jams.append((loop, shape))
        jammed_inner = {shape.inner for _, shape in jams}
        for loop in op.walk():
            if (
                isinstance(loop, scf.ForOp)
                and _eligible(loop)
                and _is_innermost(loop)
                and loop not in jammed_inner
            ):
                plain.append(loop)
        for loop, shape in jams:
            if (factor := effective_factor(loop, self.factor)) > 1:
                transform(loop, factor, _jammed_body(loop, shape, factor))
        plain = [loop for loop in plain if not self.guard(loop)]
        self.guard_short_loops(op, jammed=False)  # the inner loops jamming fused
        for loop in plain:
            if (factor := effective_factor(loop, self.factor)) > 1:
                transform(loop, factor, unrolled_body(loop, factor))
        for loop in op.walk():
            if isinstance(loop, scf.ForOp):
                loop.attributes.pop(UNROLLED_ATTR, None)

    def guard_short_loops(self, op: ModuleOp, jammed: bool) -> None:
        """Guard (`guard`) the loops around an innermost loop that jamming
        would take (`jammed`), or the innermost loops."""
        for loop in list(op.walk()):
            if isinstance(loop, scf.ForOp) and loop.parent_block() is not None and (
                jam_shape(loop) is not None if jammed else _is_innermost(loop)
            ):
                self.guard(loop)

    def guard(self, loop: scf.ForOp) -> bool:
        """Replace a loop to a run-time bound of at most `factor` trips that
        runs once an invocation (_runs_once: kv_lens' cut tile) by its
        guarded copies (unrolling.guarded_copies): every index into private
        arrays is then a constant, where the remainder loop's would keep the
        arrays out of registers for the whole kernel.  Loops in a tile loop
        keep their remainder loops (copies there would branch on every
        key).  Whether it did."""
        trips = trip_bound(loop)
        if not (_eligible(loop) and constant_index(loop.ub) is None and _runs_once(loop)
                and trips is not None and trips <= self.factor):
            return False
        guarded_copies(loop, trips)
        return True

    @staticmethod
    def unroll_chunks(op: ModuleOp) -> None:
        """Unroll every loop over the dims of one chunk (vyre-split-head-dim)
        completely, jamming its inner loop if it has one, so that the loop
        over the lane's chunks around it takes its place as an innermost
        loop or a loop around one, and is unrolled or jammed like a loop
        over a whole row's dims."""
        chunks = [
            loop for loop in op.walk()
            if isinstance(loop, scf.ForOp) and CHUNK_LOOP_ATTR in loop.attributes
        ]
        for loop in chunks:
            trips = constant_index(loop.ub) - constant_index(loop.lb)  # the chunk's dims
            if (shape := jam_shape(loop)) is not None:
                transform(loop, trips, _jammed_body(loop, shape, trips))
            elif _is_innermost(loop):
                transform(loop, trips, unrolled_body(loop, trips))
