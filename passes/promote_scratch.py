"""vyre-promote-scratch: per-lane slices of workgroup memory become private.

The seed's scratch arrays (q_scratch, score_tile, o_acc) live in workgroup
memory, but each lane only ever touches its own `lane * stride + offset`
slice (offset < stride): that is private data in disguise.  This pass turns
such a `memref.alloc` in memory space 3 into a per-lane `memref.alloca` of
`stride` elements indexed by `offset`.  Workgroup memory is then free for
data the lanes really share (and head_dim 128 fits the 48 KiB of an H200),
and a GPU compiler can keep a private array in registers.

Runs on lowered IR (after convert-vyre-to-gpu).  Every scratch array of
the kernel qualifies: the skeleton's three and a decoder's own (e.g. MLA's
absorbed `q_lat`/`o_lat`, `lane * kv_lora_rank + r`).  An array with any
other access (another lane's slice, an unknown offset, a use that is not a
load or store) stays in workgroup memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import memref
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from vyre_xdsl.scratch_forms import lane_slice_accesses

class PromoteLaneSlices(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: memref.AllocOp, rewriter: PatternRewriter):
        found = lane_slice_accesses(op)
        if found is None:
            return
        stride, accesses = found
        private = memref.AllocaOp.get(op.memref.type.element_type, shape=[stride])
        private.memref.name_hint = op.memref.name_hint
        rewriter.replace(op, private)
        for access in accesses:
            if isinstance(access.op, memref.LoadOp):
                new = memref.LoadOp.get(private.memref, [access.offset])
            else:
                new = memref.StoreOp.get(access.op.value, private.memref, [access.offset])
            rewriter.replace(access.op, new)


@dataclass(frozen=True)
class PromoteScratchPass(ModulePass):
    """Turn workgroup arrays that each lane only touches in its own slice
    into per-lane private arrays (memref.alloca)."""

    name = "vyre-promote-scratch"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(PromoteLaneSlices(), apply_recursively=False).rewrite_module(op)
