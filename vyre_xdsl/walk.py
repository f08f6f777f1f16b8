"""How the vyre passes apply their patterns."""

from xdsl.dialects.builtin import ModuleOp
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriteWalker,
    RewritePattern,
)


def walk_once(op: ModuleOp, *patterns: RewritePattern) -> None:
    """Rewrite `op` in one walk with `patterns` (the first that matches an
    op applies), never again over what they built: a pass's patterns
    build ops that none of them matches."""
    pattern = patterns[0] if len(patterns) == 1 else GreedyRewritePatternApplier(list(patterns))
    PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)
