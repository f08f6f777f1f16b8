"""Splitting an item's head dims over lanes: which loops of a skeleton's
fragments run over a row's dims, and the loop over the dims one lane owns.

vyre-split-head-dim rewrites those loops; the tuning (vyre_xdsl.tuning)
asks `find_dim_loops` once per skeleton whether they exist, and
`split_problem` whether a number of parts fits, before deciding how many
parts to give it; vyre-inline-fragments loops over a lane's dims with
`loop_over_part_dims`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import copysign

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import FloatAttr, UnitAttr, f32
from xdsl.ir import BlockArgument, Region, SSAValue

from vyre_xdsl.dialects import vyre
from vyre_xdsl.index_forms import linear_index
from vyre_xdsl.ir_builder import IRBuilder
from vyre_xdsl.loop_bounds import constant_index, loop_of

CHUNK_LOOP_ATTR = "vyre.dim_chunk"  # on a loop over the dims of one chunk (dim_parts)

Access = memref.LoadOp | memref.StoreOp


@dataclass(frozen=True)
class DimLoop:
    """A loop `d = 0 .. head_dim` of a fragment and its accesses of the
    lane's slice of a scratch array, `scratch[lane * head_dim + d]`."""

    loop: scf.ForOp
    accesses: tuple[Access, ...]


def _dim_loop_of(access: Access, lane: SSAValue, head_dim: int) -> scf.ForOp | None:
    """The loop whose index is `d` if `access` reads or writes element
    `lane * head_dim + d`, else None."""
    form = linear_index(access.indices[0])
    terms = dict(form.terms)
    if form.constant != 0 or terms.pop(lane, None) != head_dim or len(terms) != 1:
        return None
    ((d, coefficient),) = terms.items()
    loop = loop_of(d)
    if coefficient != 1 or loop is None:
        return None
    if (constant_index(loop.lb), constant_index(loop.ub), constant_index(loop.step)) != (
        0, head_dim, 1
    ):
        return None
    return loop


def _stores_in(loop: scf.ForOp) -> list[memref.StoreOp]:
    return [op for op in loop.body.walk() if isinstance(op, memref.StoreOp)]


def _dim_loops(
    scratch: BlockArgument, lane: SSAValue, head_dim: int, role: str
) -> list[DimLoop] | str:
    """The dim loops through which a fragment accesses `scratch`, or why
    some access is not in one."""
    found: dict[scf.ForOp, list[Access]] = {}
    for use in scratch.uses:
        access = use.operation
        is_access = (
            isinstance(access, memref.LoadOp) and use.index == 0
            or role == "o_acc" and isinstance(access, memref.StoreOp) and use.index == 1
        )
        loop = _dim_loop_of(access, lane, head_dim) if is_access else None
        if loop is None:
            verb = "read" if role == "q_scratch" else "accessed"
            return (
                f"%{role} is {verb} other than as {role}[lane * {head_dim} + d] "
                f"in a loop d = 0 .. {head_dim}"
            )
        found.setdefault(loop, []).append(access)
    return [DimLoop(loop, tuple(accesses)) for loop, accesses in found.items()]


def is_dot_product(loop: scf.ForOp) -> bool:
    """One f32 carried from +0.0 (each part's sum starts there; their sum
    would count another start value N times), added to once per iteration,
    nothing stored."""
    if len(loop.iter_args) != 1 or loop.iter_args[0].type != f32:
        return False
    start = loop.iter_args[0].owner
    if not (isinstance(start, arith.ConstantOp) and isinstance(start.value, FloatAttr)):
        return False
    value = start.value.value.data
    if value != 0.0 or copysign(1.0, value) < 0:
        return False
    carried = loop.body.block.args[1]
    (yielded,) = loop.body.block.last_op.operands
    add = yielded.owner
    return (
        isinstance(add, arith.AddfOp)
        and carried in (add.lhs, add.rhs)
        and len(list(carried.uses)) == 1
        and not _stores_in(loop)
    )


def _other_dot_products(
    region: Region, head_dim: int, found: set[scf.ForOp]
) -> list[DimLoop]:
    """The other dot products over d = 0 .. head_dim in `region` (reading
    the query from a buffer, say, as MLA's latent attention does): each
    part sums its own dims of them too.  Not those inside or around one
    already found."""
    others = []
    for loop in region.walk():
        if (
            isinstance(loop, scf.ForOp) and loop not in found
            and (constant_index(loop.lb), constant_index(loop.ub), constant_index(loop.step))
            == (0, head_dim, 1)
            and is_dot_product(loop)
            and not any(f.is_ancestor(loop) or loop.is_ancestor(f) for f in found)
        ):
            others.append(DimLoop(loop, ()))
            found = found | {loop}
    return others


def _touches_only(loop: scf.ForOp, scratch: SSAValue) -> bool:
    """Nothing carried, and every store in the loop writes `scratch`."""
    return not loop.iter_args and all(s.memref == scratch for s in _stores_in(loop))


