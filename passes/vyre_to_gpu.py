"""vyre-to-gpu: the whole lowering, vyre IR -> gpu/arith/scf/math/memref.

`optimize` picks what runs around the three lowering passes:
  none     the seed's layout as is (scratch in workgroup memory)
  exact    rewrites that keep every result bit-identical: per-lane scratch
           made private (vyre-promote-scratch), inner loops unrolled and
           jammed (vyre-unroll-jam), loads of neighbouring elements merged
           into vector loads (vyre-vectorize-loads), common subexpressions
           and dead code removed
  default  the fastest correct choice: the vyre-level rewrites that reorder
           floating-point sums (vyre-absorb-mla, vyre-retile, vyre-split-kv;
           the tolerance is in docs/performance.md), then `exact` tuned by
           `tuning` (vyre-stage-kv-tiles where it pays, unroll depth)
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

from vyre_xdsl.dialects import vyre
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
    operations (within a documented tolerance)."""
    from vyre_xdsl.passes.absorb_mla import AbsorbMlaPass
    from vyre_xdsl.passes.retile import RetilePass
    from vyre_xdsl.passes.split_kv import SplitKvPass

    _check_level(level)
    if level != "default":
        return ()
    return (AbsorbMlaPass(), RetilePass(), SplitKvPass())


@dataclass(frozen=True)
class Tuning:
    """What `default` adds for a module's skeletons after the rewrites,
    from measurements on the H200 (docs/performance.md): K/V tiles staged
    in shared memory (read as vec4) where a tile takes at most 16 KiB or the
    grid is small (at D=128 a 32 KiB tile slowed the 2048-workgroup case
    from 27 to 42 ms and sped the 64-workgroup case from 5.5 to 2.4 ms),
    unrolled 64 deep where staged and masked or with long rows."""

    unroll_factor: int = 32
    stage_tiles: bool = False


STAGE_TILE_BYTES = 16 * 1024
SMALL_GRID = 2 * 132  # workgroups; two per SM of an H200


def tuning(module: ModuleOp) -> Tuning:
    """The default's choices for `module` (vyre IR, after vyre_rewrites)."""
    skeletons = [s for s in module.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]
    if not skeletons or any(s.splits > 1 for s in skeletons):
        return Tuning()
    kernels = {s.parent_op() for s in skeletons}
    workgroups = sum(-(-k.item_count.value.data // k.workgroup_size.value.data)
                     for k in kernels)

    def stages(s: vyre.TiledOnlineSoftmaxOp) -> bool:
        shape = s.shape()
        return 4 * shape["tile_size"] * shape["head_dim"] <= STAGE_TILE_BYTES or (
            workgroups <= SMALL_GRID
        )

    if not all(stages(s) for s in skeletons):
        return Tuning()
    deep = all(s.has_mask or s.shape()["head_dim"] > 64 for s in skeletons)
    return Tuning(unroll_factor=64 if deep else 32, stage_tiles=True)


def optimisations(level: str, unroll_factor: int = 32) -> tuple[ModulePass, ...]:
    """The passes that follow the lowering at optimisation `level`."""
    from vyre_xdsl.passes.unroll_jam import UnrollJamPass
    from vyre_xdsl.passes.vectorize_loads import VectorizeLoadsPass

    _check_level(level)
    if level == "none":
        return ()
    return (
        PromoteScratchPass(),
        UnrollJamPass(unroll_factor),
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
        from vyre_xdsl.passes.stage_kv_tiles import StageKvTilesPass

        for rewrite in vyre_rewrites(self.optimize):
            rewrite.apply(ctx, op)
        tuned = tuning(op) if self.optimize == "default" else Tuning()
        if tuned.stage_tiles:
            StageKvTilesPass().apply(ctx, op)
        for lowering in LOWERING + optimisations(self.optimize, tuned.unroll_factor):
            lowering.apply(ctx, op)
