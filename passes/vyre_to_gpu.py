"""vyre-to-gpu: the whole lowering, vyre IR -> gpu/arith/scf/math/memref."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from vyre_xdsl.passes.convert_vyre_to_gpu import ConvertVyreToGpuPass
from vyre_xdsl.passes.expand_stability import ExpandStabilityPass
from vyre_xdsl.passes.inline_fragments import InlineFragmentsPass

PIPELINE = (InlineFragmentsPass(), ExpandStabilityPass(), ConvertVyreToGpuPass())


@dataclass(frozen=True)
class VyreToGpuPass(ModulePass):
    """vyre-inline-fragments, vyre-expand-stability, convert-vyre-to-gpu."""

    name = "vyre-to-gpu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for lowering in PIPELINE:
            lowering.apply(ctx, op)
