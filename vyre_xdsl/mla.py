"""MLA decode (SEMANTICS.md, Decoder 2) in its three forms.

`mla_decode` is the seed's: every key and value is decompressed from the
latent cache on the fly.  `mla_decode_absorbed` (absorbed in each
invocation) and `mla_decode_program` (absorbed once per head, three
kernels) are what `vyre-absorb-mla` rewrites it into.  The forms share one
checked shape (`Mla`: its buffers, where key t of a sequence lives in a
batched, ragged or paged cache) and the fragments they have in common.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from vyre_xdsl.dialects.mla import HEAD_PRODUCT_ATTR, MLA_ATTR, HeadProductAttr, MlaAttr
from vyre_xdsl.dtypes import check_dtype
from vyre_xdsl.errors import VyreError
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.kv_layout import KvLayout, check_paging, check_table
from vyre_xdsl.skeleton import (
    WORKGROUP_SIZE,
    Buffer,
    Fragment,
    FragmentFn,
    check_dimensions,
    check_u32_size,
    f32_scale,
    per_item_kernel,
    tiled_online_softmax,
)

# (builder, item or lane value) -> an element of a per-row vector
RowReader = Callable[[IRBuilder, SSAValue], SSAValue]
RowReaders = RowReader | list[RowReader]  # one row's, or several rows' in order


@dataclass(frozen=True)
class Mla:
    """The checked arguments of an MLA builder.  Items are query rows,
    `sequence * num_heads + head`."""

    seq_len: int
    num_heads: int
    head_dim: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    tile_size: int
    dtype: str
    layout: KvLayout
    batched: bool = True  # `batch` was given: q, out and the caches have its axis

    @property
    def batch(self) -> int:
        return self.layout.batch

    @property
    def items(self) -> int:
        return self.batch * self.num_heads

    @property
    def uv_stride(self) -> int:
        return self.num_heads * self.head_dim

    def record(self) -> MlaAttr:
        """What the seed's kernel records it is (vyre-absorb-mla reads it)."""
        layout = self.layout
        return MlaAttr(
            seq_len=self.seq_len, num_heads=self.num_heads, head_dim=self.head_dim,
            kv_lora_rank=self.kv_lora_rank, qk_rope_head_dim=self.qk_rope_head_dim,
            batch=layout.batch if self.batched else None, kv_lens=layout.kv_lens,
            page_size=layout.page_size,
            num_pages=layout.num_pages,
        )

    def rows(self, width: int) -> tuple[int, ...]:
        """A per-row buffer's shape: [num_heads, width], with the batch
        axis in front where the builder was given `batch`."""
        heads = (self.num_heads, width)
        return (self.batch, *heads) if self.batched else heads

    def buffers(self) -> list[Buffer]:
        """The seed's buffers, in binding order: q, kv_cache, kr_cache
        ([batch, seq_len, .] or pools [num_pages, page_size, .]), w_uk, w_uv,
        out, then kv_lens and block_table where the layout has them."""
        layout = self.layout
        if layout.paged:
            keys: tuple[int, ...] = (layout.num_pages, layout.page_size)
        else:
            keys = (self.batch, self.seq_len) if self.batched else (self.seq_len,)
        weights = (self.kv_lora_rank, self.uv_stride)
        return [
            Buffer("q", self.rows(self.head_dim)),
            Buffer("kv_cache", (*keys, self.kv_lora_rank)),
            Buffer("kr_cache", (*keys, self.qk_rope_head_dim)),
            Buffer("w_uk", weights),
            Buffer("w_uv", weights),
            Buffer("out", self.rows(self.head_dim), "write"),
            *layout.buffers(),
        ]

    def skeleton(self, name: str, buffers: list[Buffer], **options) -> ModuleOp:
        """The skeleton over this shape's items and keys."""
        return tiled_online_softmax(
            name, buffers, item_count=self.items, seq_len=self.seq_len,
            tile_size=self.tile_size, dtype=self.dtype, **self.layout.skeleton_args(),
            **options,
        )

    # -- IR shared by the forms ---------------------------------------------

    def head(self, b: IRBuilder, row: SSAValue) -> SSAValue:
        """The head of a query row (the row itself with one sequence)."""
        return row if self.batch == 1 else b.remui(row, b.index(self.num_heads), "head")

    def split_item(
        self, b: IRBuilder, item: SSAValue, width: int, hint: str
    ) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(row, head, column) of an item of a kernel over rows of `width`."""
        row = b.divui(item, b.index(width), "head" if self.batch == 1 else "row")
        column = b.remui(item, b.index(width), hint)
        return row, self.head(b, row), column

    def key_base(self, f: Fragment) -> SSAValue | None:
        """What key_row needs of this item's sequence: nothing with one
        dense sequence, its first cache row, or its first block_table
        entry."""
        if self.layout.paged:
            return self.layout.table_base(f)
        if self.batch == 1:
            return None
        seq = self.layout.sequence(f, f.item)
        return f.muli(seq, f.index(self.seq_len), "kv_base")

    def key_row(self, b: Fragment, base: SSAValue | None, t: SSAValue) -> SSAValue:
        """The row of kv_cache and kr_cache holding key t of the sequence."""
        if self.layout.paged:
            assert base is not None
            return self.layout.page_row(b, base, t, "kv_row")
        return t if base is None else b.addi(base, t, "kv_row")

    def weight_index(self, b: IRBuilder, r, head, dim) -> SSAValue:
        """`r*uv_stride + head*head_dim + dim`: w_uk/w_uv at (r, head, dim)."""
        return b.addi(b.muli(r, b.index(self.uv_stride)),
                      b.flat_index(head, self.head_dim, dim))

    def absorbed_query(self, b: IRBuilder, w_uk, q_at: RowReaders, head, r) -> list[SSAValue]:
        """q_lat[r] = sum over dim of q[dim] * w_uk[r, head, dim], for each
        row that `q_at` reads (rows of the head: w_uk read once for all)."""
        return _dots(b, self.head_dim, q_at,
                     lambda b, dim: b.load(w_uk, self.weight_index(b, r, head, dim)), "dim")

    def projected(self, b: IRBuilder, w_uv, o_lat_at: RowReaders, head, d) -> list[SSAValue]:
        """out[d] = sum over r of w_uv[r, head, d] * o_lat[r], for each row
        that `o_lat_at` reads (rows of the head: w_uv read once for all)."""
        return _dots(b, self.kv_lora_rank,
                     lambda b, r: b.load(w_uv, self.weight_index(b, r, head, d)), o_lat_at, "r")

    def projection_rows_problem(self, rows: int) -> str | None:
        """Why each invocation of the program's projections cannot compute
        `rows` (> 0) rows of a head; None if it can: a divisor of the
        batch."""
        if self.batch % rows:
            return (f"rows={rows} must divide the batch ({self.batch}): each invocation "
                    f"projects that many sequences' rows of one head")
        return None


def check_mla(
    seq_len: int,
    num_heads: int,
    head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    tile_size: int = 64,
    *,
    dtype: str = "f32",
    batch: int | None = None,
    kv_lens: bool | None = None,
    page_size: int | None = None,
    num_pages: int | None = None,
) -> Mla:
    """The builders' arguments checked, or a VyreError naming the bad one.
    Its parameters are every form's (`_builder`)."""
    dtype = check_dtype(dtype)
    batched = batch is not None
    kv_lens, page_size, num_pages = check_paging(
        kv_lens, page_size, num_pages,
        "kv_cache is [num_pages, page_size, kv_lora_rank], kr_cache [num_pages, "
        "page_size, qk_rope_head_dim]",
    )
    (seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim, tile_size,
     batch) = check_dimensions(
        seq_len=seq_len,
        num_heads=num_heads,
        head_dim=head_dim,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        tile_size=tile_size,
        batch=batch if batched else 1,
    )
    if qk_rope_head_dim > head_dim:
        raise VyreError(
            f"qk_rope_head_dim ({qk_rope_head_dim}) must be <= head_dim "
            f"({head_dim}): the rotary part is added to the first "
            f"qk_rope_head_dim dims of each key"
        )
    check_u32_size("buffer q", batch=batch, num_heads=num_heads, head_dim=head_dim)
    keys = ({"num_pages": num_pages, "page_size": page_size} if page_size is not None
            else {"batch": batch, "seq_len": seq_len})
    check_u32_size("buffer kv_cache", **keys, kv_lora_rank=kv_lora_rank)
    check_u32_size("buffer kr_cache", **keys, qk_rope_head_dim=qk_rope_head_dim)
    check_u32_size(
        "buffer w_uk",
        kv_lora_rank=kv_lora_rank,
        num_heads=num_heads,
        head_dim=head_dim,
    )
    layout = KvLayout(batch, seq_len, num_heads, kv_lens, page_size, num_pages)
    check_table(layout)
    return Mla(seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim, tile_size,
               dtype, layout, batched)


