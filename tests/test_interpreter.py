"""The xDSL interpreter of lowered kernels (vyre_xdsl.interp) against the
numpy oracle (vyre_xdsl.reference), plus hand-written kernels for barriers,
lane divergence and MLIR's NaN semantics."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from helpers import lowered_f32_kernel
from vyre_xdsl import reference
from vyre_xdsl.compiler import lower_to_gpu, parse_module
from vyre_xdsl.errors import VyreError
from vyre_xdsl.interp import execute
from vyre_xdsl.interp.arith import maximumf, minimumf
from vyre_xdsl.interp.math import fma
from vyre_xdsl.kernel_info import program_info

# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def run_lowered(module, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    info = program_info(module)  # one kernel, or a program of several
    arrays = {}
    for b in info.buffers:
        if b.is_output:
            arrays[b.name] = np.full(b.count, -7.0, dtype=np.float32)
        elif b.is_input:
            arrays[b.name] = np.ascontiguousarray(inputs[b.name], np.float32).ravel()
    execute(module, info, arrays)
    return {b.name: arrays[b.name].reshape(b.shape) for b in info.outputs}


def fa2_inputs(seq_len, head_dim, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((seq_len, head_dim)).astype(np.float32) for _ in range(3)]


def run_fa2(q, k, v, tile_size):
    seq_len, head_dim = q.shape
    module = lower_to_gpu(  # "exact": the oracle's order (see test_split_kv.py)
        vx.flash_attention_2(seq_len=seq_len, head_dim=head_dim, tile_size=tile_size),
        optimize="exact",
    )
    return run_lowered(module, {"q": q, "k": k, "v": v})["out"]


def mla_inputs(S, H, D, R, P, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((H, D)).astype(np.float32),
        rng.standard_normal((S, R)).astype(np.float32),
        rng.standard_normal((S, P)).astype(np.float32),
        (0.5 * rng.standard_normal((R, H * D))).astype(np.float32),
        (0.5 * rng.standard_normal((R, H * D))).astype(np.float32),
    )


def run_mla(q, kv, kr, wk, wv, tile_size):
    """The seed's MLA decode, optimised bit-exactly ("exact": the default
    level absorbs w_uk/w_uv, tests/test_absorb_mla.py)."""
    H, D = q.shape
    S, R = kv.shape
    module = lower_to_gpu(
        vx.mla_decode(
            seq_len=S,
            num_heads=H,
            head_dim=D,
            kv_lora_rank=R,
            qk_rope_head_dim=kr.shape[1],
            tile_size=tile_size,
        ),
        optimize="exact",
    )
    names = ("q", "kv_cache", "kr_cache", "w_uk", "w_uv")
    return run_lowered(module, dict(zip(names, (q, kv, kr, wk, wv))))["out"]


def assert_bit_exact(got, want):
    assert got.shape == want.shape
    assert got.dtype == np.float32 and want.dtype == np.float32
    same = (got.view(np.uint32) == want.view(np.uint32)) | (
        np.isnan(got) & np.isnan(want)
    )
    assert same.all(), f"differs at {np.argwhere(~same)[:5].tolist()}: max abs " \
        f"error {np.nanmax(np.abs(got - want))}"


def kernel(body: str, *, n: int = 64, lanes: int = 64, groups: int = 1,
           inputs=("a", "b"), outputs=("out",), extra_attrs: str = "") -> str:
    """A hand-written lowered kernel: buffers of n f32; `body` runs for
    every lane with %i (global id), %lane, %n and the buffers in scope."""
    return lowered_f32_kernel("test", body, n=n, lanes=lanes, grid=groups, inputs=inputs,
                              outputs=outputs, attrs=extra_attrs)


ELEMENTWISE = """
      %in_range = arith.cmpi ult, %i, %n : index
      scf.if %in_range {{
        %x = memref.load %a[%i] : memref<{n}xf32>
        %y = memref.load %b[%i] : memref<{n}xf32>
{expr}
        memref.store %r, %out[%i] : memref<{n}xf32>
      }}
