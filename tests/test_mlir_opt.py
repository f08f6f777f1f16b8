"""Upstream MLIR 22 accepts what vyre-to-gpu makes, at every optimisation
level, in custom and in generic form, for both decoders, on shapes chosen so
that each of `default`'s passes fires (and the test checks that it did:
a shape that no longer makes its pass fire fails here, so pick another).

`default` is lowered for the generic profile (what vx.lower_to_gpu gives
without a device), for lavapipe (what the Vulkan tests run on) and for the
H200, where every pass has room to fire (shuffles across lanes, 48 KiB of
workgroup memory)."""

from __future__ import annotations

import pytest
from xdsl.dialects import memref
from xdsl.dialects.builtin import IntegerAttr, ModuleOp

import vyre_xdsl as vx
from requirements import assert_mlir_opt_accepts, needs_mlir_opt
from vyre_xdsl.dialects.gpu_shuffle import ShuffleOp
from vyre_xdsl.kernel_info import program_info

WORKGROUP = 3  # memory space of workgroup arrays (docs/lowered-ir.md)


def causal(q, kv):
    return kv <= q


def soft_cap(s, q, kv, h):
    return 30.0 * vx.tanh(s / 30.0)


# name -> (vyre module builder, the passes `default` on the H200 must show)
CASES = {
    # one workgroup of short rows: each row over two lanes, added by gpu.shuffle
    "fa2-67x24-t16": (
        lambda: vx.flash_attention_2(seq_len=67, head_dim=24, tile_size=16),
        {"vyre-split-head-dim"},
    ),
    # GQA on 17408 rows (> 264 workgroups of 64) of 128 dims: 128-lane
    # workgroups, staged tiles, rows over two lanes
    "fa2-gqa8x2-2176x128-t32": (
        lambda: vx.flash_attention_2(
            seq_len=2176, head_dim=128, num_heads=8, num_kv_heads=2, tile_size=32
        ),
        {"vyre-resize-workgroup", "vyre-stage-kv-tiles", "vyre-split-head-dim"},
    ),
    # few rows, many tiles: splits merged in workgroup memory ...
    "fa2-256x4-t8": (
        lambda: vx.flash_attention_2(seq_len=256, head_dim=4, tile_size=8),
        {"vyre-split-kv"},
    ),
    # ... or, fewer still, by a kernel of their own
    "fa2-40x4-t8": (
        lambda: vx.flash_attention_2(seq_len=40, head_dim=4, tile_size=8),
        {"vyre-split-kv"},
    ),
    # a small grid of long rows that cannot be split (66 dims): the query
    # row kept in workgroup memory
    "fa2-causal-64x66-t16": (
        lambda: vx.flash_attention_2(seq_len=64, head_dim=66, tile_size=16, mask_mod=causal),
        {"vyre-stage-kv-tiles", "vyre-interleave-scratch"},
    ),
    "flex-gqa4x2-64x8-t16": (
        lambda: vx.flash_attention_2(
            seq_len=64, head_dim=8, num_heads=4, num_kv_heads=2, tile_size=16,
            mask_mod=causal, score_mod=soft_cap,
        ),
        {"vyre-stage-kv-tiles", "vyre-split-head-dim"},
    ),
    # causal over three query blocks a head: the heaviest blocks start first
    "fa2-causal-3x192x8-t16": (
        lambda: vx.flash_attention_2(seq_len=192, head_dim=8, num_heads=3, tile_size=16,
                                     mask_mod=causal),
        {"heavy-first"},
    ),
    # GQA decode with run-time lengths: rows of 128 over two lanes, their
    # splits merged by a kernel
    "gqa-decode-kv_lens-3x8/2-200x128": (
        lambda: vx.flash_attention_2(seq_len=1, kv_len=200, batch=3, num_heads=8,
                                     num_kv_heads=2, head_dim=128, kv_lens=True),
        {"vyre-split-kv", "vyre-split-head-dim"},
    ),
    # MLA: a program of absorbing, attention (split, merged by a kernel) and
    # projecting kernels
    "mla-70-3-4-5-2": (
        lambda: vx.mla_decode(
            seq_len=70, num_heads=3, head_dim=4, kv_lora_rank=5, qk_rope_head_dim=2
        ),
        {"vyre-absorb-mla", "vyre-split-kv"},
    ),
    # latent rows of 128 over two lanes
    "mla-64-2-8-128-8": (
        lambda: vx.mla_decode(
            seq_len=64, num_heads=2, head_dim=8, kv_lora_rank=128, qk_rope_head_dim=8
        ),
        {"vyre-absorb-mla", "vyre-split-kv", "vyre-split-head-dim"},
    ),
    # bf16 GQA decode: K and V read eight halves (16 bytes) at a time; on
    # the H200 a key head's four query rows share an invocation, each row
    # over eight lanes in chunks of eight dims
    "gqa-decode-bf16-2x8/2-256x128": (
        lambda: vx.flash_attention_2(seq_len=1, kv_len=256, batch=2, num_heads=8,
                                     num_kv_heads=2, head_dim=128, dtype="bf16"),
        {"vyre-split-kv", "vyre-split-head-dim", "vyre-block-rows"},
    ),
    # ... with run-time lengths: the value loads issued at the top of each
    # tile (vyre-hoist-tile-loads)
    "gqa-decode-bf16-kv_lens-2x8/2-256x128": (
        lambda: vx.flash_attention_2(seq_len=1, kv_len=256, batch=2, num_heads=8,
                                     num_kv_heads=2, head_dim=128, dtype="bf16",
                                     kv_lens=True),
        {"vyre-split-kv", "vyre-block-rows", "vyre-hoist-tile-loads"},
    ),
    # a batch of 4: each item of the projections takes a head's rows of
    # all four sequences
    "mla-batch4-64-2-8-16-4": (
        lambda: vx.mla_decode(
            seq_len=64, num_heads=2, head_dim=8, kv_lora_rank=16, qk_rope_head_dim=4, batch=4
        ),
        {"vyre-absorb-mla", "projection-rows"},
    ),
    # GQA decode whose merge kernel merges eight dims an invocation, reading
    # the splits' partials (temp buffers) as vectors
    "gqa-decode-256x16/4-512x128": (
        lambda: vx.flash_attention_2(seq_len=1, kv_len=512, batch=256, num_heads=16,
                                     num_kv_heads=4, head_dim=128),
        {"vyre-split-kv", "merge-dims", "temp-vectors"},
    ),
    # ... and one whose merge kernel merges each column in two teams, its
    # split kernel storing the partial rows as vectors
    "gqa-decode-64x16/4-512x128": (
        lambda: vx.flash_attention_2(seq_len=1, kv_len=512, batch=64, num_heads=16,
                                     num_kv_heads=4, head_dim=128),
        {"vyre-split-kv", "merge-teams", "temp-vectors", "temp-vector-stores"},
    ),
    # enough heads to leave the attention unsplit
    "mla-64-128-8-8-4": (
        lambda: vx.mla_decode(
            seq_len=64, num_heads=128, head_dim=8, kv_lora_rank=8, qk_rope_head_dim=4
        ),
        {"vyre-absorb-mla"},
    ),
}