def _dot(b: IRBuilder, count, left, right, hint: str, init=None) -> SSAValue:
    """`init + sum over i < count of left(b, i) * right(b, i)`, in order
    (init 0.0 unless given)."""
    return _dots(b, count, left, right, hint, init)[0]


def _dots(b: IRBuilder, count, left: RowReaders, right: RowReaders, hint: str,
          init=None) -> list[SSAValue]:
    """_dot for each reader of whichever of `left` and `right` is a list,
    the other read once a step for all of them."""
    rows_left = isinstance(left, list) or not isinstance(right, list)
    rows, shared = (left, right) if rows_left else (right, left)
    rows = rows if isinstance(rows, list) else [rows]

    def step(b: IRBuilder, i, acc):
        if rows_left:  # each product's operands read in _dot's order
            values = [row(b, i) for row in rows]
            common = shared(b, i)
            pairs = [(value, common) for value in values]
        else:
            common = shared(b, i)
            pairs = [(common, row(b, i)) for row in rows]
        return [b.addf(a, b.mulf(x, y)) for a, (x, y) in zip(acc, pairs, strict=True)]

    start = b.f32(0.0) if init is None else init
    return b.loop(0, count, step, [start] * len(rows), hint=hint)


def _builder(form: Callable[..., ModuleOp]) -> Callable[..., ModuleOp]:
    """The public builder of an MLA form: `check_mla`'s arguments (the same
    for every form) checked into an `Mla`, which `form` builds from; the
    form's own keyword-only options (the program's `name`) follow them."""
    checked = inspect.signature(check_mla).parameters
    own = list(inspect.signature(form).parameters.values())[1:]

    signature = inspect.Signature([*checked.values(), *own], return_annotation=ModuleOp)
    plain = inspect.Signature([p.replace(annotation=inspect.Parameter.empty)
                               for p in signature.parameters.values()])

    @functools.wraps(form)
    def builder(*args, **kwargs) -> ModuleOp:
        try:  # a call that does not fit names the public builder, not check_mla
            signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"vx.{form.__name__}{plain}: {error}") from None
        options = {p.name: kwargs.pop(p.name) for p in own if p.name in kwargs}
        return form(check_mla(*args, **kwargs), **options)

    del builder.__wrapped__
    builder.__signature__ = signature  # type: ignore[attr-defined]
    return builder


