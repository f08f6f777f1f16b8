"""vyre-split-head-dim{parts=N}: split each item's head dims over N lanes.

One invocation per query row keeps the row of q and its accumulator o_acc
in registers (vyre-promote-scratch): 2 * head_dim floats, which at head_dim
128 is more than the 255 registers an invocation has, so the row spills.
With `dim_parts N` an item runs on N neighbouring lanes of one subgroup,
and lane part p keeps only its head_dim / N dims of q and o_acc
(`vyre.part_dims`: the parts take turns over chunks of 4 dims, so an
item's lanes read neighbouring 16 bytes of a staged K/V row, in other
banks of workgroup memory).  The fragments are rewritten for it:

- scores: each loop that adds `q_scratch[lane * head_dim + d] * ...` over
  `d = 0 .. head_dim` (a dot product) runs over the lane's own dims, and
  the parts' sums are added across lanes with `gpu.shuffle xor` (offsets 1,
  2, ... N/2: every lane ends with the same bits, since f32 addition is
  commutative), so each part has the whole score; so does every other sum
  from 0.0 over `d = 0 .. head_dim` there (MLA's latent attention reads its
  query row from a buffer);
- update: each loop over `d = 0 .. head_dim` that touches
  `o_acc[lane * head_dim + d]` runs over the lane's own dims.

The loop bodies are kept as they are, `d` mapped to the lane's dim, so
any read of a key/value row (global or staged by vyre-stage-kv-tiles)
follows.  A dot product is then summed per part and across parts: results
match the oracle within docs/performance.md's tolerance and
`vx.reference.flash_attention_2(dim_parts=N)` bit for bit.  The shuffle
reads the lane's partner, which runs the same item and so takes the same
branches: it is never inactive where the shuffle runs.  That an item's
parts share a subgroup assumes subgroups of consecutive lanes, as every
Vulkan driver we know lays out one-dimensional workgroups.

A fragment qualifies when q_scratch is only read in such dot-product loops
(one f32 carried, updated by one addf, no stores in the loop), o_acc is
only accessed in such dim loops (nothing carried, no other stores), the
skeleton has no prologue or epilogue, its kv_splits (if any) are merged by
a kernel of their own (each split's parts then store their dims of its
partial row), N is a power of two that divides the workgroup size, and
head_dim is a multiple of 4N.
`parts=N` forces the split and reports why a skeleton does not qualify;
`parts=1` leaves every skeleton alone; `parts=0` (the default) chooses from
measurements on the H200 (docs/performance.md): rows longer than 64 dims
over as many lanes as leave each 64 (FA2 at 32 heads of 128 dims, two
lanes: 14.98 -> 12.38 ms with tiles of 32 keys; MLA decode's latent rows
of 512, eight lanes: 0.399 -> 0.089 ms, where two took 0.685 ms, four
0.095 and sixteen 0.090), and the rows of an unsplit kernel on a grid of
at most SMALL_GRID workgroups over two (one head of 4096 rows: 1.14 ->
0.43 ms at 64 dims, 1.67 -> 0.95 ms at 128); rows of 64 dims on large
grids stay on one lane (5.21 -> 5.35 ms split).  Four lanes for FA2 were
slower everywhere, and so were contiguous halves (5.2 -> 9.1 ms at 64
dims: both lanes of an item read the same banks).

Runs on vyre IR, after vyre-split-kv (a kernel split and merged in workgroup
memory is refused), before or after vyre-stage-kv-tiles (which reads a
lane's share of a row from the staged tile either way; `default` stages
first).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import copysign

from xdsl.context import Context
from xdsl.dialects import arith, gpu, memref, scf
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, MemRefType, ModuleOp, f32, i32, i64
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.gpu_shuffle import ShuffleMode, ShuffleOp
from vyre_xdsl.errors import VyreError, pass_error
from vyre_xdsl.index_forms import linear_index
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.loop_bounds import constant_index, loop_of
from vyre_xdsl.passes.inline_fragments import loop_over_part_dims
from vyre_xdsl.passes.resize_workgroup import scratch_name

Access = memref.LoadOp | memref.StoreOp


@dataclass(frozen=True)
class DimLoop:
    """A loop `d = 0 .. head_dim` of a fragment and its accesses of the
    lane's slice of a scratch array, `scratch[lane * head_dim + d]`."""

    loop: scf.ForOp
    accesses: tuple[Access, ...]


