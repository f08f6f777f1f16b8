"""vyre-projection-tensor-cores: a per-head matrix product on the matrix units.

MLA decode's absorbed program (vyre-absorb-mla{kernels=3}) projects every
query row into the latent space and every latent output back out of it:
for each head, a product of (sequences x depth) rows by a (depth x width)
weight matrix.  Each such kernel records the product it computes
(`#vyre.head_product`, dialects/mla.py); its own body gives each item one
output element (or a few sequences' elements of one column) summed on a
lane, so every weight element is read once a lane and feeds a few
multiply-adds.  This pass rewrites a kernel that records a product, for a
device with 16x16x16 cooperative matrices of the weights' type, into
workgroups of four subgroups of 32 lanes with MLIR's gpu.subgroup_mma ops
(f16 or bf16 in, f32 accumulated), as cuBLAS computes the absorbed PyTorch
form's batched matmuls:

- a workgroup computes `row_tiles` blocks of 16 sequences of one head at
  4 * `col_blocks` blocks of 16 columns, each subgroup `col_blocks` of
  them; a head's column blocks are neighbouring workgroups (they read the
  same source rows);
- the depth is taken in chunks of up to 64: the workgroup copies its
  rows' chunk of the source into workgroup memory in the weights' type
  (`hp_source`; rows past the last sequence as zeros, rows padded against
  bank conflicts), and, behind a barrier, each subgroup multiplies it, 16
  dims at a time, by its blocks of the weights, loaded from the buffer
  (transposed where the weights are stored [width, heads, depth]); the
  accumulators are carried by the chunk loop;
- each accumulator goes out through workgroup memory (`hp_dest`), each
  lane storing 8 of its elements to the destination, rounded once to its
  type, but for rows past the last sequence.

The source is read in the weights' 16-bit type (an f32 source, such as the
latent output o_lat, rounded to nearest even, as the absorbed PyTorch form
and FlashMLA hold it) and the sums are in the matrix unit's order, so
results are within MATRIX_TOLERANCE of the kernel's own, not bit-identical.
A kernel qualifies where it records a product whose buffers it declares
with the sizes the record implies, f16 or bf16 weights, a source and a
destination each f32 or of the weights' type, a depth a multiple of 16 and
a width a multiple of a workgroup's columns.  `vyre-projection-tensor-cores`
leaves a kernel that does not qualify as it is; `{force=true}` reports why
instead.  vyre-to-gpu's default plan takes it where the kernel qualifies on
the device, with as many row blocks a workgroup as leave the grid full
(vyre_xdsl.tuning.projection_tiling; `#vyre.projection_tensor_cores` on the
kernel).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import gpu
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, UnitAttr, f32, i64
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl import tuning
from vyre_xdsl.device import GENERIC, DeviceProfile, device_profile
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.gpu_mma import (
    MMAOperand,
    SubgroupMmaComputeOp,
    SubgroupMmaLoadMatrixOp,
    SubgroupMmaStoreMatrixOp,
)
from vyre_xdsl.dialects.mla import HEAD_PRODUCT_ATTR, HeadProductAttr
from vyre_xdsl.dialects.plan import PROJECTION_TENSOR_CORES_ATTR, ProjectionTensorCoresAttr
from vyre_xdsl.errors import pass_error
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.mma_elements import (
    F32_BYTES,
    HALF_BYTES,
    LANES,
    SUBGROUP,
    SUBGROUPS,
    MatrixElements,
    conflict_free_stride,
    half_problem,
    tile_matrix,
)
from vyre_xdsl.mma_layout import TILE
from vyre_xdsl.unrolling import DONT_UNROLL_ATTR

CHUNK = 64  # the most source dims a workgroup stages at a time


@dataclass(frozen=True)
class ProjectionTiling:
    """`row_tiles` blocks of 16 sequences a workgroup, `col_blocks` blocks
    of 16 columns a subgroup."""

    row_tiles: int = 1
    col_blocks: int = 1

    @staticmethod
    def of(attr: ProjectionTensorCoresAttr) -> ProjectionTiling:
        """The tiling a plan records (`#vyre.projection_tensor_cores`)."""
        return ProjectionTiling(attr.row_tiles, attr.col_blocks)

    def attr(self) -> ProjectionTensorCoresAttr:
        return ProjectionTensorCoresAttr(self.row_tiles, self.col_blocks)

    @property
    def rows(self) -> int:
        return TILE * self.row_tiles

    @property
    def columns(self) -> int:
        """A workgroup's columns."""
        return TILE * SUBGROUPS * self.col_blocks

    @staticmethod
    def chunk(depth: int) -> int:
        """The source dims staged at a time: the largest of 64, 32, 16 that
        divides `depth` (a multiple of 16)."""
        return next(c for c in (CHUNK, CHUNK // 2, TILE) if depth % c == 0)

    def workgroup_bytes(self, depth: int) -> int:
        """The staged source rows and each subgroup's outgoing block."""
        staged = self.rows * conflict_free_stride(self.chunk(depth))
        return HALF_BYTES * staged + F32_BYTES * SUBGROUPS * TILE * TILE

    def workgroups(self, record: HeadProductAttr) -> int:
        sequences, heads, _, width = record.dims()
        return -(-sequences // self.rows) * heads * max(width // self.columns, 1)


def record_of(kernel: vyre.KernelOp) -> HeadProductAttr | None:
    record = kernel.attributes.get(HEAD_PRODUCT_ATTR)
    return record if isinstance(record, HeadProductAttr) else None


def recorded(module: ModuleOp) -> list[vyre.KernelOp]:
    """The kernels of `module` that record a per-head product."""
    return [k for k in module.walk() if isinstance(k, vyre.KernelOp)
            and HEAD_PRODUCT_ATTR in k.attributes]


def problem(kernel: vyre.KernelOp, device: DeviceProfile,
            tiling: ProjectionTiling) -> str | None:
    """Why `kernel` cannot run its recorded product on the matrix units of
    `device`, spread as `tiling` says; None if it can."""
    record = record_of(kernel)
    if record is None:
        return "the kernel records no per-head product (#vyre.head_product)"
    if tiling.row_tiles < 1 or tiling.col_blocks < 1:
        return (f"row_tiles {tiling.row_tiles} and col_blocks {tiling.col_blocks} must be "
                f"positive")
    sequences, heads, depth, width = record.dims()
    buffers = {b.sym_name.data: b for b in kernel.buffers}
    sizes = (sequences * heads * depth, heads * depth * width, sequences * heads * width)
    for name, size in zip(record.names(), sizes, strict=True):
        buffer = buffers.get(name)
        if buffer is None:
            return f"the record names buffer '{name}', which the kernel does not declare"
        if buffer.result.type.get_shape() != (size,):
            return (f"buffer '{name}' holds {buffer.result.type.get_shape()[0]} elements, "
                    f"not the {size} the record implies")
    source, weights, dest = (buffers[n].result for n in record.names())
    if buffers[record.dest.data].access.data == "read":
        return f"buffer '{record.dest.data}' is read-only, but the product writes it"
    reason = half_problem([weights], device.matrix_shapes)
    if reason is not None:
        return reason
    half = weights.type.element_type
    for name, value in (("source", source), ("dest", dest)):
        if value.type.element_type not in (f32, half):
            return (f"the {name} must be f32 or of the weights' type ({half}), not "
                    f"{value.type.element_type}")
    if depth % TILE:
        return f"a depth of {depth}, not a multiple of {TILE}"
    if width % (TILE * tiling.col_blocks) or (width % tiling.columns
                                               and tiling.columns % width):
        return (f"a width of {width}, neither a multiple nor a divisor of a workgroup's "
                f"{tiling.columns} columns in blocks of {TILE * tiling.col_blocks} "
                f"(col_blocks {tiling.col_blocks})")
    if (used := tiling.workgroup_bytes(depth)) > device.shared_memory_bytes:
        return (f"its workgroup memory ({used} bytes) exceeds the device's "
                f"{device.shared_memory_bytes}")
    return None


class ProjectionExpansion(MatrixElements):
    """The body of one qualifying kernel, emitted at the end of its block."""

    def __init__(self, kernel: vyre.KernelOp, record: HeadProductAttr,
                 tiling: ProjectionTiling, b: IRBuilder):
        self.record, self.tiling = record, tiling
        values = {buffer.sym_name.data: buffer.result for buffer in kernel.buffers}
        self.source, self.weights, self.dest = (values[n] for n in record.names())
        self.sequences, self.heads, self.depth, self.width = record.dims()
        self.half = self.weights.type.element_type
        self.chunk = tiling.chunk(self.depth)
        self.stride = conflict_free_stride(self.chunk)
        self.staged = b.emit(vyre.ScratchOp("hp_source", tiling.rows * self.stride,
                                            self.half)).results[0]
        self.outgoing = b.emit(vyre.ScratchOp("hp_dest", SUBGROUPS * TILE * TILE,
                                              f32)).results[0]
        self.lane = b.emit(vyre.LaneIndexOp()).results[0]
        invocation = b.emit(vyre.ItemIndexOp()).results[0]
        self.group = b.divui(self.lane, b.index(SUBGROUP), "subgroup")
        self.sublane = b.remui(self.lane, b.index(SUBGROUP), "sublane")
        workgroup = b.divui(invocation, b.index(LANES))
        columns = max(self.width // tiling.columns, 1)
        column_chunk = b.remui(workgroup, b.index(columns))
        rest = b.divui(workgroup, b.index(columns))
        self.head = b.remui(rest, b.index(self.heads), "head")
        self.first = b.muli(b.divui(rest, b.index(self.heads)), b.index(tiling.rows),
                            "first_seq")
        group_columns = b.muli(self.group, b.index(TILE * tiling.col_blocks))
        # a width below the workgroup's columns: the spare subgroups repeat
        # the first ones' blocks (the barriers are the workgroup's) and
        # store nothing
        self.storing = None
        if self.width < tiling.columns:
            self.storing = b.cmpi(group_columns, b.index(self.width), "ult")
            group_columns = b.remui(group_columns, b.index(self.width))
        self.first_column = b.addi(b.muli(column_chunk, b.index(tiling.columns)),
                                   group_columns, "first_col")
        # rows past the last sequence only where the row blocks overhang it
        self.overhang = self.sequences % tiling.rows != 0

    def row(self, b: IRBuilder, sequence: SSAValue, width: int) -> SSAValue:
        """The flat index of (sequence, this head, 0) in a [sequences,
        heads, width] buffer."""
        return b.muli(b.addi(b.muli(sequence, b.index(self.heads)), self.head),
                      b.index(width))

    def emit(self, b: IRBuilder) -> None:
        c32 = tile_matrix(f32, MMAOperand.C)
        blocks = self.tiling.row_tiles * self.tiling.col_blocks
        zero = [self.constant(b, 0.0, c32) for _ in range(blocks)]
        # left rolled by the driver too: unrolled, the projection onto W_uv
        # took 1.10-1.56 times as long, W_uk's 0.98-1.11 (docs/performance.md,
        # "Thirtieth session")
        totals = b.loop(0, self.depth // self.chunk, self.chunk_step, zero, hint="chunk",
                        attributes={DONT_UNROLL_ATTR: UnitAttr()})
        self.store(b, totals)

    def chunk_step(self, b: IRBuilder, chunk: SSAValue, totals) -> list[SSAValue]:
        """One chunk of the depth: staged, then multiplied into `totals`."""
        start = b.muli(chunk, b.index(self.chunk), "chunk_start")
        b.emit(gpu.BarrierOp())  # the last chunk's rows read before they are replaced
        self.stage(b, start)
        b.emit(gpu.BarrierOp())
        a16 = tile_matrix(self.half, MMAOperand.A)
        b16 = tile_matrix(self.half, MMAOperand.B)
        k_stride, n_stride = self.record.weight_strides()
        transposed = self.record.is_transposed
        lead = self.heads * (self.depth if transposed else self.width)
        base = b.muli(self.head, b.index(self.depth if transposed else self.width))
        totals = list(totals)
        cols = self.tiling.col_blocks
        for k in range(self.chunk // TILE):
            dims = b.addi(start, b.index(k * TILE))
            operands = [b.emit(SubgroupMmaLoadMatrixOp(self.weights, [b.addi(base, b.addi(
                b.muli(dims, b.index(k_stride)),
                b.muli(b.addi(self.first_column, b.index(j * TILE)), b.index(n_stride))))],
                b16, lead, transpose=transposed)).results[0] for j in range(cols)]
            for i in range(self.tiling.row_tiles):
                rows = b.emit(SubgroupMmaLoadMatrixOp(
                    self.staged, [b.index(i * TILE * self.stride + k * TILE)], a16,
                    self.stride)).results[0]
                for j, weights in enumerate(operands):
                    totals[i * cols + j] = b.emit(SubgroupMmaComputeOp(
                        rows, weights, totals[i * cols + j])).results[0]
        return totals

    def stage(self, b: IRBuilder, start: SSAValue) -> None:
        """The workgroup's rows' source dims [start, start + chunk) into
        hp_source, in the weights' type; rows past the last sequence 0."""
        def element(b: IRBuilder, i, _):
            at = b.addi(b.muli(i, b.index(LANES)), self.lane)
            r = b.divui(at, b.index(self.chunk), "staged_row")
            dim = b.remui(at, b.index(self.chunk), "staged_dim")
            sequence = b.addi(self.first, r, "seq")
            if self.overhang:
                inside = b.cmpi(sequence, b.index(self.sequences), "ult")
                sequence = b.minui(sequence, b.index(self.sequences - 1))
            value = b.load(self.source, b.addi(self.row(b, sequence, self.depth),
                                               b.addi(start, dim)))
            if self.overhang:
                value = b.select(inside, value, b.f32(0.0))
            b.store(value, self.staged, b.addi(b.muli(r, b.index(self.stride)), dim))
            return []

        b.loop(0, self.tiling.rows * self.chunk // LANES, element, hint="staged")

    def store(self, b: IRBuilder, totals: list[SSAValue]) -> None:
        """Each accumulator through this subgroup's hp_dest block to the
        destination, 8 elements a lane."""
        block = b.muli(self.group, b.index(TILE * TILE))
        cols = self.tiling.col_blocks
        for i in range(self.tiling.row_tiles):
            for j in range(cols):
                b.emit(SubgroupMmaStoreMatrixOp(totals[i * cols + j], self.outgoing, [block],
                                                TILE))
                b.emit(gpu.BarrierOp())
                first_seq = b.addi(self.first, b.index(i * TILE))
                column = b.addi(self.first_column, b.index(j * TILE))

                def element(b: IRBuilder, t, _, first_seq=first_seq, column=column):
                    at = b.addi(b.muli(t, b.index(SUBGROUP)), self.sublane)
                    sequence = b.addi(first_seq, b.divui(at, b.index(TILE)), "seq")

                    def put(b: IRBuilder) -> None:
                        value = b.load(self.outgoing, b.addi(block, at))
                        b.store(value, self.dest, b.addi(
                            self.row(b, sequence, self.width),
                            b.addi(column, b.remui(at, b.index(TILE)))))

                    keep = b.cmpi(sequence, b.index(self.sequences), "ult") \
                        if self.overhang else None
                    if self.storing is not None:
                        keep = self.storing if keep is None else b.andi(keep, self.storing)
                    if keep is None:
                        put(b)
                    else:
                        b.if_then(keep, put)
                    return []

                b.loop(0, TILE * TILE // SUBGROUP, element, hint="out")
                b.emit(gpu.BarrierOp())  # read before the next block replaces it


def expand(kernel: vyre.KernelOp, tiling: ProjectionTiling) -> None:
    """Rewrite `kernel` (which qualifies) into its product on the matrix
    units, spread as `tiling` says."""
    record = record_of(kernel)
    assert record is not None
    for op in reversed([op for op in kernel.body.block.ops
                        if not isinstance(op, vyre.BufferOp)]):
        Rewriter.erase_op(op, safe_erase=False)
    del kernel.attributes[HEAD_PRODUCT_ATTR]  # the body no longer sums in its order
    kernel.attributes.pop(PROJECTION_TENSOR_CORES_ATTR, None)
    b = IRBuilder(InsertPoint.at_end(kernel.body.block))
    ProjectionExpansion(kernel, record, tiling, b).emit(b)
    kernel.properties["item_count"] = IntegerAttr(tiling.workgroups(record) * LANES, i64)
    kernel.properties["workgroup_size"] = IntegerAttr(LANES, i64)


def device_tiling(kernel: vyre.KernelOp, row_tiles: int = 0,
                  col_blocks: int = 0) -> ProjectionTiling:
    """The tiling given, its zeros the tuning's (vyre_xdsl.tuning.projection_tiling)."""
    record = record_of(kernel)
    if record is None:  # nothing to tile: problem() says so
        return ProjectionTiling(row_tiles or 1, col_blocks or 1)
    sequences, heads, _, width = record.dims()
    columns = ProjectionTiling(1, col_blocks or tuning.PROJECTION_COL_BLOCKS).columns
    chosen = tuning.projection_tiling(sequences, heads * max(width // columns, 1))
    return ProjectionTiling(row_tiles or chosen[0], col_blocks or chosen[1])


@dataclass(frozen=True)
class ProjectionTensorCoresPass(ModulePass):
    """Rewrite every kernel that records a per-head product
    (`#vyre.head_product`) onto the subgroup matrix ops of `device` (a
    profile name, vyre_xdsl.device): `row_tiles` blocks of 16 sequences a
    workgroup, `col_blocks` blocks of 16 columns a subgroup (0: the
    tuning's); `force`: an error for a kernel that does not qualify."""

    name = "vyre-projection-tensor-cores"

    device: str = GENERIC.name
    row_tiles: int = 0
    col_blocks: int = 0
    force: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        device = device_profile(self.device)
        kernels = recorded(op)
        if self.force and not kernels:
            raise pass_error(op, f"{self.name}: force=true, but no vyre.kernel records a "
                                 f"per-head product (#vyre.head_product); run it on vyre IR "
                                 f"after vyre-absorb-mla{{kernels=3}}, before vyre-to-gpu")
        for kernel in kernels:
            tiling = device_tiling(kernel, self.row_tiles, self.col_blocks)
            reason = problem(kernel, device, tiling)
            if reason is None:
                expand(kernel, tiling)
            elif self.force:
                raise pass_error(kernel, f"{self.name}: this kernel's product cannot run on "
                                         f"subgroup matrix ops: {reason}")
