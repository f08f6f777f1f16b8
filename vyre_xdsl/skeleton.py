"""Build a `vyre.kernel` around the one tiled online-softmax skeleton.

A decoder is only its two fragments: `tiled_online_softmax` declares the
buffers and scratch, creates the `vyre.tiled_online_softmax` op and lets the
`scores` and `update` callbacks fill its two regions.  The recurrence itself
is not built here: `vyre-inline-fragments` expands it, once, for everyone.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import VerifyException

from vyre_xdsl import trace
from vyre_xdsl.checks import (
    check_binding,
    check_callable,
    check_dimensions,
    check_identifier,
    check_kernel_name,
    check_mapping,
    check_module,
    check_sequence,
    check_shape,
    check_u32_size,
    checked_call,
)
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import DEFAULT_LANES as WORKGROUP_SIZE
from vyre_xdsl.dtypes import check_dtype, element_type
from vyre_xdsl.errors import VyreError
from vyre_xdsl.ir_builder import IRBuilder, Value
from vyre_xdsl.trace import Traced
from vyre_xdsl.traced import f32_number


@dataclass(frozen=True)
class Buffer:
    """A storage buffer of a kernel: `access` is "read" (input), "write"
    (output) or "temp" (between the kernels of a module); `shape` is its
    logical row-major shape; `binding` defaults to its place in the list;
    `dtype` ("f32", "f16" or "bf16") is its element type, by default the
    kernel's (`tiled_online_softmax(dtype=...)`, f32 unless given); "i32"
    makes a read-only buffer of integers (lengths, page tables: fragments
    read an element as an index with `f.load_index`)."""

    name: str
    shape: tuple[int, ...]
    access: str = "read"
    binding: int | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        # Checked here, where users write them: a bad field never reaches xDSL.
        name = check_identifier("buffer name", self.name)
        object.__setattr__(self, "shape", check_shape(self.shape, name))
        if not isinstance(self.access, str) or self.access not in vyre.ACCESS_MODES:
            raise VyreError(
                f"access of buffer {name!r} must be \"read\" (an input), \"write\" "
                f"(an output) or \"temp\" (between the kernels of a module), got "
                f"{self.access!r}"
            )
        object.__setattr__(self, "binding", check_binding(self.binding, name))
        if self.dtype is not None:
            check_dtype(self.dtype, f"the dtype of buffer {self.name!r}", allow_int=True)
            if self.dtype == "i32" and self.access != "read":
                raise VyreError(
                    f"buffer {name!r} holds i32 and has access {self.access!r}; "
                    f"integer buffers are inputs only (access \"read\")"
                )


def declare_buffers(
    body: IRBuilder, buffers: Sequence[Buffer], dtype: str = "f32"
) -> dict[str, SSAValue]:
    """Emit a vyre.buffer per entry of `buffers` (of element type `dtype`
    where a buffer does not give its own); return their values by name."""
    values: dict[str, SSAValue] = {}
    for index, buffer in enumerate(buffers):
        binding = index if buffer.binding is None else buffer.binding
        element = element_type(buffer.dtype or dtype)
        values[buffer.name] = body.emit(
            vyre.BufferOp(buffer.name, binding, buffer.access, buffer.shape, element)
        ).results[0]
    return values


def per_item_kernel(
    name: str,
    buffers: Sequence[Buffer],
    item_count: int,
    body: Callable[[IRBuilder, dict[str, SSAValue], SSAValue], None],
    dtype: str = "f32",
) -> vyre.KernelOp:
    """A kernel without the skeleton: `body(b, buffers, item)` runs once per
    item (the lanes past `item_count` in the last workgroup do nothing)."""
    kernel = vyre.KernelOp(check_kernel_name(name), item_count, WORKGROUP_SIZE)
    b = IRBuilder(InsertPoint.at_end(kernel.body.block))
    values = declare_buffers(b, buffers, check_dtype(dtype))
    item = b.emit(vyre.ItemIndexOp()).results[0]
    if item_count % WORKGROUP_SIZE:
        b.if_then(b.cmpi(item, b.index(item_count), "ult"), lambda b: body(b, values, item))
    else:
        body(b, values, item)
    return kernel


class Fragment(IRBuilder):
    """What a fragment callback builds with: an `IRBuilder` at the end of
    the region, the region's arguments by name, and the kernel's buffers.

    `scores` fragments see item, lane, tile_start, tile_len, q_scratch,
    score_tile; `update` fragments see item, lane, tile_start, tile_len,
    m_new, rescale, score_tile, o_acc; `prologue` fragments item, lane,
    q_scratch, o_acc; `epilogue` fragments item, lane, o_acc.  All see the
    decoder's own per-lane
    scratch arrays (`tiled_online_softmax(scratch=...)`) through
    `f.scratch(name)` and `f.scratch_index(name, offset)`.  Region
    arguments are SSA values; `f.traced(x)` (or `vx.wrap(x)`) makes a
    traced handle of one, so Python operators and `vx.where`/`vx.exp`/...
    build IR; `load`, `store` and index arguments accept traced integers.
    Update fragments read a key's
    softmax weight with `f.weight(j)` (exactly 0 for a masked key; a kept
    key's weight is > 0).  With a mask, add `select(weight == 0, 0, weight *
    value)` rather than `weight * value`: 0 * inf is NaN, while a skipped
    empty tile adds nothing."""

    def __init__(
        self,
        region_args: Sequence[SSAValue],
        arg_names: Sequence[str],
        buffers: dict[str, SSAValue],
        shape: dict[str, int],
        insertion_point: InsertPoint,
        scratch: dict[str, tuple[SSAValue, int]] | None = None,
        captures: Captures | None = None,
    ) -> None:
        super().__init__(insertion_point)
        self.captures = captures
        self.args = dict(zip(arg_names, region_args, strict=True))
        self.buffers = buffers
        self.scratch_arrays = dict(scratch or {})
        self.head_dim = shape["head_dim"]
        self.v_head_dim = shape.get("v_head_dim", self.head_dim)
        self.tile_size = shape["tile_size"]
        self.seq_len = shape["seq_len"]

    def __getattr__(self, name: str) -> SSAValue:
        args = self.__dict__.get("args", {})
        if name in args:
            return args[name]
        if name.startswith("__") or not args:
            raise AttributeError(name)  # copy/pickle probing, not the user
        where = ""
        for kind, kind_args in (("update", vyre.UPDATE_ARGS), ("scores", vyre.SCORES_ARGS),
                                ("prologue", vyre.PROLOGUE_ARGS),
                                ("epilogue", vyre.EPILOGUE_ARGS)):
            if name in kind_args:
                where = f" ({name!r} is an argument of {kind} fragments)"
                break
        raise FragmentAttributeError(
            f"a fragment has no {name!r}{where}; this one has {', '.join(args)}, "
            f".buffer(name) and .scratch(name) (at {trace.user_location()})"
        )

    def buffer(self, name: str) -> SSAValue:
        if name not in self.buffers:
            raise VyreError(
                f"the fragment reads buffer {name!r}, which the kernel does not "
                f"declare; declared buffers: {', '.join(self.buffers)} (at "
                f"{trace.user_location()})"
            )
        return self.buffers[name]

    def scratch(self, name: str) -> SSAValue:
        """The decoder's own scratch array `name` (whole: a lane owns
        `scratch_index(name, offset)` for offset < its per-lane length)."""
        if name not in self.scratch_arrays:
            declared = ", ".join(self.scratch_arrays) or "none"
            raise VyreError(
                f"the fragment uses scratch array {name!r}, which the kernel does "
                f"not declare (declare it with tiled_online_softmax(scratch="
                f"{{{name!r}: per_lane_length}}); declared: {declared}) (at "
                f"{trace.user_location()})"
            )
        return self.scratch_arrays[name][0]

    def scratch_index(self, name: str, offset: Value) -> SSAValue:
        """`lane * per_lane_length + offset`: this lane's element `offset` of
        the decoder's scratch array `name`."""
        self.scratch(name)
        return self.flat_index(self.lane, self.scratch_arrays[name][1], offset)

    def captured_buffer(self, table: trace.Table) -> SSAValue:
        """The read buffer holding a captured table (declared at its first
        use; vx.run passes its data)."""
        if self.captures is None:
            raise VyreError(
                f"a captured table is indexed in a fragment of a kernel that cannot "
                f"declare buffers for it (at {trace.user_location()})"
            )
        return self.captures.buffer(table)

    def traced(self, value: Value) -> Traced:
        """A traced handle of an SSA value (index values become i32 ints)."""
        return trace.wrap(value)

    def weight(self, j: Value) -> SSAValue:
        """The softmax weight of key `j` of the tile (update fragments):
        `exp(bounded_exp_arg(s[j] - m_new))`, exactly 0.0 if masked."""
        if "m_new" not in self.args:
            raise VyreError(
                f"f.weight(j) is only available in update fragments (at "
                f"{trace.user_location()})"
            )
        return self._result(vyre.TileWeightOp(self._index_value(j)))

    def _index_value(self, value: Value) -> SSAValue:
        from vyre_xdsl.ir_builder import _index

        return _index(value)

    # The lane's slice of each scratch array (the seed's `scratch_index`).
    def q_index(self, d: Value) -> SSAValue:
        return self.flat_index(self.lane, self.head_dim, d)

    def o_index(self, d: Value) -> SSAValue:
        return self.flat_index(self.lane, self.v_head_dim, d)

    def score_index(self, j: Value) -> SSAValue:
        return self.flat_index(self.lane, self.tile_size, j)


class FragmentAttributeError(VyreError, AttributeError):
    """A fragment argument this kind of fragment does not have (an
    AttributeError too, so that hasattr() keeps working)."""


class Captures:
    """The read buffers that captured tables (trace.Table) become: declared
    in the kernel before the skeleton at a table's first use, bound after
    the kernel's own buffers, their data recorded on the op as
    `vyre.captured` (vx.run passes it; the lowering copies it into the
    kernel's `#vyre.buffer` as `data`)."""

    ATTR = "vyre.captured"

    def __init__(self, skeleton, values: dict[str, SSAValue]) -> None:
        self.skeleton = skeleton
        self.values = values
        self.by_table: dict[int, SSAValue] = {}
        kernel = skeleton.parent_op()
        self.next_binding = 1 + max(
            (b.binding.value.data for b in kernel.buffers), default=-1
        )

    def buffer(self, table: trace.Table) -> SSAValue:
        from xdsl.dialects.builtin import DenseArrayBase, f32, i32

        key = id(table.array)
        if key not in self.by_table:
            index = len(self.by_table)
            name = f"captured_{index}"
            while name in self.values:
                index += 1
                name = f"captured_{index}"
            element = f32 if table.kind == "f32" else i32
            op = vyre.BufferOp(name, self.next_binding, "read", table.shape, element)
            op.attributes[self.ATTR] = DenseArrayBase.from_list(
                element, table.values.tolist()
            )
            self.next_binding += 1
            self.skeleton.parent_block().insert_op_before(op, self.skeleton)
            self.values[name] = self.by_table[key] = op.result
            self._keep_alive = getattr(self, "_keep_alive", []) + [table]
        return self.by_table[key]