# (optimize, device) of each lowering
LEVELS = {
    "none": ("none", None),
    "exact": ("exact", None),
    "default": ("default", None),
    "default-h200": ("default", "h200"),
    "default-lavapipe": ("default", "lavapipe"),
}


def workgroup_arrays(module: ModuleOp) -> set[str]:
    """The names of the workgroup arrays of `module`'s kernels."""
    return {
        op.memref.name_hint
        for op in module.walk()
        if isinstance(op, memref.AllocOp)
        and isinstance(space := op.memref.type.memory_space, IntegerAttr)
        and space.value.data == WORKGROUP
    }


def passes_seen(module: ModuleOp) -> set[str]:
    """The `default` passes whose marks lowered `module` bears."""
    arrays = workgroup_arrays(module)
    kernels = program_info(module).kernels
    marks = {
        "vyre-split-head-dim": any(isinstance(op, ShuffleOp) for op in module.walk()),
        # merged in workgroup memory, or by a kernel of their own
        "vyre-split-kv": "split_m" in arrays or any(k.name.endswith("_merge") for k in kernels),
        "vyre-stage-kv-tiles": "kv_tile" in arrays,
        # the query row left in workgroup memory, the accumulator promoted
        # (the seed's layout has both there)
        "vyre-interleave-scratch": "q_scratch" in arrays and "o_acc" not in arrays,
        "vyre-resize-workgroup": any(k.workgroup_size[0] != 64 for k in kernels),
        "vyre-absorb-mla": any(k.name.endswith("_absorb_query") for k in kernels),
        # vyre-absorb-mla{rows}: the projections' items over groups of sequences
        "projection-rows": any(r.name_hint == "seq_group" for op in module.walk()
                               for r in op.results),
        # a merge kernel of fewer invocations than output elements (the
        # buffer it writes besides the log-sum-exp: out, or MLA's o_lat)
        "merge-dims": any(k.name.endswith("_merge") and k.item_count < next(
            b.count for b in k.buffers if "_split_" not in b.name and b.name != "lse")
            for k in kernels),
        # vector stores of a temp buffer (vyre-vectorize-stores: a split's
        # partial rows)
        "temp-vector-stores": any(op.name == "vector.store" and any(
            b.name == op.operands[1].name_hint and b.access == "temp"
            for k in kernels for b in k.buffers) for op in module.walk()),
        # a merge kernel whose teams of lanes meet in workgroup memory
        "merge-teams": "merge_max" in arrays,
        # vector loads of a temp buffer (vyre-vectorize-loads)
        "temp-vectors": any(op.name == "vector.load" and any(
            b.name == op.operands[0].name_hint and b.access == "temp"
            for k in kernels for b in k.buffers) for op in module.walk()),
        # a second row's scratch (row_widening's copies)
        "vyre-block-rows": any(r.name_hint and r.name_hint.endswith("_row1")
                               for op in module.walk() for r in op.results),
        # a loop over tiles whose loads went to its top
        "vyre-hoist-tile-loads": any("vyre.hoisted_loads" in op.attributes
                                     for op in module.walk()),
        # vyre-inline-fragments{heavy_first}: the workgroups renumbered
        "heavy-first": any(r.name_hint == "heavy_first" for op in module.walk()
                           for r in op.results),
    }
    return {name for name, seen in marks.items() if seen}


@needs_mlir_opt
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", CASES)
def test_upstream_mlir_accepts_every_level(case, level):
    build, expected = CASES[case]
    optimize, device = LEVELS[level]
    lowered = vx.lower_to_gpu(build(), optimize=optimize, device=device)
    printed = assert_mlir_opt_accepts(lowered)
    assert printed.count("gpu.func @") == len(program_info(lowered).kernels)
    seen = passes_seen(lowered)
    if optimize != "default":
        assert seen == set(), f"{optimize} runs none of default's passes, but: {seen}"
    elif device == "h200":
        assert expected <= seen, f"{case}: expected {sorted(expected)} to fire, saw {sorted(seen)}"

