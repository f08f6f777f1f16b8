"""The `xdsl.universe` entry point: plain `xdsl-opt` knows vyre too."""

from xdsl.universe import Universe

from vyre_xdsl.passes import ALL_PASSES


def _vyre_dialect():
    from vyre_xdsl.dialects.vyre import Vyre

    return Vyre


VYRE_UNIVERSE = Universe(all_dialects={"vyre": _vyre_dialect}, all_passes=ALL_PASSES)
