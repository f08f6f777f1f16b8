"""vyre-to-gpu: the whole lowering, vyre IR -> gpu/arith/scf/math/memref.

`optimize` picks what runs after the three lowering passes:
  none     the seed's layout as is (scratch in workgroup memory)
  default  the fastest correct choice: per-lane scratch made private
           (vyre-promote-scratch), inner loops unrolled and jammed
           (vyre-unroll-jam), then common subexpressions and dead code removed
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.transforms.common_subexpression_elimination import (
    CommonSubexpressionElimination,
)
from xdsl.transforms.dead_code_elimination import DeadCodeElimination

from vyre_xdsl.errors import VyreError
from vyre_xdsl.passes.convert_vyre_to_gpu import ConvertVyreToGpuPass
from vyre_xdsl.passes.expand_stability import ExpandStabilityPass
from vyre_xdsl.passes.inline_fragments import InlineFragmentsPass
from vyre_xdsl.passes.promote_scratch import PromoteScratchPass

LOWERING = (InlineFragmentsPass(), ExpandStabilityPass(), ConvertVyreToGpuPass())


OPTIMISATION_LEVELS = ("none", "default")


def optimisations(level: str) -> tuple[ModulePass, ...]:
    """The passes that follow the lowering at optimisation `level`."""
    from vyre_xdsl.passes.unroll_jam import UnrollJamPass

    if level not in OPTIMISATION_LEVELS:
        raise VyreError(
            f"unknown optimisation level {level!r}; choose one of "
            f"{', '.join(OPTIMISATION_LEVELS)}"
        )
    if level == "none":
        return ()
    return (
        PromoteScratchPass(),
        UnrollJamPass(),
        CommonSubexpressionElimination(),
        DeadCodeElimination(),
    )


@dataclass(frozen=True)
class VyreToGpuPass(ModulePass):
    """vyre-inline-fragments, vyre-expand-stability, convert-vyre-to-gpu, then
    the optimisation passes of `optimize` (none | default)."""

    name = "vyre-to-gpu"

    optimize: str = "default"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for lowering in LOWERING + optimisations(self.optimize):
            lowering.apply(ctx, op)