"""


def elementwise(expr: str, a, b=None):
    """Run `%r = expr(%x, %y)` lane-wise over the arrays a, b."""
    a = np.asarray(a, np.float32)
    b = np.zeros_like(a) if b is None else np.asarray(b, np.float32)
    n = a.size
    groups = -(-n // 64)
    text = kernel(ELEMENTWISE.format(n=n, expr=expr), n=n, groups=groups)
    return run_lowered(parse_module(text), {"a": a, "b": b})["out"]


# --------------------------------------------------------------------------
# FlashAttention-2 and MLA decode vs the oracle, bit for bit
# --------------------------------------------------------------------------

FA2_SHAPES = [
    # seq_len, head_dim, tile_size
    (1, 1, 64),  # seq_len 1, head_dim 1
    (5, 3, 64),  # seq_len < tile_size
    (8, 4, 4),  # whole tiles
    (10, 4, 4),  # ragged last tile
    (13, 1, 5),  # head_dim 1, ragged
    (70, 2, 16),  # 2 workgroups, item_count not a multiple of 64
    (130, 3, 48),  # 3 workgroups, ragged
]


@pytest.mark.parametrize("seq_len,head_dim,tile_size", FA2_SHAPES)
def test_flash_attention_2_matches_oracle(seq_len, head_dim, tile_size):
    q, k, v = fa2_inputs(seq_len, head_dim, seed=seq_len)
    got = run_fa2(q, k, v, tile_size)
    want = reference.flash_attention_2(q, k, v, tile_size=tile_size)
    assert_bit_exact(got, want)


MLA_SHAPES = [
    # seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim, tile_size
    (1, 1, 1, 1, 1, 64),  # everything 1
    (5, 1, 3, 2, 3, 64),  # one head, rope == head_dim, seq_len < tile
    (10, 3, 4, 5, 2, 4),  # several heads, ragged last tile
    (9, 2, 4, 3, 1, 4),
    (3, 70, 2, 2, 1, 64),  # 70 heads: 2 workgroups
]


@pytest.mark.parametrize("S,H,D,R,P,T", MLA_SHAPES)
def test_mla_decode_matches_oracle(S, H, D, R, P, T):
    args = mla_inputs(S, H, D, R, P, seed=S + H)
    got = run_mla(*args, T)
    want = reference.mla_decode(*args, tile_size=T)
    assert_bit_exact(got, want)


def test_run_api_uses_interpreter():
    from vyre_xdsl.run import run

    q, k, v = fa2_inputs(9, 2)
    outs = run(vx.flash_attention_2(seq_len=9, head_dim=2, tile_size=4),
               {"q": q, "k": k, "v": v}, backend="interpreter")
    assert_bit_exact(outs["out"], reference.flash_attention_2(q, k, v, tile_size=4))


def test_outputs_written_in_place():
    module = lower_to_gpu(vx.flash_attention_2(seq_len=4, head_dim=2, tile_size=64))
    info = program_info(module)
    q, k, v = fa2_inputs(4, 2)
    out = np.zeros(8, np.float32)
    arrays = {"q": q.ravel(), "k": k.ravel(), "v": v.ravel(), "out": out}
    execute(module, info, arrays)
    assert arrays["out"] is out
    assert_bit_exact(out.reshape(4, 2), reference.flash_attention_2(q, k, v))


# --------------------------------------------------------------------------
# The stability contract, executed
# --------------------------------------------------------------------------


def test_nan_query_row_poisons_exactly_its_row():
    q, k, v = fa2_inputs(12, 3)
    q[4, 1] = np.nan
    got = run_fa2(q, k, v, 4)
    assert np.isnan(got[4]).all()
    others = np.delete(got, 4, axis=0)
    assert np.isfinite(others).all()
    assert_bit_exact(got, reference.flash_attention_2(q, k, v, tile_size=4))


def test_nan_head_poisons_exactly_its_head():
    args = list(mla_inputs(6, 3, 2, 2, 1))
    args[0][1, 0] = np.nan
    got = run_mla(*args, 4)
    assert np.isnan(got[1]).all()
    assert np.isfinite(got[[0, 2]]).all()
    assert_bit_exact(got, reference.mla_decode(*args, tile_size=4))


def test_infinite_keys_are_clamped():
    q, k, v = fa2_inputs(10, 2)
    k[2, 0] = np.inf
    k[7, 1] = -np.inf
    got = run_fa2(q, k, v, 4)
    assert np.isfinite(got).all()
    assert_bit_exact(got, reference.flash_attention_2(q, k, v, tile_size=4))


def test_huge_logits_stay_finite():
    q, k, v = fa2_inputs(9, 2)
    q *= np.float32(1e19)
    k *= np.float32(1e19)
    got = run_fa2(q, k, v, 4)
    assert np.isfinite(got).all()
    assert_bit_exact(got, reference.flash_attention_2(q, k, v, tile_size=4))


def test_all_equal_scores_average_values():
    _, k, v = fa2_inputs(8, 2)
    q = np.zeros((8, 2), np.float32)
    got = run_fa2(q, k, v, 4)
    np.testing.assert_allclose(got, np.broadcast_to(v.mean(axis=0), got.shape),
                               rtol=1e-5, atol=1e-6)
    assert_bit_exact(got, reference.flash_attention_2(q, k, v, tile_size=4))


# --------------------------------------------------------------------------
# Workgroup memory, barriers, divergence
# --------------------------------------------------------------------------

EXCHANGE = """
      %shared = memref.alloc() : memref<64xf32, 3 : i64>
      %c1 = arith.constant 1 : index
      %c64 = arith.constant 64 : index
      %zero = arith.constant 0.0 : f32
      %in_range = arith.cmpi ult, %i, %n : index
      %x = scf.if %in_range -> (f32) {
        %v = memref.load %a[%i] : memref<100xf32>
        scf.yield %v : f32
      } else {
        scf.yield %zero : f32
      }
      memref.store %x, %shared[%lane] : memref<64xf32, 3 : i64>
      "gpu.barrier"() : () -> ()
      %next = arith.addi %lane, %c1 : index
      %src = arith.remui %next, %c64 : index
      %y = memref.load %shared[%src] : memref<64xf32, 3 : i64>
      scf.if %in_range {
        memref.store %y, %out[%i] : memref<100xf32>
      }