def _dim_loop_of(access: Access, lane: SSAValue, head_dim: int) -> scf.ForOp | None:
    """The loop whose index is `d` if `access` reads or writes element
    `lane * head_dim + d`, else None."""
    form = linear_index(access.indices[0])
    terms = dict(form.terms)
    if form.constant != 0 or terms.pop(lane, None) != head_dim or len(terms) != 1:
        return None
    ((d, coefficient),) = terms.items()
    loop = loop_of(d)
    if coefficient != 1 or loop is None:
        return None
    if (constant_index(loop.lb), constant_index(loop.ub), constant_index(loop.step)) != (
        0, head_dim, 1
    ):
        return None
    return loop


def _stores_in(loop: scf.ForOp) -> list[memref.StoreOp]:
    return [op for op in loop.body.walk() if isinstance(op, memref.StoreOp)]


def _dim_loops(
    scratch: BlockArgument, lane: SSAValue, head_dim: int, role: str
) -> list[DimLoop] | str:
    """The dim loops through which a fragment accesses `scratch`, or why
    some access is not in one."""
    found: dict[scf.ForOp, list[Access]] = {}
    for use in scratch.uses:
        access = use.operation
        is_access = (
            isinstance(access, memref.LoadOp) and use.index == 0
            or role == "o_acc" and isinstance(access, memref.StoreOp) and use.index == 1
        )
        loop = _dim_loop_of(access, lane, head_dim) if is_access else None
        if loop is None:
            verb = "read" if role == "q_scratch" else "accessed"
            return (
                f"%{role} is {verb} other than as {role}[lane * {head_dim} + d] "
                f"in a loop d = 0 .. {head_dim}"
            )
        found.setdefault(loop, []).append(access)
    return [DimLoop(loop, tuple(accesses)) for loop, accesses in found.items()]


def _is_dot_product(loop: scf.ForOp) -> bool:
    """One f32 carried from +0.0 (each part's sum starts there; their sum
    would count another start value N times), added to once per iteration,
    nothing stored."""
    if len(loop.iter_args) != 1 or loop.iter_args[0].type != f32:
        return False
    start = loop.iter_args[0].owner
    if not (isinstance(start, arith.ConstantOp) and isinstance(start.value, FloatAttr)):
        return False
    value = start.value.value.data
    if value != 0.0 or copysign(1.0, value) < 0:
        return False
    carried = loop.body.block.args[1]
    (yielded,) = loop.body.block.last_op.operands
    add = yielded.owner
    return (
        isinstance(add, arith.AddfOp)
        and carried in (add.lhs, add.rhs)
        and len(list(carried.uses)) == 1
        and not _stores_in(loop)
    )


def _other_dot_products(
    region: Region, head_dim: int, found: set[scf.ForOp]
) -> list[DimLoop]:
    """The other dot products over d = 0 .. head_dim in `region` (reading
    the query from a buffer, say, as MLA's latent attention does): each
    part sums its own dims of them too.  Not those inside or around one
    already found."""
    others = []
    for loop in region.walk():
        if (
            isinstance(loop, scf.ForOp) and loop not in found
            and (constant_index(loop.lb), constant_index(loop.ub), constant_index(loop.step))
            == (0, head_dim, 1)
            and _is_dot_product(loop)
            and not any(f.is_ancestor(loop) or loop.is_ancestor(f) for f in found)
        ):
            others.append(DimLoop(loop, ()))
            found = found | {loop}
    return others


def _touches_only(loop: scf.ForOp, scratch: SSAValue) -> bool:
    """Nothing carried, and every store in the loop writes `scratch`."""
    return not loop.iter_args and all(s.memref == scratch for s in _stores_in(loop))


@dataclass(frozen=True)
class Plan:
    dots: list[DimLoop]
    updates: list[DimLoop]


