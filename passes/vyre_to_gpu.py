"""vyre-to-gpu: the whole lowering, vyre IR -> gpu/arith/scf/math/memref.

`optimize` picks what runs around the three lowering passes:
  none     the seed's layout as is (scratch in workgroup memory)
  exact    rewrites that keep every result bit-identical: per-lane scratch
           made private (vyre-promote-scratch), inner loops unrolled and
           jammed (vyre-unroll-jam), a tile's keys' divisions by a page
           size folded into the tile's (vyre-fold-divisions), loads of
           neighbouring elements merged
           into vector loads (vyre-vectorize-loads), stores of neighbouring
           elements of a buffer only written into vector stores
           (vyre-vectorize-stores), common subexpressions and dead code
           removed
  default  compute the plan (vyre-absorb-mla{kernels=3}, then vyre-plan
           for `device`: vyre_xdsl.tuning), expand the skeletons it puts on
           `device`'s matrix units (`vyre.tensor_cores`: vyre-tensor-cores
           with that tiling, which reorders sums and reads the weights in
           f16 within its declared tolerance; f16 and bf16 ones first
           through vyre-use-exp2, likewise), MLA's latent attention there
           (`vyre.latent_tensor_cores`: vyre-latent-tensor-cores, likewise),
           the absorbed program's per-head projections there
           (`vyre.projection_tensor_cores` on their kernels:
           vyre-projection-tensor-cores with that tiling, likewise),
           and those it runs as register blocks
           (`vyre.block_product`: vyre-block-product with that
           blocking, bit-identical to a lane a row with tiles of its
           size), then run the passes that follow
           it: vyre-resize-workgroup, and vyre-retile and vyre-split-kv,
           which reorder floating-point sums within the tolerance of
           docs/performance.md, then vyre-stage-kv-tiles and
           vyre-split-head-dim where the plan says, and `exact` with the
           plan's unroll depth and vyre-interleave-scratch; a masked kernel's
           heaviest query blocks start first (vyre-inline-fragments{heavy_first});
           with `matrix_units=false` the plan is that of `device` without
           matrix units, every kernel on the lanes; with `f32_parts=2` or
           `3` an f32 FlashAttention-2 may run on bf16 matrix units, its
           operands split into that many bf16 parts (within
           SPLIT_TOLERANCE, not bit-exact; vyre-tensor-cores{pieces})

The passes are taken by name from the registry (`ALL_PASSES` of
vyre_xdsl.passes), with the options the plan gives them.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.transforms.dead_code_elimination import DeadCodeElimination

from vyre_xdsl import tuning
from vyre_xdsl.cse import LinearCSE
from vyre_xdsl.device import GENERIC, DeviceProfile, device_profile
from vyre_xdsl.dialects.plan import (
    BLOCK_PRODUCT_ATTR,
    LATENT_TENSOR_CORES_ATTR,
    PROJECTION_TENSOR_CORES_ATTR,
    TENSOR_CORES_ATTR,
    BlockProductAttr,
    LatentTensorCoresAttr,
    ProjectionTensorCoresAttr,
    TensorCoresAttr,
)
from vyre_xdsl.dialects.vyre import TiledOnlineSoftmaxOp
from vyre_xdsl.errors import VyreError, pass_error
from vyre_xdsl.kernel_info import lowered_kernels, read_kernel, workgroup_memory_bytes
from vyre_xdsl.passes import (
    ALL_PASSES,
    block_product,
    latent_tensor_cores,
    projection_tensor_cores,
    tensor_cores,
    use_exp2,
)

OPTIMISATION_LEVELS = ("none", "exact", "default")
LOWERING = ("vyre-inline-fragments", "vyre-expand-stability", "convert-vyre-to-gpu")
# what `default` asks of the lowering passes: heavy query blocks first
# (causal grids finish sooner; docs/performance.md, "Heavy blocks first")
LOWERING_OPTIONS = {"default": {"vyre-inline-fragments": {"heavy_first": True}}}
# the vyre-level passes of `default` that follow the plan (their `0` options)
PLANNED = ("vyre-resize-workgroup", "vyre-retile", "vyre-split-kv")


def _pass(name: str, **options) -> ModulePass:
    return ALL_PASSES[name]()(**options)


def optimisations(
    level: str, unroll_factor: int = tuning.UNROLL, interleave: tuple[str, ...] = (),
    hoist_loads: tuple[str, ...] = (),
) -> tuple[ModulePass, ...]:
    """The passes that follow the lowering at optimisation `level`."""
    _check_level(level)
    if level == "none":
        return ()
    kept = (_pass("vyre-interleave-scratch", arrays=interleave),) if interleave else ()
    return kept + (
        _pass("vyre-promote-scratch"),
        _pass("vyre-unroll-jam", factor=unroll_factor),
        _pass("vyre-fold-divisions"),
        # the copies' identical lookups (a page's) become one value, so that
        # the loads they address are seen to be neighbours
        LinearCSE(),
        _pass("vyre-vectorize-loads"),
        _pass("vyre-vectorize-stores"),
        *((_pass("vyre-hoist-tile-loads", buffers=hoist_loads),) if hoist_loads else ()),
        LinearCSE(),
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
    device vx.run would use), on its matrix units where the plan takes
    them unless `matrix_units=false`, for f32 split into `f32_parts` bf16
    parts (0: f32 stays on the lanes)."""

    name = "vyre-to-gpu"

    optimize: str = "default"
    device: str = GENERIC.name
    matrix_units: bool = True
    f32_parts: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        device = device_profile(self.device)
        if not self.matrix_units:
            device = device.without_matrices()
        _check_level(self.optimize)
        if reason := tuning.f32_parts_problem(self.f32_parts):
            raise pass_error(op, f"{self.name}: {reason}")
        nested = [m for m in op.walk() if isinstance(m, ModuleOp) and m is not op]
        if nested:  # the passes it runs take a program's kernels from one module
            raise pass_error(
                nested[0],
                f"vyre-to-gpu: this builtin.module is nested in another ({len(nested)} "
                f"nested, as two concatenated files give); put a program's kernels in "
                f"one builtin.module, or lower each file on its own")
        unroll, interleave, hoist_loads = tuning.UNROLL, (), ()
        if self.optimize == "default":
            _pass("vyre-absorb-mla", kernels=3).apply(ctx, op)
            plans = list(tuning.record_plans(op, device, self.f32_parts).values())
            for kernel in projection_tensor_cores.recorded(op):
                if isinstance(on_matrices := kernel.attributes.get(PROJECTION_TENSOR_CORES_ATTR),
                              ProjectionTensorCoresAttr):
                    projection_tensor_cores.expand(
                        kernel, projection_tensor_cores.ProjectionTiling.of(on_matrices))
            for skeleton in [s for s in op.walk() if isinstance(s, TiledOnlineSoftmaxOp)]:
                if isinstance(on_matrices := skeleton.attributes.get(TENSOR_CORES_ATTR),
                              TensorCoresAttr):
                    if on_matrices.pieces == 1:  # exp2: a multiply less a score
                        use_exp2.fold_log2e(skeleton)
                    tensor_cores.expand(skeleton, device.accumulator_layout,
                                        tensor_cores.Tiling.of(on_matrices))
                elif isinstance(latent := skeleton.attributes.get(LATENT_TENSOR_CORES_ATTR),
                                LatentTensorCoresAttr):
                    latent_tensor_cores.expand(op, skeleton, device.accumulator_layout,
                                               latent_tensor_cores.LatentTiling.of(latent))
                elif isinstance(blocks := skeleton.attributes.get(BLOCK_PRODUCT_ATTR),
                                BlockProductAttr):
                    block_product.expand(skeleton, block_product.Blocking.of(blocks))
            for name in PLANNED:
                _pass(name).apply(ctx, op)
            if plans:  # staging, unrolling and interleaving are the module's
                plan = plans[0]
                unroll, interleave = plan.unroll, plan.interleave
                hoist_loads = tuple(dict.fromkeys(n for p in plans for n in p.hoist_loads))
                if plan.stage_bytes:
                    _pass("vyre-stage-kv-tiles", shared_memory_bytes=plan.stage_bytes).apply(
                        ctx, op
                    )
                if any(p.dim_parts > 1 for p in plans):
                    _pass("vyre-split-head-dim").apply(ctx, op)
            if any(p.rows > 1 for p in plans):
                _pass("vyre-block-rows").apply(ctx, op)
        for name in LOWERING:
            options = LOWERING_OPTIONS.get(self.optimize, {}).get(name, {})
            _pass(name, **options).apply(ctx, op)
        for optimisation in optimisations(self.optimize, unroll, interleave, hoist_loads):
            optimisation.apply(ctx, op)
        if self.optimize == "default":
            check_fits(op, device)


def check_fits(module: ModuleOp, device: DeviceProfile) -> None:
    """`default` promises kernels that `device` runs: one that breaks a
    limit (a pass before vyre-to-gpu set it, or the tuning chose it) is
    refused rather than run."""
    for func in lowered_kernels(module):
        lanes = read_kernel(func).workgroup_size
        needed = workgroup_memory_bytes(func)
        if needed > device.shared_memory_bytes or lanes[0] > device.max_workgroup_invocations:
            raise pass_error(
                func,
                f"vyre-to-gpu: kernel @{func.sym_name.data} needs {needed} bytes of "
                f"workgroup memory and {lanes[0]} lanes, more than device "
                f"'{device.name}' allows ({device.shared_memory_bytes} bytes, "
                f"{device.max_workgroup_invocations} lanes); if a pass before "
                f"vyre-to-gpu set this (vyre-resize-workgroup{{size=...}}), give it "
                f"a size the device allows, else report it and use optimize=exact",
            )
