"""Unrolling a loop: the copies of its body, in order, and the loop that
runs them (vyre-unroll-jam unrolls and jams, vyre-vectorize-loads unrolls
a loop whose iterations read neighbouring elements)."""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl.loop_bounds import constant_index

UNROLLED_ATTR = "vyre.unrolled"  # on a loop made by `transform`: not unrolled again
# on a loop of a rarely taken path (a tile with infinite values): left rolled,
# since copies would only lengthen the kernel
ROLLED_ATTR = "vyre.rolled"
# on a loop that the device's compiler should not unroll either (SPIR-V
# LoopControl DontUnroll): its copies would cost more registers than they save
DONT_UNROLL_ATTR = "vyre.dont_unroll"


class Copier:
    """Clones ops of an original loop body at an insertion point."""

    def __init__(self, block: Block) -> None:
        self.block = block

    def emit(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op

    def index(self, value: int) -> SSAValue:
        return self.emit(arith.ConstantOp(IntegerAttr(value, IndexType()))).result

    def offset(self, base: SSAValue, k: int) -> SSAValue:
        return base if k == 0 else self.emit(arith.AddiOp(base, self.index(k))).result

    def clone(self, ops: list[Operation], mapping: dict[SSAValue, SSAValue]) -> None:
        for op in ops:
            self.emit(op.clone(mapping))


def new_body_block(like: Block) -> Block:
    """An empty block with `like`'s argument types and names."""
    block = Block(arg_types=[arg.type for arg in like.args])
    for new, old in zip(block.args, like.args, strict=True):
        new.name_hint = old.name_hint
    return block


def unrolled_body(loop: scf.ForOp, factor: int) -> Block:
    """A body running `factor` consecutive iterations of `loop`, in order."""
    block = new_body_block(loop.body.block)
    copier = Copier(block)
    iv, *carried = block.args
    original_iv, *original_carried = loop.body.block.args
    *ops, terminator = list(loop.body.block.ops)
    values: list[SSAValue] = list(carried)
    for k in range(factor):
        mapping = {original_iv: copier.offset(iv, k)}
        mapping.update(zip(original_carried, values, strict=True))
        copier.clone(ops, mapping)
        values = [mapping.get(v, v) for v in terminator.operands]
    copier.emit(scf.YieldOp(*values))
    return block


def guarded_copies(loop: scf.ForOp, trips: int) -> None:
    """Replace `loop` (a constant lower bound and step 1, at most `trips`
    iterations) by `trips` copies of its body in order, copy k in an
    `scf.if lb + k < ub` that passes the carried values on when false:
    the same iterations as the loop, each with a constant induction
    variable."""
    lower = constant_index(loop.lb)
    assert lower is not None and constant_index(loop.step) == 1
    point = InsertPoint.before(loop)
    *ops, terminator = list(loop.body.block.ops)
    original_iv, *original_carried = loop.body.block.args
    types = [v.type for v in loop.iter_args]
    values: list[SSAValue] = list(loop.iter_args)
    for k in range(trips):
        iv = arith.ConstantOp(IntegerAttr(lower + k, IndexType()))
        iv.result.name_hint = original_iv.name_hint
        runs = arith.CmpiOp(iv.result, loop.ub, "ult")
        then, passed = Block(), Block()
        copier = Copier(then)
        mapping = {original_iv: iv.result}
        mapping.update(zip(original_carried, values, strict=True))
        copier.clone(ops, mapping)
        copier.emit(scf.YieldOp(*(mapping.get(v, v) for v in terminator.operands)))
        passed.add_op(scf.YieldOp(*values))
        guard = scf.IfOp(runs.result, types, Region(then), Region(passed))
        Rewriter.insert_op([iv, runs, guard], point)
        values = list(guard.results)
    for old, new in zip(loop.results, values, strict=True):
        old.replace_all_uses_with(new)
    Rewriter.erase_op(loop)


def transform(loop: scf.ForOp, factor: int, body: Block,
              attributes: dict[str, Attribute] | None = None) -> None:
    """Replace `loop` by a loop of `body` (factor iterations per step) plus,
    where the trip count may not divide, a remainder loop of the original,
    both with `attributes`; a loop of exactly `factor` iterations becomes
    `body` inline."""
    lower, upper = constant_index(loop.lb), constant_index(loop.ub)
    point = InsertPoint.before(loop)
    new_ops: list[Operation] = []

    def add(op: Operation) -> Operation:
        new_ops.append(op)
        return op

    if lower is not None and upper is not None and upper - lower == factor:
        # Unrolled completely: the body runs once, in place, without a loop.
        terminator = body.last_op
        assert isinstance(terminator, scf.YieldOp)
        results = list(terminator.operands)
        Rewriter.erase_op(terminator)
        Rewriter.inline_block(body, point, [loop.lb, *loop.iter_args])
        for old, new in zip(loop.results, results, strict=True):
            old.replace_all_uses_with(new)
        Rewriter.erase_op(loop)
        return
    step = add(arith.ConstantOp(IntegerAttr(factor, IndexType())))
    if lower is not None and upper is not None:
        main_upper_value = lower + (max(0, upper - lower) // factor) * factor
        main_upper = add(arith.ConstantOp(IntegerAttr(main_upper_value, IndexType()))).result
        needs_rest = main_upper_value < upper
    else:
        span = add(arith.SubiOp(loop.ub, loop.lb)).result
        whole = add(arith.MuliOp(add(arith.DivUIOp(span, step.result)).result, step.result))
        main_upper = add(arith.AddiOp(loop.lb, whole.result)).result
        needs_rest = True
    main = add(scf.ForOp(loop.lb, main_upper, step.result, loop.iter_args, Region(body)))
    main.attributes.update(attributes or {})
    main.attributes[UNROLLED_ATTR] = IntegerAttr(factor, 64)
    results = main.results
    if needs_rest:
        rest_body = loop.body.clone()
        rest = add(scf.ForOp(main_upper, loop.ub, loop.step, results, rest_body))
        rest.attributes.update(attributes or {})
        results = rest.results
    Rewriter.insert_op(new_ops, point)
    for old, new in zip(loop.results, results, strict=True):
        old.replace_all_uses_with(new)
    Rewriter.erase_op(loop)
