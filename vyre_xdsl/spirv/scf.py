"""scf -> SPIR-V structured control flow.

scf.for:  pre -> header { phi iv, phi iter_args; iv < ub; OpLoopMerge }
          -> body ... -> continue { iv + step } -> header;  header -> merge.
          The loop results are the header's iter_arg phis (the merge block is
          reached only from the header). Bounds compare unsigned (index is u32).
          A loop with DONT_UNROLL_ATTR has LoopControl DontUnroll.
scf.if:   OpSelectionMerge; then/else blocks; results are OpPhi in the merge
          block over the value each branch yields from its last block."""

from __future__ import annotations

from xdsl.dialects import scf
from xdsl.ir import Block, Operation

from vyre_xdsl.errors import VyreError
from vyre_xdsl.spirv.spec import LoopControl, Op, SelectionControl
from vyre_xdsl.unrolling import DONT_UNROLL_ATTR


def _emit_body(e, block: Block) -> list[int]:
    """Emit `block`'s ops; return the ids its scf.yield passes on."""
    yielded: list[int] = []
    for op in block.ops:
        if isinstance(op, scf.YieldOp):
            yielded = [e.value(v) for v in op.operands]
        else:
            e.emit_op(op)
    return yielded


def _single_block(op: Operation, index: int) -> Block | None:
    region = op.regions[index]
    if not region.blocks:
        return None
    if len(region.blocks) != 1:
        raise VyreError(f"'{op.name}' regions must have a single block")
    return region.blocks[0]


def _for(e, op: Operation) -> None:
    fn, b, uint = e.fn, e.b, e.uint
    lb, ub, step, *inits = op.operands
    body = _single_block(op, 0)
    assert body is not None
    pre = fn.current_label
    header, body_label, cont, merge = (b.new_id() for _ in range(4))
    fn.emit(Op.Branch, header)
    fn.label(header)
    iv = b.new_id()
    iv_phi = fn.emit(Op.Phi, uint, iv, e.value(lb), pre)
    arg_ids, arg_phis = [], []
    for arg, init in zip(body.args[1:], inits, strict=True):
        arg_id = b.new_id()
        ty = e.type_of(arg.type, "scf.for iter_arg")
        arg_phis.append(fn.emit(Op.Phi, ty, arg_id, e.value(init), pre))
        arg_ids.append(arg_id)
    keep_going = fn.op(Op.ULessThan, e.bool, iv, e.value(ub))
    control = LoopControl.DontUnroll if DONT_UNROLL_ATTR in op.attributes else LoopControl.None_
    fn.emit(Op.LoopMerge, merge, cont, control)
    fn.emit(Op.BranchConditional, keep_going, body_label, merge)
    fn.label(body_label)
    e.bind(body.args[0], iv)
    for arg, arg_id in zip(body.args[1:], arg_ids, strict=True):
        e.bind(arg, arg_id)
    yielded = _emit_body(e, body)
    fn.emit(Op.Branch, cont)
    fn.label(cont)
    iv_next = fn.op(Op.IAdd, uint, iv, e.value(step))
    fn.emit(Op.Branch, header)
    iv_phi.extend([iv_next, cont])
    for phi, value in zip(arg_phis, yielded, strict=True):
        phi.extend([value, cont])
    fn.label(merge)
    for result, arg_id in zip(op.results, arg_ids, strict=True):
        e.bind(result, arg_id)


def _if(e, op: Operation) -> None:
    fn, b = e.fn, e.b
    cond = e.value(op.operands[0])
    then_block = _single_block(op, 0)
    else_block = _single_block(op, 1)
    has_else = else_block is not None and (
        bool(op.results) or any(not isinstance(o, scf.YieldOp) for o in else_block.ops)
    )
    then_label, merge = b.new_id(), b.new_id()
    else_label = b.new_id() if has_else else merge
    fn.emit(Op.SelectionMerge, merge, SelectionControl.None_)
    fn.emit(Op.BranchConditional, cond, then_label, else_label)
    fn.label(then_label)
    then_values = _emit_body(e, then_block) if then_block is not None else []
    then_end = fn.current_label
    fn.emit(Op.Branch, merge)
    else_values: list[int] = []
    else_end = None
    if has_else:
        fn.label(else_label)
        else_values = _emit_body(e, else_block)
        else_end = fn.current_label
        fn.emit(Op.Branch, merge)
    fn.label(merge)
    for result, a, c in zip(op.results, then_values, else_values, strict=True):
        ty = e.type_of(result.type, "scf.if result")
        e.bind(result, fn.op(Op.Phi, ty, a, then_end, c, else_end))


HANDLERS = {
    scf.ForOp: _for,
    scf.IfOp: _if,
}
