"""vyre-stage-kv-tiles: the lanes of a workgroup load each key/value tile
into workgroup memory once, and every row of the workgroup reads it there.

In the seed's layout every lane reads the rows of K and V it needs straight
from the storage buffer, so a workgroup of 64 rows fetches each tile 64
times, through caches, with a global-memory latency on each read.  This is
FlashAttention-2's cooperative tile: at the start of a fragment, after a
barrier, the lanes copy the tile's rows of a buffer into a workgroup array
(lane l copies elements l, l + 64, ...: coalesced), and after a second
barrier the fragment's loads read that copy.

A fragment load of a read-only buffer is staged when its index is provably
`(row_base + tile_start + key) * L + column` with
- `row_base` the same for every lane of a workgroup (built from constants,
  tile_start, tile_len and `item / c` with c a multiple of the workgroup
  size, e.g. the kv head of grouped-query attention),
- `key` the index of a loop over `0 .. tile_len` (or absent), and
- `column` a sum of non-negative multiples of loop indices and of other
  bounded values (a lane's part, vyre-split-head-dim) plus a constant,
  provably in `0 .. L-1`,
so it reads row `key` of the tile; all loads of one buffer in one fragment
must agree on `L` and `row_base`.  Every lane must then reach the barriers:
the kernel's item count must be a multiple of its workgroup size (and its
tiles not split over lanes, vyre-split-kv, nor counted at run time,
kv_lens: such skeletons are left alone).  The
staged tiles of a fragment must fit `shared_memory_bytes` (the H200's and
most GPUs' Vulkan `maxComputeSharedMemorySize`, 48 KiB, by default; the
scores and update fragments reuse the same array).

The stage holds f32: a tile of an f16 or bf16 buffer is copied widened
(arith.extf, exact) and the fragment's widenings of its loads go away.
The values read are the same, so results are bit-identical.  The
fragment's loads of the tile are then neighbours in workgroup memory, which
vyre-vectorize-loads reads as vec4: that is what makes staging pay
(docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, gpu, memref
from xdsl.dialects.builtin import ModuleOp, f32
from xdsl.ir import Block, BlockArgument, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl.device import H200
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.launch import SCRATCH_ATTR, ScratchRole, ScratchRoleAttr
from vyre_xdsl.dtypes import is_half
from vyre_xdsl.errors import VyreError
from vyre_xdsl.index_forms import linear_index
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.loop_bounds import constant_index, loop_of, upper_bound

STAGE_NAME = "kv_tile"
_UNIFORM_OPS = (
    arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.DivUIOp, arith.RemUIOp,
    arith.MinUIOp, arith.MaxUIOp,
)


@dataclass(frozen=True)
class FragmentArgs:
    item: SSAValue
    lane: SSAValue
    tile_start: SSAValue
    tile_len: SSAValue


def _fragment_args(region: Region, names: tuple[str, ...]) -> FragmentArgs:
    args = dict(zip(names, region.block.args, strict=True))
    return FragmentArgs(args["item"], args["lane"], args["tile_start"], args["tile_len"])


def workgroup_uniform(value: SSAValue, args: FragmentArgs, lanes: int) -> bool:
    """Whether `value` is provably the same for every lane of a workgroup
    (all of whose lanes are items)."""
    if constant_index(value) is not None or value in (args.tile_start, args.tile_len):
        return True
    if isinstance(value, BlockArgument):
        return False
    op = value.owner
    if isinstance(op, arith.DivUIOp) and op.lhs == args.item:
        divisor = constant_index(op.rhs)
        return divisor is not None and divisor > 0 and divisor % lanes == 0
    if isinstance(op, _UNIFORM_OPS):
        return all(workgroup_uniform(operand, args, lanes) for operand in op.operands)
    return False


@dataclass(frozen=True)
class TileRead:
    """A load of `(row_base + tile_start + key) * row_length + column + offset`,
    `column` the sum of `columns` (value, coefficient)."""

    load: memref.LoadOp
    row_length: int
    row_base: tuple[tuple[SSAValue, int], ...]  # uniform values, coefficient in rows
    key: SSAValue | None
    columns: tuple[tuple[SSAValue, int], ...]
    offset: int


def _range_of(value: SSAValue) -> tuple[int, int] | None:
    """The smallest and largest value an index term can take, if known: a
    loop index with constant bounds and step 1, or a value with an upper
    bound (indices are unsigned)."""
    loop = loop_of(value)
    if loop is not None:
        lower, upper = constant_index(loop.lb), constant_index(loop.ub)
        if lower is None or upper is None or constant_index(loop.step) != 1:
            return None
        return lower, upper - 1
    top = upper_bound(value)
    return None if top is None else (0, top)


def widened_only(load: memref.LoadOp) -> bool:
    """Whether every use of the load is a widening to f32 (always so for an
    f32 load, which needs none; a load of an f16 or bf16 buffer is staged as
    the f32 values its widenings give)."""
    if not is_half(load.res.type):
        return True
    return all(
        isinstance(use.operation, arith.ExtFOp) and use.operation.result.type == f32
        for use in load.res.uses
    )


def tile_read(load: memref.LoadOp, args: FragmentArgs, lanes: int) -> TileRead | None:
    """`load` as a read of a row of the current tile, if provably one."""
    if not widened_only(load):
        return None
    form = linear_index(load.indices[0])
    terms = dict(form.terms)
    row_length = terms.pop(args.tile_start, 0)
    if row_length <= 0:
        return None
    row_base, key, columns = [], None, []
    low = high = form.constant
    for value, coefficient in terms.items():
        loop = loop_of(value)
        if workgroup_uniform(value, args, lanes):
            if coefficient % row_length:
                return None
            row_base.append((value, coefficient // row_length))
        elif (
            loop is not None and key is None and coefficient == row_length
            and constant_index(loop.lb) == 0 and constant_index(loop.step) == 1
            and loop.ub == args.tile_len
        ):
            key = value
        elif coefficient > 0 and (bounds := _range_of(value)) is not None:
            columns.append((value, coefficient))
            low += coefficient * bounds[0]
            high += coefficient * bounds[1]
        else:
            return None
    if low < 0 or high >= row_length:
        return None
    return TileRead(load, row_length, tuple(row_base), key, tuple(columns), form.constant)


@dataclass
class StagedBuffer:
    buffer: SSAValue
    reads: list[TileRead]
    offset: int = 0  # first element of its tile in the stage array

    @property
    def row_length(self) -> int:
        return self.reads[0].row_length


def staged_buffers(
    region: Region, args: FragmentArgs, lanes: int, read_only: set[SSAValue]
) -> list[StagedBuffer]:
    """The read-only buffers all of whose loads in `region` read the tile."""
    loads: dict[SSAValue, list[memref.LoadOp]] = {}
    for op in region.walk():
        if isinstance(op, memref.LoadOp) and op.memref in read_only:
            loads.setdefault(op.memref, []).append(op)
    staged = []
    for buffer, buffer_loads in loads.items():
        reads = [tile_read(load, args, lanes) for load in buffer_loads]
        if any(r is None for r in reads):
            continue
        shapes = {(r.row_length, frozenset(r.row_base)) for r in reads}  # type: ignore[union-attr]
        if len(shapes) == 1:
            staged.append(StagedBuffer(buffer, reads))  # type: ignore[arg-type]
    return staged


def _clone_slice(b: IRBuilder, value: SSAValue, block: Block, cloned: dict) -> SSAValue:
    """`value` recomputed at `b` (it depends only on `block`'s arguments,
    constants and values from outside the block)."""
    if value in cloned:
        return cloned[value]
    if isinstance(value, BlockArgument) or value.owner.parent_block() is None:
        return value
    op = value.owner
    if not block.is_ancestor(op):
        return value
    operands = [_clone_slice(b, operand, block, cloned) for operand in op.operands]
    copy = op.clone({old: new for old, new in zip(op.operands, operands)})
    b.emit(copy)
    for old, new in zip(op.results, copy.results):
        cloned[old] = new
    return cloned[value]


def _emit_copy(
    b: IRBuilder, staged: StagedBuffer, stage: SSAValue, args: FragmentArgs,
    tile_size: int, lanes: int, block: Block,
) -> None:
    """Lanes copy the tile's rows of the buffer into `stage` (coalesced)."""
    cloned: dict = {}
    length = staged.row_length
    first_row = args.tile_start
    for value, rows in staged.reads[0].row_base:
        term = _clone_slice(b, value, block, cloned)
        first_row = b.addi(first_row, term if rows == 1 else b.muli(term, b.index(rows)))
    source = b.muli(first_row, b.index(length), "tile_base")
    count = b.muli(args.tile_len, b.index(length), "tile_elements")
    rounds = -(-tile_size * length // lanes)

    def copy_round(b: IRBuilder, r, _):
        element = b.addi(b.muli(r, b.index(lanes)), args.lane)

        def copy(b: IRBuilder) -> None:
            value = b.load(staged.buffer, b.addi(source, element))
            b.store(value, stage, b.addi(b.index(staged.offset), element))

        b.if_then(b.cmpi(element, count, "ult"), copy)
        return []

    b.loop(0, rounds, copy_round, hint="copy")


def _redirect(read: TileRead, stage: SSAValue, offset: int) -> None:
    """The load reads element `key * L + column + offset` of the staged tile."""
    b = IRBuilder(InsertPoint.before(read.load))
    index = b.index(offset + read.offset)
    if read.key is not None:
        index = b.addi(b.muli(read.key, b.index(read.row_length)), index)
    for value, coefficient in read.columns:
        index = b.addi(index, value if coefficient == 1 else b.muli(value, b.index(coefficient)))
    new_load = b.load(stage, index)
    new_load.name_hint = read.load.res.name_hint
    if is_half(read.load.res.type):  # the stage holds the widened values
        for use in list(read.load.res.uses):
            use.operation.results[0].replace_all_uses_with(new_load)
            Rewriter.erase_op(use.operation)
    read.load.res.replace_all_uses_with(new_load)
    Rewriter.erase_op(read.load)


@dataclass(frozen=True)
class StageKvTilesPass(ModulePass):
    """Copy each key/value tile a fragment reads into workgroup memory once
    per workgroup (barrier-synchronised); results are bit-identical."""

    name = "vyre-stage-kv-tiles"

    # the H200's and most GPUs' maxComputeSharedMemorySize
    shared_memory_bytes: int = H200.shared_memory_bytes

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.shared_memory_bytes < 0:
            raise VyreError(
                f"vyre-stage-kv-tiles: shared_memory_bytes must be >= 0, got "
                f"{self.shared_memory_bytes}"
            )
        for skeleton in [s for s in op.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]:
            self.stage(skeleton)

    def stage(self, op: vyre.TiledOnlineSoftmaxOp) -> None:
        kernel = op.parent_op()
        assert isinstance(kernel, vyre.KernelOp)
        lanes = kernel.lanes
        shape = op.shape()
        if (shape["item_count"] * op.lanes_per_item) % lanes:
            return  # some lanes would skip the barriers
        if op.splits > 1:
            return  # the lanes of a workgroup work on different tiles
        if op.ragged:
            # kv_lens: the lanes of a workgroup may run different numbers of
            # tiles (their sequences' lengths), so not every lane would reach
            # a barrier in the tile loop; paged rows are not provable either
            return
        read_only = {
            b.result for b in kernel.body.walk()
            if isinstance(b, vyre.BufferOp) and not b.is_output
        }
        plans = []
        for region, names in ((op.scores, vyre.SCORES_ARGS), (op.update, vyre.UPDATE_ARGS)):
            args = _fragment_args(region, names)
            buffers = staged_buffers(region, args, lanes, read_only)
            budget = self.shared_memory_bytes // 4
            buffers.sort(key=lambda s: s.row_length)
            kept, used = [], 0
            for staged in buffers:
                size = shape["tile_size"] * staged.row_length
                if used + size <= budget:
                    staged.offset = used
                    kept.append(staged)
                    used += size
            if kept:
                plans.append((region, args, kept, used))
        if not plans:
            return
        size = max(used for *_, used in plans)
        stage_op = vyre.ScratchOp(STAGE_NAME, size)
        stage_op.attributes[SCRATCH_ATTR] = ScratchRoleAttr(ScratchRole.KV_TILE)
        Rewriter.insert_op(stage_op, InsertPoint.before(op))
        stage = stage_op.result
        for region, args, kept, _ in plans:
            block = region.block
            b = IRBuilder(InsertPoint.at_start(block))
            b.emit(gpu.BarrierOp())  # earlier readers of the array are done
            for staged in kept:
                _emit_copy(b, staged, stage, args, shape["tile_size"], lanes, block)
            b.emit(gpu.BarrierOp())  # the whole tile is in place
            for staged in kept:
                for read in staged.reads:
                    _redirect(read, stage, staged.offset)
