"""vyre-to-gpu: the whole lowering, vyre IR -> gpu/arith/scf/math/memref.

`optimize` picks what runs around the three lowering passes:
  none     the seed's layout as is (scratch in workgroup memory)
  exact    rewrites that keep every result bit-identical: per-lane scratch
           made private (vyre-promote-scratch), inner loops unrolled and
           jammed (vyre-unroll-jam), loads of neighbouring elements merged
           into vector loads (vyre-vectorize-loads), common subexpressions
           and dead code removed
  default  the fastest correct choice: the vyre-level rewrites
           (vyre-absorb-mla{kernels=3}, vyre-resize-workgroup, and
           vyre-retile and vyre-split-kv, which reorder floating-point sums
           within the tolerance of docs/performance.md), then `exact` tuned by
           `tuning` (vyre-stage-kv-tiles where it pays, vyre-split-head-dim
           for long rows and small grids, unroll depth, and
           vyre-interleave-scratch where registers are short)
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

from vyre_xdsl.device import GENERIC, DeviceProfile, device_profile
from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import VyreError, pass_error
from vyre_xdsl.kernel_info import lowered_kernels, read_kernel, workgroup_memory_bytes
from vyre_xdsl.passes.convert_vyre_to_gpu import ConvertVyreToGpuPass
from vyre_xdsl.passes.expand_stability import ExpandStabilityPass
from vyre_xdsl.passes.inline_fragments import InlineFragmentsPass
from vyre_xdsl.passes.promote_scratch import PromoteScratchPass
from vyre_xdsl.passes.retile import SHORT_ROWS, SMALL_GRID, grid_workgroups

LOWERING = (InlineFragmentsPass(), ExpandStabilityPass(), ConvertVyreToGpuPass())


OPTIMISATION_LEVELS = ("none", "exact", "default")


def vyre_rewrites(level: str, device: DeviceProfile = GENERIC) -> tuple[ModulePass, ...]:
    """The vyre-level passes that run before the lowering at `level`: only
    `default` has them, as they change the order of floating-point
    operations (within a documented tolerance); their choices fit
    `device`."""
    from vyre_xdsl.passes.absorb_mla import AbsorbMlaPass
    from vyre_xdsl.passes.resize_workgroup import ResizeWorkgroupPass
    from vyre_xdsl.passes.retile import RetilePass
    from vyre_xdsl.passes.split_kv import SplitKvPass

    _check_level(level)
    if level != "default":
        return ()
    shared, parts = device.shared_memory_bytes, device.max_dim_parts
    return (
        AbsorbMlaPass(kernels=3),
        ResizeWorkgroupPass(),
        RetilePass(shared_memory_bytes=shared, max_parts=parts),
        SplitKvPass(shared_memory_bytes=shared),
    )


@dataclass(frozen=True)
class Tuning:
    """What `default` adds for a module's skeletons after the rewrites,
    from measurements on the H200 (docs/performance.md):
    - K/V tiles staged in shared memory (read as vec4) where a tile takes
      at most 16 KiB or the grid is small (at head_dim 128 a 32 KiB tile
      slowed the 2048-workgroup case from 27 to 42 ms);
    - unrolled 64 deep where masked (causal: 6.8 -> 5.2 ms), with rows of
      at most 64 dims (tiles of 16 keys: 5.53 -> 5.46 ms) or split (MLA
      decode: 1.69 -> 1.49 ms); 32 deep for longer rows;
    - rows split over lanes after staging where vyre-split-head-dim's
      `automatic_parts` says so (rows longer than 64 dims, 64 a lane: 15.0
      -> 12.4 ms at 32 heads of 128, MLA's latent rows of 512 over eight
      lanes 0.40 -> 0.09 ms; any rows of an unsplit kernel on a small grid:
      1.14 -> 0.43 ms at one head of 64); the unroll depth and the
      interleaving below then follow a lane's share of the row (64 of 128
      dims: unrolled 64 deep);
    - on a small grid with rows longer than 64 dims, the query row left in
      workgroup memory, lane-minor (vyre-interleave-scratch: 2.2 -> 1.7 ms
      at one head of 128 dims; on 2048 workgroups it halved the speed)."""

    unroll_factor: int = 32
    stage_tiles: bool = False
    interleave: tuple[str, ...] = ()
    split_head_dim: bool = False


STAGE_TILE_BYTES = 16 * 1024
DEEP_UNROLL = 64


def tuning(module: ModuleOp, device: DeviceProfile = GENERIC) -> Tuning:
    """The default's choices for `module` (vyre IR, after vyre_rewrites),
    within `device`'s limits."""
    from vyre_xdsl.passes.split_head_dim import automatic_parts

    skeletons = [s for s in module.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]
    if not skeletons:
        return Tuning()
    if any(s.ragged for s in skeletons):
        # kv_lens: tile counts differ between the lanes of a workgroup, so
        # nothing that synchronises them in the tile loop (staged tiles) or
        # pattern-matches K/V addresses (paged) applies; unrolling does
        return Tuning(unroll_factor=DEEP_UNROLL if all(s.has_mask for s in skeletons) else 32)
    if any(s.splits > 1 for s in skeletons):
        split = any(automatic_parts(s, device.max_dim_parts) > 1 for s in skeletons)
        return Tuning(unroll_factor=DEEP_UNROLL, split_head_dim=split)
    workgroups = sum(grid_workgroups(s) for s in skeletons)
    small_grid = workgroups <= SMALL_GRID

    def stages(s: vyre.TiledOnlineSoftmaxOp) -> bool:
        shape = s.shape()
        return 4 * shape["tile_size"] * shape["head_dim"] <= STAGE_TILE_BYTES or small_grid

    if not all(stages(s) for s in skeletons):
        return Tuning()
    parts = [automatic_parts(s, device.max_dim_parts) for s in skeletons]
    long_rows = all(
        s.shape()["head_dim"] // n > SHORT_ROWS for s, n in zip(skeletons, parts, strict=True)
    )
    deep = not long_rows or all(s.has_mask for s in skeletons)
    # the query rows kept in workgroup memory must leave room for a staged tile
    interleave = ("q_scratch",)
    tile_bytes = max(4 * s.shape()["tile_size"] * s.shape()["head_dim"] for s in skeletons)
    if not (small_grid and long_rows) or (
        scratch_bytes(module, interleave) + tile_bytes > device.shared_memory_bytes
    ):
        interleave = ()
    return Tuning(
        unroll_factor=DEEP_UNROLL if deep else 32,
        stage_tiles=True,
        interleave=interleave,
        split_head_dim=any(n > 1 for n in parts),
    )


