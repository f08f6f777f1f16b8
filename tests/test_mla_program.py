"""Programs of several kernels built by passes: MLA decode absorbed once per
head (vyre-absorb-mla{kernels=3}) and flash-decoding splits merged by a
kernel of their own (vyre-split-kv{merge=kernel}).

What is checked:
- the pass builds exactly `mla_decode_program`, and leaves other kernels;
- interpreter == `reference.mla_decode_program` bit for bit, unsplit and
  at the default's split (merged by a kernel);
- a merge in a kernel gives the bits of the merge in workgroup memory, for
  any split count up to the tile count (not only divisors of 64);
- within the absorbed tolerance (test_absorb_mla.TOL) of the seed oracle;
- lavapipe runs the default program within the Vulkan tolerance;
- fuzzed inputs (NaN, infinities, huge, subnormal): interpreter == oracle;
- merge=auto: a kernel merge only for few items without hooks;
- rows: an item of the projections computes several sequences' rows of
  its head, with the bits of one row an item (NaN and inf included), as
  many as the tuning says by default; a count that does not divide the
  batch is refused.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings

import vyre_xdsl as vx
from helpers import merge_teams_of
from requirements import needs_vulkan
from test_absorb_mla import (
    NAMES,
    assert_bit_exact,
    assert_near_seed,
    mla_cases,
    mla_inputs,
    seed_oracle,
)
from test_fuzz_numeric import SETTINGS, assert_close, assert_exact
from vyre_xdsl import reference, tuning
from vyre_xdsl.compiler import apply_pipeline, parse_module
from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import VyreError

PROGRAM_EXACT = "vyre-absorb-mla{kernels=3},vyre-to-gpu{optimize=exact}"


def kernels(module) -> list[tuple[str, int]]:
    return [
        (k.sym_name.data, k.item_count.value.data)
        for k in module.body.block.ops
        if isinstance(k, vyre.KernelOp)
    ]


def split_of(module) -> tuple[int, int]:
    """(tile_size, kv_splits) of the module's one skeleton."""
    (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
    return op.shape()["tile_size"], op.splits


def program_oracle(inputs, tile, splits=1, teams=1):
    return reference.mla_decode_program(
        *(inputs[n] for n in NAMES), tile_size=tile, kv_splits=splits, merge_teams=teams
    )


# The pass ------------------------------------------------------------------------


def test_program_has_three_kernels_and_two_temp_buffers():
    program = vx.mla_decode_program(8, 2, 4, 4, 2, 4)
    assert kernels(program) == [
        ("mla_decode_absorb_query", 8), ("mla_decode", 2), ("mla_decode_project", 8)
    ]
    temps = {
        b.sym_name.data: (b.binding.value.data, b.logical_shape)
        for b in program.walk()
        if isinstance(b, vyre.BufferOp) and b.access.data == "temp"
    }
    assert temps == {"q_lat": (6, (2, 4)), "o_lat": (7, (2, 4))}


@pytest.mark.parametrize("shape", [(8, 2, 4, 4, 2, 4), (70, 3, 8, 5, 3, 16)], ids=str)
def test_pass_turns_the_seed_into_the_program(shape):
    rewritten = apply_pipeline(vx.mla_decode(*shape), "vyre-absorb-mla{kernels=3}")
    assert str(rewritten) == str(vx.mla_decode_program(*shape))
    assert parse_module(str(rewritten)).is_structurally_equivalent(rewritten)


def test_pass_leaves_other_kernels_alone():
    fa2 = vx.flash_attention_2(64, 8, 16)
    assert str(apply_pipeline(fa2.clone(), "vyre-absorb-mla{kernels=3}")) == str(fa2)
    absorbed = vx.mla_decode_absorbed(8, 2, 4, 4, 2, 4)
    again = apply_pipeline(absorbed.clone(), "vyre-absorb-mla{kernels=3}")
    assert str(again) == str(absorbed)


@pytest.mark.parametrize("name", [5, "", "has space", "1st"])
def test_program_name_must_name_a_kernel(name):
    with pytest.raises(VyreError, match="must be a string of letters, digits and '_'"):
        vx.mla_decode_program(8, 2, 4, 4, 2, 4, name=name)


def test_kernel_count_must_be_one_or_three():
    with pytest.raises(VyreError, match="kernels must be 1 .* or 3"):
        apply_pipeline(vx.mla_decode(8, 2, 4, 4, 2, 4), "vyre-absorb-mla{kernels=2}")


# Numbers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape", [(1, 1, 1, 1, 1, 64), (10, 3, 4, 5, 2, 4), (3, 70, 2, 2, 1, 64)], ids=str
)
def test_unsplit_program_is_exact_with_its_oracle(shape):
    inputs = mla_inputs(*shape[:5])
    inputs["q"][0, 0] = np.nan  # head 0 is NaN, the others are not
    got = vx.run(vx.lower_to_gpu(vx.mla_decode(*shape), optimize=PROGRAM_EXACT), inputs)
    assert_bit_exact(got["out"], program_oracle(inputs, shape[5]), f"program {shape}")
    assert_near_seed(got["out"], seed_oracle(inputs, shape[5]), f"program {shape}")