@_builder
def mla_decode(mla: Mla) -> ModuleOp:
    """Multi-head latent attention decode of one new token, one head per item:
    K and V are decompressed on the fly from the latent `kv_cache` through
    `w_uk`/`w_uv`; the first `qk_rope_head_dim` key dims add `kr_cache`.
    `dtype` ("f32", "f16" or "bf16") is the element type of every buffer;
    the computation stays f32 (inputs widened, the output rounded once).

    Serving (as `flash_attention_2`): q and out are `[batch, num_heads,
    head_dim]` and the caches `[batch, seq_len, kv_lora_rank]` / `[batch,
    seq_len, qk_rope_head_dim]` (without the batch axis where `batch` is not
    given: one sequence, the layouts of before; `batch=1` keeps the axis);
    w_uk and w_uv are shared by the batch.  `kv_lens=True` adds an int32
    input `kv_lens [batch]`, each sequence's key count read at run time
    (clamped to [0, seq_len]; tiles past it skipped; 0 keys give out 0).
    `page_size=P, num_pages=N` (implies kv_lens) make the caches pools
    `[N, P, kv_lora_rank]` / `[N, P, qk_rope_head_dim]` with an int32 input
    `block_table [batch, ceil(seq_len / P)]`: key t of sequence b is row
    `block_table[b, t // P] * P + t % P`, the page index clamped to
    [0, N - 1] (a bad table gives garbage, never a read outside the pool).

    The kernel records its shape as `vyre.mla = #vyre.mla<...>`, which
    vyre-absorb-mla reads to rewrite it."""
    head_dim, rank, rope = mla.head_dim, mla.kv_lora_rank, mla.qk_rope_head_dim
    scale = f32_scale(head_dim)

    def decompress(b: Fragment, weights, head, dim, row):
        """`sum over r of weights[r*uv_stride + head*head_dim + dim] * kv_cache[row*R + r]`"""
        kv_cache = b.buffer("kv_cache")
        column = b.flat_index(head, head_dim, dim)

        def step(b: Fragment, r, acc):
            w = b.load(weights, b.addi(b.muli(r, b.index(mla.uv_stride)), column))
            c = b.load(kv_cache, b.flat_index(row, rank, r))
            return [b.addf(acc[0], b.mulf(w, c))]

        return b.loop(0, rank, step, [b.f32(0.0)], hint="r")[0]

    def scores(f: Fragment) -> None:
        w_uk, kr_cache = f.buffer("w_uk"), f.buffer("kr_cache")
        head, base = mla.head(f, f.item), mla.key_base(f)

        def score_one_key(b: Fragment, j, _):
            t = b.addi(f.tile_start, j, "t")
            row = mla.key_row(b, base, t)

            def dot_step(b: Fragment, dim, acc):
                k_val = decompress(b, w_uk, head, dim, row)
                is_rope = b.cmpi(dim, b.index(rope), "ult")
                (k_val,) = b.if_else(
                    is_rope,
                    lambda b: [b.addf(k_val, b.load(kr_cache, b.flat_index(row, rope, dim)))],
                    lambda b: [k_val],
                )
                q_d = b.load(f.q_scratch, b.q_index(dim))
                return [b.addf(acc[0], b.mulf(q_d, k_val))]

            (dot,) = b.loop(0, head_dim, dot_step, [b.f32(0.0)], hint="dim")
            score = b.bounded_score(b.mulf(dot, b.f32(scale)))
            b.store(score, f.score_tile, b.score_index(j))
            return []

        f.loop(0, f.tile_len, score_one_key, hint="j")

    def update(f: Fragment) -> None:
        w_uv = f.buffer("w_uv")
        head, base = mla.head(f, f.item), mla.key_base(f)

        def rescale_dim(b: Fragment, d, _):
            o_index = b.o_index(d)
            b.store(b.mulf(b.load(f.o_acc, o_index), f.rescale), f.o_acc, o_index)
            return []

        f.loop(0, head_dim, rescale_dim, hint="d")

        def add_one_key(b: Fragment, j, _):
            weight = b.weight(j)
            row = mla.key_row(b, base, b.addi(f.tile_start, j, "t"))

            def add_dim(b: Fragment, dim, _):
                v_val = decompress(b, w_uv, head, dim, row)
                o_index = b.o_index(dim)
                o = b.load(f.o_acc, o_index)
                b.store(b.addf(o, b.mulf(weight, v_val)), f.o_acc, o_index)
                return []

            b.loop(0, head_dim, add_dim, hint="dim")
            return []

        f.loop(0, f.tile_len, add_one_key, hint="j")

    module = mla.skeleton("mla_decode", mla.buffers(), head_dim=head_dim, scores=scores,
                          update=update)
    (kernel,) = module.body.block.ops
    kernel.attributes[MLA_ATTR] = mla.record()
    return module


