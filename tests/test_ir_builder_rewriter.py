"""IRBuilder over any xDSL Builder (a pattern's rewriter included), and the
frontend's builder stack as a context variable."""

from __future__ import annotations

import threading

import pytest
from xdsl.builder import Builder
from xdsl.dialects import arith, test
from xdsl.dialects.builtin import ModuleOp, f32
from xdsl.ir import Block, Region
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from vyre_xdsl import trace
from vyre_xdsl.errors import VyreError
from vyre_xdsl.ir_builder import IRBuilder


def _module_with_placeholder():
    block = Block()
    module = ModuleOp(Region(block))
    placeholder = test.TestOp(result_types=[f32])
    block.add_op(placeholder)
    user = test.TestOp(operands=[placeholder.results[0]])
    block.add_op(user)
    return module, placeholder, user


class _ExpandPlaceholder(RewritePattern):
    """The placeholder becomes 1.0 + 2.0, built by IRBuilder on the rewriter."""

    def __init__(self) -> None:
        self.inserted = []

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: test.TestOp, rewriter: PatternRewriter) -> None:
        if not op.results:
            return
        rewriter.operation_insertion_handler.append(self.inserted.append)
        b = IRBuilder(rewriter)
        with trace.building(b):
            total = trace.wrap(b.f32(1.0)) + 2.0
        rewriter.replace(op, [], [total.ssa])


def test_irbuilder_builds_through_a_pattern_rewriter():
    module, _, user = _module_with_placeholder()
    pattern = _ExpandPlaceholder()
    PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(module)
    ops = list(module.body.block.ops)
    assert [op.name for op in ops] == [
        "arith.constant", "arith.constant", "arith.addf", "test.op"
    ]
    # the rewriter saw every op IRBuilder inserted (its listeners ran)
    assert pattern.inserted == ops[:3]
    assert user.operands[0] is ops[2].results[0]
    module.verify()


def test_irbuilder_takes_a_builder_or_an_insertion_point():
    module, placeholder, _ = _module_with_placeholder()
    builder = Builder(InsertPoint.before(placeholder))
    assert IRBuilder(builder).builder is builder
    IRBuilder(builder).f32(3.0)
    IRBuilder(InsertPoint.before(placeholder)).f32(4.0)
    constants = [op.value.value.data for op in module.body.block.ops
                 if isinstance(op, arith.ConstantOp)]
    assert constants == [3.0, 4.0]


def test_the_builder_stack_belongs_to_its_thread():
    module, placeholder, _ = _module_with_placeholder()
    b = IRBuilder(InsertPoint.before(placeholder))
    seen = []

    def elsewhere():
        try:
            trace._builder()
        except VyreError as error:
            seen.append(error)

    with trace.building(b):
        assert trace._builder() is b
        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join()
    assert len(seen) == 1 and "outside of a kernel builder" in str(seen[0])
    with pytest.raises(VyreError, match="outside of a kernel builder"):
        trace._builder()
