"""The vyre ops' accessors for what passes used to rebuild by hand."""

from __future__ import annotations

from xdsl.dialects.builtin import IndexType

import vyre_xdsl as vx
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.constants import DEFAULT_LANES


def _ops(module, kind):
    return [op for op in module.walk() if isinstance(op, kind)]


def test_kernel_lanes_and_items():
    (kernel,) = _ops(vx.flash_attention_2(seq_len=128, head_dim=64), vyre.KernelOp)
    assert kernel.lanes == DEFAULT_LANES == 64
    assert kernel.items == 128
    assert vyre.KernelOp("k", 256, 128).lanes == 128


def test_skeleton_lanes_follow_the_kernel():
    module = vx.flash_attention_2(seq_len=128, head_dim=64)
    (kernel,) = _ops(module, vyre.KernelOp)
    (skeleton,) = _ops(module, vyre.TiledOnlineSoftmaxOp)
    assert skeleton.lanes == 64
    kernel.properties["workgroup_size"] = vyre.KernelOp("k", 1, 32).workgroup_size
    # the stride of a lane's scores is the op's own, not the array over the lanes
    assert skeleton.lanes == 32 and skeleton.scores_per_lane == skeleton.shape()["tile_size"]
    skeleton.detach()
    assert skeleton.lanes == DEFAULT_LANES


def test_region_arg_by_role():
    module = vx.flash_attention_2(seq_len=128, head_dim=64, mask_mod=lambda q, kv: q >= kv)
    (skeleton,) = _ops(module, vyre.TiledOnlineSoftmaxOp)
    names = [name for name, _ in skeleton.named_regions()]
    assert names == ["scores", "update", "prologue", "epilogue", "mask"]
    for name, region in skeleton.named_regions():
        for i, role in enumerate(vyre.REGION_ARGS[name]):
            assert skeleton.region_arg(name, role) is region.block.args[i]
    assert skeleton.region_arg("update", "score_tile").type == skeleton.score_tile.type
    assert skeleton.region_arg("mask", "kv_idx").type == IndexType()


def test_hooks_empty():
    (skeleton,) = _ops(vx.flash_attention_2(seq_len=128, head_dim=64), vyre.TiledOnlineSoftmaxOp)
    assert skeleton.hooks_empty
    (mla,) = _ops(vx.mla_decode_absorbed(256, 4, 64, 128, 32), vyre.TiledOnlineSoftmaxOp)
    assert not mla.hooks_empty  # projects o_lat into o_acc in its epilogue