"""


def test_barrier_exchanges_values_through_workgroup_memory():
    module = parse_module(kernel(EXCHANGE, n=100, groups=2, inputs=("a",)))
    a = np.arange(100, dtype=np.float32) + 1
    out = run_lowered(module, {"a": a})["out"]
    lane = np.arange(100) % 64
    group_base = np.arange(100) - lane
    src = group_base + (lane + 1) % 64
    want = np.where(src < 100, a[np.minimum(src, 99)], 0).astype(np.float32)
    assert_bit_exact(out, want)
    assert out[63] == a[0] and out[99] == 0.0  # wraps within the workgroup


DIVERGENT = """
      %c32 = arith.constant 32 : index
      %low = arith.cmpi ult, %lane, %c32 : index
      scf.if %low {
        "gpu.barrier"() : () -> ()
      }
"""


def test_divergent_barrier_raises():
    module = parse_module(kernel(DIVERGENT, n=64, inputs=()))
    with pytest.raises(VyreError, match="divergent gpu.barrier.*32 of the 64"):
        run_lowered(module, {})


def test_barrier_in_uniform_branch_is_fine():
    body = """
      %c0 = arith.constant 0 : index
      %all = arith.cmpi uge, %lane, %c0 : index
      scf.if %all {
        "gpu.barrier"() : () -> ()
      }
      %one = arith.constant 1.0 : f32
      memref.store %one, %out[%i] : memref<64xf32>