def _latent_scores(mla: Mla, q_lat_at, q_at) -> FragmentFn:
    """The absorbed forms' scores: bounded_score((sum over r of q_lat[r] *
    kv_cache[t, r] + sum over dim < rope of q[dim] * kr_cache[t, dim]) *
    scale).  `q_lat_at(f, b, r)` and `q_at(f, b, dim)` read the item's
    latent and rope query."""
    rank, rope = mla.kv_lora_rank, mla.qk_rope_head_dim
    scale = f32_scale(mla.head_dim)

    def scores(f: Fragment) -> None:
        kv_cache, kr_cache = f.buffer("kv_cache"), f.buffer("kr_cache")
        base = mla.key_base(f)

        def score_one_key(b: Fragment, j, _):
            row = mla.key_row(b, base, b.addi(f.tile_start, j, "t"))
            dot = _dot(b, rank, lambda b, r: q_lat_at(f, b, r),
                       lambda b, r: b.load(kv_cache, b.flat_index(row, rank, r)), "r")
            dot = _dot(b, rope, lambda b, dim: q_at(f, b, dim),
                       lambda b, dim: b.load(kr_cache, b.flat_index(row, rope, dim)), "dim",
                       init=dot)
            b.store(b.bounded_score(b.mulf(dot, b.f32(scale))), f.score_tile, b.score_index(j))
            return []

        f.loop(0, f.tile_len, score_one_key, hint="j")

    return scores