def plan(op: vyre.TiledOnlineSoftmaxOp, parts: int) -> Plan | str:
    """The loops to split for `parts` parts, or why `op` cannot be split."""
    kernel = op.parent_op()
    assert isinstance(kernel, vyre.KernelOp)
    head_dim, lanes = op.shape()["head_dim"], kernel.workgroup_size.value.data
    if op.parts > 1:
        return "it is already split (dim_parts)"
    if op.v_dim != head_dim:
        return (
            f"its value rows ({op.v_dim} dims) are not as wide as its query rows "
            f"({head_dim}): a lane keeps the same dims of both"
        )
    if op.splits > 1 and not op.merges_in_kernel:
        return (
            "its tiles are split (vyre-split-kv) and merged in workgroup memory, "
            "which takes whole rows"
        )
    if parts & (parts - 1):
        return f"parts must be a power of two (the parts' sums are added pairwise), got {parts}"
    if lanes % parts or head_dim % (parts * vyre.DIM_CHUNK):
        return (
            f"parts {parts} must divide the workgroup size ({lanes}), and head_dim "
            f"({head_dim}) must be a multiple of parts * {vyre.DIM_CHUNK} (the parts "
            f"take turns over chunks of {vyre.DIM_CHUNK} dims)"
        )
    if op.prologue.block.first_op is not op.prologue.block.last_op or (
        op.epilogue.block.first_op is not op.epilogue.block.last_op
    ):
        return "it has a prologue or epilogue (they see an item's whole o_acc)"
    for value in (op.q_scratch, op.o_acc):
        if any(use.operation is not op for use in value.uses):
            return "a fragment uses the kernel's scratch array instead of its argument"
    scores = dict(zip(vyre.SCORES_ARGS, op.scores.block.args, strict=True))
    update = dict(zip(vyre.UPDATE_ARGS, op.update.block.args, strict=True))
    dots = _dim_loops(scores["q_scratch"], scores["lane"], head_dim, "q_scratch")
    if isinstance(dots, str):
        return "its scores fragment does not qualify: " + dots
    if not all(_is_dot_product(d.loop) for d in dots):
        return (
            "its scores fragment reads %q_scratch in a loop that is not a dot "
            "product (one f32 carried from 0.0 and added to, nothing stored)"
        )
    dots += _other_dot_products(op.scores, head_dim, {d.loop for d in dots})
    updates = _dim_loops(update["o_acc"], update["lane"], head_dim, "o_acc")
    if isinstance(updates, str):
        return "its update fragment does not qualify: " + updates
    if not all(_touches_only(u.loop, update["o_acc"]) for u in updates):
        return (
            "its update fragment carries values across dims or stores to another "
            "array in a loop over %o_acc"
        )
    return Plan(dots, updates)


def _split_loop(
    dim_loop: DimLoop, lane: SSAValue, part: SSAValue, head_dim: int, parts: int
) -> list[SSAValue]:
    """Replace the loop by one over the lane's own dims (its body moved, `d`
    the lane's dim, the scratch indexed by slot); return its results."""
    loop = dim_loop.loop
    old_block: Block = loop.body.block
    old_d, *old_carried = old_block.args
    lane_dims = head_dim // parts
    replaced = [loop.lb, loop.ub, loop.step]  # dead once the loop is

    def body(b: IRBuilder, d, slot, carried):
        old_d.replace_all_uses_with(d)
        for old, new in zip(old_carried, carried, strict=True):
            old.replace_all_uses_with(new)
        *ops, yielded = list(old_block.ops)
        for moved in ops:
            moved.detach()
            b.emit(moved)
        for access in dim_loop.accesses:
            index = IRBuilder(InsertPoint.before(access)).flat_index(lane, lane_dims, slot)
            position = 1 if isinstance(access, memref.LoadOp) else 2  # after memref (value)
            replaced.append(access.operands[position])
            access.operands[position] = index
        return list(yielded.operands)

    b = IRBuilder(InsertPoint.before(loop))
    results = loop_over_part_dims(b, head_dim, parts, part, body, list(loop.iter_args))
    for old, new in zip(loop.results, results, strict=True):
        old.replace_all_uses_with(new)
    Rewriter.erase_op(loop)
    _erase_dead(replaced)
    return results


def _erase_dead(values: list[SSAValue]) -> None:
    """Erase the pure ops computing `values` (and their operands) that
    nothing uses any more: the old loop bounds and scratch indices."""
    pending = list(values)
    while pending:
        value = pending.pop()
        op = value.owner
        if (
            isinstance(op, Operation) and op.parent is not None
            and all(not result.uses for result in op.results)
            and isinstance(op, arith.ConstantOp | arith.AddiOp | arith.MuliOp)
        ):
            pending.extend(op.operands)
            Rewriter.erase_op(op)


def sum_over_parts(b: IRBuilder, partial: SSAValue, parts: int) -> SSAValue:
    """`partial` added across the `parts` neighbouring lanes of an item: a
    butterfly of gpu.shuffle xor over the whole subgroup."""
    size = b.emit(gpu.SubgroupSizeOp()).results[0]
    width = b.emit(arith.IndexCastOp(size, i32)).results[0]
    total, offset = partial, 1
    while offset < parts:
        lanes_apart = b.emit(arith.ConstantOp(IntegerAttr(offset, i32))).results[0]
        other = b.emit(ShuffleOp(total, lanes_apart, width, ShuffleMode.XOR)).results[0]
        total = b.addf(total, other, "part_sum")
        offset *= 2
    return total


def _part_of(block: Block, lane: SSAValue, parts: int) -> SSAValue:
    """`lane % parts`, emitted at the start of a fragment: the lane's part
    (an item's parts are consecutive invocations, the workgroup a multiple
    of them)."""
    b = IRBuilder(InsertPoint.at_start(block))
    return b.remui(lane, b.index(parts), "part")


