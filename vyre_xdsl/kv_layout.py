"""Where a decoder finds the keys of an item's sequence (serving, #18).

A batch of sequences stored one after the other, each key count read at run
time (`kv_lens`, ragged lengths), or paged (`page_size`/`num_pages`, as
vLLM and FlashInfer store a cache): the caches are pools of pages and an
int32 `block_table [batch, ceil(kv_len / page_size)]` names the pages of
each sequence.  FlashAttention-2 and MLA decode check these arguments, and
build the IR that finds key t of an item's sequence, here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.ir import SSAValue

from vyre_xdsl.checks import check_dimensions, check_u32_size
from vyre_xdsl.errors import VyreError
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.skeleton import Buffer, Fragment


@dataclass(frozen=True)
class KvLayout:
    """`batch` sequences of at most `kv_len` keys; `items_per_seq`
    consecutive items (query rows) belong to one sequence."""

    batch: int
    kv_len: int
    items_per_seq: int
    kv_lens: bool = False
    page_size: int | None = None
    num_pages: int | None = None

    @property
    def paged(self) -> bool:
        return self.page_size is not None

    @property
    def pages_per_seq(self) -> int:
        assert self.page_size is not None
        return -(-self.kv_len // self.page_size)

    def buffers(self) -> list[Buffer]:
        """The int32 inputs: `kv_lens [batch]`, `block_table [batch,
        pages_per_seq]`, those the layout has."""
        buffers = []
        if self.kv_lens:
            buffers.append(Buffer("kv_lens", (self.batch,), dtype="i32"))
        if self.paged:
            buffers.append(Buffer("block_table", (self.batch, self.pages_per_seq),
                                  dtype="i32"))
        return buffers

    def skeleton_args(self) -> dict[str, object]:
        """What `tiled_online_softmax` takes for the run-time lengths."""
        if not self.kv_lens:
            return {}
        return {"kv_lens": "kv_lens", "items_per_seq": self.items_per_seq}

    def sequence(self, b: IRBuilder, item: SSAValue) -> SSAValue:
        return b.divui(item, b.index(self.items_per_seq), "seq")

    def run_time_length(self, b: Fragment) -> SSAValue:
        """The key count of this item's sequence, clamped to [0, kv_len],
        as an index (the skeleton clamps it the same way)."""
        seq = self.sequence(b, b.args["item"])
        return b.load_clamped_index(b.buffer("kv_lens"), seq, self.kv_len)

    def table_base(self, f: Fragment) -> SSAValue:
        """The first block_table entry of this item's sequence."""
        return f.muli(self.sequence(f, f.item), f.index(self.pages_per_seq), "table_base")

    def page_row(
        self, b: Fragment, table_base: SSAValue, t: SSAValue, hint: str | None = None
    ) -> SSAValue:
        """The pool row of key t: slot t % page_size of page block_table[seq,
        t // page_size], the page clamped to the pool (a bad table gives
        garbage, never a read outside the pool)."""
        assert self.page_size is not None and self.num_pages is not None
        size = b.index(self.page_size)
        page_of_t = b.divui(t, size)
        entry = b.addi(table_base, page_of_t, "table_entry")
        page = b.load_clamped_index(b.buffer("block_table"), entry, self.num_pages - 1)
        # t % page_size through the quotient: one division for both, and no
        # remui (to which xDSL gives unknown effects, so CSE would keep a
        # copy's lookup of the same page apart from the next's)
        slot = b.subi(t, b.muli(page_of_t, size))
        return b.addi(b.muli(page, size), slot, hint)


def check_paging(
    kv_lens: object, page_size: object, num_pages: object, pool: str
) -> tuple[bool, int | None, int | None]:
    """A builder's `kv_lens`, `page_size`, `num_pages` checked: (kv_lens,
    page_size, num_pages), kv_lens True where paged (pages imply lengths).
    `pool` describes the paged caches' shape for the messages."""
    paged = page_size is not None or num_pages is not None
    if kv_lens is None:
        kv_lens = paged
    if not isinstance(kv_lens, bool | np.bool_):  # as return_lse
        raise VyreError(f"kv_lens must be True or False, got {kv_lens!r}")
    kv_lens = bool(kv_lens)
    if paged:
        if page_size is None or num_pages is None:
            missing = "num_pages" if page_size is not None else "page_size"
            raise VyreError(
                f"paged KV needs both page_size and num_pages; give {missing} too "
                f"({pool})"
            )
        if not kv_lens:
            raise VyreError(
                "page_size/num_pages imply kv_lens (pages and lengths, as vLLM and "
                "FlashInfer store a cache): leave kv_lens out or pass kv_lens=True"
            )
        page_size, num_pages = check_dimensions(page_size=page_size, num_pages=num_pages)
    return kv_lens, page_size, num_pages


def check_table(layout: KvLayout) -> None:
    """block_table's size must fit u32."""
    if layout.paged:
        check_u32_size("buffer block_table", batch=layout.batch,
                       pages_per_seq=layout.pages_per_seq)
