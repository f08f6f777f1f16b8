"""A skeleton's fragments as tile products: what the expansions that compute
a tile's scores as S = Q Kᵀ and its weighted values as P V over a block of
rows (vyre-tensor-cores on matrix units, vyre-block-product on lanes) take
from them, and the checks that they may.

The fragments qualify when the scores region is one loop over the tile's
keys whose body takes one dot product of the query row (q_scratch) with a
key row of a read buffer, and stores a function of it alone at the key's
slot of score_tile; the update region weighs rows of a read buffer with
vyre.tile_weight and adds them into o_acc, rescaled; the rows that a block
of items reads are the same (checked by evaluating the fragments'
addresses for every item).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import IntegerAttr, IntegerType
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from vyre_xdsl.dialects import vyre
from vyre_xdsl.dim_split import is_dot_product
from vyre_xdsl.errors import pass_error
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.loop_bounds import constant_index
from vyre_xdsl.value_range import is_zero_constant


class Unfit(Exception):
    """Why a skeleton does not qualify."""


_FOLDS: dict[type, Callable] = {  # what _evaluate follows
    arith.AddiOp: lambda a, b: a + b, arith.SubiOp: lambda a, b: a - b,
    arith.MuliOp: lambda a, b: a * b, arith.DivUIOp: lambda a, b: a // b,
    arith.RemUIOp: lambda a, b: a % b,
}


_CLAMPS = (arith.MaxSIOp, arith.MinSIOp)


def _evaluate(value: SSAValue, known: dict[SSAValue, int | np.ndarray]) -> int | np.ndarray:
    """The integer `value` takes when the block arguments are `known` (an
    argument's values may be an array: the values for each), through arith
    index arithmetic, and lookups in integer buffers (a block table): entry
    e reads as page -e - 1 and its clamps (maxsi, minsi) keep it, so that
    two addresses agree only where they look up the same entry, and the
    rows of two neighbouring entries are never neighbours."""
    if value in known:
        return known[value]
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    if isinstance(owner, memref.LoadOp) and isinstance(owner.memref.owner, vyre.BufferOp) \
            and isinstance(owner.memref.type.element_type, IntegerType):
        return -_evaluate(owner.indices[0], known) - 1
    if isinstance(owner, arith.IndexCastOp):
        return _evaluate(owner.input, known)
    if isinstance(owner, _CLAMPS) and isinstance(owner.lhs.owner, (memref.LoadOp, *_CLAMPS)):
        return _evaluate(owner.lhs, known)
    if isinstance(owner, Operation) and type(owner) in _FOLDS:
        lhs, rhs = (_evaluate(v, known) for v in owner.operands)
        return _FOLDS[type(owner)](lhs, rhs)
    raise Unfit(f"an address depends on {value.name_hint or 'a value'} "
                 f"({owner.name if isinstance(owner, Operation) else 'an argument'}), "
                 f"which is not index arithmetic on the fragment's arguments")


@dataclass
class RowAccess:
    """A fragment's load of a key's (or value's) row: element `d` of key
    `j` of the tile is at `index`."""

    load: memref.LoadOp
    key: BlockArgument  # the loop over the tile's keys
    dim: BlockArgument  # the loop over the row's dims

    def start(self, b: IRBuilder, op: vyre.TiledOnlineSoftmaxOp, region: str, item: SSAValue,
              lane: SSAValue, tile_start: SSAValue) -> SSAValue:
        """Where `item` reads key tile_start, dim 0, emitted at `b`."""
        known = {op.region_arg(region, "item"): item, op.region_arg(region, "lane"): lane,
                 op.region_arg(region, "tile_start"): tile_start,
                 self.key: b.index(0), self.dim: b.index(0)}
        return clone_value(b, self.load.indices[0], known)

    def evaluate(self, op: vyre.TiledOnlineSoftmaxOp, region: str, item, key, dim=0):
        """Where `item` reads element `dim` of key `key` (numpy arrays or
        ints; the tile starts at 0, lane 0)."""
        known = {op.region_arg(region, "item"): item,
                 op.region_arg(region, "tile_start"): 0,
                 op.region_arg(region, "lane"): 0, self.key: key, self.dim: dim}
        return _evaluate(self.load.indices[0], known)

    def same_rows(self, op: vyre.TiledOnlineSoftmaxOp, region: str, other: RowAccess,
                  other_region: str) -> bool:
        """Whether `other` (in `other_region`) reads the rows this access
        reads, of the same buffer, for every item and key."""
        if other.load.memref is not self.load.memref:
            return False
        shape = op.shape()
        items = np.arange(shape["item_count"], dtype=np.int64)
        keys = np.arange(shape["seq_len"], dtype=np.int64)
        # every item at the first and last keys, the first and last items
        # at every key (an item's rows differ by its sequence's offset)
        probes = ((items[:, None], keys[[0, -1]][None, :]), (items[[0, -1]][:, None], keys))
        return all(np.all(self.evaluate(op, region, i, k)
                          == other.evaluate(op, other_region, i, k)) for i, k in probes)

    def check(self, op: vyre.TiledOnlineSoftmaxOp, region: str, width: int,
              block: int, run: int | None = None) -> None:
        """The row of key j + 1 follows key j's (within each aligned `run`
        of keys: rows in pages; None: all of them), its dims are contiguous,
        and each `block` items (a subgroup's, or a workgroup's when staged)
        read the same rows."""
        shape = op.shape()

        def at(item, j, d: int):
            return self.evaluate(op, region, item, j, d)

        keys = np.arange(shape["seq_len"], dtype=np.int64)
        first = keys - keys % run if run else np.zeros_like(keys)
        follows = np.broadcast_to(at(0, keys, 0) - at(0, first, 0) == (keys - first) * width,
                                  keys.shape)
        if not follows.all() or at(0, 0, 1) - at(0, 0, 0) != 1:
            raise Unfit(f"the rows that {self.load.memref.name_hint} is read in are not "
                         f"{width} contiguous elements apart"
                         + (f" in runs of {run} keys" if run else ""))
        items = np.arange(shape["item_count"], dtype=np.int64)  # all at once
        same = np.broadcast_to(at(items, 0, 0) == at(items - items % block, 0, 0),
                               items.shape)
        differ = np.nonzero(~same)[0]
        if differ.size:
            item = int(differ[0])
            raise Unfit(f"items {item - item % block} and {item} read different rows "
                         f"of {self.load.memref.name_hint}")


def _only(items: list, what: str):
    if len(items) != 1:
        raise Unfit(f"expected one {what}, found {len(items)}")
    return items[0]


def _loops(block: Block) -> list[scf.ForOp]:
    return [op for op in block.ops if isinstance(op, scf.ForOp)]


def _buffer_loads(loop: scf.ForOp) -> list[memref.LoadOp]:
    """The loop's loads of float buffers (an integer buffer's, a block
    table's, is part of an address)."""
    return [op for op in loop.body.walk() if isinstance(op, memref.LoadOp)
            and isinstance(op.memref.owner, vyre.BufferOp)
            and not isinstance(op.memref.type.element_type, IntegerType)]


def _widened(value: SSAValue) -> SSAValue:
    """`value` before an arith.extf (a half buffer's element), if any."""
    return value.owner.operands[0] if isinstance(value.owner, arith.ExtFOp) else value


def _product_sum(loop: scf.ForOp, what: str, from_zero: bool = True,
                 zero_weights: bool = False) -> tuple[SSAValue, SSAValue]:
    """The factors of the term `a * b` that a sum of products adds to its
    one carried f32 each iteration, nothing stored: from +0.0
    (dim_split.is_dot_product), the multiply-add both fragments' sums must
    be, or, with `from_zero=False`, on from whatever it starts with (a
    chained dot product).  With `zero_weights` the term may be
    `a == 0 ? 0 : a * b` (a masked update's: a dropped key adds exactly 0,
    even times an infinite value)."""
    (total,) = loop.body.block.last_op.operands
    add, carried = total.owner, loop.body.block.args[-1]
    if from_zero:
        summed = is_dot_product(loop)
    else:
        summed = (len(loop.iter_args) == 1 and isinstance(add, arith.AddfOp)
                  and len(list(carried.uses)) == 1
                  and not any(isinstance(o, memref.StoreOp) for o in loop.body.walk()))
    term = add.rhs if summed and add.lhs is carried else None
    if zero_weights and term is not None and (guarded := _zero_guarded(term)) is not None:
        term = guarded
    if term is None or not isinstance(term.owner, arith.MulfOp):
        raise Unfit(f"{what} is not a sum of products" + (" from 0" if from_zero else ""))
    return term.owner.lhs, term.owner.rhs


def _zero_guarded(term: SSAValue) -> SSAValue | None:
    """The product `a * b` of a term `select(a == 0, 0, a * b)`, else None."""
    select = term.owner
    if not isinstance(select, arith.SelectOp):
        return None
    test, product = select.cond.owner, select.rhs
    if not (isinstance(test, arith.CmpfOp)
            and arith.CMPF_COMPARISON_OPERATIONS[test.predicate.value.data] == "oeq"
            and isinstance(product.owner, arith.MulfOp)
            and test.lhs is product.owner.lhs
            and is_zero_constant(test.rhs) and is_zero_constant(select.lhs)):
        return None
    return product


def _check_bounds(loop: scf.ForOp, upper, what: str) -> None:
    bounds = (constant_index(loop.lb), constant_index(loop.step))
    if bounds != (0, 1) or (loop.ub is not upper and constant_index(loop.ub) != upper):
        bound = upper if isinstance(upper, int) else "tile_len"
        raise Unfit(f"{what} does not run over 0 .. {bound}")


@dataclass
class Fragments:
    """What the expansion takes from a qualifying skeleton's fragments."""

    key_loop: scf.ForOp  # scores: over the tile's keys
    dot: scf.ForOp  # ... its dot product
    score: SSAValue  # ... the value it stores, a function of the dot product
    k: RowAccess
    v: RowAccess

    @staticmethod
    def of(op: vyre.TiledOnlineSoftmaxOp, block: int) -> Fragments:
        """The fragments of `op`, whose items read the same rows `block`
        at a time; raises Unfit where they do not qualify."""
        shape = op.shape()
        scores = op.scores.block
        key_loop = _only(_loops(scores), "loop in the scores region")
        dot = _only(_loops(key_loop.body.block), "loop in the loop over keys")
        k_load = _only(_buffer_loads(dot), "buffer load in the dot product")
        _check_bounds(key_loop, op.region_arg("scores", "tile_len"), "the loop over keys")
        _check_bounds(dot, shape["head_dim"], "the dot product")
        query, key = (_widened(v) for v in _product_sum(dot, "the dot product"))
        q_load = query.owner
        if not (isinstance(q_load, memref.LoadOp)
                and q_load.memref is op.region_arg("scores", "q_scratch")
                and key is k_load.results[0]):
            raise Unfit("the dot product is not of the query row (q_scratch) and a key row")
        store = _only([s for s in key_loop.body.walk() if isinstance(s, memref.StoreOp)],
                      "store in the loop over keys")
        if store.memref is not op.region_arg("scores", "score_tile"):
            raise Unfit("the loop over keys stores elsewhere than score_tile")
        if _fragment_inputs(store.value, {dot.results[0]}):
            raise Unfit("the stored score depends on the key's or the row's position, "
                         "not only on the dot product")
        k = RowAccess(k_load, key_loop.body.block.args[0], dot.body.block.args[0])
        k.check(op, "scores", shape["head_dim"], block)
        return Fragments(key_loop, dot, store.value, k, weighted_rows(op, block))

    @property
    def buffers(self) -> tuple[SSAValue, SSAValue]:
        """The buffers the keys and the values are read from."""
        return self.k.load.memref, self.v.load.memref

    @property
    def scaled_dot(self) -> bool:
        """Whether the score is the dot product times constants, bounded
        at most (no score_mod)."""
        value = self.score
        while value is not self.dot.results[0]:
            owner = value.owner
            if isinstance(owner, vyre.BoundedScoreOp):
                value = owner.operands[0]
            elif isinstance(owner, arith.MulfOp) and len(
                    varying := [v for v in owner.operands
                                if not isinstance(v.owner, arith.ConstantOp)]) == 1:
                value = varying[0]
            else:
                return False
        return True


def weighted_rows(op: vyre.TiledOnlineSoftmaxOp, block: int, run: int | None = None) -> RowAccess:
    """The value rows that the update region weighs with vyre.tile_weight
    and adds into the rescaled o_acc, the same rows for each `block`
    items, contiguous in runs of `run` keys (RowAccess.check); raises Unfit
    where the update is not that."""
    v_dim = op.v_dim
    update = op.update.block
    dim_loop = _only(_loops(update), "loop in the update region")
    sum_loop = _only(_loops(dim_loop.body.block), "loop in the loop over dims")
    v_load = _only(_buffer_loads(sum_loop), "buffer load in the weighted sum")
    _check_bounds(dim_loop, v_dim, "the update's loop over dims")
    _check_bounds(sum_loop, op.region_arg("update", "tile_len"), "the weighted sum")
    weight, value = (_widened(v) for v in _product_sum(sum_loop, "the weighted sum",
                                                       zero_weights=op.has_mask))
    if not (isinstance(weight.owner, vyre.TileWeightOp)
            and weight.owner.j is sum_loop.body.block.args[0]
            and value is v_load.results[0]):
        raise Unfit("the weighted sum does not weigh value rows by vyre.tile_weight")
    _check_rescaled_add(op, dim_loop, sum_loop)
    v = RowAccess(v_load, sum_loop.body.block.args[0], dim_loop.body.block.args[0])
    v.check(op, "update", v_dim, block, run)
    return v


def _fragment_inputs(value: SSAValue, known: set[SSAValue]) -> set[SSAValue]:
    """The fragment's block arguments that `value` depends on, through
    values other than `known` (kernel-level values depend on none)."""
    if value in known:
        return set()
    owner = value.owner
    if isinstance(owner, Block):
        return set() if isinstance(owner.parent_op(), vyre.KernelOp) else {value}
    if isinstance(owner.parent_op(), vyre.KernelOp):
        return set()
    return set().union(*(_fragment_inputs(v, known) for v in owner.operands))


def _check_rescaled_add(op, dim_loop: scf.ForOp, sum_loop: scf.ForOp) -> None:
    """The loop over dims stores `rescale * o_acc[i] + sum` back to
    o_acc[i], and does nothing else with memory."""
    o_acc, rescale = op.region_arg("update", "o_acc"), op.region_arg("update", "rescale")
    stores = [s for s in dim_loop.body.walk() if isinstance(s, memref.StoreOp)]
    store = _only(stores, "store in the update")
    added = store.value.owner
    scaled = added.operands[0].owner if isinstance(added, arith.AddfOp) else None
    loaded = scaled.operands[1].owner if isinstance(scaled, arith.MulfOp) else None
    if not (store.memref is o_acc and isinstance(added, arith.AddfOp)
            and added.rhs is sum_loop.results[0] and isinstance(scaled, arith.MulfOp)
            and scaled.lhs is rescale
            and isinstance(loaded, memref.LoadOp) and loaded.memref is o_acc
            and loaded.indices[0] is store.indices[0]):
        raise Unfit("the update does not add the weighted sum to the rescaled o_acc")


def clone_value(b: IRBuilder, value: SSAValue, known: dict[SSAValue, SSAValue]) -> SSAValue:
    """`value` emitted at `b` with the values of `known` replaced: its
    defining operations inside the fragment cloned, in order; a value
    defined outside the fragments (a buffer, a constant of the kernel) is
    taken as it is."""
    if value in known:
        return known[value]
    owner = value.owner
    if isinstance(owner, Block):
        parent = owner.parent_op()
        if isinstance(parent, vyre.KernelOp):
            return value
        raise pass_error(owner.parent_op(), "a score or address depends on a loop that "
                                            "the tile products' expansion does not run")
    if isinstance(owner.parent_op(), vyre.KernelOp):
        return value
    operands = [clone_value(b, v, known) for v in owner.operands]
    clone = owner.clone(value_mapper=dict(zip(owner.operands, operands, strict=True)))
    b.emit(clone)
    for old, new in zip(owner.results, clone.results, strict=True):
        known[old] = new
    return known[value]


def qualify(op: vyre.TiledOnlineSoftmaxOp, head_dim_unit: int, v_dim_unit: int, keys: int,
            rows: int, sharing: int, masks: bool = False) -> Fragments:
    """The fragments of `op` for an expansion whose tiles have `keys` keys,
    whose workgroups have `rows` rows, `sharing` of which read the same keys
    and values, and which takes head_dim and v_head_dim in units of
    `head_dim_unit` and `v_dim_unit`; raises Unfit with the reason where it
    cannot take `op` (a mask, unless the expansion computes `masks`, kv
    splits, dim parts, rows per lane, kv_lens, the log-sum-exp or hooks)."""
    shape = op.shape()
    require_multiples((("head_dim", shape["head_dim"], head_dim_unit),
                       ("v_head_dim", op.v_dim, v_dim_unit),
                       ("the keys (seq_len)", shape["seq_len"], keys),
                       ("item_count", shape["item_count"], rows)))
    require_plain(op, masks=masks)
    return Fragments.of(op, sharing)


def require_multiples(checks) -> None:
    """Unfit where a (what, value, unit) of `checks` has a value that is
    not a multiple of its unit."""
    for what, value, unit in checks:
        if value % unit:
            raise Unfit(f"{what} ({value}) is not a multiple of {unit}")


def require_plain(op: vyre.TiledOnlineSoftmaxOp, lengths: bool = False,
                  masks: bool = False) -> None:
    """Unfit where `op` has what no tile-product expansion computes: a
    mask (but where it computes `masks`), kv splits, dim parts, rows per
    lane, kv_lens (but where it reads `lengths`), the log-sum-exp or
    hooks."""
    if (op.has_mask and not masks) or op.splits > 1 or op.parts > 1 or op.rows > 1 or (
            op.ragged and not lengths):
        raise Unfit("it has a mask, kv splits, dim parts, rows per lane or kv_lens")
    if op.lse is not None or not op.hooks_empty:
        raise Unfit("it writes the log-sum-exp or has a prologue or epilogue")


@dataclass
class QueryRow:
    """A dot product's load of the item's query row from a buffer: element
    `dim` of the row of `item` is at the load's index."""

    load: memref.LoadOp
    dim: BlockArgument  # the dot product's loop

    def at(self, b: IRBuilder, op: vyre.TiledOnlineSoftmaxOp, item: SSAValue,
           dim: SSAValue) -> SSAValue:
        """Where `item`'s query element `dim` is, emitted at `b`."""
        return clone_value(b, self.load.indices[0],
                           {op.region_arg("scores", "item"): item, self.dim: dim})


@dataclass
class Dot:
    """One of the chained dot products of a key's score: `width` products
    of the item's query row with the key's row."""

    loop: scf.ForOp
    query: QueryRow
    key: RowAccess
    width: int


@dataclass
class ChainedFragments:
    """What an expansion takes from fragments whose score is a function of
    a chain of dot products (each summing on from the one before, the first
    from 0), each of a query row read from a buffer with a key row, as MLA
    decode's latent attention scores a key over its latent and its rope
    dims; the update weighs value rows like FlashAttention-2's."""

    dots: list[Dot]
    score: SSAValue  # a function of the last dot product alone
    v: RowAccess

    @property
    def depth(self) -> int:
        """The dims of the query row, all dot products together."""
        return sum(d.width for d in self.dots)

    @staticmethod
    def of(op: vyre.TiledOnlineSoftmaxOp, block: int, run: int) -> ChainedFragments:
        """The fragments of `op`, whose items read the same keys and values
        `block` at a time, in rows contiguous for each aligned `run` of keys
        (a page holds whole runs); raises Unfit where they do not qualify."""
        scores = op.scores.block
        key_loop = _only(_loops(scores), "loop in the scores region")
        _check_bounds(key_loop, op.region_arg("scores", "tile_len"), "the loop over keys")
        key = key_loop.body.block.args[0]
        item = op.region_arg("scores", "item")
        dots: list[Dot] = []
        for loop in _loops(key_loop.body.block):
            if dots and (len(loop.iter_args) != 1
                         or loop.iter_args[0] is not dots[-1].loop.results[0]):
                raise Unfit("a dot product of the score does not sum on from the one before")
            width = constant_index(loop.ub)
            _check_bounds(loop, width if width is not None else -1, "a dot product")
            factors = [_widened(v) for v in _product_sum(loop, "a dot product of the score",
                                                         from_zero=not dots)]
            loads = [f.owner for f in factors]
            if not all(isinstance(x, memref.LoadOp) and isinstance(x.memref.owner, vyre.BufferOp)
                       for x in loads):
                raise Unfit("a dot product's factors are not both read from buffers")
            dim = loop.body.block.args[0]
            on_key = [key in _fragment_inputs(x.indices[0], set()) for x in loads]
            if sorted(on_key) != [False, True]:
                raise Unfit("a dot product is not of a query row and a key row")
            query_load, key_load = (loads[1], loads[0]) if on_key[0] else (loads[0], loads[1])
            if not _fragment_inputs(query_load.indices[0], set()) <= {item, dim}:
                raise Unfit(f"the query row of {query_load.memref.name_hint} depends on more "
                            f"than the item")
            access = RowAccess(key_load, key, dim)
            access.check(op, "scores", width, block, run)
            dots.append(Dot(loop, QueryRow(query_load, dim), access, width))
        if not dots:
            raise Unfit("the score has no dot product")
        store = _only([s for s in key_loop.body.walk() if isinstance(s, memref.StoreOp)],
                      "store in the loop over keys")
        if store.memref is not op.region_arg("scores", "score_tile"):
            raise Unfit("the loop over keys stores elsewhere than score_tile")
        if _fragment_inputs(store.value, {dots[-1].loop.results[0]}):
            raise Unfit("the stored score depends on more than the last dot product")
        return ChainedFragments(dots, store.value, weighted_rows(op, block, run))