def _latent_update(mla: Mla, accumulator, index_of, weight_first: bool) -> FragmentFn:
    """acc[r] = rescale * acc[r] + sum over j of weight(j) * kv_cache[t_j, r]
    (FlashAttention-2's order: the loop over r has a read-only inner loop,
    so vyre-unroll-jam advances 32 ranks side by side).  `accumulator(f)`
    is the array, `index_of(b, r)` the lane's element r of it.  The two
    absorbed forms read a key's weight before (`weight_first`) or after
    its latent row: the same arithmetic, each kernel as it was tuned."""
    rank = mla.kv_lora_rank

    def update(f: Fragment) -> None:
        kv_cache, acc = f.buffer("kv_cache"), accumulator(f)
        base = mla.key_base(f)

        def one_rank(b: Fragment, r, _):
            def latent(b: Fragment, j):
                row = mla.key_row(b, base, b.addi(f.tile_start, j, "t"))
                return b.load(kv_cache, b.flat_index(row, rank, r))

            if weight_first:
                weighted = _dot(b, f.tile_len, lambda b, j: b.weight(j), latent, "j")
            else:
                def weigh_step(b: Fragment, j, total):
                    c = latent(b, j)
                    return [b.addf(total[0], b.mulf(b.weight(j), c))]

                (weighted,) = b.loop(0, f.tile_len, weigh_step, [b.f32(0.0)], hint="j")
            index = index_of(b, r)
            b.store(b.addf(b.mulf(f.rescale, b.load(acc, index)), weighted), acc, index)
            return []

        f.loop(0, rank, one_rank, hint="r")

    return update


