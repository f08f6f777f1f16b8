"""Re-emitting one item's IR for R items at once (rows per lane).

vyre-inline-fragments emits an item's recurrence once.  With
`rows_per_lane R` it emits it into a detached block and `widen_rows` copies
that block for R items `base + r`: an operation that depends on the item (or
reads or writes the item's scratch) is emitted R times, once per row; one
that does not is emitted once and its result shared by the R rows.  So a
key or value element that one lane loads feeds the multiply-adds of R
rows, the point of register blocking.

Index arithmetic on `base + r` is followed exactly (`RowOffsets`) where the
rows provably agree: with `base` a multiple of R, `(base + r) / k` is one
value for every r < R when k is a multiple of R (the R items lie in one
block of k), so a head, sequence or query block that the R items share
stays one value, and so do the loads it addresses.

A scratch array stays one array while every store to it is the same for all
rows (a staged K/V tile); the first store that depends on the row gives it
one copy per row (`widen_rows` starts over with the copy).

Each row executes exactly its own operations in its own order: results are
bit-identical to R invocations of one item each.  Loop bounds and branch
conditions must be the same for every row; a branch whose condition is not
(and that holds no barrier) is emitted once per row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import gcd

from xdsl.dialects import arith, gpu, memref, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr
from xdsl.ir import Block, Operation, Region, SSAValue

from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import VyreError
from vyre_xdsl.index_forms import known_multiple
from vyre_xdsl.loop_bounds import constant_index


@dataclass(frozen=True)
class RowOffsets:
    """The index `base + offsets[r]` of row r, `base` a multiple of
    `multiple` (0: base is 0)."""

    base: SSAValue
    multiple: int
    offsets: tuple[int, ...]


Rows = tuple[SSAValue, ...]
Widened = SSAValue | Rows | RowOffsets


class _NeedsCopies(Exception):
    def __init__(self, array: SSAValue) -> None:
        self.array = array


def widen_rows(
    source: Block, rows: int, seeds: dict[SSAValue, Widened],
    copies_of: Callable[[SSAValue], Rows],
) -> Block:
    """A new block holding `source`'s operations for `rows` rows (`seeds`
    as for RowWidening); `copies_of(array)` declares one array per row for a
    scratch array that needs them."""
    storage: dict[SSAValue, Rows] = {}
    while True:
        dest = Block()
        widening = RowWidening(rows, seeds, storage)
        try:
            widening.widen(source, dest)
            return dest
        except _NeedsCopies as needed:
            # drop every use the attempt made, also in blocks not yet attached
            for block in [dest, *widening.blocks]:
                if block.parent is None:
                    discard(block)
            storage[needed.array] = copies_of(needed.array)


class RowWidening:
    """Copies blocks of one item's IR for `rows` items.  `seeds` maps values
    of the source to what they are per row; `storage` maps the scratch
    arrays the source uses to one array per row."""

    def __init__(
        self, rows: int, seeds: dict[SSAValue, Widened], storage: dict[SSAValue, Rows]
    ) -> None:
        self.rows = rows
        self.env: dict[SSAValue, Widened] = {**seeds, **storage}
        self.seeds = set(seeds)
        self.cache: list[dict[tuple[int, int], SSAValue]] = [{}]
        self.blocks: list[Block] = []  # every block made, for widen_rows to discard

    # -- values ------------------------------------------------------------

    def of(self, value: SSAValue) -> Widened:
        return self.env.get(value, value)

    def row(self, block: Block, value: SSAValue, r: int) -> SSAValue:
        """The value of row `r`, materialised at the end of `block`."""
        widened = self.of(value)
        if isinstance(widened, SSAValue):
            return widened
        if isinstance(widened, tuple):
            return widened[r]
        offset = widened.offsets[r]
        if offset == 0:
            return widened.base
        key = (id(widened), r)
        for scope in reversed(self.cache):
            if key in scope:
                return scope[key]
        value = _emit(block, arith.AddiOp(widened.base, _emit(block, _index(offset))))
        self.cache[-1][key] = value
        return value

    def _offsets(self, block: Block, base: SSAValue, multiple: int, offsets) -> Widened:
        offsets = tuple(offsets)
        if len(set(offsets)) == 1:  # the same for every row
            if offsets[0] == 0:
                return base
            return _emit(block, arith.AddiOp(base, _emit(block, _index(offsets[0]))))
        return RowOffsets(base, multiple, offsets)

    # -- operations --------------------------------------------------------

    def widen(self, source: Block, dest: Block) -> None:
        """Append to `dest` the copy of `source`'s operations (terminator
        has none) for every row."""
        for op in list(source.ops):
            self.op(op, dest)

    def op(self, op: Operation, dest: Block) -> None:
        if op.results and all(r in self.seeds for r in op.results):
            return
        if isinstance(op, vyre.ItemIndexOp):
            raise VyreError(
                "rows_per_lane: the item's IR reads vyre.item_index itself (the "
                "invocation, not its rows); use the fragments' %item"
            )
        if isinstance(op, scf.ForOp):
            return self.loop(op, dest)
        if isinstance(op, scf.IfOp):
            return self.branch(op, dest)
        if op.regions:
            raise VyreError(
                f"rows_per_lane: {op.name} has regions, which cannot be run for "
                f"several rows at once; run this skeleton with one row a lane"
            )
        operands = [self.of(v) for v in op.operands]
        if all(isinstance(v, SSAValue) for v in operands):
            self._clone_once(op, dest)
            return
        if not isinstance(op, memref.LoadOp):
            for v, widened in zip(op.operands, operands, strict=True):
                if isinstance(v.owner, vyre.ScratchOp) and isinstance(widened, SSAValue):
                    raise _NeedsCopies(v)  # a row-dependent write to a shared array
        if (followed := self._index_arith(op, operands, dest)) is not None:
            self.env[op.results[0]] = followed
            return
        copies = []
        for r in range(self.rows):
            mapper = {v: self.row(dest, v, r) for v in op.operands}
            copies.append(_emit_op(dest, op.clone(value_mapper=mapper)))
        for i, result in enumerate(op.results):
            self.env[result] = tuple(copy.results[i] for copy in copies)

    def _clone_once(self, op: Operation, dest: Block) -> None:
        mapper = {v: self.of(v) for v in op.operands}
        new = _emit_op(dest, op.clone(value_mapper=mapper))  # type: ignore[arg-type]
        for old, result in zip(op.results, new.results, strict=True):
            self.env[old] = result

    def _index_arith(self, op: Operation, operands, dest: Block) -> Widened | None:
        """`op` on a RowOffsets and a constant (or, for addi, any value the
        rows share), followed exactly; None where it cannot be."""
        if not isinstance(op, arith.AddiOp | arith.SubiOp | arith.MuliOp
                          | arith.DivUIOp | arith.RemUIOp):
            return None
        if not isinstance(op.results[0].type, IndexType):
            return None
        lhs, rhs = operands
        if isinstance(op, arith.AddiOp | arith.MuliOp) and isinstance(lhs, SSAValue):
            lhs, rhs = rhs, lhs
        if not isinstance(lhs, RowOffsets) or not isinstance(rhs, SSAValue):
            return None
        base, multiple, offsets = lhs.base, lhs.multiple, lhs.offsets
        k = constant_index(rhs)
        if isinstance(op, arith.AddiOp):
            if k is not None:
                return self._offsets(dest, base, multiple, (o + k for o in offsets))
            new_base = _emit(dest, arith.AddiOp(base, rhs))
            return self._offsets(dest, new_base, gcd(multiple, _multiple(rhs)), offsets)
        if k is None or k <= 0:
            return None
        if isinstance(op, arith.SubiOp):
            return self._offsets(dest, base, multiple, (o - k for o in offsets))
        if isinstance(op, arith.MuliOp):
            new_base = _emit(dest, arith.MuliOp(base, rhs))
            return self._offsets(dest, new_base, multiple * k, (o * k for o in offsets))
        within = all(0 <= o < multiple for o in offsets)
        if isinstance(op, arith.DivUIOp):
            if multiple % k == 0 and all(o >= 0 for o in offsets):
                # (base + o) / k = base / k + o // k: base is a multiple of k
                new_base = _emit(dest, arith.DivUIOp(base, rhs))
                return self._offsets(dest, new_base, multiple // k, (o // k for o in offsets))
            if within and k % multiple == 0:
                # base + o stays below the next multiple of k after base
                return _emit(dest, arith.DivUIOp(base, rhs))
            return None
        if multiple % k == 0 and all(o >= 0 for o in offsets):
            zero = _emit(dest, _index(0))
            return self._offsets(dest, zero, 0, (o % k for o in offsets))
        if within and k % multiple == 0:
            new_base = _emit(dest, arith.RemUIOp(base, rhs))
            return self._offsets(dest, new_base, multiple, offsets)
        return None

    # -- regions -----------------------------------------------------------

    def loop(self, op: scf.ForOp, dest: Block) -> None:
        bounds = [self.of(v) for v in (op.lb, op.ub, op.step)]
        if not all(isinstance(v, SSAValue) for v in bounds):
            raise VyreError(
                "rows_per_lane: a loop's bounds depend on the item, so the rows of "
                "an invocation cannot share it; run this skeleton with one row a lane"
            )
        varying = [not isinstance(self.of(v), SSAValue) for v in op.iter_args]
        while True:  # until every row-dependent carried value is known
            body, yields = self._loop_body(op, varying)
            wider = [v or not isinstance(y, SSAValue)
                     for v, y in zip(varying, yields, strict=True)]
            if wider == varying:
                break
            discard(body)
            varying = wider
        inits: list[SSAValue] = []
        for init, wide in zip(op.iter_args, varying, strict=True):
            inits.extend(self._carried(dest, init, wide))
        yielded: list[SSAValue] = []
        for value, wide in zip(op.body.block.last_op.operands, varying, strict=True):
            yielded.extend(self._carried(body, value, wide))
        body.add_op(scf.YieldOp(*yielded))
        new = scf.ForOp(*bounds, inits, Region(body))
        new.attributes.update(op.attributes)
        dest.add_op(new)
        self._bind(op.results, new.results, varying)

    def _bind(self, old, new, varying: list[bool]) -> None:
        """Map `old` results to `new` ones: R each where `varying`, else one."""
        results = iter(new)
        for result, wide in zip(old, varying, strict=True):
            group = tuple(next(results) for _ in range(self.rows if wide else 1))
            self.env[result] = group if wide else group[0]

    def _carried(self, block: Block, value: SSAValue, wide: bool) -> list[SSAValue]:
        if wide:
            return [self.row(block, value, r) for r in range(self.rows)]
        widened = self.of(value)
        assert isinstance(widened, SSAValue)
        return [widened]

    def _loop_body(self, op: scf.ForOp, varying: list[bool]) -> tuple[Block, list[Widened]]:
        old = op.body.block
        types = [old.args[0].type]
        for arg, wide in zip(old.args[1:], varying, strict=True):
            types.extend([arg.type] * (self.rows if wide else 1))
        body = Block(arg_types=types)
        self.blocks.append(body)
        self.env[old.args[0]] = body.args[0]
        body.args[0].name_hint = old.args[0].name_hint
        new_args = iter(body.args[1:])
        for arg, wide in zip(old.args[1:], varying, strict=True):
            group = tuple(next(new_args) for _ in range(self.rows if wide else 1))
            for new_arg in group:
                new_arg.name_hint = arg.name_hint
            self.env[arg] = group if wide else group[0]
        self.cache.append({})
        for inner in list(old.ops)[:-1]:
            self.op(inner, body)
        yields = [self.of(v) for v in old.last_op.operands]
        self.cache.pop()
        return body, yields

    def branch(self, op: scf.IfOp, dest: Block) -> None:
        cond = self.of(op.cond)
        if not isinstance(cond, SSAValue):
            return self._branch_per_row(op, dest)
        blocks, yields = [], []
        for region in (op.true_region, op.false_region):
            if not region.blocks:
                blocks.append(None)
                yields.append([])
                continue
            block = Block()
            self.blocks.append(block)
            self.cache.append({})
            for inner in list(region.block.ops)[:-1]:
                self.op(inner, block)
            yields.append([self.of(v) for v in region.block.last_op.operands])
            self.cache.pop()
            blocks.append(block)
        varying = [any(not isinstance(ys[i], SSAValue) for ys in yields if ys)
                   for i in range(len(op.results))]
        types: list = []
        for result, wide in zip(op.results, varying, strict=True):
            types.extend([result.type] * (self.rows if wide else 1))
        regions = []
        for block, region in zip(blocks, (op.true_region, op.false_region), strict=True):
            if block is None:
                regions.append(Region())
                continue
            values: list[SSAValue] = []
            for value, wide in zip(region.block.last_op.operands, varying, strict=True):
                values.extend(self._carried(block, value, wide))
            block.add_op(scf.YieldOp(*values))
            regions.append(Region(block))
        new = scf.IfOp(cond, types, regions[0], regions[1])
        new.attributes.update(op.attributes)
        dest.add_op(new)
        self._bind(op.results, new.results, varying)

    def _branch_per_row(self, op: scf.IfOp, dest: Block) -> None:
        if any(isinstance(inner, gpu.BarrierOp) for inner in op.walk()):
            raise VyreError(
                "rows_per_lane: a branch that holds a barrier depends on the item, so "
                "the rows of an invocation cannot take it apart; run this skeleton "
                "with one row a lane"
            )
        for inner in op.walk():  # every write in it depends on the row
            if not isinstance(inner, memref.LoadOp):
                for v in inner.operands:
                    if isinstance(v.owner, vyre.ScratchOp) and isinstance(self.of(v), SSAValue):
                        raise _NeedsCopies(v)
        outside = {
            v for inner in op.walk() for v in inner.operands if not _defined_in(op, v)
        }
        copies = []
        for r in range(self.rows):
            mapper = {v: self.row(dest, v, r) for v in outside}
            copies.append(_emit_op(dest, op.clone(value_mapper=mapper)))
        for i, result in enumerate(op.results):
            self.env[result] = tuple(copy.results[i] for copy in copies)


def _index(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, IndexType()))


def _emit(block: Block, op: Operation) -> SSAValue:
    block.add_op(op)
    return op.results[0]


def _emit_op(block: Block, op: Operation) -> Operation:
    block.add_op(op)
    return op


def _multiple(value: SSAValue) -> int:
    return known_multiple(value) or 0


def _defined_in(op: Operation, value: SSAValue) -> bool:
    owner = value.owner
    parent = owner.parent_op() if isinstance(owner, Block) else owner
    return parent is not None and op.is_ancestor(parent)


def discard(block: Block) -> None:
    """Erase every operation of `block` (a detached block)."""
    for op in reversed(list(block.ops)):
        op.drop_all_references()
    for op in reversed(list(block.ops)):
        op.erase(safe_erase=False)


def loads_shared(block: Block, item: SSAValue, rows: int) -> bool:
    """Whether the rows `g * rows + r` (r < rows) of a fragment whose item is
    `item` read the same element in every load of a kernel buffer in
    `block`: a key or value row they share (GQA's query heads of one key
    head, the rows of one head), so that widening loads it once for all."""
    widening = RowWidening(rows, {item: RowOffsets(item, rows, tuple(range(rows)))}, {})
    dest = Block()
    try:
        widening.widen(block, dest)
        loads = [op for op in block.walk()
                 if isinstance(op, memref.LoadOp) and isinstance(op.memref.owner, vyre.BufferOp)]
        return all(isinstance(widening.of(load.results[0]), SSAValue) for load in loads)
    except (VyreError, _NeedsCopies):
        return False
    finally:
        for made in [dest, *widening.blocks]:
            if made.parent is None:
                discard(made)
