"""vyre-to-gpu: the whole lowering, vyre IR -> gpu/arith/scf/math/memref.

`optimize` picks what runs around the three lowering passes:
  none     the seed's layout as is (scratch in workgroup memory)
  exact    rewrites that keep every result bit-identical: per-lane scratch
           made private (vyre-promote-scratch), inner loops unrolled and
           jammed (vyre-unroll-jam), loads of neighbouring elements merged
           into vector loads (vyre-vectorize-loads), common subexpressions
           and dead code removed
  default  the fastest correct choice: `exact`, preceded by the vyre-level
           rewrites that reorder floating-point sums (vyre-absorb-mla,
           vyre-split-kv; the tolerance is in docs/performance.md)
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


OPTIMISATION_LEVELS = ("none", "exact", "default")


def vyre_rewrites(level: str) -> tuple[ModulePass, ...]:
    """The vyre-level passes that run before the lowering at `level`: only
    `default` has them, as they change the order of floating-point
    operations (within a documented tolerance).  vyre-stage-kv-tiles is not
    in any level: on the H200 it made the unmasked cases slower
    (docs/performance.md)."""
    from vyre_xdsl.passes.absorb_mla import AbsorbMlaPass
    from vyre_xdsl.passes.split_kv import SplitKvPass

    _check_level(level)
    if level != "default":
        return ()
    return (AbsorbMlaPass(), SplitKvPass())


def optimisations(level: str) -> tuple[ModulePass, ...]:
    """The passes that follow the lowering at optimisation `level`."""
    from vyre_xdsl.passes.unroll_jam import UnrollJamPass
    from vyre_xdsl.passes.vectorize_loads import VectorizeLoadsPass

    _check_level(level)
    if level == "none":
        return ()
    return (
        PromoteScratchPass(),
        UnrollJamPass(),
        VectorizeLoadsPass(),
        CommonSubexpressionElimination(),
        DeadCodeElimination(),
    )


def _check_level(level: str) -> None:
    if level not in OPTIMISATION_LEVELS:
        raise VyreError(
            f"unknown optimisation level {level!r}; choose one of "
            f"{', '.join(OPTIMISATION_LEVELS)}"
        )


@dataclass(frozen=True)
class VyreToGpuPass(ModulePass):
    """vyre-inline-fragments, vyre-expand-stability, convert-vyre-to-gpu,
    with the optimisation passes of `optimize` (none | exact | default)
    around them."""

    name = "vyre-to-gpu"

    optimize: str = "default"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        passes = (
            vyre_rewrites(self.optimize) + LOWERING + optimisations(self.optimize)
        )
        for lowering in passes:
            lowering.apply(ctx, op)