"""
    out = run_lowered(parse_module(kernel(body, inputs=())), {})["out"]
    assert (out == 1).all()


def test_private_memory_is_per_lane_and_varying_loop_bounds():
    # each lane sums 0..lane-1 through a private accumulator array
    body = """
      %acc = memref.alloc() : memref<1xf32>
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %zero = arith.constant 0.0 : f32
      memref.store %zero, %acc[%c0] : memref<1xf32>
      %total = scf.for %j = %c0 to %lane step %c1 iter_args(%s = %zero) -> (f32) {
        %jj = arith.index_cast %j : index to i32
        %f = arith.uitofp %jj : i32 to f32
        %old = memref.load %acc[%c0] : memref<1xf32>
        %new = arith.addf %old, %f : f32
        memref.store %new, %acc[%c0] : memref<1xf32>
        %s2 = arith.addf %s, %f : f32
        scf.yield %s2 : f32
      }
      %p = memref.load %acc[%c0] : memref<1xf32>
      %r = arith.subf %p, %total : f32
      %r2 = arith.addf %r, %p : f32
      memref.store %r2, %out[%i] : memref<64xf32>
"""
    out = run_lowered(parse_module(kernel(body, inputs=())), {})["out"]
    lane = np.arange(64)
    assert_bit_exact(out, (lane * (lane - 1) / 2).astype(np.float32))


@pytest.mark.parametrize("body, match", [
    pytest.param("""
      %c1 = arith.constant 1 : index
      %j = arith.addi %i, %c1 : index
      %x = memref.load %a[%j] : memref<64xf32>
      memref.store %x, %out[%i] : memref<64xf32>
""", "index 64 is out of bounds", id="out_of_bounds_access"),
    pytest.param("""
      %x = memref.load %a[%i] : memref<64xf32>
      %r = math.atan %x : f32
      memref.store %r, %out[%i] : memref<64xf32>
""", "'math.atan'", id="unsupported_op_is_named"),
    # the lowered-kernel loader refuses it before anything runs
    pytest.param("""
      %one = arith.constant 1.0 : f32
      memref.store %one, %a[%i] : memref<64xf32>
