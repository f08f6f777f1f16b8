"""The vyre passes, by their `-p` names."""

from collections.abc import Callable

from xdsl.passes import ModulePass


def _inline_fragments():
    from vyre_xdsl.passes.inline_fragments import InlineFragmentsPass

    return InlineFragmentsPass


def _expand_stability():
    from vyre_xdsl.passes.expand_stability import ExpandStabilityPass

    return ExpandStabilityPass


def _convert_vyre_to_gpu():
    from vyre_xdsl.passes.convert_vyre_to_gpu import ConvertVyreToGpuPass

    return ConvertVyreToGpuPass


def _vyre_to_gpu():
    from vyre_xdsl.passes.vyre_to_gpu import VyreToGpuPass

    return VyreToGpuPass


ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "vyre-inline-fragments": _inline_fragments,
    "vyre-expand-stability": _expand_stability,
    "convert-vyre-to-gpu": _convert_vyre_to_gpu,
    "vyre-to-gpu": _vyre_to_gpu,
}
