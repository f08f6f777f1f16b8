"""The plan of `optimize=default` (vyre_xdsl.tuning, vyre-plan): one per
skeleton, computed once from a device profile, recorded as #vyre.plan and
followed by the passes; within every profile's limits."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from xdsl.utils.exceptions import VerifyException

import vyre_xdsl as vx
import vyre_xdsl.dim_split
from vyre_xdsl import tuning
from vyre_xdsl.compiler import apply_pipeline
from vyre_xdsl.device import GENERIC, H200, PROFILES
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.plan import PLAN_ATTR, PlanAttr, plan_of
from vyre_xdsl.kv_split import workgroup_merge_bytes
from vyre_xdsl.passes import split_head_dim

PASSES = Path(__file__).resolve().parents[1] / "passes"
CAUSAL = dict(mask_mod=lambda q, kv: kv <= q)


def _plan(module, device=H200) -> PlanAttr:
    absorbed = apply_pipeline(module, "vyre-absorb-mla{kernels=3}")
    (plan,) = tuning.module_plans(absorbed, device).values()
    return plan


def _fields(plan: PlanAttr) -> tuple:
    return (plan.lanes, plan.tile_size, plan.kv_splits, plan.merge.value, plan.dim_parts,
            plan.stage_bytes, plan.unroll, plan.interleave)


def _skeleton(module) -> vyre.TiledOnlineSoftmaxOp:
    (op,) = [s for s in module.walk() if isinstance(s, vyre.TiledOnlineSoftmaxOp)]
    return op


def _decode(batch: int = 8, kv_len: int = 4096, kv_heads: int | None = 8,
            head_dim: int = 128, dtype: str = "f32", **extra):
    """A decode step (one query) over 32 query heads."""
    return vx.flash_attention_2(seq_len=1, kv_len=kv_len, batch=batch, num_heads=32,
                                num_kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, **extra)


@pytest.mark.parametrize("build, want", [
    # rows of 64 dims on 2048 workgroups: 128 lanes, 16 keys, staged, 64 deep
    (lambda: vx.flash_attention_2(4096, 64, num_heads=32),
     (128, 16, 1, "none", 1, 49152, 64, ())),
    (lambda: vx.flash_attention_2(4096, 64, num_heads=32, **CAUSAL),
     (128, 16, 1, "none", 1, 49152, 64, ())),
    # rows of 128 over two lanes: 32 keys, or 4 keys on a small grid
    (lambda: vx.flash_attention_2(4096, 128, num_heads=32),
     (128, 32, 1, "none", 2, 49152, 64, ())),
    (lambda: vx.flash_attention_2(4096, 128), (64, 4, 1, "none", 2, 49152, 64, ())),
    # rows of 64 on a small grid go over two lanes too
    (lambda: vx.flash_attention_2(4096, 64), (64, 16, 1, "none", 2, 49152, 64, ())),
    # rows of 132 cannot be split; on a small grid the query row stays in
    # workgroup memory, lane-minor, and the staged tiles get the rest
    (lambda: vx.flash_attention_2(4096, 132, num_heads=32),
     (128, 16, 1, "none", 1, 49152, 32, ())),
    (lambda: vx.flash_attention_2(4096, 132),
     (64, 4, 1, "none", 1, 49152 - 4 * 64 * 132, 32, ("q_scratch",))),
    # MLA decode: a split per 16-key tile, merged by a kernel, latent rows
    # of 512 over eight lanes, not staged
    (lambda: vx.mla_decode(4096, 16, 128, 512, 64), (64, 16, 256, "kernel", 8, 0, 64, ())),
    # 128 heads (DeepSeek-V3): fewer splits, still merged by a kernel
    (lambda: vx.mla_decode(4096, 128, 128, 512, 64), (64, 64, 32, "kernel", 8, 0, 64, ())),
    # rows of 256 split over invocations: a merge in the workgroup would
    # take more than 48 KiB, so a kernel merges
    (lambda: vx.flash_attention_2(300, 256, num_heads=4), (64, 64, 4, "kernel", 4, 0, 64, ())),
    # GQA decode at batch 8: rows of 128 merge in a kernel so that they go
    # over lanes (a merge in the workgroup keeps a row on one lane), in 64
    # splits (four times the target: KERNEL_MERGE_FACTOR); a key head's four
    # query rows share an invocation (test_shared_rows), each over eight
    # lanes, in tiles of 8 keys
    (lambda: _decode(8, 4096),
     (64, 8, 64, "kernel", 8, 0, 64, ())),
    # ... with run-time lengths too: an item's lanes share its length
    (lambda: _decode(8, 4096, kv_lens=True),
     (64, 8, 64, "kernel", 8, 0, 32, ())),
    # shared rows of 16384 keys take four times the target's splits too
    # (SHARED_MORE_SPLITS_KEYS; rows on their own lanes keep 16 beyond
    # MORE_SPLITS_KEYS) ...
    (lambda: _decode(8, 16384),
     (64, 8, 64, "kernel", 8, 0, 64, ())),
    # ... however many keys each split keeps: 32768 keys in 64 splits of 512,
    # and batch 32 with 32768 keys in 16 of 2048
    (lambda: _decode(8, 32768),
     (64, 8, 64, "kernel", 8, 0, 64, ())),
    (lambda: _decode(32, 32768),
     (64, 8, 16, "kernel", 8, 0, 64, ())),
    # MQA decode (32 query heads a key head: more rows share than an
    # invocation takes) keeps the bound: 16 splits of 2048 keys
    (lambda: _decode(8, 32768, kv_heads=1),
     (64, 8, 16, "kernel", 8, 0, 64, ())),
    # MHA decode (no rows to share): rows of 16384 keys take the target's
    # 64 splits only (four times would be 256)
    (lambda: _decode(2, 16384, kv_heads=None),
     (64, 64, 64, "kernel", 2, 0, 64, ())),
    # batch 128 with 1024 keys: four splits of 256 keys (MAX_SPLIT_KEYS)
    (lambda: _decode(128, 1024),
     (64, 8, 4, "kernel", 8, 0, 64, ())),
    # batch 128 with 4096 keys: four splits of 1024 keys, merged by a kernel,
    # so that a key head's rows share an invocation, dense, with run-time
    # lengths and with pages
    (lambda: _decode(128, 4096),
     (64, 8, 4, "kernel", 8, 0, 64, ())),
    (lambda: _decode(128, 4096, kv_lens=True),
     (64, 8, 4, "kernel", 8, 0, 32, ())),
    (lambda: _decode(128, 4096, page_size=16, num_pages=128 * 256),
     (64, 8, 4, "kernel", 8, 0, 32, ())),
    # MHA decode at batch 128 (no rows to share) is not split: four splits
    # would keep 1024 keys each (MAX_SPLIT_KEYS)
    (lambda: _decode(128, 4096, kv_heads=None),
     (64, 4, 1, "none", 2, 49152, 64, ())),
    # rows of 64 keep the merge in the workgroup
    (lambda: _decode(8, 4096, head_dim=64),
     (64, 64, 16, "workgroup", 1, 0, 64, ())),
])
def test_the_h200_plan(build, want):
    assert _fields(_plan(build())) == want


def test_mla_with_128_heads_on_a_device_without_shuffles_keeps_rows_on_one_lane():
    plan = _plan(vx.mla_decode(4096, 128, 128, 512, 64), GENERIC)
    assert (plan.kv_splits, plan.merge.value, plan.dim_parts) == (32, "kernel", 1)


SHAPES = {
    "fa2_4096x64_h32": lambda: vx.flash_attention_2(4096, 64, num_heads=32),
    "fa2_4096x128": lambda: vx.flash_attention_2(4096, 128),
    "fa2_4096x132": lambda: vx.flash_attention_2(4096, 132),
    "fa2_300x256_h4": lambda: vx.flash_attention_2(300, 256, num_heads=4),
    "fa2_causal_1024x64_h8": lambda: vx.flash_attention_2(1024, 64, num_heads=8, **CAUSAL),
    "fa2_ragged": lambda: vx.flash_attention_2(1, 64, kv_len=1024, batch=4, kv_lens=True),
    "mla_4096_h16": lambda: vx.mla_decode(4096, 16, 128, 512, 64),
    "mla_1024_h128": lambda: vx.mla_decode(1024, 128, 128, 512, 64),
}
SMALL = dataclasses.replace(H200, name="small", shared_memory_bytes=8192)


@pytest.mark.parametrize("device", [*PROFILES.values(), SMALL], ids=lambda d: d.name)
@pytest.mark.parametrize("name", SHAPES)
def test_every_plan_fits_its_profile(name, device):
    module = apply_pipeline(SHAPES[name](), "vyre-absorb-mla{kernels=3}")
    (op, plan), = tuning.module_plans(module, device).items()
    assert plan.device == device.name
    assert plan.lanes <= device.max_workgroup_invocations
    assert 0 <= plan.stage_bytes <= device.shared_memory_bytes
    assert plan.dim_parts <= device.max_dim_parts
    assert op.shape()["tile_size"] % plan.tile_size == 0
    if plan.merge.value == "workgroup":
        assert workgroup_merge_bytes(op, plan.lanes) <= device.shared_memory_bytes
        assert plan.lanes % plan.kv_splits == 0


def test_a_profile_with_little_shared_memory_stages_less_and_merges_in_a_kernel():
    assert _plan(SHAPES["fa2_4096x64_h32"](), SMALL).stage_bytes == 8192
    # 64 lanes' partial rows of 64 dims take 16.5 KiB: a kernel merges them
    assert _plan(vx.flash_attention_2(512, 64), H200).merge.value == "workgroup"
    assert _plan(vx.flash_attention_2(512, 64), SMALL).merge.value == "kernel"


def test_fa2_4096x128_finds_its_dim_loops_once(monkeypatch):
    calls = {"tuning": 0, "pass": 0}

    def counting(where):
        def find(op):
            calls[where] += 1
            return vyre_xdsl.dim_split.find_dim_loops(op)
        return find

    monkeypatch.setattr(tuning, "find_dim_loops", counting("tuning"))
    monkeypatch.setattr(split_head_dim, "find_dim_loops", counting("pass"))
    lowered = vx.lower_to_gpu(vx.flash_attention_2(4096, 128, num_heads=32), device="h200")
    assert "gpu.shuffle xor" in str(lowered)
    # once to plan, once to rewrite the loops the plan splits
    assert calls == {"tuning": 1, "pass": 1}


def test_vyre_plan_records_the_plan_and_changes_nothing_else():
    module = vx.flash_attention_2(4096, 128, num_heads=32)
    planned = apply_pipeline(module, "vyre-plan{device=h200}")
    op = _skeleton(planned)
    assert plan_of(op) == _plan(module)
    del op.attributes[PLAN_ATTR]
    assert str(planned) == str(module)


def test_the_passes_follow_a_recorded_plan():
    module = apply_pipeline(vx.flash_attention_2(4096, 64, num_heads=32), "vyre-plan{device=h200}")
    op = _skeleton(module)
    op.attributes[PLAN_ATTR] = PlanAttr("h200", 32, 8, 2, "workgroup", 2, 0, 32)
    followed = apply_pipeline(module, "vyre-resize-workgroup,vyre-retile,vyre-split-kv")
    op = _skeleton(followed)
    assert (op.parent_op().workgroup_size.value.data, op.shape()["tile_size"], op.splits,
            op.merges_in_kernel) == (32, 8, 2, False)


def test_vyre_to_gpu_follows_the_plan_it_records():
    module = vx.flash_attention_2(4096, 128, num_heads=32)
    assert _plan(module).dim_parts == 2
    lowered = str(vx.lower_to_gpu(module, device="h200"))
    assert "gpu.shuffle xor" in lowered
    assert "vyre.plan" not in lowered  # gone with the skeleton


# A lane's chunk of a split row: 16 bytes of bf16 (8 dims); f16 and f32 keep
# chunks of 4 (tuning.DIM_CHUNKS); a row whose parts cannot take chunks of 8
# (72 dims over two lanes: 72 / 16 lanes of shared rows do not divide it
# either) keeps 4; an unsplit row has the default.
@pytest.mark.parametrize("build, parts, chunk", [
    (lambda: _decode(dtype="bf16"), 8, 8),
    (lambda: _decode(dtype="bf16", page_size=16, num_pages=8 * 256), 8, 8),
    (lambda: _decode(dtype="f16"), 8, 4),
    (lambda: _decode(dtype="f32"), 8, 4),
    (lambda: _decode(dtype="bf16", head_dim=72), 2, 4),
    (lambda: _decode(dtype="bf16", head_dim=64), 1, vyre.DIM_CHUNK),
])
def test_the_h200_plan_deals_split_rows_in_chunks_of_their_loads(build, parts, chunk):
    plan = _plan(build())
    assert (plan.dim_parts, plan.dim_chunk) == (parts, chunk)


# MLA's latent rows (576 dims) in bf16 take four times the target's splits,
# however many keys each keeps; in f32 they keep the target's
@pytest.mark.parametrize("heads, bf16_splits, f32_splits", [(16, 32, 8), (128, 4, 1)])
def test_half_precision_latent_rows_take_more_splits(heads, bf16_splits, f32_splits):
    plans = {dtype: _plan(vx.mla_decode(4096, heads, 128, 512, 64, batch=32, dtype=dtype))
             for dtype in ("bf16", "f32")}
    assert (plans["bf16"].kv_splits, plans["f32"].kv_splits) == (bf16_splits, f32_splits)
    assert (plans["bf16"].dim_chunk, plans["f32"].dim_chunk) == (8, 4)
    assert tuning.read_dtype(_skeleton(apply_pipeline(
        vx.mla_decode(4096, heads, 128, 512, 64, batch=32, dtype="bf16"),
        "vyre-absorb-mla{kernels=3}"))) == "bf16"  # beside the absorbed f32 query


def test_bf16_decode_lowers_to_16_byte_loads_on_the_h200():
    lowered = str(vx.lower_to_gpu(_decode(dtype="bf16"), device="h200"))
    assert "vector<8xbf16>" in lowered and "vector<4xbf16>" not in lowered
    lowered = str(vx.lower_to_gpu(_decode(dtype="f16"), device="h200"))
    assert "vector<4xf16>" in lowered and "vector<8xf16>" not in lowered


def test_a_plan_round_trips_through_the_printer():
    planned = apply_pipeline(vx.mla_decode(64, 2, 16, 256, 8), "vyre-absorb-mla,vyre-plan{device=lavapipe}")
    assert "#vyre.plan<device = \"lavapipe\"" in str(planned)
    assert str(vx.parse_module(str(planned))) == str(planned)


def test_a_plan_with_hoisted_loads_round_trips_through_the_printer():
    decode = vx.flash_attention_2(seq_len=1, kv_len=256, batch=2, num_heads=32, num_kv_heads=8,
                                  head_dim=128, dtype="bf16", page_size=16, num_pages=32)
    planned = apply_pipeline(decode, "vyre-plan{device=h200}")
    assert 'hoist_loads = ["block_table", "v"]>' in str(planned)
    assert str(vx.parse_module(str(planned))) == str(planned)


@pytest.mark.parametrize("fields, message", [
    (dict(lanes=0), "lanes must be >= 1"),
    (dict(dim_parts=3), "dim_parts must be a power of two"),
    (dict(dim_chunk=6), "dim_chunk must be a power of two"),
    (dict(dim_chunk=0), "dim_chunk must be >= 1"),
    (dict(kv_splits=2, merge="none"), "merge must be none exactly when kv_splits is 1"),
    (dict(merge="kernel"), "merge must be none exactly when kv_splits is 1"),
    (dict(stage_bytes=-1), "stage_bytes must be >= 0"),
    (dict(interleave=("out",)), "interleave names scratch arrays"),
])
def test_invalid_plans_are_refused(fields, message):
    good = dict(device="h200", lanes=64, tile_size=16, kv_splits=1, merge="none",
                dim_parts=1, stage_bytes=0, unroll=32, interleave=())
    with pytest.raises(VerifyException, match=message):
        PlanAttr(**{**good, **fields})


def test_no_pass_module_imports_another():
    for path in PASSES.glob("*.py"):
        if path.name == "__init__.py":
            continue
        assert not re.search(r"vyre_xdsl\.passes\.\w", path.read_text()), path.name
