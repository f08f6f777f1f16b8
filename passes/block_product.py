"""vyre-block-product: a tile's products as register blocks on a workgroup's
lanes.

The per-lane expansion (vyre-inline-fragments) gives each query row a lane
(or two: vyre-split-head-dim), so every K or V element that a lane reads
from workgroup memory feeds one multiply-add of one row, and shared-memory
reads bound the kernel.  This pass expands a qualifying skeleton
(vyre_xdsl.tile_products) for workgroups of `lanes` lanes instead, each
lane holding, in registers, a block of `rows` rows x `keys` keys of a
tile's scores and the same rows' accumulators for v_head_dim / `key_lanes`
of their dims:

- the workgroup's rows of Q are copied once into workgroup memory, each
  tile's K and V rows (`key_lanes * keys` keys) before the tile, behind a
  barrier;
- S: each lane's rows x keys dot products over the head dims, in order:
  each element of Q it reads feeds `keys` products, each element of K
  `rows`;
- the softmax on each lane's own scores (vyre_xdsl.recurrence): a row's
  tile max is combined over the `key_lanes` neighbouring lanes that hold its
  keys (gpu.shuffle xor), and the weights go to workgroup memory;
- P V: each lane adds, over the tile's keys in order, its rows' weights
  times its dims of each value row, and the weights' sum alongside.

A lane's rows are `row_lanes` apart, its keys `key_lanes` apart and its
dims in fours, `key_lanes` fours apart, and rows of Q and K are padded by
four elements, so that the lanes of a subgroup read different banks of
workgroup memory or the same address.  Every score, weight, sum and
comparison is the per-lane expansion's with tiles of the same size
(vyre-retile{tile_size=key_lanes*keys}): the results are bit-identical.

The skeleton qualifies as for vyre-tensor-cores (any buffer element type;
halves are read exactly into f32 tiles), with a score that is never -inf
(a dropped key's weight would multiply an infinite value), the keys
(seq_len) a multiple of the tile and the items of a workgroup's rows
(`rows * lanes / key_lanes`), v_head_dim of `4 * key_lanes`, head_dim of 4.
`vyre-block-product` leaves a skeleton that does not qualify as it is;
`{force=true}` reports why instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import gpu
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl import recurrence
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import F32_MIN
from vyre_xdsl.dialects.launch import record_skeleton
from vyre_xdsl.dialects.plan import BlockProductAttr
from vyre_xdsl.dtypes import itemsize
from vyre_xdsl.errors import pass_error
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.tile_products import Fragments, RowAccess, Unfit, clone_value, qualify
from vyre_xdsl.value_range import scores_may_be_minus_inf

VEC = 4  # elements a lane reads at once: a vec4 after vyre-vectorize-loads
PAD = VEC  # extra elements a row of the Q and K tiles (one bank group)


@dataclass(frozen=True)
class Blocking:
    """How the expansion spreads a workgroup's work: `lanes` lanes, each row
    held by `key_lanes` neighbouring lanes, each lane `rows` rows x `keys`
    keys of a tile."""

    # the plan's for one head of rows of up to 64 dims (vyre_xdsl.tuning)
    lanes: int = 128
    key_lanes: int = 8
    rows: int = 2
    keys: int = 4

    @staticmethod
    def of(attr: BlockProductAttr) -> Blocking:
        """The blocking a plan records (`#vyre.block_product`)."""
        return Blocking(attr.lanes, attr.key_lanes, attr.rows, attr.keys)

    def attr(self) -> BlockProductAttr:
        return BlockProductAttr(self.lanes, self.key_lanes, self.rows, self.keys)

    @property
    def row_lanes(self) -> int:
        """Lanes that hold different rows."""
        return self.lanes // self.key_lanes

    @property
    def workgroup_rows(self) -> int:
        return self.row_lanes * self.rows

    @property
    def tile(self) -> int:
        """Keys of a tile."""
        return self.key_lanes * self.keys

    def workgroup_bytes(self, head_dim: int, v_dim: int) -> int:
        """Q's rows, the K and V tiles and the weights, in f32."""
        padded = head_dim + PAD
        elements = (self.workgroup_rows * padded + self.tile * padded + self.tile * v_dim
                    + self.workgroup_rows * (self.tile + PAD))
        return itemsize("f32") * elements

    def problem(self) -> str | None:
        for name in ("lanes", "key_lanes", "rows", "keys"):
            if getattr(self, name) < 1:
                return f"{name} must be positive, got {getattr(self, name)}"
        if self.key_lanes & (self.key_lanes - 1) or self.lanes % self.key_lanes:
            return (f"key_lanes ({self.key_lanes}) must be a power of two that divides "
                    f"lanes ({self.lanes})")
        return None


