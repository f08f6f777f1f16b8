"""The plan's shared rows: where kv splits are merged by a kernel, the query
rows that read the same keys and values (GQA's query heads of one key head)
run in one invocation, each over more lanes, in shorter tiles
(tuning.shared_rows).  Checked bit for bit against the oracle in the
kernel's order on the interpreter, within tolerance on lavapipe, with dense,
ragged and paged caches in f32 and bf16, and in mlir-opt-22."""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import gpu

import vyre_xdsl as vx
from vyre_xdsl import tuning
from vyre_xdsl.compiler import apply_pipeline
from vyre_xdsl.device import H200
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.plan import PlanAttr
from vyre_xdsl.row_widening import loads_shared
from tests.requirements import assert_mlir_opt_accepts, needs_mlir_opt, needs_vulkan

BACKENDS = ["interpreter", pytest.param("vulkan", marks=needs_vulkan)]
HOST = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}
BATCH, HEADS, KV_HEADS, DIM, KEYS, PAGE = 2, 8, 2, 128, 256, 16
# a grid of more rows than tuning.FEW_SHARED_ITEMS (BATCH * HEADS is fewer)
MANY_HEADS, MANY_KV_HEADS = 32, 8


def _skeleton(module) -> vyre.TiledOnlineSoftmaxOp:
    (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
    return op


def _decode(dtype, cache="dense", heads=HEADS, kv_heads=KV_HEADS, return_lse=False):
    extra = {"dense": {}, "kv_lens": {"kv_lens": True},
             "paged": {"page_size": PAGE, "num_pages": BATCH * KEYS // PAGE}}[cache]
    return vx.flash_attention_2(seq_len=1, kv_len=KEYS, batch=BATCH, num_heads=heads,
                                num_kv_heads=kv_heads, head_dim=DIM, dtype=dtype,
                                return_lse=return_lse, **extra)


def _plan(module) -> PlanAttr:
    return _skeleton(apply_pipeline(module.clone(), "vyre-plan{device=h200}")).attributes[
        "vyre.plan"]


def _inputs(dtype, cache, rng, heads=HEADS, kv_heads=KV_HEADS):
    host = HOST[dtype]
    q = rng.standard_normal((BATCH, heads, 1, DIM)).astype(host)
    pages = BATCH * KEYS // PAGE
    shape = (pages, PAGE, kv_heads, DIM) if cache == "paged" else (BATCH, kv_heads, KEYS, DIM)
    k, v = (rng.standard_normal(shape).astype(host) for _ in range(2))
    arrays = {"q": q, "k": k, "v": v}
    if cache != "dense":
        arrays["kv_lens"] = np.array([KEYS - 37, 90], np.int32)  # a last short tile each
    if cache == "paged":
        arrays["block_table"] = rng.permutation(pages).astype(np.int32).reshape(BATCH, -1)
    return arrays


@pytest.mark.parametrize("cache", ["dense", "kv_lens", "paged"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("many", [False, True])
def test_a_key_heads_query_rows_share_an_invocation(dtype, cache, many):
    # few rows (batch 1's query heads): fewer rows an invocation, each over
    # more lanes
    heads = {"heads": MANY_HEADS, "kv_heads": MANY_KV_HEADS} if many else {}
    rows, dims = ((tuning.SHARED_ROWS, tuning.SHARED_ROW_DIMS) if many else
                  (tuning.FEW_SHARED_ROWS, tuning.FEW_SHARED_ROW_DIMS))
    plan = _plan(_decode(dtype, cache, **heads))
    assert (plan.merge.value, plan.rows, plan.dim_parts, plan.tile_size) == (
        "kernel", rows, DIM // dims, 4)  # 4: 64 splits of 256
    assert plan.dim_chunk == (8 if dtype == "bf16" else 4)


# the few rows' plan takes 16 lanes a row, more than lavapipe's subgroups
@pytest.mark.parametrize("many, backend", [
    (False, "interpreter"), (True, "interpreter"),
    pytest.param(True, "vulkan", marks=needs_vulkan)])
@pytest.mark.parametrize("cache", ["dense", "kv_lens", "paged"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_shared_rows_match_the_oracle_in_the_kernels_order(dtype, cache, many, backend):
    heads = {"heads": MANY_HEADS, "kv_heads": MANY_KV_HEADS} if many else {}
    module = _decode(dtype, cache, **heads)
    plan = _plan(module)
    assert plan.rows == (tuning.SHARED_ROWS if many else tuning.FEW_SHARED_ROWS)
    arrays = _inputs(dtype, cache, np.random.default_rng(11), **heads)
    lowered = vx.lower_to_gpu(module, device="h200")
    got = vx.run(lowered, arrays, backend=backend)["out"]
    paging = {"kv_lens": arrays.get("kv_lens"), "block_table": arrays.get("block_table"),
              "page_size": PAGE if cache == "paged" else None,
              "kv_len": KEYS if cache != "dense" else None}
    want = vx.reference.flash_attention_2(
        arrays["q"], arrays["k"], arrays["v"], tile_size=plan.tile_size,
        kv_splits=plan.kv_splits, merge_teams=plan.merge_teams, dim_parts=plan.dim_parts,
        dim_chunk=plan.dim_chunk,
        dtype=dtype, **{key: value for key, value in paging.items() if value is not None})
    if backend == "interpreter":
        assert got.tobytes() == want.tobytes()
    else:  # the driver may contract or reorder f32 operations
        scale = float(np.max(np.abs(want.astype(np.float32))))
        half_ulp = 2.0**-8 if dtype == "bf16" else 0.0
        assert float(np.max(np.abs(got.astype(np.float32) - want.astype(np.float32)))) <= (
            1e-5 + half_ulp) * scale


def test_few_rows_keep_four_an_invocation_where_subgroups_are_narrow():
    # 16 lanes a row need subgroups of 16 (lavapipe's have 8)
    narrow = replace(H200, shuffle_subgroup_size=8)
    plans = tuning.module_plans(_decode("bf16"), narrow)
    assert [(p.rows, p.dim_parts) for p in plans.values()] == [
        (tuning.SHARED_ROWS, DIM // tuning.SHARED_ROW_DIMS)]
    wide = tuning.module_plans(_decode("bf16"), H200)
    assert [(p.rows, p.dim_parts) for p in wide.values()] == [
        (tuning.FEW_SHARED_ROWS, DIM // tuning.FEW_SHARED_ROW_DIMS)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cache", ["dense", "kv_lens", "paged"])
def test_decode_with_the_log_sum_exp_takes_the_same_plan(cache, backend):
    # the merge kernel writes lse (vyre.merge_splits lse(...)), so a decode
    # that returns it is split, merged and shares its rows as one that does not
    heads = {"heads": MANY_HEADS, "kv_heads": MANY_KV_HEADS}
    module = _decode("bf16", cache, return_lse=True, **heads)
    plan = _plan(module)
    assert plan == _plan(_decode("bf16", cache, **heads))
    assert (plan.merge.value, plan.rows) == ("kernel", tuning.SHARED_ROWS)
    arrays = _inputs("bf16", cache, np.random.default_rng(12), **heads)
    arrays["q"][0, 1, 0, 5] = np.inf  # a row of clamped scores (lse -74)
    got = vx.run(vx.lower_to_gpu(module, device="h200"), arrays, backend=backend)
    paging = {"kv_lens": arrays.get("kv_lens"), "block_table": arrays.get("block_table"),
              "page_size": PAGE if cache == "paged" else None,
              "kv_len": KEYS if cache != "dense" else None}
    out, lse = vx.reference.flash_attention_2(
        arrays["q"], arrays["k"], arrays["v"], tile_size=plan.tile_size,
        kv_splits=plan.kv_splits, merge_teams=plan.merge_teams, dim_parts=plan.dim_parts,
        dim_chunk=plan.dim_chunk,
        dtype="bf16", return_lse=True,
        **{key: value for key, value in paging.items() if value is not None})
    if backend == "interpreter":
        assert got["out"].tobytes() == out.tobytes() and got["lse"].tobytes() == lse.tobytes()
    else:  # the driver's exp and log are not correctly rounded
        assert np.allclose(got["lse"], lse, rtol=1e-5, atol=1e-5)


def test_loads_are_shared_by_the_rows_of_one_key_head_only():
    op = _skeleton(_decode("f32"))
    for name, region in (("scores", op.scores), ("update", op.update)):
        item = op.region_arg(name, "item")
        assert [loads_shared(region.block, item, rows) for rows in (2, 4, 8)] == [
            True, True, False]  # four query heads a key head


def test_more_splits_for_rows_that_share_a_key_head_few_at_a_time():
    # GQA decode's four query heads a key head take splits of any length
    # (tuning.few_rows_share); MHA decode shares nothing, MQA decode's 16
    # heads and a prefill's query rows share with more rows than an
    # invocation takes (a staged tile serves them)
    assert tuning.few_rows_share(_skeleton(_decode("f32")))
    assert not tuning.few_rows_share(_skeleton(_decode("f32", heads=8, kv_heads=8)))
    assert not tuning.few_rows_share(_skeleton(_decode("f32", heads=16, kv_heads=1)))
    assert not tuning.few_rows_share(_skeleton(vx.flash_attention_2(256, DIM)))


@pytest.mark.parametrize("heads, kv_heads, rows", [(8, 8, 1), (8, 4, 2), (16, 2, 2), (32, 4, 4)])
def test_as_many_rows_as_share_a_key_head_up_to_shared_rows(heads, kv_heads, rows):
    assert _plan(_decode("f32", heads=heads, kv_heads=kv_heads)).rows == rows


def test_mla_latent_rows_keep_one_row_a_lane():
    # rows of 512 latent dims are longer than MORE_SPLITS_DIMS
    module = apply_pipeline(vx.mla_decode(4096, 16, 128, 512, 64), "vyre-absorb-mla{kernels=3}")
    plans = tuning.module_plans(module, H200)
    assert all(plan.rows == 1 for plan in plans.values())


@needs_mlir_opt
@pytest.mark.parametrize("level", ["none", "exact"])
def test_mlir_opt_accepts_shared_rows_at_every_level(level):
    # the plan's rewrites asked for by name: splits merged by a kernel, rows
    # over eight lanes in chunks of 8, four rows an invocation
    pipeline = ("vyre-split-kv{splits=4 merge=kernel},vyre-split-head-dim{parts=8 chunk=8},"
                f"vyre-block-rows{{rows=4}},vyre-to-gpu{{optimize={level}}}")
    lowered = vx.lower_to_gpu(_decode("bf16", "paged"), optimize=pipeline)
    assert "o_acc_row3" in str(lowered)
    assert_mlir_opt_accepts(lowered)


@needs_mlir_opt
@pytest.mark.parametrize("many", [False, True])
def test_mlir_opt_accepts_shared_rows(many):
    heads = {"heads": MANY_HEADS, "kv_heads": MANY_KV_HEADS} if many else {}
    lowered = vx.lower_to_gpu(_decode("bf16", "paged", **heads), device="h200")
    text = str(lowered)
    assert ("o_acc_row3" in text) == many and "o_acc_row1" in text  # rows 4 or 2
    assert_mlir_opt_accepts(lowered)


@needs_mlir_opt
@pytest.mark.parametrize("level", ["none", "exact", "default"])
def test_mlir_opt_accepts_the_merge_kernels_log_sum_exp_at_every_level(level):
    module = _decode("bf16", "paged", return_lse=True)
    if level == "default":
        lowered = vx.lower_to_gpu(module, device="h200")
    else:
        lowered = vx.lower_to_gpu(module, optimize=(
            f"vyre-split-kv{{splits=4 merge=kernel}},vyre-to-gpu{{optimize={level}}}"))
    (merge,) = [f for f in lowered.walk() if isinstance(f, gpu.FuncOp)
                and f.sym_name.data == "flash_attention_2_merge"]
    assert "math.log" in str(merge) and "%lse" in str(merge)
    assert_mlir_opt_accepts(lowered)


@pytest.mark.parametrize("cache, hoisted", [
    ("dense", ()), ("kv_lens", ("v",)), ("paged", ("block_table", "v"))])
def test_run_time_lengths_issue_a_tiles_value_loads_at_its_top(cache, hoisted):
    # the update fragment's buffers (tuning.update_buffers) go to
    # vyre-hoist-tile-loads where lengths come at run time
    module = _decode("bf16", cache, heads=MANY_HEADS, kv_heads=MANY_KV_HEADS)
    assert _plan(module).hoist_loads == hoisted
    lowered = vx.lower_to_gpu(module, device="h200")
    marked = [op for op in lowered.walk() if "vyre.hoisted_loads" in op.attributes]
    assert len(marked) == (1 if hoisted else 0)
    if hoisted:  # every value load of a tile comes before its first score's work
        ops = list(marked[0].body.block.ops)
        values = [i for i, op in enumerate(ops)
                  if op.name == "vector.load" and op.operands[0].name_hint == "v"]
        keys = [i for i, op in enumerate(ops) if op.name == "scf.for"
                or (op.name == "vector.load" and op.operands[0].name_hint == "k")]
        floats = [i for i, op in enumerate(ops) if op.name in ("arith.extf", "arith.mulf")]
        moved = [op for op in ops if op.name in ("vector.load", "memref.load")
                 and op.operands[0].name_hint in hoisted]
        assert len(moved) == marked[0].attributes["vyre.hoisted_loads"].value.data
        assert values and max(values) < min(keys + floats)


@needs_vulkan
@pytest.mark.parametrize("cache", ["kv_lens", "paged"])
def test_hoisted_value_loads_are_bit_identical(cache, monkeypatch):
    heads = {"heads": MANY_HEADS, "kv_heads": MANY_KV_HEADS}
    module = _decode("bf16", cache, **heads)
    arrays = _inputs("bf16", cache, np.random.default_rng(5), **heads)
    hoisted = vx.run(vx.lower_to_gpu(module, device="h200"), arrays, backend="vulkan")["out"]
    monkeypatch.setattr(tuning, "update_buffers", lambda op: ())
    in_place = vx.lower_to_gpu(module, device="h200")
    assert not any("vyre.hoisted_loads" in op.attributes for op in in_place.walk())
    assert vx.run(in_place, arrays, backend="vulkan")["out"].tobytes() == hoisted.tobytes()