def _resize_slices(op: vyre.TiledOnlineSoftmaxOp, parts: int) -> None:
    """q_scratch and o_acc keep head_dim / parts floats per lane."""
    kernel = op.parent_op()
    for role in ("q_scratch", "o_acc"):
        name = scratch_name(op, role)
        scratch = next(
            s for s in kernel.body.walk()
            if isinstance(s, vyre.ScratchOp) and s.sym_name.data == name
        )
        (count,) = scratch.result.type.get_shape()
        new_type = MemRefType(f32, [count // parts])
        values = [scratch.result]
        for region, names in (
            (op.scores, vyre.SCORES_ARGS), (op.update, vyre.UPDATE_ARGS),
            (op.prologue, vyre.PROLOGUE_ARGS), (op.epilogue, vyre.EPILOGUE_ARGS),
        ):
            if role in names:
                values.append(region.block.args[names.index(role)])
        for value in values:
            hint = value.name_hint
            Rewriter.replace_value_with_new_type(value, new_type).name_hint = hint


def split(op: vyre.TiledOnlineSoftmaxOp, found: Plan, parts: int) -> None:
    """Give `op` `dim_parts` `parts` along `found`'s loops."""
    head_dim = op.shape()["head_dim"]
    for region, names, loops, are_dots in (
        (op.scores, vyre.SCORES_ARGS, found.dots, True),
        (op.update, vyre.UPDATE_ARGS, found.updates, False),
    ):
        lane = region.block.args[names.index("lane")]
        part = _part_of(region.block, lane, parts)
        for dim_loop in loops:
            results = _split_loop(dim_loop, lane, part, head_dim, parts)
            if are_dots:
                (partial,) = results
                uses = list(partial.uses)
                total = sum_over_parts(IRBuilder(InsertPoint.after(partial.owner)), partial, parts)
                for use in uses:
                    use.operation.operands[use.index] = total
    _resize_slices(op, parts)
    op.properties["dim_parts"] = IntegerAttr(parts, i64)
    kernel = op.parent_op()
    invocations = kernel.item_count.value.data * parts  # every split's parts
    kernel.properties["item_count"] = IntegerAttr(invocations, i64)


def automatic_parts(op: vyre.TiledOnlineSoftmaxOp, max_parts: int = 0) -> int:
    """The measured choice (module docstring): rows longer than SHORT_ROWS
    over as many lanes (a power of two) as leave SHORT_ROWS dims or fewer
    to each; rows of an unsplit kernel on a small grid over 2; fewer where
    `op` does not qualify for as many or the device shuffles across fewer
    than that (`max_parts`, 0: unbounded); 1 otherwise."""
    from vyre_xdsl.passes.retile import SHORT_ROWS, SMALL_GRID, grid_workgroups

    head_dim = op.shape()["head_dim"]
    parts = 1
    if head_dim > SHORT_ROWS:
        while head_dim > parts * SHORT_ROWS:
            parts *= 2
    elif op.splits == 1 and grid_workgroups(op) <= SMALL_GRID:
        parts = 2
    while parts > 1 and (
        (max_parts and parts > max_parts) or not isinstance(plan(op, parts), Plan)
    ):
        parts //= 2
    return parts


@dataclass(frozen=True)
class SplitHeadDimPass(ModulePass):
    """Split each item's head dims over `parts` lanes (0: choose), the dot
    products added across them with gpu.shuffle."""

    name = "vyre-split-head-dim"

    parts: int = 0
    # the most lanes the device shuffles across (its subgroup size; 0:
    # unbounded; vyre-to-gpu passes its device profile's)
    max_parts: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.parts < 0:
            raise VyreError(
                f"vyre-split-head-dim: parts must be 0 (choose) or >= 1, got {self.parts}"
            )
        for skeleton in [s for s in op.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]:
            parts = self.parts or automatic_parts(skeleton, self.max_parts)
            if parts == 1:
                continue
            found = plan(skeleton, parts)
            if self.max_parts and parts > self.max_parts:
                found = (
                    f"the device shuffles across at most {self.max_parts} lanes"
                    if self.max_parts > 1 else "the device has no subgroup shuffles"
                )
            if isinstance(found, str):
                if self.parts == 0:
                    continue
                kernel = skeleton.parent_op()
                assert isinstance(kernel, vyre.KernelOp)
                raise pass_error(
                    skeleton,
                    f"vyre-split-head-dim: kernel @{kernel.sym_name.data} cannot split "
                    f"its head dims over {parts} lanes: {found}",
                )
            split(skeleton, found, parts)
