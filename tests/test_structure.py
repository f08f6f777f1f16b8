"""Invalid IR that xDSL accepts is refused before anything runs it: SSA
dominance, definitions inside a kernel, stores into read buffers, barriers
that some lanes never reach (vyre kernels, dialects/structure.py), and for
lowered kernels from a user also a grid short of the items, arrays of 2^32
elements or more, and a workgroup size the body was not written for
(vyre_xdsl/kernel_info.py).  The lit file tests/filecheck/verify/
structure_errors.mlir and tests/corpus/lowered_*.mlir hold the textual
cases; these are the Python paths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import gpu
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import vyre_xdsl as vx
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import program_info
from requirements import needs_vulkan

ROOT = Path(__file__).resolve().parent.parent
LOWERED = {
    "lowered_grid_short_of_items": "fewer than its 100 items",
    "lowered_alloc_2_pow_32": "of 4294967296 elements",
    "lowered_alloca_2_pow_32_plus_1": "of 4294967297 elements",
    "lowered_store_to_read_buffer": "writes buffer 'a', which is declared read",
    "lowered_use_before_definition": "uses a value before it is defined",
    "lowered_self_use": "uses its own result",
    "lowered_func_inside_kernel": "'func.func' defined inside kernel @k",
    "lowered_workgroup_size_mismatch": "lane 127 (the workgroup has 128 lanes",
}


@pytest.mark.parametrize("name", list(LOWERED))
@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_vx_run_refuses_invalid_lowered_kernels(name, backend):
    """The module is parsed without the checks of parse_module where it can
    be (plain xDSL), so vx.run's own loader must refuse it."""
    text = (ROOT / "tests" / "corpus" / f"{name}.mlir").read_text()
    module = Parser(vx.make_context(), text, name).parse_module()
    inputs = {"a": np.zeros(128, np.float32)}
    with pytest.raises(VyreError) as info:
        vx.run(module, inputs, backend=backend)
    assert LOWERED[name] in str(info.value), str(info.value)


@pytest.mark.parametrize("name", ["lowered_workgroup_size_mismatch", "lowered_store_to_read_buffer"])
def test_vyre_run_refuses_invalid_lowered_kernels(name):
    from test_errors import _vyre_run

    code, out, err = _vyre_run([str(ROOT / "tests" / "corpus" / f"{name}.mlir"), "--random",
                                "--backend", "interpreter"])
    assert code == 1 and LOWERED[name] in err, err
    assert "Traceback" not in err


def _kernel(items=64, scores=None):
    def noop(f):
        pass

    return vx.tiled_online_softmax(
        "k", [vx.Buffer("q", (items, 2)), vx.Buffer("out", (items, 2), "write")],
        item_count=items, seq_len=4, head_dim=2, tile_size=2,
        scores=scores or noop, update=noop)


def test_a_fragment_storing_into_a_read_buffer_is_refused():
    with pytest.raises(VyreError, match="writes buffer 'q', which is declared read"):
        _kernel(scores=lambda f: f.store(f.f32(0.0), f.buffer("q"), 0))


@pytest.mark.parametrize("items, message", [
    (100, "last workgroup has lanes without an item"),
    (64, None),  # every lane runs an item: the barrier is fine
])
def test_a_barrier_in_a_fragment_needs_every_lane(items, message):
    def scores(f):
        f.emit(gpu.BarrierOp())

    if message is None:
        _kernel(items, scores)
        return
    with pytest.raises(VyreError, match=message):
        _kernel(items, scores)


def test_a_barrier_under_a_branch_on_the_lane_is_refused():
    def scores(f):
        f.if_then(f.cmpi(f.lane, f.index(32), "ult"), lambda b: b.emit(gpu.BarrierOp()))

    with pytest.raises(VyreError, match="under an 'scf.if' whose condition"):
        _kernel(64, scores)


def test_dominance_is_a_verifier_error_of_the_kernel_in_plain_xdsl():
    """Through xdsl-opt or xDSL's Parser (no vyre-opt parser), the vyre.kernel
    verifier itself refuses a use before its definition."""
    text = """builtin.module {
  vyre.kernel @k items 64 workgroup_size 64 {
    %q = vyre.buffer "q" binding 0 read [64, 2] : memref<128xf32>
    %y = arith.addf %x, %x : f32
    %x = arith.constant 1.0 : f32
  }
}"""
    module = Parser(vx.make_context(), text).parse_module()
    with pytest.raises(VerifyException, match="uses a value before it is defined"):
        module.verify()


@pytest.mark.parametrize("optimize", ["none", "exact", "default"])
@pytest.mark.parametrize("make", [
    lambda: vx.flash_attention_2(seq_len=100, head_dim=16, tile_size=32),
    lambda: vx.flash_attention_2(seq_len=67, head_dim=24, tile_size=16, num_heads=2,
                                 mask_mod=lambda q, kv: kv <= q),
    lambda: vx.flash_attention_2(seq_len=300, head_dim=64, num_heads=4, num_kv_heads=2,
                                 score_mod=lambda s, q, kv, h: s - 0.1 * abs(q - kv)),
    lambda: vx.mla_decode(seq_len=1000, num_heads=8, head_dim=64, kv_lora_rank=32,
                          qk_rope_head_dim=16),
    lambda: vx.mla_decode(seq_len=256, num_heads=128, head_dim=128, kv_lora_rank=512,
                          qk_rope_head_dim=64),
], ids=["fa2", "fa2-causal-heads", "fa2-alibi-gqa", "mla", "mla-128-heads"])
def test_every_kernel_the_compiler_makes_passes_the_checks(make, optimize):
    """No false alarm: the structural checks accept what the lowering makes
    (split, staged, resized, retiled, dims over lanes, programs)."""
    info = program_info(vx.lower_to_gpu(make(), optimize=optimize))
    assert info.kernels