def problem(op: vyre.TiledOnlineSoftmaxOp, blocking: Blocking = Blocking()) -> str | None:
    """Why `op` cannot be expanded as `blocking` says; None if it can."""
    if (reason := blocking.problem()) is not None:
        return reason
    if scores_may_be_minus_inf(op):
        return "its scores may be -inf (a score_mod that drops keys)"
    try:
        qualify(op, VEC, VEC * blocking.key_lanes, blocking.tile, blocking.workgroup_rows,
                blocking.workgroup_rows)
    except Unfit as unfit:
        return str(unfit)
    return None


class BlockExpansion:
    """The scf loop nest of one qualifying skeleton, emitted before it."""

    def __init__(self, op: vyre.TiledOnlineSoftmaxOp, fragments: Fragments,
                 blocking: Blocking, b: IRBuilder):
        self.op, self.f, self.blocking = op, fragments, blocking
        shape = op.shape()
        self.head_dim, self.v_dim = shape["head_dim"], op.v_dim
        self.exp2 = op.exp2 is not None
        self.count = shape["seq_len"] // blocking.tile  # tiles
        self.stride = self.head_dim + PAD  # of the Q and K tiles
        self.p_stride = blocking.tile + PAD
        rows, tile = blocking.workgroup_rows, blocking.tile
        self.q_tile, self.k_tile, self.v_tile, self.p_tile = (
            b.emit(vyre.ScratchOp(name, count)).results[0] for name, count in (
                ("block_query_tile", rows * self.stride),
                ("block_key_tile", tile * self.stride),
                ("block_value_tile", tile * self.v_dim),
                ("block_weights", rows * self.p_stride)))
        self.lane = b.emit(vyre.LaneIndexOp()).results[0]
        invocation = b.emit(vyre.ItemIndexOp()).results[0]
        self.first = b.muli(b.divui(invocation, b.index(blocking.lanes)), b.index(rows),
                            "first_row")
        row_group = b.divui(self.lane, b.index(blocking.key_lanes), "row_group")
        self.key_group = b.remui(self.lane, b.index(blocking.key_lanes), "key_group")
        # the tile rows of this lane's rows, keys and dims
        self.rows = [b.addi(row_group, b.index(i * blocking.row_lanes))
                     for i in range(blocking.rows)]
        self.keys = [b.addi(self.key_group, b.index(j * blocking.key_lanes))
                     for j in range(blocking.keys)]
        self.dims = [b.muli(b.addi(self.key_group, b.index(t * blocking.key_lanes)),
                            b.index(VEC))
                     for t in range(self.v_dim // (VEC * blocking.key_lanes))]
        self.width = b.subgroup_width()

    def emit(self, b: IRBuilder) -> None:
        op, blocking = self.op, self.blocking
        self.copy_rows(b, op.q, b.muli(self.first, b.index(self.head_dim)), self.head_dim,
                       blocking.workgroup_rows, self.q_tile, self.stride)
        o_count = blocking.rows * len(self.dims) * VEC
        state = ([b.f32(F32_MIN)] * blocking.rows + [b.f32(0.0)] * blocking.rows
                 + [b.f32(0.0)] * o_count)
        carried = b.loop(0, self.count, self.tile, state, hint="tile_idx")
        l_final, o_final = carried[blocking.rows:2 * blocking.rows], carried[2 * blocking.rows:]
        per_row = len(self.dims) * VEC
        for i, row in enumerate(self.rows):
            denominator = recurrence.final_denominator(b, l_final[i])
            at = b.muli(b.addi(self.first, row), b.index(self.v_dim))
            for n, o in enumerate(o_final[i * per_row:(i + 1) * per_row]):
                dim = b.addi(self.dims[n // VEC], b.index(n % VEC))
                b.store(recurrence.final_value(b, o, denominator), op.out, b.addi(at, dim))

    def copy_rows(self, b: IRBuilder, source: SSAValue, first: SSAValue, width: int,
                  count: int, target: SSAValue, stride: int) -> None:
        """`count` rows of `width` elements, row r at `first + r * width` of
        `source`, into `target` at `r * stride`, VEC elements a lane at a
        time (the last round guarded where it is partial)."""
        lanes, chunks = self.blocking.lanes, width // VEC
        total = count * chunks
        for t in range(-(-total // lanes)):
            n = b.addi(b.index(t * lanes), self.lane)

            def copy(b: IRBuilder, n=n) -> None:
                row = b.divui(n, b.index(chunks))
                column = b.muli(b.remui(n, b.index(chunks)), b.index(VEC))
                read = b.addi(b.addi(first, b.muli(row, b.index(width))), column)
                written = b.addi(b.muli(row, b.index(stride)), column)
                for e in range(VEC):
                    b.store(b.load(source, b.addi(read, b.index(e))), target,
                            b.addi(written, b.index(e)))

            if (t + 1) * lanes <= total:
                copy(b)
            else:
                b.if_then(b.cmpi(n, b.index(total), "ult"), copy)

    def row_start(self, b: IRBuilder, access: RowAccess, region: str, tile_start) -> SSAValue:
        """Where the workgroup's rows read key tile_start, dim 0 (the same
        for all of them: Fragments.of checked it)."""
        return access.start(b, self.op, region, self.first, self.lane, tile_start)

    def tile(self, b: IRBuilder, index: SSAValue, carried) -> list[SSAValue]:
        blocking, f = self.blocking, self.f
        rows = blocking.rows
        m, l, o = carried[:rows], carried[rows:2 * rows], carried[2 * rows:]  # noqa: E741
        start = b.muli(index, b.index(blocking.tile), "tile_start")
        for access, region, tile, width, stride in (
                (f.k, "scores", self.k_tile, self.head_dim, self.stride),
                (f.v, "update", self.v_tile, self.v_dim, self.v_dim)):
            self.copy_rows(b, access.load.memref, self.row_start(b, access, region, start),
                           width, blocking.tile, tile, stride)
        b.emit(gpu.BarrierOp())  # the tiles in place
        scores = self.scores(b)
        tile_max = [b.f32(F32_MIN)] * rows
        for i in range(rows):
            for s in scores[i]:
                tile_max[i] = recurrence.max_step(b, s, tile_max[i])
        tile_max = [self.row_total(b, t) for t in tile_max]
        m_new = [recurrence.running_max(b, t, old) for t, old in zip(tile_max, m, strict=True)]
        rescale = [recurrence.rescale_of(b, old, new, self.exp2)
                   for old, new in zip(m, m_new, strict=True)]
        for i, row in enumerate(self.rows):
            at = b.muli(row, b.index(self.p_stride))
            for key, s in zip(self.keys, scores[i], strict=True):
                b.store(recurrence.score_weight(b, s, m_new[i], self.exp2), self.p_tile,
                        b.addi(at, key))
        b.emit(gpu.BarrierOp())  # the weights in place
        sums, tile_sum = self.weighted_values(b)
        per_row = len(sums) // rows
        o_new = [b.addf(b.mulf(rescale[n // per_row], old), added)
                 for n, (old, added) in enumerate(zip(o, sums, strict=True))]
        l_new = [recurrence.next_denominator(b, scale, old, t)
                 for scale, old, t in zip(rescale, l, tile_sum, strict=True)]
        b.emit(gpu.BarrierOp())  # every read of the tiles and weights done
        return [*m_new, *l_new, *o_new]

    def scores(self, b: IRBuilder) -> list[list[SSAValue]]:
        """This lane's rows x keys scores of the staged tile: the dot
        products over the head dims, VEC at a time, then the fragment's
        epilogue."""
        blocking = self.blocking
        q_rows = [b.muli(row, b.index(self.stride)) for row in self.rows]
        k_rows = [b.muli(key, b.index(self.stride)) for key in self.keys]

        def step(b: IRBuilder, chunk, totals):
            dim = b.muli(chunk, b.index(VEC))
            q = [[b.load(self.q_tile, b.addi(b.addi(at, dim), b.index(e))) for e in range(VEC)]
                 for at in q_rows]
            k = [[b.load(self.k_tile, b.addi(b.addi(at, dim), b.index(e))) for e in range(VEC)]
                 for at in k_rows]
            totals = list(totals)
            for e in range(VEC):
                for i in range(blocking.rows):
                    for j in range(blocking.keys):
                        n = i * blocking.keys + j
                        totals[n] = b.addf(totals[n], b.mulf(q[i][e], k[j][e]))
            return totals

        dots = b.loop(0, self.head_dim // VEC, step,
                      [b.f32(0.0)] * (blocking.rows * blocking.keys), hint="dim_chunk")
        scores = [clone_value(b, self.f.score, {self.f.dot.results[0]: dot}) for dot in dots]
        return [scores[i * blocking.keys:(i + 1) * blocking.keys] for i in range(blocking.rows)]

    def row_total(self, b: IRBuilder, value: SSAValue) -> SSAValue:
        """A row's tile max over the key_lanes lanes that hold its keys."""
        mask = 1
        while mask < self.blocking.key_lanes:
            value = recurrence.max_step(b, b.shuffle_xor(value, mask, self.width), value)
            mask *= 2
        return value

    def weighted_values(self, b: IRBuilder) -> tuple[list[SSAValue], list[SSAValue]]:
        """This lane's rows x dims of the tile's weighted sum of value rows
        and its rows' sums of weights, each over the keys in order from 0."""
        blocking = self.blocking
        p_rows = [b.muli(row, b.index(self.p_stride)) for row in self.rows]
        dims = [b.addi(at, b.index(e)) for at in self.dims for e in range(VEC)]
        per_row = len(dims)

        def step(b: IRBuilder, chunk, totals):
            first_key = b.muli(chunk, b.index(VEC))
            p = [[b.load(self.p_tile, b.addi(b.addi(at, first_key), b.index(e)))
                  for e in range(VEC)] for at in p_rows]
            totals = list(totals)
            for e in range(VEC):
                at = b.muli(b.addi(first_key, b.index(e)), b.index(self.v_dim))
                v = [b.load(self.v_tile, b.addi(at, dim)) for dim in dims]
                for i in range(blocking.rows):
                    for n, value in enumerate(v):
                        k = i * per_row + n
                        totals[k] = b.addf(totals[k], b.mulf(p[i][e], value))
                    k = blocking.rows * per_row + i
                    totals[k] = b.addf(totals[k], p[i][e])
            return totals

        totals = b.loop(0, blocking.tile // VEC, step,
                        [b.f32(0.0)] * (blocking.rows * (per_row + 1)), hint="key_chunk")
        return totals[:blocking.rows * per_row], totals[blocking.rows * per_row:]


def expand(op: vyre.TiledOnlineSoftmaxOp, blocking: Blocking = Blocking()) -> None:
    """Replace `op` (which qualifies: `problem(op, blocking)` is None) by its
    expansion."""
    kernel = op.parent_op()
    assert isinstance(kernel, vyre.KernelOp)
    fragments = Fragments.of(op, blocking.workgroup_rows)
    record_skeleton(op)
    b = IRBuilder(InsertPoint.before(op))
    BlockExpansion(op, fragments, blocking, b).emit(b)
    unused = [op.q_scratch, op.score_tile, op.o_acc]
    items = op.shape()["item_count"]
    Rewriter.erase_op(op, safe_erase=False)
    for array in unused:
        if not array.uses:
            Rewriter.erase_op(array.owner)
    workgroups = items // blocking.workgroup_rows
    kernel.properties["item_count"] = IntegerAttr(workgroups * blocking.lanes, i64)
    kernel.properties["workgroup_size"] = IntegerAttr(blocking.lanes, i64)


@dataclass(frozen=True)
class BlockProductPass(ModulePass):
    """Expand every qualifying skeleton into register blocks: workgroups of
    `lanes` lanes, `key_lanes` lanes a row, each lane `rows` rows x `keys`
    keys of a tile (`force`: an error for a skeleton that does not
    qualify)."""

    name = "vyre-block-product"

    lanes: int = Blocking.lanes
    key_lanes: int = Blocking.key_lanes
    rows: int = Blocking.rows
    keys: int = Blocking.keys
    force: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        blocking = Blocking(self.lanes, self.key_lanes, self.rows, self.keys)
        if (reason := blocking.problem()) is not None:
            raise pass_error(op, f"vyre-block-product: {reason}")
        for skeleton in [s for s in op.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]:
            reason = problem(skeleton, blocking)
            if reason is None:
                expand(skeleton, blocking)
            elif self.force:
                raise pass_error(skeleton, f"vyre-block-product: this skeleton cannot be "
                                           f"expanded into register blocks: {reason}")