FragmentFn = Callable[[Fragment], None]
# mask(item, kv_idx) -> bool, over traced integer handles
MaskFn = Callable[[Traced, Traced], Traced]


def tiled_online_softmax(
    name: str,
    buffers: Sequence[Buffer],
    *,
    item_count: int,
    seq_len: int,
    head_dim: int,
    tile_size: int = 64,
    scores: FragmentFn,
    update: FragmentFn,
    q: str = "q",
    out: str = "out",
    mask: MaskFn | None = None,
    scratch: Mapping[str, int] | None = None,
    prologue: FragmentFn | None = None,
    epilogue: FragmentFn | None = None,
    dtype: str = "f32",
    v_head_dim: int | None = None,
    lse: str | None = None,
    kv_lens: str | None = None,
    items_per_seq: int | None = None,
    mask_period: int | None = None,
) -> ModuleOp:
    """A verified module holding one `vyre.kernel` named `name`: storage
    `buffers` (bound in the order given), the three scratch arrays, and the
    skeleton with the `scores` and `update` fragments.  `q` names the buffer
    whose rows are the items' queries, `out` the output buffer.

    `dtype` ("f32", "f16" or "bf16") is the element type of the buffers that
    do not give their own (`Buffer(..., dtype=...)`).  Fragments and the
    recurrence compute in f32 whatever it is: `f.load` of a half buffer
    widens the value exactly (arith.extf), and `f.store` of an f32 value to
    one, like the skeleton's write of the output, rounds it once to nearest
    even (arith.truncf).

    `scratch` declares the decoder's own per-lane scratch arrays, name ->
    per-lane length (e.g. `{"q_lat": kv_lora_rank}`): each holds
    `workgroup_size * length` f32 and a lane owns `lane * length + offset`
    (`f.scratch_index(name, offset)`), like the skeleton's three, so that
    vyre-promote-scratch makes them private.  Both fragments may use them;
    nothing initialises them.

    `prologue` (sees item, lane, q_scratch, o_acc) runs once per item before
    the first tile, after the query row is loaded and o_acc zeroed;
    `epilogue` (sees item, lane, o_acc) after the last tile, before the
    output `o_acc / denom` is written: a decoder that accumulates in its own
    scratch (absorbed MLA) initialises it in one and projects into o_acc in
    the other.

    `mask(item, kv_idx) -> bool` (traced integers; True keeps the pair) adds
    the mask region; it is also evaluated with numpy over every (item, key)
    pair at build time to classify each (block of 64 items, key tile) as
    empty, full or partial (`tile_classes`), unless that would take more
    than CLASSIFY_BUDGET evaluations or a table of more than TABLE_BUDGET
    entries: then every tile is partial (the mask is evaluated per key at
    run time; nothing is skipped), so that building never grows with the
    square of the sequence past that.  `mask_period` P says that `mask`
    sees the item only through `item % P` (a mask_mod without the head:
    P = seq_len), so one period of blocks is evaluated and repeated.

    A `tile_size` above `seq_len` is taken as `seq_len`: one tile of every
    key, the same sums.

    `v_head_dim` (default head_dim) is the width of the value rows: o_acc's
    lane slices and the rows of `out`. `lse` names a write buffer of
    item_count f32 that receives each item's log-sum-exp.

    `kv_lens` names a read i32 buffer of item_count / items_per_seq key
    counts, one per sequence of `items_per_seq` consecutive items: item i
    then runs over `clamp(kv_lens[i // items_per_seq], 0, seq_len)` keys
    only (tiles past it skipped at run time, the last one cut), and a
    `mask` is evaluated on every tile (no compile-time tile classes)."""
    check_kernel_name(name)
    dtype = check_dtype(dtype)
    for role, fn, arguments in (("scores", scores, ("f",)), ("update", update, ("f",)),
                                ("prologue", prologue, ("f",)),
                                ("epilogue", epilogue, ("f",)),
                                ("mask", mask, ("item", "kv_idx"))):
        check_callable(role, fn, optional=role not in ("scores", "update"),
                       arguments=arguments)
    if mask_period is not None:
        (mask_period,) = check_dimensions(mask_period=mask_period)
    buffers = check_sequence("buffers", buffers, Buffer, "vx.Buffer(name, shape, ...)")
    for role, wanted in (("q", q), ("out", out)):
        check_identifier(f"the {role} buffer name", wanted)
    item_count, seq_len, head_dim, tile_size = check_dimensions(
        item_count=item_count, seq_len=seq_len, head_dim=head_dim, tile_size=tile_size
    )
    # a tile longer than the keys is one tile of all of them (the same sums);
    # each lane's score slice would otherwise hold tile_size floats for nothing
    tile_size = min(tile_size, seq_len)
    if v_head_dim is None:
        v_head_dim = head_dim
    (v_head_dim,) = check_dimensions(v_head_dim=v_head_dim)
    check_u32_size(f"buffer {q!r}", item_count=item_count, head_dim=head_dim)
    check_u32_size("scratch q_scratch", workgroup_size=WORKGROUP_SIZE, head_dim=head_dim)
    if v_head_dim != head_dim:
        check_u32_size(f"buffer {out!r}", item_count=item_count, v_head_dim=v_head_dim)
        check_u32_size("scratch o_acc", workgroup_size=WORKGROUP_SIZE, v_head_dim=v_head_dim)
    check_u32_size(
        "scratch score_tile", workgroup_size=WORKGROUP_SIZE, tile_size=tile_size
    )
    extra_scratch = dict(check_mapping(
        "scratch", {} if scratch is None else scratch, "{'q_lat': kv_lora_rank}"
    ))
    for scratch_name, length in extra_scratch.items():
        check_identifier("scratch array name", scratch_name)
        if scratch_name in ("q_scratch", "score_tile", "o_acc"):
            raise VyreError(
                f"scratch array {scratch_name!r} is the skeleton's own; give the "
                f"decoder's scratch array another name"
            )
        (length,) = check_dimensions(**{f"scratch {scratch_name!r} length": length})
        extra_scratch[scratch_name] = length
        check_u32_size(
            f"scratch {scratch_name}", workgroup_size=WORKGROUP_SIZE,
            **{f"{scratch_name} length": length},
        )
    names = [b.name for b in buffers]
    clashes = sorted(set(names) & set(extra_scratch))
    if clashes:
        raise VyreError(
            f"{clashes[0]!r} names both a buffer and a scratch array; rename one"
        )
    if (kv_lens is None) != (items_per_seq is None):
        raise VyreError(
            "kv_lens and items_per_seq go together: kv_lens names the buffer of key "
            "counts, items_per_seq how many consecutive items share one"
        )
    if kv_lens is not None:
        check_identifier("the kv_lens buffer name", kv_lens)
        (items_per_seq,) = check_dimensions(items_per_seq=items_per_seq)
        if item_count % items_per_seq:
            raise VyreError(
                f"items_per_seq ({items_per_seq}) must divide item_count ({item_count})"
            )
    roles = (("q", q), ("out", out)) + ((("lse", lse),) if lse is not None else ()) + (
        (("kv_lens", kv_lens),) if kv_lens is not None else ())
    for role, wanted in roles:
        if wanted not in names:
            raise VyreError(
                f"the {role} buffer {wanted!r} is not among the buffers "
                f"({', '.join(names)}); declare it"
            )
    checked_buffers = []
    for buffer in buffers:
        shape = {f"{buffer.name}.shape[{i}]": d for i, d in enumerate(buffer.shape)}
        dims = check_dimensions(**shape)
        check_u32_size(f"buffer {buffer.name!r}", **dict(zip(shape, dims)))
        checked_buffers.append(
            Buffer(buffer.name, dims, buffer.access, buffer.binding, buffer.dtype)
        )
    buffers = checked_buffers

    kernel = vyre.KernelOp(name, item_count, WORKGROUP_SIZE)
    body = IRBuilder(InsertPoint.at_end(kernel.body.block))
    values = declare_buffers(body, buffers, dtype)
    scratch = {
        scratch_name: body.emit(
            vyre.ScratchOp(scratch_name, WORKGROUP_SIZE * stride)
        ).results[0]
        for scratch_name, stride in (
            ("q_scratch", head_dim),
            ("score_tile", tile_size),
            ("o_acc", v_head_dim),
        )
    }
    own_scratch = {
        scratch_name: (
            body.emit(vyre.ScratchOp(scratch_name, WORKGROUP_SIZE * length)).results[0],
            length,
        )
        for scratch_name, length in extra_scratch.items()
    }
    # With run-time lengths a mask may depend on them: every tile is partial.
    classes = (
        bounded_tile_classes(mask, item_count, seq_len, tile_size, mask_period)
        if mask is not None and kv_lens is None else None
    )
    skeleton = vyre.TiledOnlineSoftmaxOp(
        values[q],
        values[out],
        scratch["q_scratch"],
        scratch["score_tile"],
        scratch["o_acc"],
        item_count=item_count,
        seq_len=seq_len,
        head_dim=head_dim,
        tile_size=tile_size,
        with_mask=mask is not None,
        tile_classes=classes,
        v_head_dim=v_head_dim,
        lse=values[lse] if lse is not None else None,
        kv_lens=values[kv_lens] if kv_lens is not None else None,
        items_per_seq=items_per_seq,
    )
    body.emit(skeleton)
    captures = Captures(skeleton, values)  # tables the modifiers index
    shape = {**skeleton.shape(), "v_head_dim": skeleton.v_dim}
    for region_name, region, arg_names, fill in (
        ("scores", skeleton.scores, vyre.SCORES_ARGS, scores),
        ("update", skeleton.update, vyre.UPDATE_ARGS, update),
        ("prologue", skeleton.prologue, vyre.PROLOGUE_ARGS, prologue),
        ("epilogue", skeleton.epilogue, vyre.EPILOGUE_ARGS, epilogue),
    ):
        if fill is None:
            continue  # the hook keeps its plain vyre.yield
        block = region.block
        terminator = block.last_op
        point = InsertPoint.before(terminator) if terminator else InsertPoint.at_end(block)
        fragment = Fragment(block.args, arg_names, values, shape, point, own_scratch,
                            captures)
        with trace.building(fragment):
            checked_call(fill, fragment)
        fragment.close(f"the {region_name} fragment")
        if terminator is None:
            block.add_op(vyre.YieldOp())
    if mask is not None:
        assert skeleton.mask is not None
        block = skeleton.mask.block
        fragment = Fragment(
            block.args, vyre.MASK_ARGS, values, shape, InsertPoint.at_end(block),
            captures=captures,
        )
        with trace.building(fragment):
            keep = checked_call(
                mask, fragment.traced(fragment.item), fragment.traced(fragment.kv_idx)
            )
            keep = check_result(keep, "bool", mask, "mask")
            if not isinstance(keep, Traced):
                keep = Traced("bool", trace.IR.const("bool", keep), trace.IR)
        fragment.close("the mask fragment")
        block.add_op(vyre.YieldOp(keep.ssa))

    module = ModuleOp([kernel])
    try:
        module.verify()
    except VerifyException as error:
        raise VyreError(f"kernel @{name} does not verify: {error}") from None
    return module