@pytest.mark.parametrize("shape", [(64, 2, 8, 16, 4, 16), (90, 3, 4, 6, 2, 8)], ids=str)
def test_default_splits_the_program_and_merges_in_a_kernel(shape):
    module = vx.mla_decode(*shape)
    rewritten = apply_pipeline(
        module.clone(), "vyre-absorb-mla{kernels=3},vyre-retile,vyre-split-kv"
    )
    tile, splits = split_of(rewritten)
    assert splits > 1
    assert [name for name, _ in kernels(rewritten)] == [
        "mla_decode_absorb_query", "mla_decode", "mla_decode_merge", "mla_decode_project"
    ]
    inputs = mla_inputs(*shape[:5], seed=3)
    got = vx.run(module, inputs)["out"]  # optimize="default"
    want = program_oracle(inputs, tile, splits, merge_teams_of(rewritten))
    assert_bit_exact(got, want, f"default {shape}")
    assert_near_seed(got, seed_oracle(inputs, shape[5]), f"default {shape}")


@pytest.mark.parametrize("splits", [2, 3, 6])
def test_a_kernel_merge_has_the_bits_of_the_workgroup_merge(splits):
    seq, dim, tile = 48, 4, 8  # six tiles; 3 and 6 do not divide the workgroup
    rng = np.random.default_rng(splits)
    q, k, v = (rng.standard_normal((seq, dim)).astype(np.float32) for _ in range(3))
    inputs = {"q": q, "k": k, "v": v}
    module = vx.flash_attention_2(seq, dim, tile)
    in_kernel = vx.lower_to_gpu(
        module, optimize=f"vyre-split-kv{{splits={splits} merge=kernel}},"
                         "vyre-to-gpu{optimize=exact}"
    )
    got = vx.run(in_kernel, inputs)["out"]
    want = reference.flash_attention_2(q, k, v, tile_size=tile, kv_splits=splits)
    assert_bit_exact(got, want, f"{splits} splits merged by a kernel")
    if 64 % splits == 0 and (seq * splits) % 64 == 0:
        in_workgroup = vx.lower_to_gpu(
            module, optimize=f"vyre-split-kv{{splits={splits}}},vyre-to-gpu{{optimize=exact}}"
        )
        assert_bit_exact(vx.run(in_workgroup, inputs)["out"], got, "workgroup merge")


@needs_vulkan
def test_lavapipe_runs_the_default_program():

    shape = (256, 4, 16, 32, 8, 16)
    inputs = mla_inputs(*shape[:5], seed=5)
    lowered = vx.lower_to_gpu(vx.mla_decode(*shape))
    got = vx.run(lowered, inputs, backend="vulkan")["out"]
    program = apply_pipeline(
        vx.mla_decode(*shape), "vyre-absorb-mla{kernels=3},vyre-retile,vyre-split-kv"
    )
    tile, splits = split_of(program)
    want = program_oracle(inputs, tile, splits, merge_teams_of(program))
    assert_close(got, want, "vulkan mla program")
    assert_near_seed(got, seed_oracle(inputs, shape[5]), "vulkan mla program")


# rows of a head an item of the projections ------------------------------------------


def batched_inputs(batch: int, s: int, h: int, d: int, r: int, p: int, seed: int = 0):
    """mla_inputs for `batch` sequences, a NaN query element and an infinite
    weight among them."""
    rng = np.random.default_rng(seed)
    shapes = {"q": (batch, h, d), "kv_cache": (batch, s, r), "kr_cache": (batch, s, p),
              "w_uk": (r, h * d), "w_uv": (r, h * d)}
    inputs = {n: rng.standard_normal(shape).astype(np.float32) for n, shape in shapes.items()}
    inputs["q"][1, h - 1, 0] = np.nan
    inputs["w_uv"][r - 1, d] = np.inf
    return inputs


