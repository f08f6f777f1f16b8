"""`vyre.tiled_online_softmax`, the skeleton: the whole attention
recurrence as one op, with the decoder's fragments as regions that end in
`vyre.yield`; `vyre.tile_weight` reads a tile's softmax weight in `update`."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    I8,
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    MemRefType,
    UnitAttr,
    f32,
    i1,
    i32,
    i64,
    i8,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    opt_region_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator
from xdsl.utils.exceptions import VerifyException

from vyre_xdsl.dialects.constants import DEFAULT_LANES, U32_MAX
from vyre_xdsl.dialects.structure import check_fragment_barriers
from vyre_xdsl.dialects.vyre_checks import _int, parse_int_in_range
from vyre_xdsl.dialects.vyre_kernel import KernelOp, Skeleton
from vyre_xdsl.dialects.vyre_regions import (
    DIM_CHUNK,
    EPILOGUE_ARGS,
    MASK_ARGS,
    PROLOGUE_ARGS,
    REGION_ARGS,
    SCORES_ARGS,
    SHAPE_FIELDS,
    TILE_CLASS_NAMES,
    TILE_FULL,
    TILE_PARTIAL,
    UPDATE_ARGS,
    _parse_region_with_args,
    hook_types,
    region_types,
    tile_count_for,
)
from vyre_xdsl.dialects.vyre_skeleton_operands import verify_partials, verify_sizes


def is_empty_hook(region: Region) -> bool:
    """A hook region that only yields (printed by omission)."""
    return isinstance(region.block.first_op, YieldOp)


def trivial_hook(arg_types: Sequence[Attribute], names: Sequence[str]) -> Region:
    block = Block(arg_types=arg_types)
    for arg, arg_name in zip(block.args, names, strict=True):
        arg.name_hint = arg_name
    block.add_op(YieldOp())
    return Region(block)



@irdl_op_definition
class TiledOnlineSoftmaxOp(IRDLOperation):
    """The tiled online-softmax recurrence of SEMANTICS.md for every item.

    Per item: load the query row into `q_scratch`, then for each key tile run
    `scores` (fills `score_tile[lane*tile_size + j]` for j < tile_len), take
    the tile max, rescale, tile sum and `l`, run `update` (folds the tile's
    values into `o_acc`), and finally write `out = flush_tiny(o_acc / denom)`.

    Region arguments (all `index` but `m_new`/`rescale`: f32; scratch arrays
    are whole, a lane owns `lane * stride + offset`):
      scores(%item, %lane, %tile_start, %tile_len, %q_scratch, %score_tile)
      update(%item, %lane, %tile_start, %tile_len, %m_new, %rescale,
             %score_tile, %o_acc)
      mask(%item, %lane, %kv_idx)            (optional; yields an i1)
      prologue(%item, %lane, %q_scratch, %o_acc)
      epilogue(%item, %lane, %o_acc)

    The `prologue` runs once per item after the query row is loaded and
    `o_acc` zeroed, before the first tile; the `epilogue` after the last
    tile, before the output is written (a decoder that accumulates in
    another space projects into `o_acc` there).  Both are printed only when
    they do something; by default they only yield.

    With a `mask` region, key `kv_idx` counts for `item` only where the mask
    yields true: masked pairs enter neither the tile max, nor the tile sum,
    nor the update (the update reads weights through `vyre.tile_weight`,
    which is exactly 0 for them).  `tile_classes` (optional, i8, one entry
    per (query block of `workgroup_size` items, key tile), row-major) says
    which tiles are empty (0: skipped), full (1: no mask code) or partial
    (2: masked); without it every tile is partial.

    `exp2` (a unit property, set by vyre-use-exp2) says the scores are in
    log2 units: the recurrence then uses `math.exp2` where it uses `math.exp`.

    `kv_splits P` (set by vyre-split-kv; flash-decoding) gives each item P
    consecutive invocations of one workgroup: invocation `item * P + s`
    runs the recurrence (prologue to epilogue) over the s-th of P contiguous
    runs of tiles, and the P partial (m, l, o_acc) are merged in workgroup
    memory.  The kernel then runs `item_count * P` invocations.

    `partials(%m, %l)` (with kv_splits; set by vyre-split-kv{merge=kernel})
    leaves the merge to a later kernel (`vyre.merge_splits`): invocation i
    stores its m and l at `m[i]`, `l[i]` and its o_acc, not divided, as row
    i of `out`, which then holds item_count * P rows.  Nothing is shared
    between an item's invocations, so P need not divide the workgroup.

    `lse(%lse)` (optional) also writes each item's log-sum-exp, the natural
    log of its softmax denominator, `m + log(l)` (-inf where every key was
    dropped), to `lse[item]`.

    `kv_lens(%kv_lens) ... items_per_seq N` (optional, together): ragged
    key counts at run time.  `%kv_lens` is a read-only i32 buffer of
    item_count / N entries; item i belongs to sequence `i / N` (with
    kv_splits or dim_parts: the item, not the invocation), whose key count
    is `L = clamp(kv_lens[i / N], 0, seq_len)` (`seq_len` is then the most
    keys any sequence has).  The item runs `ceil(L / tile_size)` tiles,
    the last cut at L; a sequence of 0 keys outputs 0 (lse -inf).  The
    fragments see the same `tile_start`/`tile_len` as ever; a mask that
    depends on L loads it itself.  `tile_classes` cannot be given with it
    (a mask is evaluated on every tile: the classes would depend on L).

    `v_head_dim D` (optional; head_dim without
    it) is the width of the value rows: `o_acc` and `out` hold rows of D,
    the query rows stay head_dim wide.

    `dim_parts P` (set by vyre-split-head-dim) gives each item (each
    split, with partials) P consecutive invocations that split its head
    dims: invocation `item * P + p` (`(item * kv_splits + s) * P + p`;
    `lane % P == p`) owns the dims `part_dims(head_dim, P, p, C)`, dealt in
    chunks of C dims (`dim_chunk C`, a power of two; 4 without it), and its
    q_scratch and o_acc slices hold only those, head_dim / P each (slot i:
    the i-th of its dims).  The scores fragment must give every part the
    whole score (vyre-split-head-dim adds the parts' dot products with
    gpu.shuffle), the update fragment updates the lane's own dims; a split's
    partial o row is written by its parts, m and l by part 0.  The kernel
    then runs `item_count * kv_splits * P` invocations.

    `rows_per_lane R` (set by vyre-block-rows) gives each invocation R
    items, `g * R + r` for r < R where `g` is the invocation's item index
    above, so that a key or value one lane loads feeds R rows; each row has
    its own copy of every scratch array. The kernel then runs
    `item_count / R * kv_splits * P` invocations, and `tile_classes` are
    kept per block of `workgroup_size * R` items.

    Accessors: `shape()`, `has_mask`, `tile_class_table()`, `exp2`,
    `q/out/q_scratch/score_tile/o_acc` (operands), `scores/update/mask/
    prologue/epilogue` (regions).
    """

    name = "vyre.tiled_online_softmax"

    q = operand_def(MemRefType)
    out = operand_def(MemRefType)
    q_scratch = operand_def(MemRefType)
    score_tile = operand_def(MemRefType)
    o_acc = operand_def(MemRefType)
    # (m, l) buffers of a split whose merge is another kernel's
    partials = var_operand_def(MemRefType)
    # where the log-sum-exp of each item goes, if anywhere
    lse = opt_operand_def(MemRefType)
    # each sequence's key count at run time (i32), if ragged
    kv_lens = opt_operand_def(MemRefType)

    item_count = prop_def(IntegerAttr[I64])
    seq_len = prop_def(IntegerAttr[I64])
    head_dim = prop_def(IntegerAttr[I64])
    tile_size = prop_def(IntegerAttr[I64])
    tile_count = prop_def(IntegerAttr[I64])

    tile_classes = opt_prop_def(DenseArrayBase[I8])
    # Scores are in log2 units (log2(e) folded into them): the recurrence
    # uses exp2 (set by vyre-use-exp2).
    exp2 = opt_prop_def(UnitAttr)
    # Each item's tiles are split over this many consecutive lanes, whose
    # partial results are merged (set by vyre-split-kv).
    kv_splits = opt_prop_def(IntegerAttr[I64])
    # Each item's head dims are split over this many consecutive lanes (set
    # by vyre-split-head-dim).
    dim_parts = opt_prop_def(IntegerAttr[I64])
    # ... dealt to them in chunks of this many dims (DIM_CHUNK without it).
    dim_chunk = opt_prop_def(IntegerAttr[I64])
    # The width of the value rows (o_acc, out) where it is not head_dim.
    v_head_dim = opt_prop_def(IntegerAttr[I64])
    # Items per sequence, with kv_lens: item i's key count is kv_lens[i / N].
    items_per_seq = opt_prop_def(IntegerAttr[I64])
    # Items of one invocation, which share every load that does not depend
    # on the item (set by vyre-block-rows).
    rows_per_lane = opt_prop_def(IntegerAttr[I64])
    # Elements of score_tile per lane where they are more than tile_size:
    # the fragments' stride, which vyre-retile keeps when it shrinks the
    # tiles (lane l's scores start at l * score_stride).
    score_stride = opt_prop_def(IntegerAttr[I64])

    scores = region_def("single_block")
    update = region_def("single_block")
    prologue = region_def("single_block")
    epilogue = region_def("single_block")
    mask = opt_region_def("single_block")

    traits = traits_def(HasParent(KernelOp), Skeleton())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(
        self,
        q: SSAValue,
        out: SSAValue,
        q_scratch: SSAValue,
        score_tile: SSAValue,
        o_acc: SSAValue,
        *,
        item_count: int,
        seq_len: int,
        head_dim: int,
        tile_size: int,
        with_mask: bool = False,
        tile_classes: Sequence[int] | None = None,
        v_head_dim: int | None = None,
        lse: SSAValue | None = None,
        kv_lens: SSAValue | None = None,
        items_per_seq: int | None = None,
    ) -> None:
        scores_types, update_types = region_types(q_scratch, score_tile, o_acc)
        scores = Region(Block(arg_types=scores_types))
        update = Region(Block(arg_types=update_types))
        named = [(scores, SCORES_ARGS), (update, UPDATE_ARGS)]
        mask: list[Region] = []
        if with_mask:
            mask = [Region(Block(arg_types=[IndexType()] * 3))]
            named.append((mask[0], MASK_ARGS))
        for region, names in named:
            for arg, arg_name in zip(region.block.args, names, strict=True):
                arg.name_hint = arg_name
        prologue_types, epilogue_types = hook_types(q_scratch, o_acc)
        prologue = trivial_hook(prologue_types, PROLOGUE_ARGS)
        epilogue = trivial_hook(epilogue_types, EPILOGUE_ARGS)
        values = {
            "item_count": item_count,
            "seq_len": seq_len,
            "head_dim": head_dim,
            "tile_size": tile_size,
            "tile_count": tile_count_for(seq_len, tile_size),
        }
        properties: dict[str, Attribute] = {
            k: IntegerAttr(v, i64) for k, v in values.items()
        }
        if tile_classes is not None:
            properties["tile_classes"] = DenseArrayBase.from_list(i8, list(tile_classes))
        if v_head_dim is not None and v_head_dim != head_dim:
            properties["v_head_dim"] = IntegerAttr(v_head_dim, i64)
        if items_per_seq is not None:
            properties["items_per_seq"] = IntegerAttr(items_per_seq, i64)
        super().__init__(
            operands=[q, out, q_scratch, score_tile, o_acc, [], [lse] if lse else [],
                      [kv_lens] if kv_lens else []],
            properties=properties,
            regions=[scores, update, prologue, epilogue, mask],
        )

    def shape(self) -> dict[str, int]:
        """item_count, seq_len, head_dim, tile_size, tile_count as ints."""
        return {field: _int(getattr(self, field)) for field in SHAPE_FIELDS}

    @property
    def v_dim(self) -> int:
        """The width of the value rows: o_acc's slices and out's rows."""
        return _int(self.v_head_dim) if self.v_head_dim is not None else _int(self.head_dim)

    def set_partials(self, out: SSAValue, m: SSAValue, l: SSAValue) -> None:  # noqa: E741
        """Leave the merge to another kernel: write partial rows to `out`,
        m and l to their buffers (vyre-split-kv{merge=kernel}); the merge
        writes the log-sum-exp, if any, so the op no longer does."""
        lse: list[SSAValue] = []
        kv_lens = [self.kv_lens] if self.kv_lens is not None else []
        self.operands = [self.q, out, self.q_scratch, self.score_tile, self.o_acc, m, l,
                         *lse, *kv_lens]
        self.properties["operandSegmentSizes"] = DenseArrayBase.from_list(
            i32, [1, 1, 1, 1, 1, 2, len(lse), len(kv_lens)]
        )

    @property
    def lanes(self) -> int:
        """Lanes of the enclosing kernel's workgroups (DEFAULT_LANES while
        the op is detached)."""
        kernel = self.parent_op()
        return kernel.lanes if isinstance(kernel, KernelOp) else DEFAULT_LANES

    @property
    def scores_per_lane(self) -> int:
        """Elements of score_tile per lane: `score_stride` where vyre-retile
        shrank the tiles, else tile_size (lane l's scores start at l times
        it)."""
        stride = self.score_stride if self.score_stride is not None else self.tile_size
        return _int(stride)

    def named_regions(self) -> list[tuple[str, Region]]:
        """(name, region) of each region the op has: scores, update,
        prologue, epilogue and, where there is one, mask."""
        named = [("scores", self.scores), ("update", self.update),
                 ("prologue", self.prologue), ("epilogue", self.epilogue)]
        return named + ([("mask", self.mask)] if self.mask is not None else [])

    def region_arg(self, region: str, role: str) -> BlockArgument:
        """The argument `role` (REGION_ARGS[region], e.g. "score_tile") of
        the region named `region`."""
        return getattr(self, region).block.args[REGION_ARGS[region].index(role)]

    @property
    def hooks_empty(self) -> bool:
        """Whether the prologue and the epilogue only yield."""
        return is_empty_hook(self.prologue) and is_empty_hook(self.epilogue)

    @property
    def splits(self) -> int:
        """How many invocations share an item's tiles (1: the seed's one)."""
        return 1 if self.kv_splits is None else _int(self.kv_splits)

    @property
    def parts(self) -> int:
        """Over how many invocations an item's head dims are split (1: none)."""
        return 1 if self.dim_parts is None else _int(self.dim_parts)

    @property
    def chunk(self) -> int:
        """How many neighbouring dims a part takes in turn (dim_chunk)."""
        return DIM_CHUNK if self.dim_chunk is None else _int(self.dim_chunk)

    @property
    def lanes_per_item(self) -> int:
        """Invocations per item: its kv splits or its dim parts."""
        return self.splits * self.parts

    @property
    def rows(self) -> int:
        """Items per invocation (rows_per_lane, set by vyre-block-rows)."""
        rows = self.rows_per_lane
        return 1 if rows is None else _int(rows)

    @property
    def block_items(self) -> int:
        """Items of one query block of `tile_classes`: a workgroup's."""
        return self.lanes * self.rows

    @property
    def merges_in_kernel(self) -> bool:
        """Whether its split partials are left for a vyre.merge_splits kernel."""
        return len(self.partials) > 0

    @property
    def ragged(self) -> bool:
        """Whether each sequence's key count is read at run time (kv_lens)."""
        return self.kv_lens is not None

    @property
    def seq_items(self) -> int:
        """Items per sequence (items_per_seq), with kv_lens."""
        assert self.items_per_seq is not None
        return _int(self.items_per_seq)

    @property
    def has_mask(self) -> bool:
        """Whether the op has a `mask` region."""
        return self.mask is not None

    def tile_class_table(self) -> list[list[int]]:
        """`tile_classes` as rows [query block][tile]; every tile partial when
        the attribute is absent (empty tiles only exist with a mask)."""
        shape = self.shape()
        blocks = -(-shape["item_count"] // self.block_items)
        tiles = shape["tile_count"]
        if self.tile_classes is None:
            fill = TILE_PARTIAL if self.has_mask else TILE_FULL
            return [[fill] * tiles for _ in range(blocks)]
        flat = [int(v) for v in self.tile_classes.get_values()]
        return [flat[b * tiles : (b + 1) * tiles] for b in range(blocks)]

    # -- verification ------------------------------------------------------

    def verify_(self) -> None:
        shape = self.shape()
        for field in SHAPE_FIELDS[:4]:
            if shape[field] < 1:
                raise VerifyException(
                    f"'{field}' must be > 0, got {shape[field]}; every dimension "
                    f"of the skeleton must be positive"
                )
            if shape[field] > U32_MAX:
                raise VerifyException(
                    f"'{field}' = {shape[field]} does not fit in u32 (max {U32_MAX}); "
                    f"use a smaller value"
                )
        expected_tiles = tile_count_for(shape["seq_len"], shape["tile_size"])
        if shape["tile_count"] != expected_tiles:
            raise VerifyException(
                f"'tile_count' is {shape['tile_count']} but ceil(seq_len / tile_size)"
                f" = ceil({shape['seq_len']} / {shape['tile_size']}) = "
                f"{expected_tiles}; set tile_count {expected_tiles}"
            )
        kernel = self.parent_op()
        assert isinstance(kernel, KernelOp)
        lanes = kernel.lanes
        self._verify_splits(shape, lanes)
        self._verify_dim_parts(shape, lanes)
        self._verify_rows(shape)
        invocations = shape["item_count"] * self.lanes_per_item // self.rows
        if invocations != kernel.items:
            if self.rows > 1:
                raise VerifyException(
                    f"with rows_per_lane {self.rows} the kernel runs item_count / "
                    f"{self.rows} * {self.lanes_per_item} = {invocations} invocations, "
                    f"not {kernel.items}; set the kernel's items to that"
                )
            if self.lanes_per_item == 1:
                raise VerifyException(
                    f"'item_count' is {shape['item_count']} but the enclosing kernel "
                    f"runs {kernel.items} items; make them equal"
                )
            field, value = (
                ("kv_splits", self.splits) if self.splits > 1 else ("dim_parts", self.parts)
            )
            raise VerifyException(
                f"with {field} {value} the kernel runs item_count * "
                f"{field} = {invocations} invocations, "
                f"not {kernel.items}; set the kernel's items to that"
            )
        verify_sizes(self, shape, lanes)
        scores_types, update_types = region_types(
            self.q_scratch, self.score_tile, self.o_acc
        )
        prologue_types, epilogue_types = hook_types(self.q_scratch, self.o_acc)
        self._verify_region(self.scores, "scores", SCORES_ARGS, scores_types)
        self._verify_region(self.update, "update", UPDATE_ARGS, update_types)
        self._verify_region(self.prologue, "prologue", PROLOGUE_ARGS, prologue_types)
        self._verify_region(self.epilogue, "epilogue", EPILOGUE_ARGS, epilogue_types)
        for region in (self.scores, self.update, self.prologue, self.epilogue):
            yielded = region.block.last_op
            if isinstance(yielded, YieldOp) and yielded.values:
                raise VerifyException(
                    "the scores, update, prologue and epilogue regions end with a "
                    "plain vyre.yield (no values); only the mask region yields an i1"
                )
        check_fragment_barriers(
            [r for r in (self.scores, self.update, self.prologue, self.epilogue, self.mask)
             if r is not None],
            invocations % lanes == 0, f"{invocations} invocations, {lanes} lanes a workgroup",
        )
        if self.has_mask:
            self._verify_mask(lanes)
        elif self.tile_classes is not None:
            raise VerifyException(
                "'tile_classes' needs a mask region: without a mask every tile is full"
            )

    def _verify_splits(self, shape: dict[str, int], lanes: int) -> None:
        splits = self.splits
        if self.merges_in_kernel:
            verify_partials(self, shape)
        if splits == 1:
            return
        if self.has_mask:
            raise VerifyException(
                "'kv_splits' cannot be combined with a mask region (tile skipping "
                "is decided per block of items, not per split)"
            )
        if splits > shape["tile_count"]:
            raise VerifyException(
                f"'kv_splits' is {splits} but there are only {shape['tile_count']} "
                f"tiles to split; use at most {shape['tile_count']}"
            )
        if self.merges_in_kernel:
            return  # no workgroup merge: any split count
        if splits < 1 or lanes % splits:
            raise VerifyException(
                f"'kv_splits' is {splits}; it must divide the workgroup size "
                f"({lanes}), so that an item's splits share a workgroup"
            )
        items, per = shape["item_count"] // self.rows, "item_count"
        if self.rows > 1:
            per = f"item_count / rows_per_lane {self.rows}"
        if (items * splits) % lanes:
            raise VerifyException(
                f"with kv_splits {splits}, {per} * kv_splits = {items * splits} must "
                f"be a multiple of the workgroup size ({lanes}): every lane takes "
                f"part in the merge's barrier"
            )

    def _verify_dim_parts(self, shape: dict[str, int], lanes: int) -> None:
        parts, chunk = self.parts, self.chunk
        if self.dim_chunk is not None and self.dim_parts is None:
            raise VerifyException(
                "'dim_chunk' is given without 'dim_parts': it says how the parts "
                "deal an item's head dims"
            )
        if self.dim_parts is None:
            return
        if chunk < 1 or chunk & (chunk - 1):
            raise VerifyException(
                f"'dim_chunk' is {chunk}; it must be a power of two >= 1"
            )
        if parts < 2 or parts & (parts - 1):
            raise VerifyException(
                f"'dim_parts' is {parts}; it must be a power of two >= 2 (the "
                f"parts' dot products are added pairwise across lanes)"
            )
        if self.splits > 1 and not self.merges_in_kernel:
            raise VerifyException(
                "'dim_parts' combines with 'kv_splits' only where the splits' "
                "partials are merged by another kernel (partials(%m, %l)): the "
                "merge in workgroup memory takes whole rows"
            )
        if self.v_dim != shape["head_dim"]:
            raise VerifyException(
                f"'dim_parts' needs value rows as wide as the query rows (v_head_dim "
                f"{self.v_dim}, head_dim {shape['head_dim']}): a lane keeps the same "
                f"dims of both"
            )
        if shape["head_dim"] % (parts * chunk):
            raise VerifyException(
                f"'dim_parts' is {parts} but head_dim ({shape['head_dim']}) is not a "
                f"multiple of dim_parts * dim_chunk = {parts * chunk} (the "
                f"parts take turns over chunks of {chunk} dims)"
            )
        if lanes % parts:
            raise VerifyException(
                f"'dim_parts' is {parts}; it must divide the workgroup size "
                f"({lanes}), so that an item's parts share a subgroup"
            )
        if not self.hooks_empty:
            raise VerifyException(
                "'dim_parts' cannot be combined with a prologue or epilogue (the "
                "hooks see the whole o_acc of an item)"
            )

    def _verify_rows(self, shape: dict[str, int]) -> None:
        rows = self.rows
        if self.rows_per_lane is None:
            return
        if rows < 2 or shape["item_count"] % rows:
            raise VerifyException(
                f"'rows_per_lane' is {rows}; it must be at least 2 and divide "
                f"item_count ({shape['item_count']})"
            )
        if self.ragged and self.seq_items % rows:
            raise VerifyException(
                f"'rows_per_lane' is {rows} but items_per_seq ({self.seq_items}) is "
                f"not a multiple of it: the rows of a lane must share their sequence"
            )

    def _verify_mask(self, lanes: int) -> None:
        assert self.mask is not None
        self._verify_region(self.mask, "mask", MASK_ARGS, [IndexType()] * 3)
        yielded = self.mask.block.last_op
        assert isinstance(yielded, YieldOp)
        if len(yielded.values) != 1 or yielded.values[0].type != i1:
            raise VerifyException(
                "region 'mask' must end with `vyre.yield %keep : i1` (true keeps "
                "the (item, kv_idx) pair)"
            )
        score_tile = self.region_arg("update", "score_tile")
        if score_tile.first_use is not None:
            raise VerifyException(
                "with a mask, the update region must read weights through "
                "vyre.tile_weight (exactly 0 for masked keys), not load "
                "%score_tile itself"
            )
        if self.tile_classes is not None:
            shape = self.shape()
            blocks = -(-shape["item_count"] // self.block_items)
            wanted = blocks * shape["tile_count"]
            values = [int(v) for v in self.tile_classes.get_values()]
            if len(values) != wanted:
                raise VerifyException(
                    f"'tile_classes' has {len(values)} entries but there are "
                    f"{blocks} query blocks x {shape['tile_count']} tiles = {wanted}"
                )
            if any(v not in TILE_CLASS_NAMES for v in values):
                raise VerifyException(
                    "'tile_classes' entries must be 0 (empty), 1 (full) or 2 (partial)"
                )

    def _verify_region(
        self,
        region: Region,
        region_name: str,
        arg_names: Sequence[str],
        arg_types: Sequence[Attribute],
    ) -> None:
        block = region.block
        got = [arg.type for arg in block.args]
        if got != list(arg_types):
            expected = ", ".join(
                f"%{n}: {t}" for n, t in zip(arg_names, arg_types, strict=True)
            )
            raise VerifyException(
                f"region '{region_name}' must take ({expected}), got "
                f"({', '.join(str(t) for t in got)})"
            )
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException(
                f"region '{region_name}' must end with vyre.yield, got "
                f"{last.name if last else 'an empty block'}"
            )

    # -- custom syntax -----------------------------------------------------
    # Not an assembly_format: the regions' argument lists are untyped (their
    # types follow from the scratch operands), a hook that only yields is
    # left out and rebuilt, and the fields wrap onto their own lines.

    @classmethod
    def parse(cls, parser: Parser) -> TiledOnlineSoftmaxOp:
        operands: list[UnresolvedOperand] = []
        for keyword in ("q", "out"):
            parser.parse_keyword(keyword)
            parser.parse_punctuation("(")
            operands.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        lse: list[UnresolvedOperand] = []
        if parser.parse_optional_keyword("lse"):
            parser.parse_punctuation("(")
            lse.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        kv_lens: list[UnresolvedOperand] = []
        if parser.parse_optional_keyword("kv_lens"):
            parser.parse_punctuation("(")
            kv_lens.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        parser.parse_keyword("scratch")
        operands.extend(
            parser.parse_comma_separated_list(
                parser.Delimiter.PAREN, parser.parse_unresolved_operand
            )
        )
        if len(operands) != 5:
            parser.raise_error(
                "expected three scratch operands: (q_scratch, score_tile, o_acc)"
            )
        partials: list[UnresolvedOperand] = []
        if parser.parse_optional_keyword("partials"):
            partials = parser.parse_comma_separated_list(
                parser.Delimiter.PAREN, parser.parse_unresolved_operand
            )
        properties: dict[str, Attribute] = {}
        for field in SHAPE_FIELDS:
            parser.parse_keyword(field)
            properties[field] = IntegerAttr(parse_int_in_range(parser, field), i64)
        if parser.parse_optional_keyword("tile_classes"):
            classes = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE,
                lambda: parse_int_in_range(parser, "a tile class", -128, 127, "i8"),
            )
            properties["tile_classes"] = DenseArrayBase.from_list(i8, classes)
        if parser.parse_optional_keyword("exp2"):
            properties["exp2"] = UnitAttr()
        for field in OPTIONAL_FIELDS:
            if parser.parse_optional_keyword(field):
                properties[field] = IntegerAttr(parse_int_in_range(parser, field), i64)
        attributes = parser.parse_optional_attr_dict_with_keyword()
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, parser.parse_type
        )
        wanted = 5 + len(partials) + len(lse) + len(kv_lens)
        if len(types) != wanted:
            parser.raise_error(
                f"expected {wanted} operand types (q, out, 3 "
                f"scratch{', partials' if partials else ''}{', lse' if lse else ''}"
                f"{', kv_lens' if kv_lens else ''})"
            )
        resolved = parser.resolve_operands(
            operands + partials + lse + kv_lens, types, parser.pos
        )
        properties["operandSegmentSizes"] = DenseArrayBase.from_list(
            i32, [1, 1, 1, 1, 1, len(partials), len(lse), len(kv_lens)]
        )
        # Region argument types follow from the operands (see region_types).
        regions = []
        for region_name, arg_types in zip(
            ("scores", "update"), region_types(*resolved[2:5]), strict=True
        ):
            parser.parse_keyword(region_name)
            regions.append(_parse_region_with_args(parser, region_name, arg_types))
        mask = None
        if parser.parse_optional_keyword("mask"):
            arg_types = [IndexType()] * len(MASK_ARGS)
            mask = _parse_region_with_args(parser, "mask", arg_types)
        for (hook, names), arg_types in zip(
            (("prologue", PROLOGUE_ARGS), ("epilogue", EPILOGUE_ARGS)),
            hook_types(resolved[2], resolved[4]),
            strict=True,
        ):
            if parser.parse_optional_keyword(hook):
                regions.append(_parse_region_with_args(parser, hook, arg_types))
            else:
                regions.append(trivial_hook(arg_types, names))
        if mask is not None:
            regions.append(mask)
        return cls.create(
            operands=resolved,
            properties=properties,
            attributes=attributes.data if attributes else {},
            regions=regions,
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" q(")
        printer.print_operand(self.q)
        printer.print_string(") out(")
        printer.print_operand(self.out)
        if self.lse is not None:
            printer.print_string(") lse(")
            printer.print_operand(self.lse)
        if self.kv_lens is not None:
            printer.print_string(") kv_lens(")
            printer.print_operand(self.kv_lens)
        printer.print_string(") scratch(")
        printer.print_list(
            (self.q_scratch, self.score_tile, self.o_acc), printer.print_operand
        )
        printer.print_string(")")
        if self.merges_in_kernel:
            printer.print_string(" partials(")
            printer.print_list(self.partials, printer.print_operand)
            printer.print_string(")")
        with printer.indented(2):
            printer.print_string("\n")
            printer.print_string(
                " ".join(f"{field} {value}" for field, value in self.shape().items())
            )
            if self.tile_classes is not None:
                values = ", ".join(str(int(v)) for v in self.tile_classes.get_values())
                printer.print_string(f" tile_classes [{values}]")
            if self.exp2 is not None:
                printer.print_string(" exp2")
            for field in OPTIONAL_FIELDS:
                if (value := self.properties.get(field)) is not None:
                    printer.print_string(f" {field} {_int(value)}")
            printer.print_op_attributes(self.attributes, print_keyword=True)
            printer.print_string("\n")
            printer.print_string(": (")
            printer.print_list(self.operand_types, printer.print_attribute)
            printer.print_string(")")
        named = [("scores", self.scores), ("update", self.update)]
        if self.has_mask:
            named.append(("mask", self.mask))
        for hook_name, hook in (("prologue", self.prologue), ("epilogue", self.epilogue)):
            if not is_empty_hook(hook):
                named.append((hook_name, hook))
        for region_name, region in named:
            printer.print_string("\n")
            printer.print_string(f"{region_name}(")
            printer.print_list(
                region.block.args, lambda arg: printer.print_block_argument(arg, False)
            )
            printer.print_string(") ")
            printer.print_region(region, print_entry_block_args=False)


