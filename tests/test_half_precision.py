"""f16 and bf16 buffers (issue 17, items 1, 2 and 4 without tensor cores).

Inputs and outputs are half precision, everything the recurrence keeps is
f32: a half load is widened exactly (arith.extf), the output rounded once
to nearest even (arith.truncf).

What a half kernel computes, exactly: the bits of the same kernel with f32
buffers on the inputs' f32 values, rounded once to nearest even
(`test_half_kernel_is_the_f32_kernel_rounded_once`, on the interpreter and
on lavapipe, at every optimisation level).  So against the f32 oracle:

Declared tolerance: `|out - oracle_f32| <= ulp(oracle_f32) + 1e-5 *
max|oracle_f32|` for every element (vyre_xdsl.dtypes.ulp: the spacing of
the half type at the oracle's value).  The first term is the one rounding
(half an ulp, or a whole one where the executor's f32 value sits across a
rounding boundary from the oracle's); the second is the f32 kernels' own
allowance (README: optimize="default" within 1e-5 of the oracle relative
to max|out|; lavapipe's exp is not numpy's), which dominates only for
outputs near zero, where a half ulp is far below f32 noise.  Measured:
the interpreter at none/exact gives the rounded oracle bit for bit (<= 0.5
ulp); at default and on lavapipe >= 99.97% of the elements are within 1
ulp and the excess beyond it is <= 1.4e-7 * max|oracle| (FA2 512x64 and
2x256x128, f16 and bf16, on lavapipe).
"""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from requirements import (
    assert_mlir_opt_accepts,
    assert_spirv_valid,
    needs_mlir_opt,
    needs_val,
    needs_vulkan,
)
from vyre_xdsl.dtypes import distance, numpy_dtype, ulp
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import program_info
from vyre_xdsl.skeleton import Buffer, per_item_kernel
from xdsl.dialects.builtin import ModuleOp

HALVES = ("f16", "bf16")
LEVELS = ("none", "exact", "default")
ULP_TOLERANCE = 1.0  # the declared tolerance: ulps of the half type ...
F32_ALLOWANCE = 1e-5  # ... plus this times max|oracle| (the f32 kernels' own)


