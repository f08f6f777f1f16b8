"""vyre-vectorize-loads: four scalar loads of neighbouring elements become
one vector load.

After vyre-unroll-jam, an invocation reads K and V one f32 at a time: one
load instruction per multiply-add, and a GPU issues loads at a quarter of
its FMA rate.  This pass merges the loads of `width` consecutive elements
of an f32 kernel buffer the kernel only reads (a `read` buffer, or a
`temp` one an earlier kernel wrote) or of an f32 workgroup array (a staged K/V
tile), `base + 0 .. base + width-1` with `base` a provable multiple of
`width`, into one `vector.load` and `vector.extract`s.  A read-only f16 or
bf16 buffer's loads merge by `2 * width` (the same bytes a load: 16 at
width 4), or by 4 where they do not come in such windows, each element
then widened to f32 as before.
Where such loads sit in copies of a loop body that are not unrolled yet (an
innermost loop whose index steps through a buffer one element at a time,
like the dot product over head_dim), the loop is first unrolled by `width`.

Only loads move, and only of buffers the kernel never writes or across no
store and no barrier, so every value, and the order of every
floating-point operation, is unchanged: results are bit-identical.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, gpu, memref, scf, vector
from xdsl.dialects.builtin import (
    IndexType,
    IntegerAttr,
    ModuleOp,
    VectorType,
    f32,
)
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl.dialects.constants import WORKGROUP_MEMORY_SPACE
from vyre_xdsl.dialects.launch import BufferAccess
from vyre_xdsl.dtypes import HALF_DTYPES, element_type
from vyre_xdsl.errors import require_f32_vector_width
from vyre_xdsl.index_forms import is_multiple_of_term, linear_index
from vyre_xdsl.kernel_info import buffer_arguments, only_loaded
from vyre_xdsl.loop_bounds import constant_index
from vyre_xdsl.unrolling import UNROLLED_ATTR, transform, unrolled_body

HALF_TYPES = tuple(element_type(dtype) for dtype in HALF_DTYPES)
HALF_PER_F32 = 2  # elements of a half buffer in the bytes of one f32
MIN_HALF_VECTOR = 4  # the narrowest vector of halves: two 32-bit words


def read_only_buffers(func: gpu.FuncOp, element_types=(f32,)) -> set[SSAValue]:
    """The arguments of a lowered vyre kernel of `element_types` that it
    only reads: its `read` buffers, and the `temp` ones (which an earlier
    kernel of the program wrote) that it only loads."""
    return {
        arg for arg, described in buffer_arguments(func, element_types)
        if described.access == BufferAccess.READ
        or (described.access == BufferAccess.TEMP and only_loaded(arg))
    }


def workgroup_arrays(func: gpu.FuncOp, width: int) -> set[SSAValue]:
    """The kernel's f32 workgroup-memory arrays of a multiple of `width`
    elements (the emitter declares those read as vectors as vector arrays),
    but those that subgroup matrix ops also read or write: a matrix is
    loaded from an array of scalars."""
    arrays = set()
    for alloc in func.walk():
        if not isinstance(alloc, memref.AllocOp):
            continue
        space = alloc.memref.type.memory_space
        shape = alloc.memref.type.get_shape()
        if (
            isinstance(space, IntegerAttr) and space.value.data == WORKGROUP_MEMORY_SPACE
            and len(shape) == 1 and shape[0] % width == 0
            and alloc.memref.type.element_type == f32
            and not any(use.operation.name.startswith("gpu.subgroup_mma")
                        for use in alloc.memref.uses)
        ):
            arrays.add(alloc.memref)
    return arrays


def _vectorisable_loads(ops, buffers: set[SSAValue]) -> list[memref.LoadOp]:
    return [
        op for op in ops
        if isinstance(op, memref.LoadOp) and op.memref in buffers and len(op.indices) == 1
    ]


def _steps_through_buffer(loop: scf.ForOp, buffers: set[SSAValue], width: int) -> bool:
    """An innermost loop of `width`-divisible constant trip count that loads
    buffer element `... + iv` (so `width` iterations read neighbours)."""
    lower, upper = constant_index(loop.lb), constant_index(loop.ub)
    if constant_index(loop.step) != 1 or lower is None or upper is None:
        return False
    if (upper - lower) % width or upper <= lower:
        return False
    if any(isinstance(op, scf.ForOp) for op in loop.body.walk()):
        return False
    iv = loop.body.block.args[0]
    return any(
        (iv, 1) in linear_index(load.indices[0]).terms
        for load in _vectorisable_loads(loop.body.block.ops, buffers)
    )


@dataclass
class _Group:
    loads: dict[int, list[memref.LoadOp]]  # element within the vector -> loads


def _groups(block: Block, buffers: set[SSAValue], width: int) -> list[_Group]:
    """Loads of `block` that cover all `width` elements of an aligned window,
    with no barrier or store to their memref between them (such an op
    starts a new run of loads)."""
    windows: dict[tuple, _Group] = defaultdict(lambda: _Group(defaultdict(list)))
    barriers, stores = 0, defaultdict(int)
    for op in block.ops:
        if not (isinstance(op, memref.LoadOp) and op.memref in buffers and len(op.indices) == 1):
            for inner in op.walk():
                if isinstance(inner, gpu.BarrierOp):
                    barriers += 1
                elif isinstance(inner, memref.StoreOp):
                    stores[inner.memref] += 1
            continue
        form = linear_index(op.indices[0])
        if not all(is_multiple_of_term(value, coeff, width) for value, coeff in form.terms):
            continue
        window, element = divmod(form.constant, width)
        run = (barriers, stores[op.memref])
        windows[(op.memref, form.terms, window, run)].loads[element].append(op)
    return [g for g in windows.values() if len(g.loads) == width]


def _defined_before(value: SSAValue, op: Operation) -> bool:
    """Whether `value` is available just before `op` (same block or above)."""
    block = op.parent_block()
    if isinstance(value, BlockArgument):
        return True
    owner = value.owner
    if owner.parent_block() is not block:
        return True
    return owner.is_before_in_block(op)


def _vectorise(group: _Group, width: int) -> None:
    loads = [load for element in sorted(group.loads) for load in group.loads[element]]
    first = loads[0]  # the first of them in the block (all in one)
    for load in loads[1:]:
        if load.is_before_in_block(first):
            first = load
    new_ops: list[Operation] = []
    base = group.loads[0][0].indices[0]
    if not _defined_before(base, first):
        # the element-0 index is computed later: step back from the first load's
        first_element = next(e for e, ls in group.loads.items() if first in ls)
        back = arith.ConstantOp(IntegerAttr(first_element, IndexType()))
        start = arith.SubiOp(first.indices[0], back)
        new_ops += [back, start]
        base = start.result
    load = vector.LoadOp(first.memref, [base], VectorType(first.res.type, [width]))
    load.result.name_hint = f"{first.memref.name_hint or 'buffer'}_vec"
    new_ops.append(load)
    extracts = {}
    for element in range(width):
        extract = vector.ExtractOp(load.result, [element], first.res.type)
        extracts[element] = extract
        new_ops.append(extract)
    Rewriter.insert_op(new_ops, InsertPoint.before(first))
    for element, element_loads in group.loads.items():
        for scalar in element_loads:
            name = scalar.res.name_hint
            scalar.res.replace_all_uses_with(extracts[element].result)
            if name and not extracts[element].result.name_hint:
                extracts[element].result.name_hint = name
            Rewriter.erase_op(scalar)


def _vectorise_buffers(func: gpu.FuncOp, buffers: set[SSAValue], width: int) -> None:
    """Unroll the loops that step through `buffers` by `width`, then merge
    each aligned window of `width` loads of them into one vector load."""
    loops = [
        loop for loop in func.walk()
        if isinstance(loop, scf.ForOp) and _steps_through_buffer(loop, buffers, width)
    ]
    for loop in loops:
        transform(loop, width, unrolled_body(loop, width))
    for loop in func.walk():
        if isinstance(loop, scf.ForOp):
            loop.attributes.pop(UNROLLED_ATTR, None)
    blocks = {inner.parent_block() for inner in func.walk()
              if isinstance(inner, memref.LoadOp)}
    for block in blocks:
        if block is None:
            continue
        for group in _groups(block, buffers, width):
            _vectorise(group, width)


@dataclass(frozen=True)
class VectorizeLoadsPass(ModulePass):
    """Merge loads of `width` neighbouring elements of a read-only kernel
    buffer into one vector load (unrolling the loop that steps through the
    buffer where needed); results are bit-identical."""

    name = "vyre-vectorize-loads"

    width: int = 4

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_f32_vector_width(self.name, self.width)
        for func in [f for f in op.walk() if isinstance(f, gpu.FuncOp)]:
            # widest first: a loop that steps through several kinds is
            # unrolled by the widest vector, whose window holds the others';
            # halves that do not come in eights (a lane's chunks of 4 dims,
            # vyre-split-head-dim's default) are read in fours
            halves = read_only_buffers(func, HALF_TYPES)
            for buffers, width in (
                (halves, HALF_PER_F32 * self.width),
                (halves, max(self.width, MIN_HALF_VECTOR)),
                (read_only_buffers(func) | workgroup_arrays(func, self.width), self.width),
            ):
                if buffers:
                    _vectorise_buffers(func, buffers, width)