def scratch_bytes(module: ModuleOp, names: tuple[str, ...]) -> int:
    """The workgroup memory that the scratch arrays `names` take, per kernel
    at most."""
    per_kernel: dict[vyre.KernelOp, int] = {}
    for scratch in module.walk():
        if isinstance(scratch, vyre.ScratchOp) and scratch.sym_name.data in names:
            kernel = scratch.parent_op()
            (count,) = scratch.result.type.get_shape()
            per_kernel[kernel] = per_kernel.get(kernel, 0) + 4 * count
    return max(per_kernel.values(), default=0)


def optimisations(
    level: str, unroll_factor: int = 32, interleave: tuple[str, ...] = ()
) -> tuple[ModulePass, ...]:
    """The passes that follow the lowering at optimisation `level`."""
    from vyre_xdsl.passes.interleave_scratch import InterleaveScratchPass
    from vyre_xdsl.passes.unroll_jam import UnrollJamPass
    from vyre_xdsl.passes.vectorize_loads import VectorizeLoadsPass

    _check_level(level)
    if level == "none":
        return ()
    kept = (InterleaveScratchPass(interleave),) if interleave else ()
    return kept + (
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
    around them; `default` chooses within the limits of `device` (a
    profile of vyre_xdsl.device: generic, h200, lavapipe, or vulkan for the
    device vx.run would use)."""

    name = "vyre-to-gpu"

    optimize: str = "default"
    device: str = GENERIC.name

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from vyre_xdsl.passes.split_head_dim import SplitHeadDimPass
        from vyre_xdsl.passes.stage_kv_tiles import StageKvTilesPass

        device = device_profile(self.device)
        for rewrite in vyre_rewrites(self.optimize, device):
            rewrite.apply(ctx, op)
        tuned = tuning(op, device) if self.optimize == "default" else Tuning()
        if tuned.stage_tiles:
            kept = scratch_bytes(op, tuned.interleave)
            StageKvTilesPass(device.shared_memory_bytes - kept).apply(ctx, op)
        if tuned.split_head_dim:
            SplitHeadDimPass(max_parts=device.max_dim_parts).apply(ctx, op)
        optimising = optimisations(self.optimize, tuned.unroll_factor, tuned.interleave)
        for lowering in LOWERING + optimising:
            lowering.apply(ctx, op)
        if self.optimize == "default":
            check_fits(op, device)


def check_fits(module: ModuleOp, device: DeviceProfile) -> None:
    """`default` promises kernels that `device` runs: a choice above that
    breaks a limit is a bug of the tuning, reported rather than run."""
    for func in lowered_kernels(module):
        lanes = read_kernel(func).workgroup_size
        needed = workgroup_memory_bytes(func)
        if needed > device.shared_memory_bytes or lanes[0] > device.max_workgroup_invocations:
            raise pass_error(
                func,
                f"vyre-to-gpu: kernel @{func.sym_name.data} needs {needed} bytes of "
                f"workgroup memory and {lanes[0]} lanes, more than device "
                f"'{device.name}' allows ({device.shared_memory_bytes} bytes, "
                f"{device.max_workgroup_invocations} lanes); please report this, and "
                f"use optimize=exact meanwhile",
            )