@dataclass(frozen=True)
class DimLoops:
    """The loops of a skeleton's fragments that split-head-dim rewrites."""

    dots: list[DimLoop]
    updates: list[DimLoop]


def split_problem(
    op: vyre.TiledOnlineSoftmaxOp, parts: int, lanes: int, splits: int, merges_in_kernel: bool,
    chunk: int = vyre.DIM_CHUNK,
) -> str | None:
    """Why `op` cannot split its rows over `parts` lanes in workgroups of
    `lanes`, dealt in chunks of `chunk` dims, its tiles split `splits` ways
    (merged by a kernel of their own or not), its fragments aside; None if
    nothing stands in the way."""
    head_dim = op.shape()["head_dim"]
    if op.parts > 1:
        return "it is already split (dim_parts)"
    if op.v_dim != head_dim:
        return (
            f"its value rows ({op.v_dim} dims) are not as wide as its query rows "
            f"({head_dim}): a lane keeps the same dims of both"
        )
    if splits > 1 and not merges_in_kernel:
        return (
            "its tiles are split (vyre-split-kv) and merged in workgroup memory, "
            "which takes whole rows"
        )
    if parts & (parts - 1):
        return f"parts must be a power of two (the parts' sums are added pairwise), got {parts}"
    if chunk < 1 or chunk & (chunk - 1):
        return f"chunk must be a power of two (a lane's dims in a vector load), got {chunk}"
    if lanes % parts or head_dim % (parts * chunk):
        return (
            f"parts {parts} must divide the workgroup size ({lanes}), and head_dim "
            f"({head_dim}) must be a multiple of parts * chunk = {parts * chunk} (the "
            f"parts take turns over chunks of {chunk} dims)"
        )
    return None


def find_dim_loops(op: vyre.TiledOnlineSoftmaxOp) -> DimLoops | str:
    """The loops to split whatever the number of parts, or why `op`'s
    fragments (or hooks) cannot be split."""
    head_dim = op.shape()["head_dim"]
    if not op.hooks_empty:
        return "it has a prologue or epilogue (they see an item's whole o_acc)"
    for value in (op.q_scratch, op.o_acc):
        if any(use.operation is not op for use in value.uses):
            return "a fragment uses the kernel's scratch array instead of its argument"
    scores = dict(zip(vyre.SCORES_ARGS, op.scores.block.args, strict=True))
    update = dict(zip(vyre.UPDATE_ARGS, op.update.block.args, strict=True))
    dots = _dim_loops(scores["q_scratch"], scores["lane"], head_dim, "q_scratch")
    if isinstance(dots, str):
        return "its scores fragment does not qualify: " + dots
    if not all(is_dot_product(d.loop) for d in dots):
        return (
            "its scores fragment reads %q_scratch in a loop that is not a dot "
            "product (one f32 carried from 0.0 and added to, nothing stored)"
        )
    dots += _other_dot_products(op.scores, head_dim, {d.loop for d in dots})
    updates = _dim_loops(update["o_acc"], update["lane"], head_dim, "o_acc")
    if isinstance(updates, str):
        return "its update fragment does not qualify: " + updates
    if not all(_touches_only(u.loop, update["o_acc"]) for u in updates):
        return (
            "its update fragment carries values across dims or stores to another "
            "array in a loop over %o_acc"
        )
    return DimLoops(dots, updates)


def loop_over_part_dims(
    b: IRBuilder,
    head_dim: int,
    parts: int,
    part: SSAValue | None,
    body: Callable[[IRBuilder, SSAValue, SSAValue, list[SSAValue]], list[SSAValue]],
    iter_args: list[SSAValue] | tuple = (),
    hint: str = "d",
    chunk: int = vyre.DIM_CHUNK,
) -> list[SSAValue]:
    """Loop over the dims that `part` owns (vyre.part_dims), in slot order:
    `body(b, d, slot, carried)` returns the next carried values.  With one
    part, one loop over every dim (d is the slot); else a loop over the
    lane's chunks around a loop over a chunk's `chunk` dims (marked with
    CHUNK_LOOP_ATTR: vyre-unroll-jam unrolls it first), d an affine form of
    both indices and `part`."""
    if part is None:
        return b.loop(0, head_dim, lambda b, d, carried: body(b, d, d, list(carried)),
                      iter_args, hint=hint)
    first = b.muli(part, b.index(chunk), "part_offset")

    def over_chunks(b: IRBuilder, c, carried):
        def over_chunk(b: IRBuilder, e, carried):
            slot = b.addi(b.muli(c, b.index(chunk)), e, "slot")
            d = b.addi(b.addi(b.muli(c, b.index(parts * chunk)), first), e, hint)
            return body(b, d, slot, list(carried))

        return b.loop(0, chunk, over_chunk, carried, hint="e",
                      attributes={CHUNK_LOOP_ATTR: UnitAttr()})

    return b.loop(0, head_dim // (parts * chunk), over_chunks, iter_args, hint="chunk")
