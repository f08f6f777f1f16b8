"""vyre-plan{device=NAME}: record what `optimize=default` will do.

Computes, once, the plan of every `vyre.tiled_online_softmax` for the
device profile NAME (vyre_xdsl.device: generic, h200, lavapipe, or vulkan
for the device vx.run would use) and records it on the skeleton as
`vyre.plan = #vyre.plan<...>` (dialects/plan.py), or, for a skeleton
that will run on the device's matrix units, as `vyre.tensor_cores =
#vyre.tensor_cores<...>` (vyre-tensor-cores' tiling); the IR is otherwise
left as it is.  The optimisation passes given `0` ("choose") then follow it;
`vyre-to-gpu{optimize=default}` runs this pass and then them.  The plan is
the tuning's (vyre_xdsl.tuning); docs/performance.md says why it chooses
what it does.  vyre-to-gpu plans MLA decode after vyre-absorb-mla, so run
that first to see its plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from vyre_xdsl.device import GENERIC, device_profile
from vyre_xdsl.errors import pass_error
from vyre_xdsl.tuning import f32_parts_problem, record_plans


@dataclass(frozen=True)
class PlanPass(ModulePass):
    """Record on every skeleton the plan that `optimize=default` follows on
    `device` (without its matrix units where `matrix_units=false`, as
    vyre-to-gpu's option of that name; f32 on them split into `f32_parts`
    bf16 parts, as vyre-to-gpu's)."""

    name = "vyre-plan"

    device: str = GENERIC.name
    matrix_units: bool = True
    f32_parts: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if reason := f32_parts_problem(self.f32_parts):
            raise pass_error(op, f"{self.name}: {reason}")
        device = device_profile(self.device)
        record_plans(op, device if self.matrix_units else device.without_matrices(),
                     self.f32_parts)
