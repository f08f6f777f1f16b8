"""vyre-split-head-dim{parts=N}: split each item's head dims over N lanes.

One invocation per query row keeps the row of q and its accumulator o_acc
in registers (vyre-promote-scratch): 2 * head_dim floats, which at head_dim
128 is more than the 255 registers an invocation has, so the row spills.
With `dim_parts N` an item runs on N neighbouring lanes of one subgroup,
and lane part p keeps only its head_dim / N dims of q and o_acc
(`vyre.part_dims`: the parts take turns over chunks of `chunk` dims, so
an item's lanes read neighbouring pieces of a K/V row, in other banks of
a staged tile, each lane a whole vector load of its chunk).  The
fragments are rewritten for it:

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
head_dim is a multiple of N * chunk.
`parts=N` forces the split and reports why a skeleton does not qualify;
`parts=1` leaves every skeleton alone; `parts=0` (the default) takes the
count from the skeleton's `#vyre.plan` (vyre-plan), or, without one, asks
the tuning (`vyre_xdsl.tuning.dim_parts`): rows longer than 64 dims over
as many lanes as leave each 64, the rows of an unsplit kernel on a small
grid over two.  `chunk=C` (a power of two) deals the dims in chunks of C;
`chunk=0` (the default) takes the plan's, else the tuning's
(`vyre_xdsl.tuning.dim_chunk`: 16 bytes of a bf16 row, 4 dims otherwise).
The parts take turns over chunks rather than contiguous halves so that an
item's lanes read other banks (docs/performance.md).

Runs on vyre IR, after vyre-split-kv (a kernel split and merged in workgroup
memory is refused), before or after vyre-stage-kv-tiles (which reads a
lane's share of a row from the staged tile either way; `default` stages
first).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, memref
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, f32, i64
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl import tuning
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.plan import plan_of
from vyre_xdsl.dim_split import (
    DimLoop,
    DimLoops,
    find_dim_loops,
    loop_over_part_dims,
    split_problem,
)
from vyre_xdsl.errors import VyreError, pass_error
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.scratch_forms import scratch_name


def qualifying_loops(
    op: vyre.TiledOnlineSoftmaxOp, parts: int, chunk: int = vyre.DIM_CHUNK
) -> DimLoops | str:
    """The loops to split for `parts` parts in chunks of `chunk` dims, or why
    `op` cannot be split."""
    problem = split_problem(op, parts, op.lanes, op.splits, op.merges_in_kernel, chunk)
    return find_dim_loops(op) if problem is None else problem


def _split_loop(
    dim_loop: DimLoop, lane: SSAValue, part: SSAValue, head_dim: int, parts: int, chunk: int
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
    results = loop_over_part_dims(b, head_dim, parts, part, body, list(loop.iter_args),
                                  chunk=chunk)
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
    width = b.subgroup_width()
    total, offset = partial, 1
    while offset < parts:
        other = b.shuffle_xor(total, offset, width)
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
        for region, _ in op.named_regions():
            if role in vyre.REGION_ARGS[region]:
                values.append(op.region_arg(region, role))
        for value in values:
            hint = value.name_hint
            Rewriter.replace_value_with_new_type(value, new_type).name_hint = hint


def split(
    op: vyre.TiledOnlineSoftmaxOp, found: DimLoops, parts: int, chunk: int = vyre.DIM_CHUNK
) -> None:
    """Give `op` `dim_parts` `parts`, dealt in chunks of `chunk` dims, along
    `found`'s loops."""
    head_dim = op.shape()["head_dim"]
    for name, region, loops, are_dots in (
        ("scores", op.scores, found.dots, True),
        ("update", op.update, found.updates, False),
    ):
        lane = op.region_arg(name, "lane")
        part = _part_of(region.block, lane, parts)
        for dim_loop in loops:
            results = _split_loop(dim_loop, lane, part, head_dim, parts, chunk)
            if are_dots:
                (partial,) = results
                uses = list(partial.uses)
                total = sum_over_parts(IRBuilder(InsertPoint.after(partial.owner)), partial, parts)
                for use in uses:
                    use.operation.operands[use.index] = total
    _resize_slices(op, parts)
    op.properties["dim_parts"] = IntegerAttr(parts, i64)
    if chunk != vyre.DIM_CHUNK:
        op.properties["dim_chunk"] = IntegerAttr(chunk, i64)
    kernel = op.parent_op()
    invocations = kernel.items * parts  # every split's parts
    kernel.properties["item_count"] = IntegerAttr(invocations, i64)


@dataclass(frozen=True)
class SplitHeadDimPass(ModulePass):
    """Split each item's head dims over `parts` lanes in chunks of `chunk`
    dims (0: the recorded plan's, else the tuning's), the dot products
    added across them with gpu.shuffle."""

    name = "vyre-split-head-dim"

    parts: int = 0
    chunk: int = 0
    # the most lanes the device shuffles across (its subgroup size; 0:
    # unbounded; vyre-to-gpu passes its device profile's)
    max_parts: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.parts < 0:
            raise VyreError(
                f"vyre-split-head-dim: parts must be 0 (choose) or >= 1, got {self.parts}"
            )
        if self.chunk < 0 or self.chunk & (self.chunk - 1):
            raise VyreError(
                f"vyre-split-head-dim: chunk must be 0 (choose) or a power of two, "
                f"got {self.chunk}"
            )
        for skeleton in [s for s in op.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]:
            parts = self.parts or self.chosen_parts(skeleton)
            if parts == 1:
                continue
            chunk = self.chunk or self.chosen_chunk(skeleton)
            found = qualifying_loops(skeleton, parts, chunk)
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
            split(skeleton, found, parts, chunk)

    @staticmethod
    def chosen_chunk(skeleton: vyre.TiledOnlineSoftmaxOp) -> int:
        recorded = plan_of(skeleton)
        return recorded.dim_chunk if recorded is not None else tuning.dim_chunk(skeleton)

    def chosen_parts(self, skeleton: vyre.TiledOnlineSoftmaxOp) -> int:
        recorded = plan_of(skeleton)
        if recorded is not None:
            return recorded.dim_parts
        return tuning.dim_parts(
            skeleton, skeleton.lanes, skeleton.splits,
            skeleton.merges_in_kernel, self.max_parts,
        )