@_builder
def mla_decode_absorbed(mla: Mla) -> ModuleOp:
    """MLA decode with `w_uk` and `w_uv` absorbed: what `vyre-absorb-mla`
    turns `mla_decode` into.  The same attention, with the sums reordered
    (so within a tolerance of `mla_decode`, not bit-identical):

        q_lat[r] = sum over dim of q[dim] * w_uk[r*uv_stride + head*head_dim + dim]
        s[j]     = bounded_score(scale * (sum over r of q_lat[r] * kv_cache[t, r]
                                 + sum over dim < rope of q[dim] * kr_cache[t, dim]))
        o_lat[r] = the online-softmax weighted sum of kv_cache[t, r]
        o_acc[d] = sum over r of w_uv[r*uv_stride + head*head_dim + d] * o_lat[r]

    A key costs kv_lora_rank + qk_rope_head_dim multiply-adds for its score
    and kv_lora_rank for the update, instead of head_dim * kv_lora_rank each.
    The two latent vectors are per-lane scratch (`q_lat`, `o_lat`, one
    kv_lora_rank slice per lane).  The prologue computes `q_lat` and zeroes
    `o_lat`; the update fragment folds the tile into `o_lat` the way
    FlashAttention-2's folds it into `o_acc`; the epilogue projects `o_lat`
    through `w_uv` into `o_acc`, which the skeleton then divides by the
    softmax denominator.  `reference.mla_decode_absorbed` is its oracle, op
    for op.  The other arguments are `mla_decode`'s."""
    for latent in ("q_lat", "o_lat"):
        check_u32_size(
            f"scratch {latent}", workgroup_size=WORKGROUP_SIZE, kv_lora_rank=mla.kv_lora_rank
        )

    def absorb_query(f: Fragment) -> None:
        """prologue: q_lat = W_uk q; o_lat = 0."""
        w_uk = f.buffer("w_uk")
        q_lat, o_lat = f.scratch("q_lat"), f.scratch("o_lat")
        head = mla.head(f, f.item)

        def one_rank(b: Fragment, r, _):
            (q_r,) = mla.absorbed_query(
                b, w_uk, lambda b, dim: b.load(f.q_scratch, b.q_index(dim)), head, r
            )
            b.store(q_r, q_lat, b.scratch_index("q_lat", r))
            b.store(b.f32(0.0), o_lat, b.scratch_index("o_lat", r))
            return []

        f.loop(0, mla.kv_lora_rank, one_rank, hint="r")

    def project_output(f: Fragment) -> None:
        """epilogue: o_acc = W_uv o_lat."""
        w_uv = f.buffer("w_uv")
        o_lat = f.scratch("o_lat")
        head = mla.head(f, f.item)

        def one_dim(b: Fragment, d, _):
            (v,) = mla.projected(
                b, w_uv, lambda b, r: b.load(o_lat, b.scratch_index("o_lat", r)), head, d
            )
            b.store(v, f.o_acc, b.o_index(d))
            return []

        f.loop(0, mla.head_dim, one_dim, hint="d")

    return mla.skeleton(
        "mla_decode",
        mla.buffers(),
        head_dim=mla.head_dim,
        scores=_latent_scores(
            mla,
            lambda f, b, r: b.load(f.scratch("q_lat"), b.scratch_index("q_lat", r)),
            lambda f, b, dim: b.load(f.q_scratch, b.q_index(dim)),
        ),
        update=_latent_update(
            mla, lambda f: f.scratch("o_lat"), lambda b, r: b.scratch_index("o_lat", r),
            weight_first=False,
        ),
        scratch={"q_lat": mla.kv_lora_rank, "o_lat": mla.kv_lora_rank},
        prologue=absorb_query,
        epilogue=project_output,
    )