# The optional integer fields, in the order they are printed and parsed.
OPTIONAL_FIELDS = (
    "kv_splits", "dim_parts", "dim_chunk", "v_head_dim", "items_per_seq", "rows_per_lane",
    "score_stride",
)


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends a fragment region of vyre.tiled_online_softmax."""

    name = "vyre.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator(), HasParent(TiledOnlineSoftmaxOp))
    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, *values: SSAValue | Operation) -> None:
        super().__init__(operands=[list(values)])


@irdl_op_definition
class TileWeightOp(IRDLOperation):
    """The softmax weight of key `j` of the current tile, for use in the
    `update` region: `exp(bounded_exp_arg(score_tile[lane*tile_size + j] -
    m_new))`, and exactly 0.0 for a key the mask excludes.
    vyre-inline-fragments expands it (the recurrence owns this formula).

        %w = vyre.tile_weight %j : f32
    """

    name = "vyre.tile_weight"
    j = operand_def(IndexType)
    result = result_def(f32)
    assembly_format = "$j attr-dict `:` type($result)"

    def __init__(self, j: SSAValue | Operation) -> None:
        super().__init__(operands=[j], result_types=[f32])
        self.result.name_hint = "weight"

    def verify_(self) -> None:
        parent = self.parent_op()
        while parent is not None and not isinstance(parent, TiledOnlineSoftmaxOp):
            parent = parent.parent_op()
        if parent is None or not parent.update.is_ancestor(self):
            raise VerifyException(
                "vyre.tile_weight is only valid inside the update region of "
                "vyre.tiled_online_softmax"
            )