""", "writes buffer 'a', which is declared read", id="store_to_read_buffer"),
])
def test_bad_kernel_raises(body, match):
    module = parse_module(kernel(body, inputs=("a",)))
    with pytest.raises(VyreError, match=match):
        run_lowered(module, {"a": np.zeros(64, np.float32)})


# --------------------------------------------------------------------------
# f32 arithmetic with MLIR's semantics
# --------------------------------------------------------------------------

SPECIAL = np.array([np.nan, 1.0, -1.0, np.inf, -np.inf, 0.0, -0.0, 2.5], np.float32)
PAIRS_A, PAIRS_B = (g.ravel() for g in np.meshgrid(SPECIAL, SPECIAL, indexing="ij"))

CMPF = {
    "false": lambda a, b: np.zeros_like(a, bool),
    "oeq": lambda a, b: a == b,
    "ogt": lambda a, b: a > b,
    "oge": lambda a, b: a >= b,
    "olt": lambda a, b: a < b,
    "ole": lambda a, b: a <= b,
    "one": lambda a, b: ~np.isnan(a) & ~np.isnan(b) & (a != b),
    "ord": lambda a, b: ~np.isnan(a) & ~np.isnan(b),
    "ueq": lambda a, b: np.isnan(a) | np.isnan(b) | (a == b),
    "ugt": lambda a, b: np.isnan(a) | np.isnan(b) | (a > b),
    "uge": lambda a, b: np.isnan(a) | np.isnan(b) | (a >= b),
    "ult": lambda a, b: np.isnan(a) | np.isnan(b) | (a < b),
    "ule": lambda a, b: np.isnan(a) | np.isnan(b) | (a <= b),
    "une": lambda a, b: np.isnan(a) | np.isnan(b) | (a != b),
    "uno": lambda a, b: np.isnan(a) | np.isnan(b),
    "true": lambda a, b: np.ones_like(a, bool),
}


@pytest.mark.parametrize("pred", sorted(CMPF))
def test_cmpf_predicates_on_nan_inf_and_zeros(pred):
    # select(cmpf) also checks that select picks lane by lane
    expr = f"""
        %c = arith.cmpf {pred}, %x, %y : f32
        %one = arith.constant 1.0 : f32
        %zero = arith.constant 0.0 : f32
        %r = arith.select %c, %one, %zero : f32"""
    got = elementwise(expr, PAIRS_A, PAIRS_B)
    want = CMPF[pred](PAIRS_A, PAIRS_B).astype(np.float32)
    assert_bit_exact(got, want)


def test_select_passes_nan_through_and_ignores_the_other_side():
    expr = """
        %c = arith.cmpf uno, %x, %x : f32
        %r = arith.select %c, %x, %y : f32"""
    a = np.array([np.nan, 1.0, np.nan, 3.0], np.float32)
    b = np.array([5.0, np.nan, np.inf, -1.0], np.float32)
    got = elementwise(expr, a, b)
    assert_bit_exact(got, np.array([np.nan, np.nan, np.nan, -1.0], np.float32))


def test_maximumf_minimumf_propagate_nan_and_order_zeros():
    got_max = elementwise("        %r = arith.maximumf %x, %y : f32", PAIRS_A, PAIRS_B)
    got_min = elementwise("        %r = arith.minimumf %x, %y : f32", PAIRS_A, PAIRS_B)
    nan = np.isnan(PAIRS_A) | np.isnan(PAIRS_B)
    assert np.isnan(got_max[nan]).all() and np.isnan(got_min[nan]).all()
    zeros = (PAIRS_A == 0) & (PAIRS_B == 0)
    neg_a, neg_b = np.signbit(PAIRS_A), np.signbit(PAIRS_B)
    # -0 < +0: max is -0 only for (-0, -0), min is +0 only for (+0, +0)
    assert (np.signbit(got_max[zeros]) == (neg_a & neg_b)[zeros]).all()
    assert (np.signbit(got_min[zeros]) == (neg_a | neg_b)[zeros]).all()
    rest = ~nan & ~zeros
    assert_bit_exact(got_max[rest], np.maximum(PAIRS_A, PAIRS_B)[rest])
    assert_bit_exact(got_min[rest], np.minimum(PAIRS_A, PAIRS_B)[rest])
    # the Python-level helpers agree on scalars
    assert np.isnan(maximumf(np.float32(np.nan), np.float32(1)))
    assert not np.signbit(maximumf(np.float32(-0.0), np.float32(0.0)))
    assert np.signbit(minimumf(np.float32(0.0), np.float32(-0.0)))


def test_f32_arithmetic_is_exact_and_exp_overflows_to_inf():
    rng = np.random.default_rng(1)
    a = (rng.standard_normal(100) * 50).astype(np.float32)
    b = (rng.standard_normal(100) * 3).astype(np.float32)
    a[:3] = [100.0, 89.0, -200.0]  # exp overflows / underflows
    expr = """
        %e = math.exp %x : f32
        %d = arith.divf %e, %y : f32
        %s = arith.subf %d, %y : f32
        %r = arith.mulf %s, %x : f32"""
    got = elementwise(expr, a, b)
    with np.errstate(all="ignore"):
        want = ((np.exp(a) / b) - b) * a
    assert_bit_exact(got, want.astype(np.float32))
    assert np.isinf(elementwise("        %r = math.exp %x : f32", a[:2])).all()


def test_math_ops_are_f32():
    a = np.array([0.5, 2.0, 3.0, 1e-3, 7.25, 100.0], np.float32)
    b = np.array([1.5, -2.0, 0.25, 4.0, -1.0, 3.0], np.float32)
    for op, fn in [
        ("math.exp2", np.exp2), ("math.log", np.log), ("math.log2", np.log2),
        ("math.tanh", np.tanh), ("math.sqrt", np.sqrt),
        ("math.rsqrt", lambda x: np.float32(1) / np.sqrt(x)),
        ("math.absf", np.abs), ("arith.negf", np.negative),
    ]:
        for x in (a, -b):
            got = elementwise(f"        %r = {op} %x : f32", x)
            with np.errstate(all="ignore"):
                assert_bit_exact(got, fn(x).astype(np.float32))
    got = elementwise("        %r = math.fma %x, %y, %y : f32", a, b)
    assert_bit_exact(got, fma(a, b, b))


def test_fma_is_correctly_rounded():
    from fractions import Fraction

    rng = np.random.default_rng(2)
    a = rng.standard_normal(300).astype(np.float32)
    b = rng.standard_normal(300).astype(np.float32)
    c = (-(a.astype(np.float64) * b)).astype(np.float32)  # heavy cancellation
    c[::2] = rng.standard_normal(150).astype(np.float32)
    got = fma(a, b, c)
    for x, y, z, r in zip(a, b, c, got):
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        # the f32 nearest to `exact`: compare against both neighbours of r
        lo, hi = np.nextafter(r, np.float32(-np.inf)), np.nextafter(r, np.float32(np.inf))
        err = abs(Fraction(float(r)) - exact)
        assert err <= abs(Fraction(float(lo)) - exact)
        assert err <= abs(Fraction(float(hi)) - exact)


INT_OPS = """
      %in_range = arith.cmpi ult, %i, %n : index
      scf.if %in_range {
        %x = memref.load %a[%i] : memref<8xf32>
        %y = memref.load %b[%i] : memref<8xf32>
        %xi = arith.fptosi %x : f32 to i32
        %yi = arith.fptosi %y : f32 to i32
        %q = arith.divsi %xi, %yi : i32
        %m = arith.remsi %xi, %yi : i32
        %qf = arith.sitofp %q : i32 to f32
        %mf = arith.sitofp %m : i32 to f32
        %ten = arith.constant 10.0 : f32
        %t = arith.mulf %qf, %ten : f32
        %s = arith.addf %t, %mf : f32
        %xu = arith.index_cast %xi : i32 to index
        %c3 = arith.constant 3 : index
        %mn = arith.minui %xu, %c3 : index
        %mni = arith.index_cast %mn : index to i32
        %mnf = arith.uitofp %mni : i32 to f32
        %hundred = arith.constant 100.0 : f32
        %u = arith.mulf %mnf, %hundred : f32
        %r = arith.addf %s, %u : f32
        memref.store %r, %out[%i] : memref<8xf32>
      }