def _half(array: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(array, np.float32).astype(numpy_dtype(dtype))


def _fa2_inputs(dtype, shape_q, shape_kv, seed=0):
    rng = np.random.default_rng(seed)
    q = _half(rng.standard_normal(shape_q), dtype)
    k = _half(rng.standard_normal(shape_kv), dtype)
    v = _half(rng.standard_normal(shape_kv), dtype)
    return {"q": q, "k": k, "v": v}


def _mla_inputs(dtype, heads, seq, dim, rank, rope, seed=1):
    rng = np.random.default_rng(seed)
    arrays = {
        "q": rng.standard_normal((heads, dim)),
        "kv_cache": rng.standard_normal((seq, rank)),
        "kr_cache": rng.standard_normal((seq, rope)),
        "w_uk": 0.3 * rng.standard_normal((rank, heads * dim)),
        "w_uv": 0.3 * rng.standard_normal((rank, heads * dim)),
    }
    return {name: _half(a, dtype) for name, a in arrays.items()}


def _widened(arrays):
    return {name: a.astype(np.float32) for name, a in arrays.items()}


def ulps_off(out: np.ndarray, oracle_f32: np.ndarray, dtype: str) -> float:
    """The largest |out - oracle| in ulps of `dtype` at the f32 oracle
    (NaN where both are NaN counts as 0)."""
    with np.errstate(all="ignore"):
        error = distance(out, oracle_f32, dtype) / ulp(oracle_f32, dtype)
    return float(np.max(error))


def excess(out: np.ndarray, oracle_f32: np.ndarray, dtype: str) -> float:
    """The largest error beyond ULP_TOLERANCE ulps, relative to max|oracle|
    (<= 0 when every element is within the ulps)."""
    with np.errstate(all="ignore"):
        beyond = distance(out, oracle_f32, dtype) - ULP_TOLERANCE * ulp(oracle_f32, dtype)
    return float(np.max(beyond) / np.nanmax(np.abs(oracle_f32)))


def assert_within_tolerance(out, oracle_f32, dtype):
    """The declared tolerance (module docstring); NaN exactly where the oracle's."""
    assert out.dtype == numpy_dtype(dtype)
    assert out.shape == oracle_f32.shape
    assert np.array_equal(np.isnan(out.astype(np.float32)), np.isnan(oracle_f32))
    over = excess(out, oracle_f32, dtype)
    assert over <= F32_ALLOWANCE, (
        f"{ulps_off(out, oracle_f32, dtype)} ulps of {dtype} off the f32 oracle, "
        f"{over} * max|oracle| beyond {ULP_TOLERANCE} ulp"
    )


# builders and IR -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", HALVES)
def test_buffers_carry_the_dtype_and_loads_widen(dtype):
    m = vx.flash_attention_2(seq_len=16, head_dim=8, tile_size=8, dtype=dtype)
    text = str(m)
    assert text.count(f"memref<128x{dtype}>") >= 4  # q, k, v, out
    assert "xf32>" in text  # scratch stays f32
    lowered = vx.lower_to_gpu(m, optimize="none")
    body = str(lowered)
    loads = [line for line in body.splitlines()
             if "memref.load" in line and line.endswith(f"x{dtype}>")]
    assert body.count("arith.extf") == len(loads) == 3  # q, k, v
    assert body.count(f"arith.truncf") == 1  # the one write of the output
    assert f"arith.truncf %" in body and f"f32 to {dtype}" in body
    info = program_info(lowered)
    assert {b.name: b.dtype for b in info.buffers} == {n: dtype for n in ("q", "k", "v", "out")}


def test_f32_kernels_have_no_conversions():
    for m in (vx.flash_attention_2(seq_len=16, head_dim=8, tile_size=8),
              vx.mla_decode(20, 2, 8, 4, 4, tile_size=8)):
        for level in LEVELS:
            text = str(vx.lower_to_gpu(m, optimize=level))
            assert "extf" not in text and "truncf" not in text and "f16" not in text


@pytest.mark.parametrize("bad", ["fp16", "float16", np.float16, "F32", 16])
def test_bad_dtype_names_the_choices(bad):
    builds = (
        lambda: vx.flash_attention_2(seq_len=8, head_dim=4, dtype=bad),
        lambda: vx.mla_decode(8, 2, 4, 4, 2, dtype=bad),
        lambda: vx.Buffer("q", (4, 4), dtype=bad),
        lambda: vx.reference.flash_attention_2(*[np.zeros((4, 4), np.float32)] * 3, dtype=bad),
    )
    for build in builds:
        with pytest.raises(VyreError, match="'f32', 'f16', 'bf16'"):
            build()


def test_tiled_online_softmax_dtype_and_mixed_buffers():
    """A decoder of one's own: the kernel's dtype for the buffers that give
    none, a buffer's own otherwise; f.load widens, the output store rounds."""
    S, D = 12, 4

    def scores(f):
        def one(b, j, _):
            t = b.addi(f.tile_start, j)
            dot = b.load(f.buffer("k"), b.flat_index(t, D, b.index(0)))
            b.store(b.bounded_score(dot), f.score_tile, b.score_index(j))
            return []
        f.loop(0, f.tile_len, one)

    def update(f):
        def one(b, d, _):
            def step(b, j, acc):
                t = b.addi(f.tile_start, j)
                return [b.addf(acc[0], b.mulf(b.weight(j), b.load(f.buffer("v"), b.flat_index(t, D, d))))]
            (wv,) = b.loop(0, f.tile_len, step, [b.f32(0.0)])
            o = b.load(f.o_acc, b.o_index(d))
            b.store(b.addf(b.mulf(f.rescale, o), wv), f.o_acc, b.o_index(d))
            return []
        f.loop(0, D, one)

    m = vx.tiled_online_softmax(
        "mine", [Buffer("q", (S, D)), Buffer("k", (S, D), dtype="f32"), Buffer("v", (S, D)),
                 Buffer("out", (S, D), "write")],
        item_count=S, seq_len=S, head_dim=D, tile_size=4, scores=scores, update=update,
        dtype="bf16",
    )
    dtypes = {b.name: b.dtype for b in program_info(vx.lower_to_gpu(m, optimize="none")).buffers}
    assert dtypes == {"q": "bf16", "k": "f32", "v": "bf16", "out": "bf16"}
    rng = np.random.default_rng(3)
    inputs = {"q": _half(rng.standard_normal((S, D)), "bf16"),
              "k": rng.standard_normal((S, D)).astype(np.float32),
              "v": _half(rng.standard_normal((S, D)), "bf16")}
    out = vx.run(m, inputs)["out"]
    assert out.dtype == numpy_dtype("bf16") and np.isfinite(out.astype(np.float32)).all()
    with pytest.raises(VyreError, match="'f32', 'f16', 'bf16'"):
        vx.tiled_online_softmax("x", [Buffer("q", (S, D)), Buffer("out", (S, D), "write")],
                                item_count=S, seq_len=S, head_dim=D, scores=scores,
                                update=update, dtype="half")


def test_verifier_rejects_other_buffer_element_types():
    text = """
    vyre.kernel @k items 4 workgroup_size 64 {
      %q = vyre.buffer "q" binding 0 read [4, 2] : memref<8xf64>
    }
    """
    with pytest.raises(VyreError, match=r"f32, f16 or bf16 .*memref<8xf64>"):
        vx.parse_module(text)


def test_run_names_the_buffer_and_the_dtype():
    m = vx.flash_attention_2(seq_len=8, head_dim=4, tile_size=4, dtype="bf16")
    good = _fa2_inputs("bf16", (8, 4), (8, 4))
    bad = dict(good, k=good["k"].astype(np.float32))
    with pytest.raises(VyreError, match=r"input 'k' has dtype float32.*bfloat16.*ml_dtypes.bfloat16"):
        vx.run(m, bad)
    f16 = dict(good, v=good["v"].astype(np.float16))
    with pytest.raises(VyreError, match=r"input 'v' has dtype float16"):
        vx.run(m, f16)
    with pytest.raises(VyreError, match=r"q has dtype float32.*bf16 kernel"):
        vx.reference.flash_attention_2(*_widened(good).values(), tile_size=4, dtype="bf16")


# exact conversions ----------------------------------------------------------------------


def _special_f32() -> np.ndarray:
    """f32 values where rounding to f16 / bf16 is delicate, then random bits."""
    tiny = [2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-14, 2.0**-14 - 2.0**-25, 2.0**-133,
            2.0**-126, 1e-45, 65504, 65519.99, 65520, 65536, 3.4e38, 1 + 2.0**-11,
            1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 0.1, 1 / 3]
    values = np.array([*tiny, *(-np.array(tiny)), 0.0, -0.0, np.inf, -np.inf, np.nan],
                      dtype=np.float32)
    bits = np.random.default_rng(7).integers(0, 2**32, 3000, dtype=np.uint64)
    random = bits.astype(np.uint32).view(np.float32)
    # neighbours of the halfway points between half values
    halfway = np.array([0x38800000 + k * 0x1000 + d for k in range(64) for d in (-1, 0, 1)],
                       np.uint32).view(np.float32)
    return np.concatenate([values, random, halfway, np.float32(1.5) * halfway])


def _conversion_program(dtype: str, count: int) -> ModuleOp:
    """out_half[i] = truncf(x[i]); wide[i] = extf(h[i])."""

    def narrow(b, v, item):
        b.store(b.load(v["x"], item), v["narrow"], item)

    def widen(b, v, item):
        b.store(b.load(v["h"], item), v["wide"], item)

    return ModuleOp([
        per_item_kernel("narrow", [Buffer("x", (count,), dtype="f32"),
                                   Buffer("narrow", (count,), "write", dtype=dtype)],
                        count, narrow),
        per_item_kernel("widen", [Buffer("h", (65536,), binding=2, dtype=dtype),
                                  Buffer("wide", (65536,), "write", binding=3, dtype="f32")],
                        65536, widen),
    ])


def _check_conversions(dtype: str, backend: str) -> None:
    x = _special_f32()
    every_half = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(numpy_dtype(dtype))
    outs = vx.run(_conversion_program(dtype, x.size), {"x": x, "h": every_half},
                  backend=backend)
    expected = _half(x, dtype)
    narrow = outs["narrow"]
    nan = np.isnan(expected.astype(np.float32))
    assert np.array_equal(np.isnan(narrow.astype(np.float32)), nan)
    got_bits, want_bits = narrow.view(np.uint16), expected.view(np.uint16)
    bad = np.flatnonzero(got_bits != want_bits)  # NaN's bits too
    assert bad.size == 0, [(float(x[i]), hex(got_bits[i]), hex(want_bits[i])) for i in bad[:5]]
    wide = outs["wide"]
    want = every_half.astype(np.float32)
    assert np.array_equal(wide.view(np.uint32), want.view(np.uint32))  # NaN payloads too


@pytest.mark.parametrize("dtype", HALVES)
def test_interpreter_converts_exactly(dtype):
    _check_conversions(dtype, "interpreter")


@needs_vulkan
@pytest.mark.parametrize("dtype", HALVES)
def test_vulkan_converts_exactly(dtype):
    """The emitter's integer conversions (spirv/half.py): every f16/bf16 bit
    pattern widened, ties, subnormals, overflow, inf and NaN narrowed."""
    _check_conversions(dtype, "vulkan")


# decoders vs the oracle -----------------------------------------------------------------


FA2_CASES = {
    "plain": dict(seq_len=40, head_dim=8, tile_size=16),
    "gqa": dict(seq_len=24, head_dim=8, tile_size=8, num_heads=4, num_kv_heads=2),
    "masked": dict(seq_len=40, head_dim=8, tile_size=16,
                   mask_mod=lambda q, kv: kv <= q,
                   score_mod=lambda s, q, kv: 20.0 * vx.tanh(s / 20.0)),
}


def _fa2(case: str, dtype: str):
    params = dict(FA2_CASES[case])
    heads = params.get("num_heads", 1)
    kv_heads = params.get("num_kv_heads", heads)
    S, D = params["seq_len"], params["head_dim"]
    q_shape = (S, D) if heads == 1 else (heads, S, D)
    kv_shape = (S, D) if heads == 1 else (kv_heads, S, D)
    inputs = _fa2_inputs(dtype, q_shape, kv_shape)
    module = vx.flash_attention_2(**params, dtype=dtype)
    oracle_params = {k: params[k] for k in ("tile_size", "mask_mod", "score_mod") if k in params}
    oracle_f32 = vx.reference.flash_attention_2(*_widened(inputs).values(), **oracle_params)
    rounded = vx.reference.flash_attention_2(*inputs.values(), **oracle_params, dtype=dtype)
    return module, inputs, oracle_f32, rounded


MLA_SHAPE = (70, 4, 16, 16, 8)  # seq, heads, head_dim, rank, rope


def _mla(dtype: str):
    seq, heads, dim, rank, rope = MLA_SHAPE
    inputs = _mla_inputs(dtype, heads, seq, dim, rank, rope)
    module = vx.mla_decode(*MLA_SHAPE, tile_size=16, dtype=dtype)
    oracle_f32 = vx.reference.mla_decode(*_widened(inputs).values(), tile_size=16)
    rounded = vx.reference.mla_decode(*inputs.values(), tile_size=16, dtype=dtype)
    return module, inputs, oracle_f32, rounded


@pytest.mark.parametrize("dtype,top,gap,one", [("f16", 65504.0, 32.0, 2.0**-10),
                                               ("bf16", 2.0**128 - 2.0**120, 2.0**120, 2.0**-7)])
def test_ulp_and_distance_at_the_top_of_the_range(dtype, top, gap, one):
    """At the largest finite half an ulp is the gap below it (it was inf
    above it, so any output passed there); an output that overflows to inf
    where the oracle rounds to inf is at distance 0 (it was NaN or inf)."""
    half = numpy_dtype(dtype)
    oracle = np.array([top, np.inf, -np.inf, top + gap / 2, 1.0], np.float32)  # the tie: inf
    assert np.array_equal(ulp(oracle, dtype), [gap, gap, gap, gap, one])
    with np.errstate(over="ignore"):
        out = oracle.astype(half)
    assert np.array_equal(distance(out, oracle, dtype), np.zeros(5))
    wrong = np.array([0, top, np.inf, 0, 1], half)
    assert np.array_equal(distance(wrong, oracle, dtype) <= ulp(oracle, dtype),
                          [False, False, False, False, True])


def test_oracle_rounds_the_f32_result_once():
    for dtype in HALVES:
        _, inputs, oracle_f32, rounded = _fa2("plain", dtype)
        assert rounded.dtype == numpy_dtype(dtype)
        assert np.array_equal(rounded.view(np.uint16), _half(oracle_f32, dtype).view(np.uint16))
        assert ulps_off(rounded, oracle_f32, dtype) <= 0.5


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("case", sorted(FA2_CASES))
def test_fa2_interpreter(case, dtype):
    module, inputs, oracle_f32, rounded = _fa2(case, dtype)
    for level in LEVELS:
        out = vx.run(vx.lower_to_gpu(module, optimize=level), inputs)["out"]
        assert_within_tolerance(out, oracle_f32, dtype)
        if level != "default":  # the seed's order of operations: the oracle, bit for bit
            np.testing.assert_array_equal(out.view(np.uint16), rounded.view(np.uint16))


@pytest.mark.parametrize("dtype", HALVES)
def test_mla_interpreter(dtype):
    module, inputs, oracle_f32, rounded = _mla(dtype)
    for level in LEVELS:
        out = vx.run(vx.lower_to_gpu(module, optimize=level), inputs)["out"]
        assert_within_tolerance(out, oracle_f32, dtype)
        if level != "default":
            np.testing.assert_array_equal(out.view(np.uint16), rounded.view(np.uint16))


@pytest.mark.parametrize("dtype", HALVES)
def test_mla_default_is_the_absorbed_program_of_that_dtype(dtype):
    module, inputs, oracle_f32, _ = _mla(dtype)
    lowered = vx.lower_to_gpu(module)
    info = program_info(lowered)
    assert len(info.kernels) >= 3  # absorbed once per head
    dtypes = {b.name: b.dtype for b in info.buffers}
    assert all(dtypes[n] == dtype for n in ("q", "kv_cache", "kr_cache", "w_uk", "w_uv", "out"))
    assert dtypes["q_lat"] == dtypes["o_lat"] == "f32"
    program_oracle = vx.reference.mla_decode_program(*inputs.values(), tile_size=16, dtype=dtype)
    assert ulps_off(program_oracle, oracle_f32, dtype) <= ULP_TOLERANCE


@needs_vulkan
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("case", sorted(FA2_CASES))
def test_fa2_vulkan(case, dtype):
    module, inputs, oracle_f32, _ = _fa2(case, dtype)
    for level in ("none", "default"):
        lowered = vx.lower_to_gpu(module, optimize=level, device="vulkan")
        out = vx.run(lowered, inputs, backend="vulkan")["out"]
        assert_within_tolerance(out, oracle_f32, dtype)


@needs_vulkan
@pytest.mark.parametrize("dtype", HALVES)
def test_mla_vulkan(dtype):
    module, inputs, oracle_f32, _ = _mla(dtype)
    for level in ("none", "default"):
        lowered = vx.lower_to_gpu(module, optimize=level, device="vulkan")
        out = vx.run(lowered, inputs, backend="vulkan")["out"]
        assert_within_tolerance(out, oracle_f32, dtype)


@pytest.mark.parametrize("dtype", HALVES)
def test_nan_and_inf_inputs_pass_through(dtype):
    """NaN is evidence: a NaN query row gives a NaN output row; an inf key
    is bounded as in f32; values that overflow the half type become inf."""
    module, inputs, _, _ = _fa2("plain", dtype)
    q = inputs["q"].copy()
    q[3, 0] = np.nan
    k = inputs["k"].copy()
    k[5, :] = np.inf
    v = inputs["v"].copy()
    v[7, :] = _half(np.full(8, 6e4 if dtype == "f16" else 3e38), dtype)
    arrays = {"q": q, "k": k, "v": v}
    out = vx.run(vx.lower_to_gpu(module, optimize="none"), arrays)["out"]
    oracle = vx.reference.flash_attention_2(q, k, v, tile_size=16, dtype=dtype)
    np.testing.assert_array_equal(out.view(np.uint16), oracle.view(np.uint16))
    assert np.isnan(out[3].astype(np.float32)).all()


# SPIR-V, MLIR, the Vulkan device --------------------------------------------------------


@needs_val
@pytest.mark.parametrize("dtype", HALVES)
def test_spirv_validates(dtype, tmp_path):
    for module in (_fa2("masked", dtype)[0], _mla(dtype)[0]):
        for level in LEVELS:
            spirv = vx.compile_spirv(vx.lower_to_gpu(module, optimize=level))
            assert_spirv_valid(spirv, tmp_path)


@needs_mlir_opt
@pytest.mark.parametrize("dtype", HALVES)
def test_mlir_opt_accepts_half_kernels(dtype):
    for module in (_fa2("gqa", dtype)[0], _mla(dtype)[0]):
        for level in LEVELS:
            assert_mlir_opt_accepts(vx.lower_to_gpu(module, optimize=level))
    for device in ("h200", "lavapipe"):
        assert_mlir_opt_accepts(vx.lower_to_gpu(_fa2("plain", dtype)[0], device=device))


def test_spirv_declares_16bit_storage_only_for_half_buffers():
    from vyre_xdsl.spirv import emit_spirv_module
    from vyre_xdsl.spirv.spec import Capability

    def capabilities(**kw):
        module = vx.flash_attention_2(seq_len=8, head_dim=4, tile_size=4, **kw)
        return emit_spirv_module(vx.lower_to_gpu(module)).capabilities

    f32, bf16 = capabilities(), capabilities(dtype="bf16")
    assert Capability.StorageBuffer16BitAccess not in f32
    assert Capability.StorageBuffer16BitAccess in bf16
    assert Capability.Float16 not in bf16


@needs_vulkan
def test_vulkan_refuses_a_device_without_16bit_storage(monkeypatch):
    from vyre_xdsl.vulkan import runtime

    ctx = runtime._context(runtime._validation_requested(None))
    monkeypatch.setattr(ctx, "storage_16bit", False)
    module, inputs, _, _ = _fa2("plain", "f16")
    with pytest.raises(VyreError, match=r"storageBuffer16BitAccess.*'q' \(f16\)|"
                                        r"'q' \(f16\).*storageBuffer16BitAccess"):
        vx.run(vx.lower_to_gpu(module, optimize="none"), inputs, backend="vulkan")


def test_measured_tolerance():
    """The errors the module docstring quotes, on the interpreter: the
    rounded oracle at none/exact, within 1 ulp here at default."""
    worst = {}
    for dtype in HALVES:
        module, inputs, oracle_f32, _ = _fa2("masked", dtype)
        for level in LEVELS:
            out = vx.run(vx.lower_to_gpu(module, optimize=level), inputs)["out"]
            worst[(dtype, level)] = ulps_off(out, oracle_f32, dtype)
    assert max(worst.values()) <= ULP_TOLERANCE
    assert all(worst[(d, lv)] <= 0.5 for d in HALVES for lv in ("none", "exact"))


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
@pytest.mark.parametrize("dtype", HALVES)
def test_half_kernel_is_the_f32_kernel_rounded_once(dtype, backend):
    """Half buffers change nothing but the loads and the one store: the
    output is the f32 kernel's, on the widened inputs, rounded to nearest
    even, bit for bit, at every level (the lowering makes the same choices)."""
    params = dict(FA2_CASES["masked"])
    inputs = _fa2_inputs(dtype, (params["seq_len"], params["head_dim"]),
                         (params["seq_len"], params["head_dim"]))
    seq, heads, dim, rank, rope = MLA_SHAPE
    mla_inputs = _mla_inputs(dtype, heads, seq, dim, rank, rope)
    cases = [
        (lambda dt: vx.flash_attention_2(**params, dtype=dt), inputs),
        (lambda dt: vx.mla_decode(*MLA_SHAPE, tile_size=16, dtype=dt), mla_inputs),
    ]
    device = "vulkan" if backend == "vulkan" else None
    levels = LEVELS if backend == "interpreter" else ("none", "default")
    for build, arrays in cases:
        for level in levels:
            half = vx.lower_to_gpu(build(dtype), optimize=level, device=device)
            full = vx.lower_to_gpu(build("f32"), optimize=level, device=device)
            out = vx.run(half, arrays, backend=backend)["out"]
            out32 = vx.run(full, _widened(arrays), backend=backend)["out"]
            np.testing.assert_array_equal(out.view(np.uint16), _half(out32, dtype).view(np.uint16))


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_lse_stays_f32(backend):
    """return_lse: the output is bf16, the log-sum-exp f32 (as FlashAttention
    returns it), both as the oracle gives them."""
    inputs = _fa2_inputs("bf16", (24, 8), (24, 8))
    module = vx.flash_attention_2(seq_len=24, head_dim=8, tile_size=8, dtype="bf16",
                                  return_lse=True)
    outs = vx.run(module, inputs, backend=backend)
    out, lse = vx.reference.flash_attention_2(*inputs.values(), tile_size=8, dtype="bf16",
                                              return_lse=True)
    oracle_f32, _ = vx.reference.flash_attention_2(*_widened(inputs).values(), tile_size=8,
                                                   return_lse=True)
    assert outs["lse"].dtype == lse.dtype == np.float32
    np.testing.assert_allclose(outs["lse"], lse, rtol=1e-6, atol=1e-6)
    assert_within_tolerance(outs["out"], oracle_f32, "bf16")


def test_vyre_run_random_check(tmp_path):
    """vyre-run --random draws inputs of each buffer's dtype, and --check
    holds a half output to the declared tolerance."""
    from vyre_xdsl.tools.vyre_run import main

    path = tmp_path / "fa2_f16.mlir"
    path.write_text(str(vx.flash_attention_2(seq_len=40, head_dim=8, tile_size=16,
                                             dtype="f16")))
    assert main([str(path), "--random", "--check"]) == 0


@needs_vulkan
@pytest.mark.parametrize("dtype", HALVES)
def test_fa2_vulkan_longer_rows(dtype):
    """At 512 rows of 64 dims (default optimisation for the device) a few
    outputs near zero are more than 1 ulp of their own magnitude off the
    f32 oracle (f32 noise of the executor, ~1e-7 of max|out|); the declared
    tolerance covers them, and nearly all elements are within 1 ulp."""
    inputs = _fa2_inputs(dtype, (512, 64), (512, 64), seed=5)
    module = vx.flash_attention_2(seq_len=512, head_dim=64, dtype=dtype)
    out = vx.run(module, inputs, backend="vulkan")["out"]
    oracle_f32 = vx.reference.flash_attention_2(*_widened(inputs).values())
    assert_within_tolerance(out, oracle_f32, dtype)
    within = distance(out, oracle_f32, dtype) <= ulp(oracle_f32, dtype)
    assert within.mean() >= 0.999


@needs_vulkan
@pytest.mark.parametrize("dtype", HALVES)
def test_split_rows_and_merge_kernel_on_vulkan(dtype):
    """One head of 64 rows of 128 dims, lowered for the Vulkan device: rows
    split over lanes (gpu.shuffle), keys split over workgroups and merged by
    a kernel of one invocation per output element, so neighbouring f16/bf16
    outputs are stored by different invocations (16-bit stores: no race).
    The output is within the declared tolerance of the f32 oracle, and, with
    the same splits and chunks of dims, the f32 twin's, rounded once, bit
    for bit (the plan deals bf16 rows in chunks of 8 dims, f32 in fours)."""
    build = lambda dt: vx.flash_attention_2(seq_len=64, head_dim=128, tile_size=16,  # noqa: E731
                                            dtype=dt)
    inputs = _fa2_inputs(dtype, (64, 128), (64, 128), seed=9)
    half = vx.lower_to_gpu(build(dtype), device="vulkan")
    text = str(half)
    assert "gpu.shuffle" in text and "flash_attention_2_merge" in text
    out = vx.run(half, inputs, backend="vulkan")["out"]
    oracle_f32 = vx.reference.flash_attention_2(*_widened(inputs).values(), tile_size=16)
    assert_within_tolerance(out, oracle_f32, dtype)
    same = ("vyre-split-kv{splits=4 merge=kernel},vyre-split-head-dim{parts=2 chunk=8},"
            "vyre-to-gpu{optimize=exact}")
    out = vx.run(vx.lower_to_gpu(build(dtype), optimize=same), inputs, backend="vulkan")["out"]
    twin = vx.run(vx.lower_to_gpu(build("f32"), optimize=same), _widened(inputs),
                  backend="vulkan")["out"]
    np.testing.assert_array_equal(out.view(np.uint16), _half(twin, dtype).view(np.uint16))