def check_result(result, kind: str, fn, role: str):
    """`result` of a modifier if it has type `kind` (a Python constant of
    that type is accepted as is), else a VyreError at the modifier."""
    if isinstance(result, Traced):
        if result.kind == kind:
            return result
        got = result.kind
    elif kind == "bool" and isinstance(result, bool | np.bool_):
        return bool(result)
    elif kind == "f32" and isinstance(result, numbers.Real) and not isinstance(
            result, bool | np.bool_):
        number = f32_number(result)
        if number is None:
            raise VyreError(
                f"{role} {trace.function_location(fn)} returns {reprlib.repr(result)}, "
                f"beyond f32's range; return float('inf') for an infinity"
            )
        return number
    else:
        got = type(result).__name__
    wanted = {"f32": "an f32 score", "bool": "a boolean (e.g. a comparison)"}[kind]
    raise VyreError(
        f"{role} {trace.function_location(fn)} must return {wanted}, got {got}"
    )


# Build-time work bounds of the tile classification (see tiled_online_softmax)
CLASSIFY_BUDGET = 1 << 30  # mask evaluations: about a second for a causal mask
TABLE_BUDGET = 1 << 22  # (query block, key tile) entries of the tile_classes table


def distinct_blocks(blocks: int, block_rows: int, period: int | None) -> int:
    """How many blocks of `block_rows` items differ for a mask that sees the
    item only through `item % period`: block b is block b % d, d =
    lcm(period, block_rows) / block_rows (all of them without a period)."""
    if period is None:
        return blocks
    return min(blocks, period // math.gcd(period, block_rows))


def bounded_tile_classes(
    mask: MaskFn, item_count: int, seq_len: int, tile_size: int,
    period: int | None = None, block_rows: int = WORKGROUP_SIZE,
) -> list[int] | None:
    """classify_tiles, or None (every tile partial) where it would evaluate
    the mask more than CLASSIFY_BUDGET times or the table would have more
    than TABLE_BUDGET entries (a causal mask at 262144 keys: 2^36
    evaluations)."""
    blocks = -(-item_count // block_rows)
    tiles = -(-seq_len // tile_size)
    evaluations = distinct_blocks(blocks, block_rows, period) * block_rows * seq_len
    if blocks * tiles > TABLE_BUDGET or evaluations > CLASSIFY_BUDGET:
        return None
    return classify_tiles(mask, item_count, seq_len, tile_size, block_rows, period)


def classify_tiles(
    mask: MaskFn, item_count: int, seq_len: int, tile_size: int,
    block_rows: int = WORKGROUP_SIZE, row_period: int | None = None,
) -> list[int]:
    """The `tile_classes` table, flat [query block][tile]: evaluate `mask`
    with numpy on every (item, key) pair of each block of `block_rows` items
    (as FlexAttention's block mask does) and call a tile empty (no pair
    kept), full (every pair kept) or partial.  With `row_period` P (the mask
    sees the item only through `item % P`), only the first lcm(P,
    block_rows) items are evaluated and their blocks repeated (a last
    block cut short takes the class of its complete copy, which holds for
    any subset of its rows)."""
    check_callable("mask", mask)
    item_count, seq_len, tile_size, block_rows = check_dimensions(
        item_count=item_count, seq_len=seq_len, tile_size=tile_size, block_rows=block_rows
    )
    if row_period is not None:
        (row_period,) = check_dimensions(row_period=row_period)
    tiles = -(-seq_len // tile_size)
    padded = tiles * tile_size
    kv = trace.array("int", np.arange(seq_len, dtype=np.int64)[None, :])
    all_blocks = -(-item_count // block_rows)
    blocks = distinct_blocks(all_blocks, block_rows, row_period)
    per_chunk = max(1, (1 << 22) // (block_rows * seq_len))
    classes: list[int] = []
    for first in range(0, blocks, per_chunk):
        last = min(blocks, first + per_chunk)
        rows = np.arange(first * block_rows, min(last * block_rows, item_count))
        keep = mask(trace.array("int", rows[:, None]), kv)
        keep = check_result(keep, "bool", mask, "mask")
        keep = keep.value if isinstance(keep, Traced) else np.asarray(keep)
        keep = np.broadcast_to(keep, (len(rows), seq_len))
        any_kept = np.zeros((len(rows), padded), bool)
        all_kept = np.ones((len(rows), padded), bool)
        any_kept[:, :seq_len] = keep
        all_kept[:, :seq_len] = keep
        for block in range(first, last):
            lo = (block - first) * block_rows
            hi = min(lo + block_rows, len(rows))
            some = any_kept[lo:hi].reshape(hi - lo, tiles, tile_size).any(axis=(0, 2))
            every = all_kept[lo:hi].reshape(hi - lo, tiles, tile_size).all(axis=(0, 2))
            classes.extend(
                vyre.TILE_FULL if e else vyre.TILE_PARTIAL if s else vyre.TILE_EMPTY
                for s, e in zip(some, every)
            )
    if blocks < all_blocks:
        classes = [classes[(b % blocks) * tiles + t]
                   for b in range(all_blocks) for t in range(tiles)]
    return classes


def tile_class_counts(module: ModuleOp) -> dict[str, int]:
    """How many (query block, key tile) pairs of the skeleton in `module` are
    empty (skipped), full and partial."""
    check_module(module, "tile_class_counts")
    counts = {name: 0 for name in vyre.TILE_CLASS_NAMES.values()}
    for op in module.walk():
        if isinstance(op, vyre.TiledOnlineSoftmaxOp) and op.has_mask and op.tile_classes is None:
            # no table (too large to classify at build time): all partial
            shape = op.shape()
            counts["partial"] += -(-shape["item_count"] // op.lanes) * shape["tile_count"]
        elif isinstance(op, vyre.TiledOnlineSoftmaxOp):
            for row in op.tile_class_table():
                for c in row:
                    counts[vyre.TILE_CLASS_NAMES[c]] += 1
    return counts


def f32_scale(head_dim: int) -> float:
    """`1 / sqrt(head_dim)` computed in f32, as SEMANTICS.md fixes it."""
    return float(np.float32(1.0) / np.sqrt(np.float32(head_dim)))


__all__ = [
    "Buffer",
    "Fragment",
    "tiled_online_softmax",
    "classify_tiles",
    "tile_class_counts",
    "check_dimensions",
    "check_u32_size",
    "f32_scale",
    "WORKGROUP_SIZE",
]