@_builder
def mla_decode_program(mla: Mla, *, name: str = "mla_decode", rows: int = 1) -> ModuleOp:
    """MLA decode with `w_uk` and `w_uv` absorbed once per head, as a
    program of three kernels (what `vyre-absorb-mla{kernels=3}` turns
    `mla_decode` into), run in this order:

        @<name>_absorb_query  one item per (query row, r):
            q_lat[row, r] = sum over dim of q[row, dim] * w_uk[r, head, dim]
        @<name>               the skeleton over the latent cache, one item
            per query row (sequence, head), rows of kv_lora_rank:
            s[j]  = bounded_score(scale * (sum over r of q_lat[row, r] * kv_cache[t, r]
                                  + sum over dim < rope of q[row, dim] * kr_cache[t, dim]))
            o_lat = flush_tiny(online-softmax average of the kv_cache rows)
        @<name>_project       one item per (query row, d):
            out[row, d] = sum over r of w_uv[r, head, d] * o_lat[row, r]

    `q_lat` and `o_lat` are `temp` buffers.  Unlike `mla_decode_absorbed`,
    no invocation repeats the head's projections, and the attention is a
    plain skeleton (no hooks) that vyre-split-kv can split across
    workgroups.  It normalises o_lat before projecting it, so it is within
    rounding of the other forms; `reference.mla_decode_program` is its
    oracle, op for op.  The score reads the row's q_lat from the buffer,
    where every lane of a workgroup of one head's splits reads the same
    row; the skeleton's own copy of it (q_scratch) goes unread.  q_lat and
    o_lat stay f32; the other arguments are `mla_decode`'s.

    Each projection records the product it computes (`#vyre.head_product`,
    which vyre-projection-tensor-cores reads).  `rows` (a divisor of the
    batch) gives each item of the projections
    that many rows of one head (`rows` sequences') at its column: each
    weight is read once for all of them, and each row's sum keeps its
    order (the same bits)."""
    (rows,) = check_dimensions(rows=rows)
    if reason := mla.projection_rows_problem(rows):
        raise VyreError(f"mla_decode_program: {reason}")
    check_u32_size("scratch o_acc", workgroup_size=WORKGROUP_SIZE,
                   kv_lora_rank=mla.kv_lora_rank)
    head_dim, rank = mla.head_dim, mla.kv_lora_rank
    buffers = {
        b.name: Buffer(b.name, b.shape, b.access, binding, b.dtype)
        for binding, b in enumerate(mla.buffers())
    }
    binding = len(buffers)
    for latent in ("q_lat", "o_lat"):
        buffers[latent] = Buffer(latent, mla.rows(rank), "temp", binding, "f32")
        binding += 1
    serving = [b.name for b in mla.layout.buffers()]

    def uses(*names: str) -> list[Buffer]:
        return [buffers[n] for n in names]

    def through_weights(dot, weights: str, source: str, source_width: int, dest: str,
                        dest_width: int, hint: str):
        """An item's `rows` (row, column) elements of `dest` = `dot` of
        `weights` with row `source`[row], for rows of one head, num_heads
        apart (absorb_query and project)."""

        def body(b: IRBuilder, v: dict[str, SSAValue], item: SSAValue) -> None:
            if rows == 1:
                first, head, column = mla.split_item(b, item, dest_width, hint)
            else:  # item: (group of `rows` sequences, head, column)
                span = mla.num_heads * dest_width
                head = b.divui(b.remui(item, b.index(span)), b.index(dest_width), "head")
                column = b.remui(item, b.index(dest_width), hint)
                group = b.divui(item, b.index(span), "seq_group")
                first = b.addi(b.muli(group, b.index(rows * mla.num_heads)), head, "row")
            members = [first, *(b.addi(first, b.index(j * mla.num_heads))
                                for j in range(1, rows))]
            values = dot(b, v[weights], [
                lambda b, i, row=row: b.load(v[source], b.flat_index(row, source_width, i))
                for row in members], head, column)
            for row, value in zip(members, values, strict=True):
                b.store(value, v[dest],
                        item if rows == 1 else b.flat_index(row, dest_width, column))

        return body

    absorb_query = through_weights(mla.absorbed_query, "w_uk", "q", head_dim, "q_lat", rank, "r")
    project = through_weights(mla.projected, "w_uv", "o_lat", rank, "out", head_dim, "d")

    (attention,) = mla.skeleton(
        name,
        uses("q", "kv_cache", "kr_cache", "q_lat", "o_lat", *serving),
        head_dim=rank,
        scores=_latent_scores(
            mla,
            lambda f, b, r: b.load(f.buffer("q_lat"), b.flat_index(f.item, rank, r)),
            lambda f, b, dim: b.load(f.buffer("q"), b.flat_index(f.item, head_dim, dim)),
        ),
        update=_latent_update(mla, lambda f: f.o_acc, lambda b, r: b.o_index(r),
                              weight_first=True),
        q="q_lat",
        out="o_lat",
    ).body.block.ops
    attention.detach()
    projections = [
        per_item_kernel(
            f"{name}_absorb_query", uses("q", "w_uk", "q_lat"),
            mla.items * rank // rows, absorb_query, mla.dtype,
        ),
        per_item_kernel(
            f"{name}_project", uses("w_uv", "o_lat", "out"), mla.items * head_dim // rows,
            project,
            mla.dtype,
        ),
    ]
    for kernel, (source, weights, dest, depth, width) in zip(projections, (
            ("q", "w_uk", "q_lat", head_dim, rank), ("o_lat", "w_uv", "out", rank, head_dim)),
            strict=True):
        kernel.attributes[HEAD_PRODUCT_ATTR] = HeadProductAttr(
            source=source, weights=weights, dest=dest, sequences=mla.batch,
            heads=mla.num_heads, depth=depth, width=width, transposed=weights == "w_uk")
    module = ModuleOp([projections[0], attention, projections[1]])
    module.verify()
    return module
