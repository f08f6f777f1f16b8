"""vyre-use-exp2: fold log2(e) into the scores and use exp2.

The worked example of a pass written only with the public API (the vyre op
classes and their accessors, xDSL's pattern rewriter): FlashAttention and
IREE compute softmax weights as `exp2(s*log2(e) - m*log2(e))`, because exp2
is the cheaper instruction on GPUs and the scale is one multiply that folds
into the score scale that is already there.

On every `vyre.tiled_online_softmax` without the `exp2` property:
- each score the `scores` region stores into `score_tile` is multiplied by
  log2(e); where the stored value is `vyre.bounded_score(x * c)` for an f32
  constant `c` (FlashAttention-2's `dot * scale`), the factor is folded into
  the constant instead: `vyre.bounded_score(x * (c * log2(e)))`, marked
  `log2`;
- every `math.exp` in the `update` region whose argument derives from the
  scores (a fragment that weighs keys itself; `vyre.tile_weight` follows
  the property) becomes `math.exp2`, and a `vyre.bounded_exp_arg` or
  `vyre.bounded_score` on the way gets `log2`;
- the op gets `exp2`, so vyre-inline-fragments uses exp2 in the recurrence,
  and so does the `vyre.merge_splits` of a kernel of its own that merges
  its partial maxima (vyre-split-kv{merge=kernel} ran first).

A value derived from the scores (a load of `score_tile` in `update`,
`m_new`) may only reach an exp through ops that a positive factor commutes
with: differences, sums, negations, max/min and selects of such values,
products with and quotients by other values, their stability bounds and
comparisons between two of them.  Where one has any other use (`s - 1.0`,
`s * v`, a store, a loop's yield) scaling the scores would change what it
sees, so the pass leaves that skeleton as it is.

Because max and subtraction commute with a positive scale, the result is the
same softmax up to f32 rounding; the stability bounds stay where SEMANTICS.md
puts them (`log2`: -80 becomes -80 * log2(e), so a weight is still floored
at e^-80).  Not bit-exact: compare with a tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, math, memref
from xdsl.dialects.builtin import FloatAttr, ModuleOp, UnitAttr, f32
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import LOG2_E
from vyre_xdsl.dialects.vyre_ops import FlooredOp

# Ops whose result is in the scores' units when every float operand is:
# each commutes with a positive factor.
_EVERY_OPERAND_SCALED = (
    arith.SubfOp, arith.AddfOp, arith.NegfOp, arith.MaximumfOp, arith.MinimumfOp,
    arith.MaxnumfOp, arith.MinnumfOp, FlooredOp,
)


def _f32_constant(value) -> float | None:
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, FloatAttr):
        return owner.value.value.data
    return None


class FoldLog2EIntoScores(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: vyre.TiledOnlineSoftmaxOp, rewriter: PatternRewriter
    ) -> None:
        if op.exp2 is not None:
            return
        score_tile = op.region_arg("scores", "score_tile")
        stores = [use.operation for use in score_tile.uses]
        if not all(isinstance(store, memref.StoreOp) and store.memref == score_tile
                   for store in stores):
            return
        scaled = _scaled_users(op)
        if scaled is None:
            return
        for store in stores:
            self.scale_stored_score(store, rewriter)
        for user in scaled:
            if isinstance(user, FlooredOp):
                user.log2 = UnitAttr()  # its -80 in log2 units
                rewriter.handle_operation_modification(user)
            elif isinstance(user, math.ExpOp):
                rewriter.replace(user, math.Exp2Op(user.operand))
        op.exp2 = UnitAttr()
        rewriter.handle_operation_modification(op)
        for merge in _merges_of(op):  # its partial maxima are in log2 units now
            merge.exp2 = UnitAttr()
            rewriter.handle_operation_modification(merge)

    @staticmethod
    def scale_stored_score(store: memref.StoreOp, rewriter: PatternRewriter) -> None:
        value = store.value
        bounded = value.owner
        if isinstance(bounded, vyre.BoundedScoreOp) and value.has_one_use():
            product = bounded.input.owner
            if isinstance(product, arith.MulfOp) and product.result.has_one_use():
                for i, factor in enumerate(product.operands):
                    c = _f32_constant(factor)
                    if c is not None:
                        folded = arith.ConstantOp(
                            FloatAttr(float(np.float32(c) * np.float32(LOG2_E)), f32)
                        )
                        operands = list(product.operands)
                        operands[i] = folded.result
                        rewriter.insert(folded, InsertPoint.before(product))
                        rewriter.replace(product, arith.MulfOp(*operands))
                        bounded.log2 = UnitAttr()  # its -80 in log2 units
                        rewriter.handle_operation_modification(bounded)
                        return
        log2e = arith.ConstantOp(FloatAttr(LOG2_E, f32))
        scaled = arith.MulfOp(value, log2e.result)
        rewriter.insert([log2e, scaled], InsertPoint.before(store))
        rewriter.replace(
            store, memref.StoreOp.get(scaled.result, store.memref, list(store.indices))
        )


def _merges_of(op: vyre.TiledOnlineSoftmaxOp) -> list[vyre.MergeSplitsOp]:
    """The vyre.merge_splits ops that read `op`'s partial maxima (a kernel of
    their own after vyre-split-kv{merge=kernel}: the same buffer binding)."""
    if not op.merges_in_kernel:
        return []
    m = op.partials[0].owner
    assert isinstance(m, vyre.BufferOp)
    module = op.get_toplevel_object()
    return [merge for merge in module.walk() if isinstance(merge, vyre.MergeSplitsOp)
            and isinstance(read := merge.m.owner, vyre.BufferOp)
            and read.binding == m.binding]


def _scaled_users(op: vyre.TiledOnlineSoftmaxOp) -> list[Operation] | None:
    """The ops of `update` that take values derived from the scores, or None
    where one of them would see the scaling (the module docstring)."""
    score_tile = op.region_arg("update", "score_tile")
    loads = [use.operation for use in score_tile.uses]
    if not all(isinstance(load, memref.LoadOp) and load.memref == score_tile
               for load in loads):
        return None
    scaled: set[SSAValue] = set()
    users: list[Operation] = []
    work = [op.region_arg("update", "m_new"), *(load.res for load in loads)]
    while work:
        value = work.pop()
        if value in scaled:
            continue
        scaled.add(value)
        for use in value.uses:
            user = use.operation
            if user in users:
                continue
            if isinstance(user, (math.ExpOp, arith.CmpfOp)):
                users.append(user)
            elif isinstance(user, (*_EVERY_OPERAND_SCALED, arith.MulfOp, arith.DivfOp,
                                   arith.SelectOp)):
                users.append(user)
                work.extend(user.results)
            else:
                return None
    return users if all(_keeps_scale(user, scaled) for user in users) else None


def _keeps_scale(user: Operation, scaled: set[SSAValue]) -> bool:
    """Whether `user` sees the same thing with its scaled operands scaled."""
    if isinstance(user, FlooredOp) and user.log2 is not None:
        return False  # already in log2 units, in a skeleton that is not
    if isinstance(user, (*_EVERY_OPERAND_SCALED, arith.CmpfOp)):
        return all(operand in scaled for operand in user.operands)
    if isinstance(user, arith.MulfOp):
        return (user.lhs in scaled) != (user.rhs in scaled)
    if isinstance(user, arith.DivfOp):
        return user.lhs in scaled and user.rhs not in scaled
    if isinstance(user, arith.SelectOp):
        return (user.cond not in scaled and user.lhs in scaled
                and user.rhs in scaled)
    return isinstance(user, math.ExpOp)


def fold_log2e(op: vyre.TiledOnlineSoftmaxOp) -> None:
    """The pass on one skeleton (vyre-to-gpu's plan takes it for those on
    the matrix units)."""
    FoldLog2EIntoScores().match_and_rewrite(op, PatternRewriter(op))


@dataclass(frozen=True)
class UseExp2Pass(ModulePass):
    """Fold log2(e) into the scores of every vyre.tiled_online_softmax and
    compute its softmax weights with exp2."""

    name = "vyre-use-exp2"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FoldLog2EIntoScores(), apply_recursively=False).rewrite_module(op)
