"""The forms in which passes find a skeleton's scratch arrays."""

from __future__ import annotations

from vyre_xdsl.dialects import vyre


def scratch_name(skeleton: vyre.TiledOnlineSoftmaxOp, role: str) -> str:
    """The name of the vyre.scratch that is `skeleton`'s operand `role`."""
    owner = getattr(skeleton, role).owner
    assert isinstance(owner, vyre.ScratchOp)
    return owner.sym_name.data
