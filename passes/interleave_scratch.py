"""vyre-interleave-scratch: keep a per-lane scratch array in workgroup
memory, laid out so that a warp's accesses hit every bank once.

vyre-promote-scratch makes each lane's slice of a scratch array private,
and a GPU compiler keeps a private array in registers while it fits.  At
head_dim 128 FlashAttention-2's query row and accumulator are 256 floats
per lane, more than the 255 registers an invocation may have, and the
private arrays spill to local memory.  Keeping one of them in workgroup
memory instead frees the registers, at the price of a workgroup-memory
read per use and of workgroup memory, which can limit how many workgroups
an SM runs at once.

Left in the seed's layout (`lane * stride + offset`) the lanes of a warp
would read 32 words `stride` apart, one bank, one after another.  This pass
stores element `offset` of lane `lane` at `offset * lanes + lane` instead:
the 32 lanes read 32 neighbouring words.  The values are the same, so
results are bit-identical; vyre-promote-scratch then leaves the array in
workgroup memory (it is no longer a lane slice).

Runs on lowered IR (after convert-vyre-to-gpu, before
vyre-promote-scratch), on the skeleton's workgroup arrays whose role
(`vyre.role`, recorded by the lowering) `arrays` names: `q_scratch`,
`o_acc` or `score_tile`.  As in vyre-promote-scratch, an array
with any other access (another lane's slice, an unknown offset, a use that
is not a load or store) is left as it is.

Workgroup memory kept this way costs occupancy, which a small grid does
not have anyway: `default` uses it for the query row of long rows on small
grids only (the plan's `interleave`; docs/performance.md says why).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, memref
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from vyre_xdsl.dialects.launch import ScratchRole, scratch_role
from vyre_xdsl.errors import VyreError
from vyre_xdsl.scratch_forms import lane_slice_accesses


def interleave(alloc: memref.AllocOp) -> None:
    """Move every lane's slice of `alloc` to stride `lanes`, if every access
    is to the lane's own slice."""
    found = lane_slice_accesses(alloc)
    if found is None:
        return
    stride, accesses = found
    (size,) = alloc.memref.type.get_shape()
    lanes = size // stride
    for access in accesses:
        lanes_value = arith.ConstantOp(IntegerAttr(lanes, IndexType()))
        scaled = arith.MuliOp(access.offset, lanes_value.result)
        moved = arith.AddiOp(scaled.result, access.lane)
        Rewriter.insert_op([lanes_value, scaled, moved], InsertPoint.before(access.op))
        access.op.operands[1 if isinstance(access.op, memref.LoadOp) else 2] = moved.result


@dataclass(frozen=True)
class InterleaveScratchPass(ModulePass):
    """Store the per-lane workgroup arrays of the roles named (ScratchRole)
    lane-minor (element e of lane l at e * lanes + l), free of bank
    conflicts; bit-identical."""

    name = "vyre-interleave-scratch"

    arrays: tuple[str, ...] = ("q_scratch",)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        roles = [role.value for role in ScratchRole]
        unknown = [name for name in self.arrays if name not in roles]
        if unknown:
            raise VyreError(
                f"vyre-interleave-scratch: arrays={','.join(unknown)} names no scratch "
                f"role; the roles are {', '.join(roles)}"
            )
        for alloc in [a for a in op.walk() if isinstance(a, memref.AllocOp)]:
            if scratch_role(alloc) in self.arrays:
                interleave(alloc)
