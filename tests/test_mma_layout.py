"""Accumulator layouts (vyre_xdsl.mma_layout): what a lane holds of a
subgroup matrix, as the H200's profile records it, as the interpreter
executes `gpu.subgroup_mma_extract/insert_thread_local` by it, and as
vyre-tensor-cores computes on it.  The H200 reads it from its driver
through tools/gpu_check.py's `layout` case."""

from __future__ import annotations

import re

import numpy as np
import pytest
from xdsl.parser import Parser

import vyre_xdsl as vx
from requirements import needs_vulkan
from vyre_xdsl.compiler import make_context
from vyre_xdsl.device import GENERIC, H200, LAVAPIPE, mma_sync_layout
from vyre_xdsl.dialects.launch import AccumulatorAttr
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import program_info
from vyre_xdsl.mma_layout import TILE, AccumulatorLayout
from vyre_xdsl.mma_elements import MATRIX_TOLERANCE
from vyre_xdsl.passes.tensor_cores import Tiling, expand
from vyre_xdsl.spirv import emit_spirv_module
from vyre_xdsl.tools.mma_kernels import accumulator_layout_kernel
from vyre_xdsl.tuning import tensor_core_tiling

TOLERANCE = MATRIX_TOLERANCE["f16"]

LANES = 32


def _row_pairs() -> AccumulatorLayout:
    """Another valid layout: lane l holds row l / 2, the columns 8 (l % 2)
    to 8 (l % 2) + 7, in reverse order (one row a lane, partners xor 1)."""
    return AccumulatorLayout.from_positions(
        [(lane // 2) * TILE + (lane % 2) * 8 + 7 - i for lane in range(LANES) for i in range(8)],
        LANES)


def test_the_h200_layout_is_ptx_mma_fragments():
    layout = H200.accumulator_layout
    assert layout == mma_sync_layout() and layout.problem() is None
    assert (layout.length, layout.row_count, layout.masks) == (8, 2, (1, 2))
    assert layout.slots == (0, 0, 0, 0, 1, 1, 1, 1)
    # lane 5: group 1, thread 1 -> rows 1 and 9, columns 2, 3, 10, 11
    assert layout.rows[5] == (1, 1, 1, 1, 9, 9, 9, 9)
    assert layout.cols[5] == (2, 3, 10, 11, 2, 3, 10, 11)
    # its A operand: the same elements in the same order (the driver's)
    assert layout.operand_a == tuple(range(8))
    assert [layout.operand_position(5, j) for j in (0, 2, 4, 6)] == [
        (1, 2), (1, 10), (9, 2), (9, 10)]


def _reversed_operand(layout: AccumulatorLayout) -> AccumulatorLayout:
    """`layout` whose A operands hold each lane's elements in reverse."""
    return layout.with_operand([p for share in layout.lane_positions() for p in share[::-1]])


def test_an_operand_order_is_read_only_where_every_lane_has_the_same():
    layout = _row_pairs()
    assert _reversed_operand(layout).operand_a == tuple(range(7, -1, -1))
    shares = [list(share) for share in layout.lane_positions()]
    shares[3] = shares[3][::-1]  # one lane in another order
    assert layout.with_operand([p for share in shares for p in share]).operand_a is None
    shares = [list(share) for share in layout.lane_positions()]
    shares[0][0], shares[1][0] = shares[1][0], shares[0][0]  # elements of other lanes
    assert layout.with_operand([p for share in shares for p in share]).operand_a is None


def test_a_kernel_relies_on_the_operand_order_only_where_it_records_one():
    from dataclasses import replace

    device = H200.accumulator_layout
    assert replace(device, operand_a=None).fits(device)
    assert device.fits(device) and not device.fits(replace(device, operand_a=None))
    assert not _reversed_operand(device).fits(device)
    assert not device.fits(None) and not _row_pairs().fits(device)


def test_another_layout_derives_its_own_rows_and_partners():
    layout = _row_pairs()
    assert layout.problem() is None
    assert (layout.row_count, layout.masks, layout.slots) == (1, (1,), (0,) * 8)


@pytest.mark.parametrize("change, reason", [
    (lambda p: p[:1] + p[:1] + p[2:], "do not cover the matrix once each"),
    (lambda p: p[:8] + p[12:16] + p[8:12] + p[16:], "lane 1 keeps its rows' elements"),
])
def test_layouts_kernels_cannot_compute_on_are_refused(change, reason):
    positions = list(H200.accumulator_layout.positions())
    layout = AccumulatorLayout.from_positions(change(positions), LANES)
    assert reason in layout.problem()


def _layout_module(layout: AccumulatorLayout | None, dtype: str = "f32",
                   operand: str = "COp"):
    text = accumulator_layout_kernel(dtype, operand=operand)
    if layout is not None:
        attr = AccumulatorAttr.of(layout)
        text = text.replace("grid = [1, 1, 1],", f"grid = [1, 1, 1], accumulator = {attr},")
    return Parser(make_context(), text).parse_module()


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("layout", [H200.accumulator_layout, _row_pairs()],
                         ids=["h200", "row_pairs"])
def test_the_interpreter_extracts_where_the_recorded_layout_says(layout, dtype):
    module = _layout_module(layout, dtype)
    count = program_info(module).buffer("c").count
    out = vx.run(module, {"c": np.arange(count).astype(dtype.replace("f", "float"))})["out"]
    assert out.astype(np.int64).reshape(-1).tolist() == list(layout.positions())


@pytest.mark.parametrize("layout", [H200.accumulator_layout, _reversed_operand(_row_pairs())],
                         ids=["h200", "row_pairs_reversed"])
def test_the_interpreter_extracts_an_operand_where_its_recorded_order_says(layout):
    module = _layout_module(layout, "f16", "AOp")
    out = vx.run(module, {"c": np.arange(256).astype(np.float16)})["out"]
    want = [layout.operand_position(lane, j) for lane in range(LANES) for j in range(8)]
    assert out.astype(np.int64).reshape(-1).tolist() == [r * TILE + c for r, c in want]


def test_an_operand_without_a_recorded_order_cannot_be_extracted():
    from dataclasses import replace

    module = _layout_module(replace(H200.accumulator_layout, operand_a=None), "f16", "AOp")
    with pytest.raises(VyreError, match='not of a "AOp" matrix; record its `operand_a`'):
        vx.run(module, {"c": np.arange(256).astype(np.float16)})


def test_a_kernel_without_a_recorded_layout_cannot_extract():
    module = _layout_module(None)
    with pytest.raises(VyreError, match="records no accumulator layout"):
        vx.run(module, {"c": np.arange(256, dtype=np.float32)})


@pytest.mark.parametrize("old, new, message", [
    ("%m[%i0]", "%m[%lane]", "pass different indices"),
    ("%i3 = arith.constant 3 : index", "%i3 = arith.constant 9 : index",
     "a lane holds elements 0 to 7, and every lane takes the same one; not element(s) [9]"),
])
def test_an_element_index_a_lane_does_not_hold_is_refused(old, new, message):
    module = Parser(make_context(), str(_layout_module(H200.accumulator_layout)).replace(
        old, new, 1)).parse_module()
    with pytest.raises(VyreError, match=re.escape(message)):
        vx.run(module, {"c": np.arange(256, dtype=np.float32)})


def test_the_emitter_needs_a_constant_element_index():
    module = Parser(make_context(), str(_layout_module(H200.accumulator_layout)).replace(
        "%m[%i0]", "%m[%lane]", 1)).parse_module()
    with pytest.raises(VyreError, match="the element's index must be a constant"):
        emit_spirv_module(module, program_info(module))


@pytest.mark.parametrize("registers", [False, True])
def test_the_expansion_follows_the_layout_it_is_given(registers):
    """The softmax on another layout's elements (one row a lane, partners
    xor 1; A operands in reverse) is as right as on the H200's: nothing
    assumes the H200's."""
    kwargs = dict(seq_len=128, head_dim=32, num_heads=2)
    module = vx.flash_attention_2(tile_size=16, dtype="f16", **kwargs)
    (skeleton,) = [op for op in module.walk() if op.name == "vyre.tiled_online_softmax"]
    expand(skeleton, _reversed_operand(_row_pairs()),
           Tiling(keys=32, row_tiles=2, registers=registers))
    lowered = vx.lower_to_gpu(module, optimize="exact")
    assert f"positions = [{', '.join(map(str, _row_pairs().positions()[:4]))}" in str(lowered)
    assert ("operand_a = [7, 6, 5" in str(lowered)) == registers
    rng = np.random.default_rng(1)
    inputs = {b.name: rng.standard_normal(b.shape).astype(np.float16)
              for b in program_info(lowered).inputs}
    got = vx.run(lowered, inputs)["out"].astype(np.float32)
    want = np.asarray(vx.reference.flash_attention_2(
        inputs["q"], inputs["k"], inputs["v"], tile_size=16, dtype="f16"), np.float32)
    assert np.abs(got - want.reshape(got.shape)).max() / np.abs(want).max() <= TOLERANCE


def _skeleton(**kwargs):
    module = vx.flash_attention_2(tile_size=16, **kwargs)
    (skeleton,) = [op for op in module.walk() if op.name == "vyre.tiled_online_softmax"]
    return skeleton


@pytest.mark.parametrize("kwargs, tiling", [
    # a grid of 512 workgroups of 128 rows: the fastest tiling measured,
    # its tile loop left rolled for the driver, two tiles a trip
    (dict(seq_len=2048, num_heads=32, head_dim=64),
     Tiling(keys=32, row_tiles=2, stage=True, prefetch=True, registers=True, rolled=True,
            unroll=2)),
    # ... at 128 dims skipping O's rescale where no row moved its max
    (dict(seq_len=1024, num_heads=64, head_dim=128),
     Tiling(keys=16, row_tiles=2, stage=True, prefetch=True, registers=True,
            skip_rescale=True)),
    # 512 rows: the most workgroups there can be (8 of 64 rows)
    (dict(seq_len=256, num_heads=2, head_dim=64), Tiling(keys=32, stage=True)),
    # 32 dims: a 32-key tile's 4 K blocks split over the 4 subgroups
    (dict(seq_len=2048, num_heads=32, head_dim=32),
     Tiling(keys=32, row_tiles=2, stage=True, prefetch=True, registers=True, rolled=True,
            unroll=2)),
    # 16 dims: its 2 do not; the first tiling without prefetch
    (dict(seq_len=2048, num_heads=32, head_dim=16), Tiling(keys=32, row_tiles=4, stage=True)),
])
def test_the_plan_picks_a_tiling_that_fills_the_device(kwargs, tiling):
    assert tensor_core_tiling(_skeleton(dtype="f16", **kwargs), H200) == tiling


def test_without_an_operand_order_the_plan_keeps_p_in_workgroup_memory():
    from dataclasses import replace

    device = replace(H200, accumulator_layout=replace(H200.accumulator_layout, operand_a=None))
    skeleton = _skeleton(dtype="f16", seq_len=2048, num_heads=32, head_dim=64)
    assert tensor_core_tiling(skeleton, device) == Tiling(
        keys=16, row_tiles=4, stage=True, prefetch=True)


def test_the_plan_uses_tensor_cores_only_where_the_profile_has_them():
    skeleton = _skeleton(seq_len=256, head_dim=64, num_heads=2, dtype="f16")
    assert tensor_core_tiling(skeleton, GENERIC) is None
    assert tensor_core_tiling(skeleton, LAVAPIPE) is None
    assert tensor_core_tiling(_skeleton(seq_len=256, head_dim=64, num_heads=2), H200) is None


@needs_vulkan
def test_the_runtime_refuses_a_layout_its_device_does_not_have():
    """lavapipe has no cooperative matrices: a kernel compiled for the
    H200's layout is refused before it runs, with the fix."""
    text = accumulator_layout_kernel("f32")
    body_start, body_end = text.index("%c0 = "), text.index('"gpu.return"')
    attr = AccumulatorAttr(LANES, H200.accumulator_layout.positions())
    text = (text[:body_start] + text[body_end:]).replace(
        "grid = [1, 1, 1],", f"grid = [1, 1, 1], accumulator = {attr},")
    module = Parser(make_context(), text).parse_module()
    with pytest.raises(VyreError, match="lays them out differently .*device='vulkan'"):
        vx.run(module, {"c": np.zeros(256, np.float32)}, backend="vulkan")