@pytest.mark.parametrize("rows", [1, 2, 4])
def test_projection_rows_keep_the_bits_of_one_row_an_item(rows):
    batch, shape = 4, (20, 3, 4, 6, 2, 8)
    inputs = batched_inputs(batch, *shape[:5])
    module = vx.mla_decode(*shape, batch=batch)
    lowered = vx.lower_to_gpu(module, optimize=f"vyre-absorb-mla{{kernels=3 rows={rows}}},"
                                                f"vyre-to-gpu{{optimize=exact}}")
    items = {name: count for name, count in kernels(
        apply_pipeline(module.clone(), f"vyre-absorb-mla{{kernels=3 rows={rows}}}"))}
    assert items["mla_decode_absorb_query"] == batch * 3 * 6 // rows
    assert items["mla_decode_project"] == batch * 3 * 4 // rows
    got = vx.run(lowered, inputs)["out"]
    assert np.isnan(got[1, 2]).all()  # the NaN query row
    assert_bit_exact(got, program_oracle(inputs, shape[5]), f"{rows} rows an item")


def test_default_projection_rows_are_the_tunings():
    assert [tuning.projection_rows(b) for b in (1, 2, 3, 6, 12, 32, 128)] == [
        1, 2, 1, 2, 4, 8, 8]
    for batch in (1, 6, 32):
        program = apply_pipeline(vx.mla_decode(8, 2, 4, 4, 2, 4, batch=batch),
                                 "vyre-absorb-mla{kernels=3}")
        rows = tuning.projection_rows(batch)
        assert kernels(program)[0] == ("mla_decode_absorb_query", batch * 2 * 4 // rows)


@pytest.mark.parametrize("rows", [0, -2, 3, 8, True, 2.0, "2", None])
def test_program_rows_must_divide_the_batch(rows):
    with pytest.raises(VyreError, match="rows must be|must divide the batch"):
        vx.mla_decode_program(8, 2, 4, 4, 2, 4, batch=4, rows=rows)


def test_program_rows_may_be_a_numpy_integer():
    assert str(vx.mla_decode_program(8, 2, 4, 4, 2, 4, batch=4, rows=np.int64(2))) == str(
        vx.mla_decode_program(8, 2, 4, 4, 2, 4, batch=4, rows=2))


def test_pass_rows_must_divide_each_kernels_batch():
    module = vx.mla_decode(8, 2, 4, 4, 2, 4, batch=2)
    with pytest.raises(VyreError, match=r"rows=4 must divide the batch \(2\)"):
        apply_pipeline(module.clone(), "vyre-absorb-mla{kernels=3 rows=4}")
    with pytest.raises(VyreError, match="is kernels=3's option"):
        apply_pipeline(module.clone(), "vyre-absorb-mla{rows=2}")


# merge=auto -----------------------------------------------------------------------


def merge_kernels(module) -> list[str]:
    return re.findall(r"vyre.kernel @(\w+_merge)", str(module))


def test_auto_merges_in_a_kernel_only_for_few_items_without_hooks():
    program = apply_pipeline(
        vx.mla_decode(4096, 16, 8, 8, 4), "vyre-absorb-mla{kernels=3},vyre-retile,vyre-split-kv"
    )
    assert merge_kernels(program) == ["mla_decode_merge"]
    assert split_of(program) == (16, 256)  # 16 heads x 256 splits = 4096 invocations
    # The hooks of the one-kernel absorbed form would run in every split.
    hooked = apply_pipeline(
        vx.mla_decode(4096, 16, 8, 8, 4), "vyre-absorb-mla,vyre-split-kv"
    )
    assert merge_kernels(hooked) == [] and split_of(hooked)[1] == 64
    # 512 rows reach 4096 invocations split 8 ways in their workgroups.
    rows = apply_pipeline(vx.flash_attention_2(512, 8), "vyre-split-kv")
    assert merge_kernels(rows) == [] and split_of(rows)[1] == 8
    forced = apply_pipeline(vx.flash_attention_2(512, 8), "vyre-split-kv{merge=kernel}")
    assert merge_kernels(forced) == ["flash_attention_2_merge"]


def test_unknown_merge_is_an_error():
    with pytest.raises(VyreError, match="merge must be one of auto, workgroup, kernel"):
        apply_pipeline(vx.flash_attention_2(64, 2, 16), "vyre-split-kv{merge=global}")


@settings(max_examples=60, **SETTINGS)
@given(case=mla_cases())
def test_fuzz_default_program_matches_its_oracle_bit_exactly(case, fuzz_stats):
    """NaN, +-inf, huge, subnormal (tests/test_fuzz_numeric.py's draws) through
    the default: the program, retiled and split as the default chooses."""
    shape, inputs = case
    program = apply_pipeline(
        vx.mla_decode(*shape), "vyre-absorb-mla{kernels=3},vyre-retile,vyre-split-kv"
    )
    tile, splits = split_of(program)
    out = vx.run(vx.mla_decode(*shape), inputs, backend="interpreter")["out"]
    fuzz_stats["numeric: mla program interpreter vs program oracle"] += 1
    want = program_oracle(inputs, tile, splits, merge_teams_of(program))
    assert_exact(out, want, f"mla program {shape}")
