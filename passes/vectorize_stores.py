"""vyre-vectorize-stores: four scalar stores of neighbouring elements of a
buffer the kernel only writes become one vector store.

A kernel split over its keys for a merge kernel (vyre-split-kv{merge=kernel})
leaves each invocation's partial row of the accumulator in a `temp`
buffer one f32 at a time: a lane's neighbouring dims are written by as
many store instructions, each filling 4 bytes of a memory sector.  This
pass merges the stores of `width` consecutive elements `base + 0 ..
base + width-1` of an f32 kernel buffer that the kernel never loads (a
`write` or `temp` buffer), with `base` a provable multiple of `width`,
that sit in one block, into one `vector.from_elements` and one
`vector.store` where the last of them was.  Between the first and the
last, every other store to that buffer must be provably elsewhere (an
index of the same terms, in another window); a store that may write the
same element ends the run.  The SPIR-V emitter writes such a buffer
through a vector view where every write of it is a vector store
(spirv/vector.py).

No load sees the buffer in this kernel and no element's last value
changes, so every result is bit-identical.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import gpu, memref, vector
from xdsl.dialects.builtin import ModuleOp, f32
from xdsl.ir import Block, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl.dialects.launch import BufferAccess
from vyre_xdsl.dialects.vector_from_elements import FromElementsOp
from vyre_xdsl.errors import require_f32_vector_width
from vyre_xdsl.index_forms import is_multiple_of_term, linear_index
from vyre_xdsl.kernel_info import buffer_arguments


def write_only_buffers(func: gpu.FuncOp) -> set[SSAValue]:
    """The f32 arguments of a lowered vyre kernel that are `write` or `temp`
    buffers it stores to and never loads."""
    return {
        arg for arg, described in buffer_arguments(func, (f32,))
        if described.access in (BufferAccess.WRITE, BufferAccess.TEMP)
        and arg.uses and all(isinstance(use.operation, memref.StoreOp | vector.StoreOp)
                             and use.index == 1 for use in arg.uses)
    }


@dataclass
class _Window:
    """The stores of one aligned window, by element, in block order."""

    stores: dict[int, memref.StoreOp] = field(default_factory=dict)
    broken: bool = False


def _place(store: memref.StoreOp, width: int) -> tuple[tuple, int] | None:
    """(window key, element) of a store whose index is a multiple of
    `width` plus a constant; None for any other index."""
    if len(store.indices) != 1:
        return None
    form = linear_index(store.indices[0])
    if not all(is_multiple_of_term(v, c, width) for v, c in form.terms):
        return None
    window, element = divmod(form.constant, width)
    return (store.memref, form.terms, window), element


def _windows(block: Block, buffers: set[SSAValue], width: int) -> list[_Window]:
    """The windows of `width` stores of `block` that cover every element
    once, with no store to their buffer between them that might write one
    of their elements."""
    windows: dict[tuple, _Window] = {}
    unfinished: dict[SSAValue, list[tuple[tuple, _Window]]] = defaultdict(list)
    for op in block.ops:
        for store in [inner for inner in op.walk()
                      if isinstance(inner, memref.StoreOp | vector.StoreOp)
                      and inner.operands[1] in buffers]:
            place = _place(store, width) if store is op and isinstance(
                store, memref.StoreOp) else None
            for key, window in unfinished[store.operands[1]]:
                # a store to another window of the same terms is elsewhere
                if place is None or place[0][1] != key[1] or (
                        place[0] == key and place[1] in window.stores):
                    window.broken = True
            if place is None:
                continue
            key, element = place
            window = windows.setdefault(key, _Window())
            if window.stores and (window.broken or element in window.stores):
                window.broken = True
                continue
            if not window.stores:
                unfinished[store.memref].append((key, window))
            window.stores[element] = store
            if len(window.stores) == width:
                unfinished[store.memref].remove((key, window))
    return [w for w in windows.values() if not w.broken and len(w.stores) == width]


def _vectorise(window: _Window, width: int) -> None:
    """The window's stores as one vector store where the last of them was
    (every stored value and element 0's index are defined by then)."""
    ordered = [window.stores[element] for element in range(width)]
    last = list(window.stores.values())[-1]
    values = FromElementsOp([store.value for store in ordered])
    store = vector.StoreOp(values.result, ordered[0].memref, [ordered[0].indices[0]])
    Rewriter.insert_op([values, store], InsertPoint.before(last))
    for scalar in ordered:
        Rewriter.erase_op(scalar)


@dataclass(frozen=True)
class VectorizeStoresPass(ModulePass):
    """Merge stores of `width` neighbouring elements of a buffer the kernel
    only writes into one vector store; results are bit-identical."""

    name = "vyre-vectorize-stores"

    width: int = 4

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_f32_vector_width(self.name, self.width)
        for func in [f for f in op.walk() if isinstance(f, gpu.FuncOp)]:
            buffers = write_only_buffers(func)
            blocks = {store.parent_block() for store in func.walk()
                      if isinstance(store, memref.StoreOp) and store.memref in buffers}
            for block in blocks:
                for window in _windows(block, buffers, self.width):
                    _vectorise(window, self.width)