"""


def test_integer_ops_and_casts():
    a = np.array([7, -7, 7, -7, 2, 0, 9, -1], np.float32)
    b = np.array([2, 2, -2, -2, 5, 3, 4, 1], np.float32)
    got = run_lowered(parse_module(kernel(INT_OPS, n=8)), {"a": a, "b": b})["out"]
    ai, bi = a.astype(np.int64), b.astype(np.int64)
    q = np.trunc(ai / bi).astype(np.int64)
    m = ai - q * bi
    # minui on the u32 view: negative values are huge, so min is 3
    mn = np.minimum(np.where(ai < 0, 2**32 + ai, ai), 3)
    want = (q * 10 + m + mn * 100).astype(np.float32)
    assert_bit_exact(got, want)


def test_signed_division_of_int_min_truncates():
    """|INT_MIN| does not fit its type: dividing magnitudes gave
    INT_MIN divsi 3 = +715827883 (so a mask computing -2**31 // (kv + 1)
    disagreed with vx.reference); C truncation is -715827882."""
    from vyre_xdsl.interp.arith import _trunc_div

    for dtype in (np.int32, np.int64):
        low = int(np.iinfo(dtype).min)
        a = np.array([low, low, low, low + 1, -7, 7, -7, 0], dtype)
        b = np.array([3, -3, 2, -1, 2, -2, -2, 5], dtype)
        want = [abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
                for x, y in zip(a.tolist(), b.tolist())]
        assert _trunc_div(a, b).tolist() == want
    mask = lambda q, kv: (-(2**31) // (kv + 1)) % 3 == 1  # noqa: E731
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((6, 2), dtype=np.float32) for _ in range(3))
    m = vx.flash_attention_2(seq_len=6, head_dim=2, tile_size=2, mask_mod=mask)
    np.testing.assert_allclose(vx.run(m, {"q": q, "k": k, "v": v})["out"],
                               vx.reference.flash_attention_2(q, k, v, mask_mod=mask),
                               rtol=1e-5, atol=1e-6)


def test_lane_varying_if_with_results_and_nested_loops():
    # odd lanes loop 3 times, even lanes take the else branch
    body = """
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %x = memref.load %a[%i] : memref<64xf32>
      %parity = arith.remui %lane, %c2 : index
      %odd = arith.cmpi eq, %parity, %c1 : index
      %r = scf.if %odd -> (f32) {
        %s = scf.for %j = %c0 to %c3 step %c1 iter_args(%acc = %x) -> (f32) {
          %d = arith.addf %acc, %acc : f32
          scf.yield %d : f32
        }
        scf.yield %s : f32
      } else {
        %neg = arith.negf %x : f32
        scf.yield %neg : f32
      }
      memref.store %r, %out[%i] : memref<64xf32>
