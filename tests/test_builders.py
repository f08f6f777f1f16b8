"""The builders, the lowering from Python, and upstream MLIR's verdict."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import arith, builtin, gpu, math, memref, scf

import vyre_xdsl as vx
from vyre_xdsl.dialects import vyre
from vyre_xdsl.kernel_info import kernel_info
from requirements import assert_mlir_opt_accepts, needs_mlir_opt

REPO = Path(__file__).resolve().parent.parent
# vector: vyre-vectorize-loads' loads (docs/lowered-ir.md)
LOWERED_DIALECTS = {"gpu", "arith", "scf", "math", "memref", "vector", "func", "builtin"}

FA2_SHAPES = [
    dict(seq_len=1, head_dim=1, tile_size=64),  # a single key, a single dim
    dict(seq_len=5, head_dim=3, tile_size=64),  # seq_len < tile_size
    dict(seq_len=130, head_dim=8, tile_size=64),  # ragged last tile (2 keys)
    dict(seq_len=128, head_dim=4, tile_size=32),  # exact tiles, 2 workgroups
    dict(seq_len=7, head_dim=2, tile_size=1),
]
MLA_SHAPES = [
    dict(seq_len=1, num_heads=1, head_dim=1, kv_lora_rank=1, qk_rope_head_dim=1),
    dict(seq_len=70, num_heads=3, head_dim=4, kv_lora_rank=5, qk_rope_head_dim=2),
    dict(seq_len=9, num_heads=2, head_dim=6, kv_lora_rank=3, qk_rope_head_dim=6, tile_size=4),
]


def skeleton_of(module: builtin.ModuleOp) -> vyre.TiledOnlineSoftmaxOp:
    (op,) = [op for op in module.walk() if isinstance(op, vyre.TiledOnlineSoftmaxOp)]
    return op


@pytest.mark.parametrize("shape", FA2_SHAPES, ids=str)
def test_flash_attention_2_declares_the_seed_program(shape):
    module = vx.flash_attention_2(**shape)
    module.verify()
    (kernel,) = [op for op in module.walk() if isinstance(op, vyre.KernelOp)]
    seq, dim = shape["seq_len"], shape["head_dim"]
    tile = min(shape["tile_size"], seq)  # a tile longer than the keys is one tile of them
    assert kernel.item_count.value.data == seq
    assert kernel.workgroup_size.value.data == 64
    buffers = {b.sym_name.data: b for b in kernel.buffers}
    assert list(buffers) == ["q", "k", "v", "out"]
    assert [b.binding.value.data for b in buffers.values()] == [0, 1, 2, 3]
    assert [b.is_output for b in buffers.values()] == [False, False, False, True]
    assert all(b.logical_shape == (seq, dim) for b in buffers.values())
    scratch = {s.sym_name.data: s.result.type.get_shape() for s in kernel.scratch_arrays}
    assert scratch == {
        "q_scratch": (64 * dim,),
        "score_tile": (64 * tile,),
        "o_acc": (64 * dim,),
    }
    skeleton = skeleton_of(module)
    assert skeleton.shape() == dict(
        item_count=seq,
        seq_len=seq,
        head_dim=dim,
        tile_size=tile,
        tile_count=-(-seq // tile),
    )


@pytest.mark.parametrize("shape", MLA_SHAPES, ids=str)
def test_mla_decode_declares_its_buffers(shape):
    module = vx.mla_decode(**shape)
    (kernel,) = [op for op in module.walk() if isinstance(op, vyre.KernelOp)]
    s, h, d = shape["seq_len"], shape["num_heads"], shape["head_dim"]
    r, p = shape["kv_lora_rank"], shape["qk_rope_head_dim"]
    shapes = {b.sym_name.data: b.logical_shape for b in kernel.buffers}
    assert shapes == {
        "q": (h, d),
        "kv_cache": (s, r),
        "kr_cache": (s, p),
        "w_uk": (r, h * d),
        "w_uv": (r, h * d),
        "out": (h, d),
    }
    assert skeleton_of(module).shape()["item_count"] == h


def test_both_decoders_share_the_skeleton_and_differ_in_fragments():
    fa2 = skeleton_of(vx.flash_attention_2(seq_len=64, head_dim=4))
    mla = skeleton_of(
        vx.mla_decode(seq_len=64, num_heads=2, head_dim=4, kv_lora_rank=2, qk_rope_head_dim=1)
    )
    assert type(fa2) is type(mla)
    # The recurrence is not in the builders' output: the fragments hold no
    # tile max (uno compare) and no rescale; they only fill and fold.
    for skeleton in (fa2, mla):
        for region in (skeleton.scores, skeleton.update):
            names = {op.name for op in region.walk()}
            assert "vyre.positive_denominator" not in names
            assert "vyre.flush_tiny" not in names
    # ...and the update fragments differ (MLA rescales o_acc in its own loop).
    assert str(fa2.update) != str(mla.update)


@pytest.mark.parametrize(
    "kwargs, parameter",
    [
        (dict(seq_len=0, head_dim=4), "seq_len must be > 0"),
        (dict(seq_len=4, head_dim=0), "head_dim must be > 0"),
        (dict(seq_len=4, head_dim=True), "head_dim must be a positive integer"),
        (dict(seq_len=4, head_dim=2.5), "head_dim must be a positive integer"),
        (dict(seq_len=4, head_dim=4, v_head_dim=0), "v_head_dim must be > 0"),
        (dict(seq_len=4, head_dim=4, tile_size=0), "tile_size must be > 0"),
        (dict(seq_len=-3, head_dim=4), "seq_len must be > 0"),
        (dict(seq_len=4.0, head_dim=4), "seq_len must be a positive integer"),
        (dict(seq_len=float("nan"), head_dim=4), "seq_len must be a positive integer"),
        (dict(seq_len=True, head_dim=4), "seq_len must be a positive integer"),
        (dict(seq_len=2**32, head_dim=1), "seq_len = 4294967296 does not fit in u32"),
        (dict(seq_len=2**20, head_dim=2**12), "seq_len (1048576) * head_dim (4096)"),
        (dict(seq_len=4, head_dim=2**26), "workgroup_size (64) * head_dim (67108864)"),
        (dict(seq_len=2**26, head_dim=4, tile_size=2**26), "workgroup_size (64) * tile_size"),
    ],
)
def test_flash_attention_2_rejects_bad_shapes(kwargs, parameter):
    # not preceded by a word character: head_dim is not v_head_dim
    with pytest.raises(vx.VyreError, match=rf"(?<!\w){re.escape(parameter)}"):
        vx.flash_attention_2(**kwargs)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(num_heads=0), "num_heads must be > 0"),
        (dict(kv_lora_rank=0), "kv_lora_rank must be > 0"),
        (dict(qk_rope_head_dim=0), "qk_rope_head_dim must be > 0"),
        (dict(qk_rope_head_dim=9), r"qk_rope_head_dim \(9\) must be <= head_dim \(8\)"),
        (dict(kv_lora_rank=2**16, num_heads=2**8, head_dim=2**8), "buffer w_uk"),
        (dict(seq_len=2**31, kv_lora_rank=4), "buffer kv_cache"),
    ],
)
def test_mla_decode_rejects_bad_shapes(change, message):
    shape = dict(seq_len=16, num_heads=2, head_dim=8, kv_lora_rank=4, qk_rope_head_dim=2)
    shape.update(change)
    with pytest.raises(vx.VyreError, match=message):
        vx.mla_decode(**shape)


def test_vyre_error_is_a_value_error():
    assert issubclass(vx.VyreError, ValueError)


def test_a_fragment_reading_an_undeclared_buffer_is_an_error():
    def scores(f):
        f.buffer("keys")

    with pytest.raises(vx.VyreError, match="does not declare; declared buffers: q, out"):
        vx.tiled_online_softmax(
            "broken",
            [vx.Buffer("q", (4, 2)), vx.Buffer("out", (4, 2), "write")],
            item_count=4,
            seq_len=4,
            head_dim=2,
            tile_size=2,
            scores=scores,
            update=lambda f: None,
        )


def test_printed_vyre_ir_parses_back_identically():
    module = vx.mla_decode(seq_len=33, num_heads=2, head_dim=3, kv_lora_rank=2, qk_rope_head_dim=1)
    text = str(module)
    again = vx.parse_module(text)
    assert str(again) == text


def test_parse_module_reports_located_errors():
    with pytest.raises(vx.VyreError, match=r"bad\.mlir:1:\d+"):
        vx.parse_module("vyre.kernel @k items x", "bad.mlir")


@pytest.mark.parametrize("build", [
    lambda: vx.flash_attention_2(seq_len=77, head_dim=5, tile_size=16),
    lambda: vx.mla_decode(seq_len=45, num_heads=5, head_dim=6, kv_lora_rank=3, qk_rope_head_dim=2, tile_size=8),
], ids=["fa2", "mla"])
@pytest.mark.parametrize("optimize", ["none", "exact", "default"])
def test_lower_to_gpu_leaves_only_upstream_dialects(build, optimize):
    module = build()
    before = str(module)
    lowered = vx.lower_to_gpu(module, optimize=optimize)
    assert str(module) == before, "lower_to_gpu must not modify its input"
    lowered.verify()
    dialects = {op.name.split(".")[0] for op in lowered.walk()}
    assert dialects <= LOWERED_DIALECTS, dialects - LOWERED_DIALECTS
    shared = [op for op in lowered.walk() if isinstance(op, memref.AllocOp)]
    private = [op for op in lowered.walk() if isinstance(op, memref.AllocaOp)]
    if optimize == "none":  # the seed's layout: all three scratch arrays shared
        assert len(shared) == 3 and not private
        assert all(a.memref.type.memory_space == builtin.IntegerAttr(3, 64) for a in shared)
    else:  # each lane's slice became private
        # (at default, MLA's latent vectors are temp buffers of its program)
        expected = ["o_acc", "q_scratch", "score_tile"]
        assert sorted(a.memref.name_hint for a in private) == sorted(expected)
        assert not shared
    kinds = {type(op) for op in lowered.walk()}
    assert {gpu.GlobalIdOp, gpu.ThreadIdOp, scf.ForOp, math.ExpOp, arith.SelectOp} <= kinds
    assert "gpu.container_module" in lowered.attributes


def test_kernel_info_describes_the_launch():
    info = kernel_info(vx.lower_to_gpu(vx.flash_attention_2(seq_len=130, head_dim=2)))
    assert info.name == "flash_attention_2"
    assert [(b.name, b.binding, b.access, b.shape) for b in info.buffers] == [
        ("q", 0, "read", (130, 2)),
        ("k", 1, "read", (130, 2)),
        ("v", 2, "read", (130, 2)),
        ("out", 3, "write", (130, 2)),
    ]
    assert info.item_count == 130
    assert info.workgroup_size == (64, 1, 1)
    assert info.grid_size == (3, 1, 1)


def test_lower_to_gpu_rejects_lowered_or_foreign_input():
    lowered = vx.lower_to_gpu(vx.flash_attention_2(seq_len=4, head_dim=2))
    with pytest.raises(vx.VyreError, match="may already be lowered"):
        vx.lower_to_gpu(lowered)
    with pytest.raises(vx.VyreError, match="expected an xdsl ModuleOp"):
        vx.lower_to_gpu("not a module")


def test_lowered_kernel_computes_the_oracle():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((70, 3), dtype=np.float32) for _ in range(3))
    out = vx.run(vx.flash_attention_2(seq_len=70, head_dim=3, tile_size=16), {"q": q, "k": k, "v": v})
    np.testing.assert_array_equal(out["out"], vx.reference.flash_attention_2(q, k, v, tile_size=16))


@pytest.mark.parametrize("build", [
    lambda: vx.flash_attention_2(seq_len=1000, head_dim=24, tile_size=48),
    lambda: vx.flash_attention_2(seq_len=3, head_dim=1, tile_size=64),
    lambda: vx.mla_decode(seq_len=301, num_heads=7, head_dim=12, kv_lora_rank=9, qk_rope_head_dim=5, tile_size=32),
], ids=["fa2-1000x24", "fa2-3x1", "mla-301"])
@needs_mlir_opt
def test_upstream_mlir_accepts_the_lowered_ir(build):
    printed = assert_mlir_opt_accepts(vx.lower_to_gpu(build()))
    assert "gpu.func" in printed and " kernel" in printed


def test_xdsl_opt_knows_vyre_through_the_universe_entry_point():
    result = subprocess.run(
        ["xdsl-opt", str(REPO / "examples" / "flash_attention_2.mlir"), "-p", "vyre-to-gpu"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert '"gpu.func"' in result.stdout


@pytest.mark.parametrize("build", [
    lambda tile: vx.flash_attention_2(seq_len=9, head_dim=4, tile_size=tile),
    lambda tile: vx.mla_decode(9, 2, 4, 8, 4, tile_size=tile),
])
def test_a_tile_longer_than_the_keys_is_one_tile_of_them(build):
    """tile_size=2**20 over 9 keys: one tile of 9, the same sums, and no
    score slice of 2**20 floats a lane (it ran lavapipe's compiler out of
    memory)."""
    module = build(2**20)
    (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
    assert (op.shape()["tile_size"], op.shape()["tile_count"]) == (9, 1)
    assert str(module) == str(build(9))
    lowered = str(vx.lower_to_gpu(module))
    assert max(int(n) for n in re.findall(r"memref<(\d+)x", lowered)) < 2**12


def test_a_long_tile_matches_the_oracle_at_that_tile_size():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((9, 4)).astype(np.float32) for _ in range(3))
    module = vx.flash_attention_2(seq_len=9, head_dim=4, tile_size=2**20)
    out = vx.run(vx.lower_to_gpu(module, optimize="exact"), {"q": q, "k": k, "v": v})["out"]
    np.testing.assert_array_equal(out, vx.reference.flash_attention_2(q, k, v, tile_size=2**20))
