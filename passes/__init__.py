"""The vyre passes, by their `-p` names."""

from collections.abc import Callable

from xdsl.passes import ModulePass


def _absorb_mla():
    from vyre_xdsl.passes.absorb_mla import AbsorbMlaPass

    return AbsorbMlaPass


def _fold_divisions():
    from vyre_xdsl.passes.fold_divisions import FoldDivisionsPass

    return FoldDivisionsPass


def _inline_fragments():
    from vyre_xdsl.passes.inline_fragments import InlineFragmentsPass

    return InlineFragmentsPass


def _expand_stability():
    from vyre_xdsl.passes.expand_stability import ExpandStabilityPass

    return ExpandStabilityPass


def _convert_vyre_to_gpu():
    from vyre_xdsl.passes.convert_vyre_to_gpu import ConvertVyreToGpuPass

    return ConvertVyreToGpuPass


def _hoist_tile_loads():
    from vyre_xdsl.passes.hoist_tile_loads import HoistTileLoadsPass

    return HoistTileLoadsPass


def _interleave_scratch():
    from vyre_xdsl.passes.interleave_scratch import InterleaveScratchPass

    return InterleaveScratchPass


def _plan():
    from vyre_xdsl.passes.plan import PlanPass

    return PlanPass


def _promote_scratch():
    from vyre_xdsl.passes.promote_scratch import PromoteScratchPass

    return PromoteScratchPass


def _unroll_jam():
    from vyre_xdsl.passes.unroll_jam import UnrollJamPass

    return UnrollJamPass


def _block_rows():
    from vyre_xdsl.passes.block_rows import BlockRowsPass

    return BlockRowsPass


def _block_product():
    from vyre_xdsl.passes.block_product import BlockProductPass

    return BlockProductPass


def _resize_workgroup():
    from vyre_xdsl.passes.resize_workgroup import ResizeWorkgroupPass

    return ResizeWorkgroupPass


def _retile():
    from vyre_xdsl.passes.retile import RetilePass

    return RetilePass


def _split_kv():
    from vyre_xdsl.passes.split_kv import SplitKvPass

    return SplitKvPass


def _split_head_dim():
    from vyre_xdsl.passes.split_head_dim import SplitHeadDimPass

    return SplitHeadDimPass


def _stage_kv_tiles():
    from vyre_xdsl.passes.stage_kv_tiles import StageKvTilesPass

    return StageKvTilesPass


def _latent_tensor_cores():
    from vyre_xdsl.passes.latent_tensor_cores import LatentTensorCoresPass

    return LatentTensorCoresPass


def _projection_tensor_cores():
    from vyre_xdsl.passes.projection_tensor_cores import ProjectionTensorCoresPass

    return ProjectionTensorCoresPass


def _tensor_cores():
    from vyre_xdsl.passes.tensor_cores import TensorCoresPass

    return TensorCoresPass


def _use_exp2():
    from vyre_xdsl.passes.use_exp2 import UseExp2Pass

    return UseExp2Pass


def _vectorize_loads():
    from vyre_xdsl.passes.vectorize_loads import VectorizeLoadsPass

    return VectorizeLoadsPass


def _vectorize_stores():
    from vyre_xdsl.passes.vectorize_stores import VectorizeStoresPass

    return VectorizeStoresPass


def _vyre_to_gpu():
    from vyre_xdsl.passes.vyre_to_gpu import VyreToGpuPass

    return VyreToGpuPass


ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "vyre-absorb-mla": _absorb_mla,
    "vyre-fold-divisions": _fold_divisions,
    "vyre-inline-fragments": _inline_fragments,
    "vyre-expand-stability": _expand_stability,
    "convert-vyre-to-gpu": _convert_vyre_to_gpu,
    "vyre-hoist-tile-loads": _hoist_tile_loads,
    "vyre-interleave-scratch": _interleave_scratch,
    "vyre-plan": _plan,
    "vyre-promote-scratch": _promote_scratch,
    "vyre-unroll-jam": _unroll_jam,
    "vyre-block-rows": _block_rows,
    "vyre-block-product": _block_product,
    "vyre-resize-workgroup": _resize_workgroup,
    "vyre-retile": _retile,
    "vyre-split-kv": _split_kv,
    "vyre-split-head-dim": _split_head_dim,
    "vyre-stage-kv-tiles": _stage_kv_tiles,
    "vyre-tensor-cores": _tensor_cores,
    "vyre-latent-tensor-cores": _latent_tensor_cores,
    "vyre-projection-tensor-cores": _projection_tensor_cores,
    "vyre-use-exp2": _use_exp2,
    "vyre-vectorize-loads": _vectorize_loads,
    "vyre-vectorize-stores": _vectorize_stores,
    "vyre-to-gpu": _vyre_to_gpu,
}