"""
    a = np.arange(64, dtype=np.float32)
    out = run_lowered(parse_module(kernel(body, inputs=("a",))), {"a": a})["out"]
    assert_bit_exact(out, np.where(np.arange(64) % 2 == 1, a * 8, -a).astype(np.float32))


def test_launch_ids():
    n = 150
    body = f"""
      %in_range = arith.cmpi ult, %i, %n : index
      scf.if %in_range {{
        %b = "gpu.block_id"() <{{dimension = #gpu<dim x>}}> : () -> index
        %bd = "gpu.block_dim"() <{{dimension = #gpu<dim x>}}> : () -> index
        %gd = "gpu.grid_dim"() <{{dimension = #gpu<dim x>}}> : () -> index
        %ty = "gpu.thread_id"() <{{dimension = #gpu<dim y>}}> : () -> index
        %c1000 = arith.constant 1000 : index
        %c100000 = arith.constant 100000 : index
        %c10000000 = arith.constant 10000000 : index
        %x1 = arith.muli %b, %c1000 : index
        %x2 = arith.muli %bd, %c100000 : index
        %x3 = arith.muli %gd, %c10000000 : index
        %x4 = arith.addi %x1, %x2 : index
        %x5 = arith.addi %x4, %x3 : index
        %x6 = arith.addi %x5, %lane : index
        %x7 = arith.addi %x6, %ty : index
        %xi = arith.index_cast %x7 : index to i32
        %r = arith.uitofp %xi : i32 to f32
        memref.store %r, %out[%i] : memref<{n}xf32>
      }}
"""
    out = run_lowered(parse_module(kernel(body, n=n, groups=3, inputs=())), {})["out"]
    i = np.arange(n)
    want = (i // 64) * 1000 + 64 * 100000 + 3 * 10000000 + i % 64
    assert_bit_exact(out, want.astype(np.float32))


def _random_shapes(count, seed):
    rng = np.random.default_rng(seed)
    return [tuple(int(x) for x in rng.integers(1, hi, size=len(hi)))
            for hi in [np.array([90, 6, 40])] * count]


@pytest.mark.parametrize("seq_len,head_dim,tile_size", _random_shapes(6, 11))
def test_flash_attention_2_random_shapes(seq_len, head_dim, tile_size):
    q, k, v = fa2_inputs(seq_len, head_dim, seed=seq_len * head_dim)
    assert_bit_exact(run_fa2(q, k, v, tile_size),
                     reference.flash_attention_2(q, k, v, tile_size=tile_size))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mla_decode_random_shapes(seed):
    rng = np.random.default_rng(seed)
    S, H, D, R, P, T = (int(x) for x in rng.integers(1, [20, 80, 5, 5, 5, 12]))
    P = min(P, D)  # the rotary part covers at most head_dim dims
    args = mla_inputs(S, H, D, R, P, seed=seed)
    assert_bit_exact(run_mla(*args, T), reference.mla_decode(*args, tile_size=T))
