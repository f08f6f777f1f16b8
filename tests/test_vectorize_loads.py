"""vyre-vectorize-loads: vector loads of neighbouring read-only elements,
bit-identical results, and clear errors where a vector load cannot be
emitted or run."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl import reference
from vyre_xdsl.compiler import parse_module
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import kernel_info
from vyre_xdsl.spirv import emit_spirv
from tests.requirements import assert_spirv_valid, needs_val, needs_vulkan


def _ops(module, name: str) -> list:
    return [op for op in module.walk() if op.name == name]


def _loaded_buffers(module, name: str) -> set[str]:
    return {op.operands[0].name_hint for op in _ops(module, name)}


def test_fa2_reads_q_k_v_as_vectors():
    # 100 rows: a partial workgroup, so K and V are not staged in workgroup
    # memory and every lane reads them from the buffers.
    lowered = vx.lower_to_gpu(vx.flash_attention_2(100, 64), optimize="exact")
    assert _loaded_buffers(lowered, "vector.load") == {"q", "k", "v"}
    assert not {"q", "k", "v"} & _loaded_buffers(lowered, "memref.load")


def test_unaligned_rows_stay_scalar():
    # head_dim 6: row t starts at 6t, not a multiple of 4 for odd t.
    lowered = vx.lower_to_gpu(vx.flash_attention_2(40, 6), optimize="exact")
    assert not _ops(lowered, "vector.load")


@pytest.mark.parametrize(
    "build",
    [
        lambda: vx.flash_attention_2(100, 16, 16),
        lambda: vx.flash_attention_2(70, 8, 32, num_heads=4, num_kv_heads=2),
        lambda: vx.flash_attention_2(
            96, 12, 32, mask_mod=lambda q, kv: kv <= q, score_mod=lambda s, q, kv: s * 0.5
        ),
        lambda: vx.mla_decode(40, 4, 8, 12, 4, tile_size=16),
    ],
    ids=["fa2", "gqa", "masked", "mla"],
)
def test_exact_level_is_bit_identical_to_the_seed_layout(build):
    module = build()
    rng = np.random.default_rng(7)
    info = kernel_info(vx.lower_to_gpu(module, optimize="none"))
    inputs = {
        b.name: rng.standard_normal(b.shape).astype(np.float32)
        for b in info.buffers if not b.is_output
    }
    seed = vx.run(vx.lower_to_gpu(module, optimize="none"), inputs, backend="interpreter")
    exact = vx.lower_to_gpu(module, optimize="exact")
    assert _ops(exact, "vector.load")
    got = vx.run(exact, inputs, backend="interpreter")
    np.testing.assert_array_equal(got["out"].view(np.uint32), seed["out"].view(np.uint32))


def test_fa2_vectorised_matches_oracle_bit_exactly_with_nan_and_inf():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((64, 8)).astype(np.float32) for _ in range(3))
    q[5, 2] = np.nan
    k[9, :] = np.inf
    v[11, 3] = -np.inf
    got = vx.run(vx.flash_attention_2(64, 8, 16), {"q": q, "k": k, "v": v},
                 backend="interpreter")["out"]
    want = reference.flash_attention_2(q, k, v, tile_size=16)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


_SKEWED = """
builtin.module attributes {gpu.container_module} {
  "gpu.module"() <{sym_name = "skewed"}> ({
    "gpu.func"() <{function_type = (memref<68xf32>, memref<64xf32>) -> (), kernel}> ({
    ^bb0(%k: memref<68xf32>, %out: memref<64xf32>):
      %row = "gpu.global_id"() <{dimension = #gpu<dim x>}> : () -> index
      %c4 = arith.constant 4 : index
      %at = arith.muli %row, %c4 : index
      %kv = vector.load %BUFFER[%at] : memref<68xf32>, vector<4xf32>
      %x = vector.extract %kv[0] : f32 from vector<4xf32>
      USE
      memref.store %x, %out[%row] : memref<64xf32>
      "gpu.return"() : () -> ()
    }) {sym_name = "skewed", gpu.kernel, vyre.launch = #vyre.launch<items = 16,
        workgroup = [64, 1, 1], grid = [1, 1, 1],
        buffers = [#vyre.buffer<name = "k", binding = 0, access = read, shape = [68], dtype = f32>,
                        #vyre.buffer<name = "out", binding = 1, access = write, shape = [64], dtype = f32>]>} : () -> ()
  }) : () -> ()
}
"""


def test_vector_load_of_a_written_buffer_is_refused_by_the_emitter():
    text = _SKEWED.replace("%BUFFER[%at] : memref<68xf32>", "%out[%at] : memref<64xf32>")
    with pytest.raises(VyreError, match="'out' is written by the kernel"):
        emit_spirv(parse_module(text.replace("USE", "")))


def test_a_vector_used_whole_is_refused_by_the_interpreter():
    module = parse_module(
        _SKEWED.replace("BUFFER", "k").replace(
            "USE", '"test.op"(%kv) : (vector<4xf32>) -> ()'
        )
    )
    with pytest.raises(VyreError, match="only extracts elements of a vector"):
        vx.run(module, {"k": np.zeros(68, np.float32)}, backend="interpreter")


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_temp_buffers_a_kernel_only_reads_are_read_as_vectors(backend, tmp_path):
    # The MLA program's last kernel reads o_lat, which the attention wrote:
    # as vectors, with every bit of the oracle's program order.
    args = dict(seq_len=64, num_heads=2, head_dim=16, kv_lora_rank=64, qk_rope_head_dim=16,
                batch=4)
    lowered = vx.lower_to_gpu(vx.mla_decode_program(**args, rows=2), optimize="exact")
    project = next(f for f in _ops(lowered, "gpu.func") if f.sym_name.data.endswith("_project"))
    assert _loaded_buffers(project, "vector.load") >= {"o_lat"}
    assert "o_lat" not in _loaded_buffers(project, "memref.load")
    rng = np.random.default_rng(5)
    arrays = {"q": (4, 2, 16), "kv_cache": (4, 64, 64), "kr_cache": (4, 64, 16),
              "w_uk": (64, 32), "w_uv": (64, 32)}
    ins = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in arrays.items()}
    got = vx.run(lowered, ins, backend=backend)["out"]
    want = reference.mla_decode_program(*ins.values(), tile_size=64)
    if backend == "interpreter":
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    else:  # the driver's exp
        assert_spirv_valid(vx.compile_spirv(lowered), tmp_path)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@needs_vulkan
def test_vectorised_fa2_runs_on_vulkan_within_tolerance():
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal((250, 32)).astype(np.float32) for _ in range(3))
    lowered = vx.lower_to_gpu(vx.flash_attention_2(250, 32), optimize="exact")
    assert b"k_vec4" in emit_spirv(lowered)
    got = vx.run(lowered, {"q": q, "k": k, "v": v}, backend="vulkan")["out"]
    want = reference.flash_attention_2(q, k, v)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


STAGED = "vyre-stage-kv-tiles,vyre-to-gpu{optimize=exact}"


@needs_vulkan
@pytest.mark.parametrize("mods", [{}, dict(mask_mod=lambda q, kv: kv <= q)],
                         ids=["plain", "causal"])
def test_staged_tiles_are_read_as_vectors_bit_exactly(mods, tmp_path):
    from vyre_xdsl.spirv import emit_spirv_module

    module = vx.flash_attention_2(128, 16, 32, num_heads=2, **mods)
    lowered = vx.lower_to_gpu(module, optimize=STAGED)
    assert "kv_tile" in _loaded_buffers(lowered, "vector.load")
    binary = emit_spirv(lowered)
    (entry,) = emit_spirv_module(lowered).entries
    assert entry.workgroup_bytes == 32 * 16 * 4  # one tile, as 128 vec4
    rng = np.random.default_rng(12)
    q, k, v = (rng.standard_normal((2, 128, 16)).astype(np.float32) for _ in range(3))
    inputs = {"q": q, "k": k, "v": v}
    seed = vx.run(vx.lower_to_gpu(module, optimize="none"), inputs)["out"]
    np.testing.assert_array_equal(vx.run(lowered, inputs)["out"].view(np.uint32),
                                  seed.view(np.uint32))
    got = vx.run(lowered, inputs, backend="vulkan")["out"]
    np.testing.assert_allclose(got, seed, rtol=1e-5, atol=1e-6)


def _half_inputs(info, dtype: str, rng) -> dict[str, np.ndarray]:
    """Normal values, a subnormal and -0 in K, NaN and +-inf in a few
    elements of V (a few output dims)."""
    from vyre_xdsl.dtypes import numpy_dtype

    specials = {"k": [1e-6, -0.0, 1e-7], "v": [np.nan, np.inf, -np.inf]}
    inputs = {}
    for b in info.buffers:
        if b.is_output or b.is_temporary:
            continue
        values = rng.standard_normal(b.shape).astype(np.float32)
        if b.name in specials:
            values.reshape(-1)[[3, 40, 77]] = specials[b.name]
        inputs[b.name] = values.astype(numpy_dtype(dtype))
    return inputs


# seq_len 1 over 256 keys: rows of 64 dims on one lane (eight halves a load),
# then split over two lanes in chunks of four dims (four halves a load);
# each against the same pipeline with its loads left scalar
UNVECTORISED = "vyre-to-gpu{optimize=none},vyre-promote-scratch,vyre-unroll-jam,cse,dce"
HALF_PIPELINES = {
    "eights": ("exact", UNVECTORISED, "vector<8x"),
    "fours": ("vyre-split-head-dim{parts=2 chunk=4},vyre-to-gpu{optimize=exact}",
              "vyre-split-head-dim{parts=2 chunk=4}," + UNVECTORISED, "vector<4x"),
}


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("pipeline", HALF_PIPELINES)
@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_half_buffers_are_read_as_vectors_bit_exactly(dtype, pipeline, backend):
    module = vx.flash_attention_2(seq_len=1, kv_len=256, batch=2, num_heads=4,
                                  num_kv_heads=2, head_dim=64, dtype=dtype)
    vectorised, scalar, vector = HALF_PIPELINES[pipeline]
    lowered = vx.lower_to_gpu(module, optimize=vectorised)
    kv = ("k", "v")
    loads = [op for op in _ops(lowered, "vector.load") if op.operands[0].name_hint in kv]
    assert loads and all(str(op.result.type).startswith(vector) for op in loads)
    assert not [op for op in _ops(lowered, "memref.load") if op.operands[0].name_hint in kv]
    unvectorised = vx.lower_to_gpu(module, optimize=scalar)
    assert not _ops(unvectorised, "vector.load")
    inputs = _half_inputs(kernel_info(lowered), dtype, np.random.default_rng(5))
    want = vx.run(unvectorised, inputs, backend=backend)["out"]
    got = vx.run(lowered, inputs, backend=backend)["out"]
    assert np.isfinite(want.astype(np.float32)).mean() > 0.9
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@needs_val
def test_half_vector_loads_are_valid_spirv(tmp_path):
    module = vx.mla_decode(seq_len=64, num_heads=4, head_dim=16, kv_lora_rank=64,
                           qk_rope_head_dim=16, batch=2, dtype="bf16")
    lowered = vx.lower_to_gpu(module, optimize="exact")
    assert any("bf16" in str(op.result.type) for op in _ops(lowered, "vector.load"))
    assert_spirv_valid(vx.compile_spirv(lowered), tmp_path)


def test_a_vector_of_two_halves_is_refused_by_the_emitter():
    text = (_SKEWED.replace("BUFFER", "k").replace("USE", "")
            .replace("memref<68xf32>, vector<4xf32>", "memref<68xbf16>, vector<2xbf16>")
            .replace("%x = vector.extract %kv[0] : f32 from vector<4xf32>",
                     "%h = vector.extract %kv[0] : bf16 from vector<2xbf16>\n"
                     "      %x = arith.extf %h : bf16 to f32")
            .replace("(memref<68xf32>, memref<64xf32>)", "(memref<68xbf16>, memref<64xf32>)")
            .replace("%k: memref<68xf32>", "%k: memref<68xbf16>")
            .replace("shape = [68], dtype = f32", "shape = [68], dtype = bf16"))
    with pytest.raises(VyreError, match="vectors of 2 to 4 f32 or of 4 or 8 f16/bf16"):
        emit_spirv(parse_module(text))


@pytest.mark.parametrize("head_dim, widths", [(6, set()), (12, {4}), (16, {8})])
def test_half_rows_are_read_in_the_widest_aligned_vectors(head_dim, widths):
    # row t of q, k and v starts at head_dim * t: eights need rows of a
    # multiple of 8 halves, fours of 4; other rows stay scalar
    module = vx.flash_attention_2(40, head_dim, dtype="bf16")
    lowered = vx.lower_to_gpu(module, optimize="exact")
    halves = [op for op in _ops(lowered, "vector.load") if "bf16" in str(op.result.type)]
    assert {op.result.type.get_shape()[0] for op in halves} == widths
    inputs = _half_inputs(kernel_info(lowered), "bf16", np.random.default_rng(2))
    want = vx.run(vx.lower_to_gpu(module, optimize=UNVECTORISED), inputs, backend="interpreter")
    got = vx.run(lowered, inputs, backend="interpreter")
    np.testing.assert_array_equal(got["out"].view(np.uint16), want["out"].view(np.uint16))
