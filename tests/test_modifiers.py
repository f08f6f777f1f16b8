"""Modifiers as PyTorch users write them: builtins (abs, round, divmod),
numpy functions on traced values, integer and bit operations with Python's
semantics on negative values, sin/cos/tan/erf/sqrt/pow, vx.where between
booleans and a keyword-only head; each one on the interpreter (bit-exact
with the oracle) and on Vulkan (lavapipe), and each misuse a VyreError."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl import trace
from vyre_xdsl.errors import VyreError
from requirements import (
    assert_mlir_opt_accepts,
    assert_spirv_valid,
    needs_mlir_opt,
    needs_val,
    needs_vulkan,
)

S, D, H = 20, 4, 2


def _qkv(seed=0, heads=H):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((heads, S, D)).astype(np.float32) for _ in range(3))


def _run(backend, **mods):
    q, k, v = _qkv()
    m = vx.flash_attention_2(seq_len=S, head_dim=D, tile_size=8, num_heads=H, **mods)
    lowered = vx.lower_to_gpu(m, optimize="exact")  # the oracle's order of sums
    out = vx.run(lowered, {"q": q, "k": k, "v": v}, backend=backend)["out"]
    ref = vx.reference.flash_attention_2(q, k, v, tile_size=8, **mods)
    return out, ref


MODIFIERS = {
    "builtin abs (ALiBi)": dict(score_mod=lambda s, q, kv, h: s - 0.5 * abs(q - kv)),
    "np.exp": dict(score_mod=lambda s, q, kv: np.exp(s) * 0.1),
    "np.tanh soft-cap": dict(score_mod=lambda s, q, kv: 5.0 * np.tanh(s / 5.0)),
    "numpy scalar times score": dict(score_mod=lambda s, q, kv: np.float32(0.5) * s),
    "round": dict(score_mod=lambda s, q, kv: round(s * 4) / 4),
    "np.rint np.floor np.ceil": dict(
        score_mod=lambda s, q, kv: np.rint(s) + np.floor(s * 3) - np.ceil(s * 2)),
    "math.floor": dict(score_mod=lambda s, q, kv: math.floor(s * 2) + math.trunc(s)),
    "np.where np.maximum": dict(
        score_mod=lambda s, q, kv: np.where(kv > q, s - 1.0, np.maximum(s, -1.0))),
    "np.clip np.minimum": dict(score_mod=lambda s, q, kv: np.clip(s, -0.5, np.minimum(q, 2))),
    "sin cos tan": dict(
        score_mod=lambda s, q, kv: s + vx.sin(kv * 0.3) * vx.cos(q * 0.7) + vx.tan(s * 0.1)),
    "np.sin np.cos np.sqrt": dict(
        score_mod=lambda s, q, kv: np.sin(s) + np.cos(kv) + np.sqrt(np.abs(s))),
    "exact GELU (erf)": dict(score_mod=lambda s, q, kv: 0.5 * s * (1 + vx.erf(s / math.sqrt(2)))),
    "sqrt pow **": dict(score_mod=lambda s, q, kv: vx.sqrt(abs(s)) + s ** 2 * 0.1
                        + 2 ** (-(kv * 0.25)) + vx.pow(abs(s), 1.5) + s ** -1 * 0.01),
    "keyword-only head": dict(score_mod=lambda s, q, kv, *, head: s * (head + 1)),
    "where between booleans": dict(
        mask_mod=lambda q, kv, h: vx.where(h == 0, kv <= q, kv >= q)),
    "where with a Python bool": dict(mask_mod=lambda q, kv: vx.where(q > 10, kv <= q, True)),
    "shifts": dict(mask_mod=lambda q, kv: ((q - kv) >> 2) <= 1),
    "shift by a traced count": dict(mask_mod=lambda q, kv: (1 << (kv % 5)) > q % 9),
    "bit and xor invert": dict(mask_mod=lambda q, kv: (kv & 3) != (q ^ 1) % 4),
    "invert": dict(mask_mod=lambda q, kv: (~kv & 1) == (q & 1)),
    "floor division of negatives": dict(mask_mod=lambda q, kv: (kv - q) // 3 >= -2),
    "modulo of negatives (dilated)": dict(mask_mod=lambda q, kv: (kv - q) % 5 != 1),
    "divmod": dict(mask_mod=lambda q, kv: divmod(kv - q, 4)[1] < 2),
    "np.logical_and, np.less_equal": dict(
        mask_mod=lambda q, kv: np.logical_and(np.less_equal(kv, q), kv > q - 6)),
    "keyword-only head mask": dict(mask_mod=lambda q, kv, *, head: kv <= q + head),
}


@pytest.mark.parametrize("name", list(MODIFIERS))
def test_modifier_on_the_interpreter_is_bit_exact_with_the_oracle(name):
    out, ref = _run("interpreter", **MODIFIERS[name])
    np.testing.assert_array_equal(out, ref)


@needs_vulkan
@pytest.mark.parametrize("name", list(MODIFIERS))
def test_modifier_on_vulkan_is_close_to_the_oracle(name):
    out, ref = _run("vulkan", **MODIFIERS[name])
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    v = _qkv()[2]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(v).max()))


# Python's // and % on negative operands, against Python itself ----------------
# The mask keeps exactly one key per row, chosen with // or %, so the output
# row is that key's v row exactly (weight 1, sum 1), on any executor.

def _pick(rows):
    """The index of the key each row keeps (Python integers)."""
    return [rows(q) for q in range(S)]


INTEGER_PICKS = {
    "q // 3 of negatives": (lambda q: (q - 10) // 3 + 5, None),
    "q // -3": (lambda q: (q - 10) // -3 + 5, None),
    "q % 7 of negatives": (lambda q: (q - 10) % 7, None),
    "q % -7": (lambda q: (q - 10) % -7 + 7, None),
    "by a traced divisor": (lambda q: (q - 10) // ((q % 5) - 2) + 10 if (q % 5) != 2 else 10,
                            lambda q: vx.where(q % 5 == 2, 10, (q - 10) // ((q % 5) - 2) + 10)),
    "traced % traced": (lambda q: (10 - q) % ((q % 4) - 2) + 3 if (q % 4) != 2 else 3,
                        lambda q: vx.where(q % 4 == 2, 3, (10 - q) % ((q % 4) - 2) + 3)),
    "divisor 0 (numpy's 0)": (lambda q: 4, lambda q: (q - 10) // (q * 0) + (q - 10) % (q * 0) + 4),
    "divisor -1": (lambda q: (q - 10) // -1 + 10 if q > 4 else 0,
                   lambda q: vx.where(q > 4, (q - 10) // ((q * 0) - 1) + 10, 0)),
    "arithmetic shift of negatives": (lambda q: ((q - 10) >> 1) + 6, None),
    "shift count past 31": (lambda q: ((q - 10) >> 40) + 2 + ((q << 33) & 1), None),
}


@pytest.mark.parametrize("name", list(INTEGER_PICKS))
@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_integer_division_follows_python_on_negative_values(name, backend):
    python, traced = INTEGER_PICKS[name]
    traced = traced or python
    picked = _pick(python)
    assert all(0 <= p < S for p in picked), picked
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((S, D)).astype(np.float32) for _ in range(3))
    m = vx.flash_attention_2(seq_len=S, head_dim=D, tile_size=8,
                             mask_mod=lambda qi, kv: kv == traced(qi))
    out = vx.run(m, {"q": q, "k": k, "v": v}, backend=backend)["out"]
    np.testing.assert_array_equal(out, v[picked])
    ref = vx.reference.flash_attention_2(q, k, v, tile_size=8,
                                         mask_mod=lambda qi, kv: kv == traced(qi))
    np.testing.assert_array_equal(ref, v[picked])


def test_traced_integer_operations_match_python_with_i32_wraparound():
    """The numpy side of the trace (oracle, tile classes) against Python on
    every pair of a grid of negative and positive values."""
    values = [-2**31, -2**31 + 1, -65, -9, -7, -3, -2, -1, 0, 1, 2, 3, 7, 9, 64, 2**31 - 1]
    a, b = np.array(values, np.int32)[:, None], np.array(values, np.int32)[None, :]
    ta, tb = trace.array("int", a), trace.array("int", b)

    def wrap(x):
        return (x + 2**31) % 2**32 - 2**31

    for op, python in (("//", lambda x, y: x // y if y else 0),
                       ("%", lambda x, y: x % y if y else 0),
                       ("&", lambda x, y: x & y), ("|", lambda x, y: x | y),
                       ("^", lambda x, y: x ^ y)):
        got = eval(f"ta {op} tb").value
        want = [[wrap(python(x, y)) for y in values] for x in values]
        np.testing.assert_array_equal(got, want, err_msg=op)
    counts = np.array([-1, 0, 1, 5, 31, 32, 40], np.int32)
    got_l = (ta << trace.array("int", counts[None, :])).value
    got_r = (ta >> trace.array("int", counts[None, :])).value
    for i, x in enumerate(values):
        for j, c in enumerate(counts.tolist()):
            assert got_l[i, j] == (wrap(x << c) if 0 <= c <= 31 else 0), (x, c)
            assert got_r[i, j] == x >> (c if 0 <= c <= 31 else 31), (x, c)
    np.testing.assert_array_equal((~ta).value, wrap(~a.astype(np.int64)))


def test_the_emitted_erf_is_within_2e8_of_erf():
    from vyre_xdsl.spirv.math import erf_reference

    for x in np.linspace(-6.0, 6.0, 24001).tolist() + [1e-30, -1e-30, 0.0, 0.999999]:
        exact = math.erf(x)
        assert abs(erf_reference(x) - exact) <= 2e-8 * max(abs(exact), 1e-30), x
    assert math.isnan(erf_reference(float("nan")))
    assert erf_reference(float("inf")) == 1.0 and erf_reference(-float("inf")) == -1.0


SPECIAL = np.array([0.0, -0.0, 0.5, -0.99, 1.0, -1.5, 3.9, -4.5, 10.0, np.inf, -np.inf,
                    np.nan, 2.5, -2.5, 0.25, 7.0, -3.0, 1e-30], np.float32)
FUNCTIONS = {
    "erf": (vx.erf, lambda x: np.vectorize(math.erf)(x)),
    "pow": (lambda s: vx.pow(s, 3.5), lambda x: np.power(x, 3.5)),
    "pow by a traced odd whole": (lambda s: vx.pow(s, vx.where(s > 0.0, 3.0, 3.0)),
                                  lambda x: np.power(x, 3.0)),
    "pow by a traced fraction": (lambda s: vx.pow(s, vx.where(s > 0.0, -2.5, 0.5)),
                                 lambda x: np.power(x, np.where(x > 0, -2.5, 0.5))),
    "pow with an infinite exponent": (
        lambda s: vx.pow(s * 0.25, vx.where(s > 5.0, math.inf, vx.where(s < -2.0, -math.inf, 2.0))),
        lambda x: np.power(x * 0.25, np.where(x > 5, np.inf, np.where(x < -2, -np.inf, 2.0)))),
    "pow of a negative base": (lambda s: vx.pow(s - 1.0, s), lambda x: np.power(x - 1, x)),
    "pow 0 and 1": (lambda s: vx.pow(vx.where(s == s, 0.0, 0.0), s)
                    + vx.pow(vx.where(s == s, 1.0, 1.0), s),
                    lambda x: np.power(0.0, x) + np.power(1.0, x)),
    "** 3": (lambda s: s ** 3, lambda x: x ** 3),
    "round half to even": (round, np.rint),
    "floor ceil trunc": (lambda s: vx.floor(s) + vx.ceil(s) * 2 + vx.trunc(s) * 4,
                         lambda x: np.floor(x) + np.ceil(x) * 2 + np.trunc(x) * 4),
    "sin cos": (lambda s: vx.sin(s) + vx.cos(s), lambda x: np.sin(x) + np.cos(x)),
    "tan": (vx.tan, np.tan),
    "sqrt": (vx.sqrt, np.sqrt),
}


def _elementwise(fn) -> object:
    """A kernel computing out[i] = fn(x[i]) with traced operations."""
    from xdsl.dialects.builtin import ModuleOp

    from vyre_xdsl.skeleton import Buffer, per_item_kernel

    def body(b, buffers, item):
        with trace.building(b):
            result = fn(trace.wrap(b.load(buffers["x"], item)))
        b.store(result.ssa, buffers["out"], item)

    n = len(SPECIAL)
    return ModuleOp([per_item_kernel("elementwise", [Buffer("x", (n,)),
                                                      Buffer("out", (n,), "write")], n, body)])


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_math_functions_at_special_values(name, backend):
    """Interpreter: bit-exact with the numpy side of the trace (the oracle's);
    Vulkan: the same NaNs and infinities, finite values close to float64."""
    fn, truth = FUNCTIONS[name]
    out = vx.run(_elementwise(fn), {"x": SPECIAL}, backend=backend)["out"]
    oracle = fn(trace.array("f32", SPECIAL)).value
    if backend == "interpreter":
        np.testing.assert_array_equal(out, oracle)
    with np.errstate(all="ignore"):
        want = truth(SPECIAL.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(out), np.isnan(want)), (out, want)
    finite = np.isfinite(want)
    assert np.array_equal(out[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    # Vulkan's sin/cos/tan/pow are not correctly rounded (lavapipe's are close)
    np.testing.assert_allclose(out[finite], want[finite], rtol=2e-6, atol=2e-7)


@needs_val
def test_spirv_of_the_new_math_validates(tmp_path):
    module = _elementwise(lambda s: vx.erf(s) + vx.pow(s, 1.5) + vx.sin(s) + vx.tan(s)
                          + round(s) + vx.floor(s) + vx.ceil(s) + vx.trunc(s))
    assert_spirv_valid(vx.compile_spirv(module), tmp_path)


@needs_mlir_opt
def test_mlir_opt_accepts_the_new_ops():
    m = vx.flash_attention_2(
        seq_len=S, head_dim=D, num_heads=H,
        score_mod=lambda s, q, kv, h: vx.erf(s) + vx.pow(s, 1.5) + vx.sin(s) + vx.tan(s)
        + round(s) + (q - kv) // 3 + (q - kv) % (h + 2) + ((q << 2) >> (kv % 3)) + (q & ~kv),
        mask_mod=lambda q, kv: (kv ^ q) | 1 != 0)
    printed = assert_mlir_opt_accepts(vx.lower_to_gpu(m))
    for op in ("math.erf", "math.powf", "math.roundeven", "arith.shli", "arith.shrsi",
               "arith.divsi", "arith.remsi", "arith.xori"):
        assert op in printed, op


# misuse: VyreErrors that say what to write ------------------------------------

@pytest.mark.parametrize("score_mod, message", [
    (lambda s, q, kv: round(s, 2), "round(x, 2)"),
    (lambda s, q, kv: np.sum(s), "np.sum"),
    (lambda s, q, kv: np.add(s, 1.0, dtype=np.float64), "ufunc keyword (dtype)"),
    (lambda s, q, kv: np.add.reduce(s), "np.add.reduce"),
    (lambda s, q, kv: np.arctan2(s, 1.0), "np.arctan2"),
    (lambda s, q, kv: s + np.ones(3, np.float32), "numpy array of shape (3,)"),
    (lambda s, q, kv: s // 2, "'//' on f32"),
    (lambda s, q, kv: ~s, "'~' on an f32"),
    (lambda s, q, kv: s << 1, "'<<' on a f32"),
    (lambda s, q, kv: s + (q & (kv > 2)), "'&' between a int and a bool"),
    (lambda s, q, kv: np.where(s > 0), "np.where(condition) with one argument"),
    (lambda s, q, kv: vx.where(s > 0, s, kv > q), "between a boolean and a number"),
    (lambda s, q, kv: np.where(np.logical_and(q, kv), s, 0.0), "logical"),
    (lambda s, q, kv: np.clip(s, 0.0, 1.0, out=None), "np.clip with out"),
    (lambda s, q, *, scale: s, "keyword-only argument 'scale'"),
    (lambda s, q: s, "takes 2 arguments"),
    (lambda s, q, kv: s if kv in {0, 3} else s, "a traced value was hashed"),
    (lambda s, q, kv: {0: 1.0}.get(kv, s), "a traced value was hashed"),
    (functools.lru_cache(None)(lambda s, q, kv: s), "a traced value was hashed"),
])
def test_modifier_misuse_is_a_vyre_error(score_mod, message):
    with pytest.raises(VyreError) as info:
        vx.flash_attention_2(seq_len=S, head_dim=D, score_mod=score_mod)
    assert message in str(info.value), str(info.value)


@pytest.mark.parametrize("mask_mod, message", [
    (lambda q, kv: q + 2**40 == kv, "'+' with the integer 1099511627776, outside i32"),
    (lambda q, kv: q * 2**31 == kv, "'*' with the integer 2147483648, outside i32"),
    (lambda q, kv: q == -(2**31) - 1, "'==' with the integer -2147483649, outside i32"),
    (lambda q, kv: vx.where(q > kv, 2**40, 1) > 0, "'where' with the integer"),
    (lambda q, kv: q + np.int64(2**33) > kv, "with the integer 8589934592"),
    (lambda q, kv: q * 1e40 > kv, "'*' with the number 1e+40, beyond f32's largest"),
    (lambda q, kv: q + 10**400 > kv, "outside i32"),
])
def test_a_constant_beyond_i32_or_f32_is_a_vyre_error(mask_mod, message):
    """It was an OverflowError from numpy (the tile classification) or an
    xDSL error about packing a float; i32's own extremes still build."""
    with pytest.raises(VyreError) as info:
        vx.flash_attention_2(seq_len=S, head_dim=D, mask_mod=mask_mod)
    assert message in str(info.value), str(info.value)
    with pytest.raises(VyreError, match="beyond f32's largest"):
        vx.flash_attention_2(seq_len=S, head_dim=D, score_mod=lambda s, q, kv: s + 10**400)
    vx.flash_attention_2(seq_len=S, head_dim=D,
                         mask_mod=lambda q, kv: (q + (2**31 - 1) != kv) & (kv != -(2**31)),
                         score_mod=lambda s, q, kv: s * 3.4e38 + float("-inf"))


@pytest.mark.parametrize("result, message", [
    (10**400, "returns 100"),  # was float()'s OverflowError, in the kernel and the oracle
    (1e45, r"returns 1e\+45, beyond f32's range"),  # was xDSL's float-packing error
])
def test_a_constant_score_beyond_f32_is_a_vyre_error(result, message):
    q = np.ones((S, D), np.float32)
    for build in (lambda mod: vx.flash_attention_2(seq_len=S, head_dim=D, score_mod=mod),
                  lambda mod: vx.reference.flash_attention_2(q, q, q, score_mod=mod)):
        with pytest.raises(VyreError, match=message):
            build(lambda s, q, kv: result)


def test_a_numpy_number_is_a_constant_score():
    """np.float32(2.0) was refused as "must return an f32 score, got float32"."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((S, D), dtype=np.float32) for _ in range(3))
    for result in (np.float32(2.0), np.int64(-3), np.float64("-inf")):
        m = vx.flash_attention_2(seq_len=S, head_dim=D, score_mod=lambda s, q, kv: result)
        np.testing.assert_allclose(
            vx.run(m, {"q": q, "k": k, "v": v})["out"],
            vx.reference.flash_attention_2(q, k, v, score_mod=lambda s, q, kv: result),
            rtol=1e-5, atol=1e-6)


def test_a_traced_value_cannot_index_a_python_list():
    table = [0.0, 1.0, 2.0]
    with pytest.raises(VyreError, match="used as a Python int"):
        vx.flash_attention_2(seq_len=S, head_dim=D,
                             score_mod=lambda s, q, kv: s + table[kv % 3])


@pytest.mark.parametrize("score_mod, message", [
    (lambda s, q, kv: s * len(q), r"len\(\) of a traced value"),
    (lambda s, q, kv: s if f"{s}" else s, "formatted into a Python string"),
])
def test_python_only_uses_of_a_traced_value_name_the_problem(score_mod, message):
    with pytest.raises(VyreError, match=message):
        vx.flash_attention_2(seq_len=S, head_dim=D, score_mod=score_mod)


def test_an_mla_call_that_does_not_fit_names_the_public_builder():
    with pytest.raises(TypeError, match=r"vx\.mla_decode\(seq_len, num_heads, .*missing a "
                                        r"required argument: 'qk_rope_head_dim'"):
        vx.mla_decode(seq_len=8, num_heads=2, head_dim=4, kv_lora_rank=4)


# literal 0, inf and NaN operands: IEEE by cases, whatever the driver folds -----

def test_arithmetic_with_a_literal_zero_inf_or_nan_is_ieee():
    """x op c and c op x for c in 0, -0, inf, -inf, NaN (as selects, which a
    driver does not fold): numpy's IEEE results (a zero's sign aside)."""
    import itertools
    import operator

    from vyre_xdsl.trace_backends import NUMPY
    from vyre_xdsl.traced import Traced

    xs = np.array([0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 3e38], np.float32)
    ops = (operator.add, operator.sub, operator.mul, operator.truediv)
    for fn, c, reflected in itertools.product(ops, (0.0, -0.0, INF, -INF, math.nan),
                                              (False, True)):
        x = Traced("f32", xs.copy(), NUMPY)
        got = np.asarray((fn(c, x) if reflected else fn(x, c)).value, np.float32)
        with np.errstate(all="ignore"):
            want = fn(np.float32(c), xs) if reflected else fn(xs, np.float32(c))
        assert np.array_equal(got, want, equal_nan=True), (fn.__name__, c, reflected, got)


LITERAL_SPECIALS = {
    # every key dropped: a negative score over +0 is -inf
    "negative_over_zero": lambda s, q, kv: (s - 100.0) / 0.0,
    "positive_over_minus_zero": lambda s, q, kv: (s + 100.0) / -0.0,
    # inf * 0 is NaN (Mesa folds x * 0.0 to 0): the row is NaN
    "inf_times_zero": lambda s, q, kv: vx.where(kv == 1, (abs(s) * 0.0 + INF) * 0.0, s),
    # a NaN branch does not hide the -inf of the other from the analysis
    "nan_or_minus_inf": lambda s, q, kv: vx.where(kv == 0, math.nan,
                                                  vx.where(kv < 3, -INF, s)),
}


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
@pytest.mark.parametrize("level", ["exact", "default"])
@pytest.mark.parametrize("case", sorted(LITERAL_SPECIALS))
def test_modifiers_with_literal_specials_match_the_oracle(case, level, backend):
    score_mod = LITERAL_SPECIALS[case]
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 8, 4)).astype(np.float32) for _ in range(3))
    m = vx.flash_attention_2(seq_len=8, head_dim=4, tile_size=4, num_heads=2,
                             score_mod=score_mod, return_lse=True)
    got = vx.run(vx.lower_to_gpu(m, optimize=level), {"q": q, "k": k, "v": v},
                 backend=backend)
    with np.errstate(all="ignore"):
        want = vx.reference.flash_attention_2(q, k, v, tile_size=4, score_mod=score_mod,
                                              return_lse=True)
    for name, expected in zip(("out", "lse"), want, strict=True):
        np.testing.assert_allclose(got[name].reshape(expected.shape), expected,
                                   rtol=1e-5, atol=1e-6)


# a score_mod's -inf drops the key exactly, as a false mask_mod does ------------

INF = math.inf


def _fa2(backend, optimize="exact", seed=3, v_wild=False, **mods):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((H, S, D)).astype(np.float32) for _ in range(3))
    if v_wild:  # dropped keys' values must not reach any output
        wild = np.array([np.nan, np.inf, -np.inf, 1e38], np.float32)
        v[:, ::2] = wild[np.arange(len(range(0, S, 2))) % 4][None, :, None]
    m = vx.flash_attention_2(seq_len=S, head_dim=D, tile_size=8, num_heads=H, **mods)
    lowered = vx.lower_to_gpu(m, optimize=optimize)
    out = vx.run(lowered, {"q": q, "k": k, "v": v}, backend=backend)["out"]
    return out, vx.reference.flash_attention_2(q, k, v, tile_size=8, **mods)


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_minus_inf_from_score_mod_drops_the_key_like_a_mask(backend):
    """Keys at -inf have weight exactly 0, even where every kept key scores
    below -80 (the old clamp to -80 let the dropped keys win) and where the
    dropped keys' values are NaN or inf."""
    by_score = dict(score_mod=lambda s, q, kv: vx.where(kv % 2 == 0, -INF, s - 1000.0))
    by_mask = dict(score_mod=lambda s, q, kv: s - 1000.0, mask_mod=lambda q, kv: kv % 2 == 1)
    out, ref = _fa2(backend, v_wild=True, **by_score)
    masked, masked_ref = _fa2(backend, v_wild=True, **by_mask)
    assert not np.isnan(out).any() and np.isfinite(out).all()
    np.testing.assert_array_equal(ref, masked_ref)
    if backend == "interpreter":
        np.testing.assert_array_equal(out, ref)
        np.testing.assert_array_equal(out, masked)
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
@pytest.mark.parametrize("optimize", ["exact", "default"])
def test_rows_with_every_key_scored_minus_inf_output_zero(backend, optimize):
    mods = dict(score_mod=lambda s, q, kv, h: vx.where((q < 5) | (kv > q + h), -INF, s))
    out, ref = _fa2(backend, optimize, **mods)
    assert (out[:, :5] == 0).all() and (ref[:, :5] == 0).all()
    assert np.abs(out[:, 5:]).max() > 0
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    if backend == "interpreter" and optimize == "exact":
        np.testing.assert_array_equal(out, ref)


def test_minus_inf_rows_give_minus_inf_lse():
    mods = dict(score_mod=lambda s, q, kv: vx.where(q < 3, -INF, s))
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((S, D)).astype(np.float32) for _ in range(3))
    m = vx.flash_attention_2(seq_len=S, head_dim=D, tile_size=8, return_lse=True, **mods)
    got = vx.run(vx.lower_to_gpu(m, optimize="exact"), {"q": q, "k": k, "v": v})
    out, lse = vx.reference.flash_attention_2(q, k, v, tile_size=8, return_lse=True, **mods)
    assert (got["out"][:3] == 0).all() and (got["lse"][:3] == -np.inf).all()
    np.testing.assert_array_equal(got["lse"], lse)


def test_only_kernels_whose_scores_may_be_minus_inf_pay_for_the_check():
    from vyre_xdsl.dialects import vyre
    from vyre_xdsl.value_range import scores_may_be_minus_inf

    def skeleton(module):
        (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
        return op

    plain = vx.flash_attention_2(seq_len=S, head_dim=D)
    masked = vx.flash_attention_2(seq_len=S, head_dim=D, mask_mod=lambda q, kv: kv <= q)
    modified = vx.flash_attention_2(seq_len=S, head_dim=D, score_mod=lambda s, q, kv: s * 2.0)
    mla = vx.mla_decode(seq_len=S, num_heads=2, head_dim=4, kv_lora_rank=4, qk_rope_head_dim=2)
    assert not scores_may_be_minus_inf(skeleton(plain))
    assert not scores_may_be_minus_inf(skeleton(masked))
    assert not scores_may_be_minus_inf(skeleton(mla))
    assert scores_may_be_minus_inf(skeleton(modified))
    exp2 = vx.apply_pipeline(plain.clone(), "vyre-use-exp2")  # bounded * log2(e)
    assert not scores_may_be_minus_inf(skeleton(exp2))
    # a soft-cap's score is finite or NaN (vyre_xdsl.value_range): no key
    # is dropped, so neither the scores nor the update test for it
    capped = vx.flash_attention_2(seq_len=S, head_dim=D,
                                  score_mod=lambda s, q, kv: 30.0 * vx.tanh(s / 30.0))
    assert not scores_may_be_minus_inf(skeleton(capped))
    assert "arith.select" not in str(capped) and "0xff800000" not in str(capped)
    assert "arith.select" in str(modified)


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_soft_cap_without_the_drop_test_matches_the_oracle_on_wild_values(backend):
    """The soft-cap kernel has no dropped-key test: a NaN query row, and a
    key whose dot products are infinite (capped to +-30), land where the
    oracle puts them."""
    mods = dict(score_mod=lambda s, q, kv: 30.0 * vx.tanh(s / 30.0))
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((H, S, D)).astype(np.float32) for _ in range(3))
    q[:, 0, 1] = np.nan
    k[:, 3, 2] = np.inf
    m = vx.flash_attention_2(seq_len=S, head_dim=D, tile_size=8, num_heads=H, **mods)
    out = vx.run(vx.lower_to_gpu(m, optimize="exact"), {"q": q, "k": k, "v": v},
                 backend=backend)["out"]
    ref = vx.reference.flash_attention_2(q, k, v, tile_size=8, **mods)
    assert np.isnan(ref[:, 0]).all() and np.isfinite(ref[:, 1:]).all()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_allclose(out[:, 1:], ref[:, 1:], rtol=1e-5, atol=1e-6)


# captured tables: numpy arrays indexed with traced values ------------------------

_RNG = np.random.default_rng(11)
BIAS = _RNG.standard_normal(2 * S - 1).astype(np.float32)    # relative position bias
SLOPES = np.array([0.5, 0.125], np.float32)                  # ALiBi slope per head
DOC = np.repeat(np.arange(4), 5)                             # documents of 5 (int64)
BIAS_PER_HEAD = _RNG.standard_normal((H, 2 * S - 1)).astype(np.float32)
KEEP = _RNG.random(S) < 0.7                                  # a boolean table

TABLES = {
    "relative bias (global)": dict(score_mod=lambda s, q, kv: s + BIAS[kv - q + S - 1]),
    "ALiBi slopes per head": dict(score_mod=lambda s, q, kv, h: s - SLOPES[h] * abs(q - kv)),
    "document mask (int table)": dict(mask_mod=lambda q, kv: DOC[q] == DOC[kv]),
    "2-D table, negative indices": dict(
        score_mod=lambda s, q, kv, h: s + BIAS_PER_HEAD[h, kv - q]),
    "bool table": dict(mask_mod=lambda q, kv: KEEP[kv] | (kv == q)),
    "explicit vx.table": dict(score_mod=lambda s, q, kv: s * vx.table(SLOPES)[q % 2]),
}


def _closure_table():
    local = np.linspace(-1, 1, S).astype(np.float32)
    return dict(score_mod=lambda s, q, kv: s + local[kv])


TABLES["closure variable"] = _closure_table()


@pytest.mark.parametrize("name", list(TABLES))
@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_captured_tables_become_input_buffers_vx_run_passes(name, backend):
    out, ref = _run(backend, **TABLES[name])
    assert not np.isnan(ref).any()
    if backend == "interpreter":
        np.testing.assert_array_equal(out, ref)
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-5,
                                   atol=1e-5 * float(np.abs(_qkv()[2]).max()))


def test_a_captured_table_is_an_input_buffer_with_its_data_in_the_ir():
    from vyre_xdsl.kernel_info import program_info

    m = vx.flash_attention_2(seq_len=S, head_dim=D, num_heads=H, **TABLES["document mask (int table)"])
    text = str(m)
    assert 'vyre.buffer "captured_0" binding 4 read [20]' in text and "vyre.captured" in text
    # printed and parsed back, the table still travels with the kernel
    again = vx.parse_module(text)
    (buffer,) = [b for b in program_info(vx.lower_to_gpu(again)).inputs if b.captured]
    assert buffer.dtype == "i32" and list(buffer.captured) == DOC.tolist()
    q, k, v = _qkv()
    np.testing.assert_array_equal(
        vx.run(again, {"q": q, "k": k, "v": v})["out"],
        vx.run(m, {"q": q, "k": k, "v": v})["out"])
    # the caller may pass other data for it
    other = vx.run(m, {"q": q, "k": k, "v": v, "captured_0": np.zeros(S, np.int32)})["out"]
    assert not np.array_equal(other, vx.run(m, {"q": q, "k": k, "v": v})["out"])


def test_an_index_outside_the_table_reads_nan_not_memory():
    """Python's negative indices count from the end; outside [-n, n) an f32
    table reads NaN (evidence), on both sides."""
    short = np.ones(S // 2, np.float32)
    mods = dict(score_mod=lambda s, q, kv: s + vx.table(short)[kv - S // 4])
    out, ref = _run("interpreter", **mods)
    np.testing.assert_array_equal(out, ref)
    assert np.isnan(ref).all()  # every row meets keys past the table


@pytest.mark.parametrize("index, finite", [(-1, True), (S // 2, False), (-S // 2 - 1, False)])
def test_a_constant_index_follows_the_same_rule(index, finite):
    """An index known in Python (a constant) counts from the end where
    negative and reads NaN outside [-n, n), as a traced one does, in the
    kernel and the oracle (it raised numpy's IndexError)."""
    short = np.arange(S // 2, dtype=np.float32)
    out, ref = _run("interpreter", score_mod=lambda s, q, kv: s + vx.table(short)[index])
    np.testing.assert_array_equal(out, ref)
    assert np.isfinite(ref).all() == finite and (finite or np.isnan(ref).all())


@pytest.mark.parametrize("mods, message", [
    (dict(score_mod=lambda s, q, kv: s + _Holder.table[kv]), "wrap it with vx.table(array)"),
    (dict(score_mod=lambda s, q, kv: s + vx.table(BIAS)[kv:]), "one integer index per dimension"),
    (dict(score_mod=lambda s, q, kv: s + vx.table(BIAS_PER_HEAD)[kv]), "shape (2, 39)"),
    (dict(score_mod=lambda s, q, kv: s + vx.table(np.array(["a"]))[0 * kv]), "dtype <U1"),
    (dict(score_mod=lambda s, q, kv: s + vx.table(BIAS)[s]), "indexed with a f32 value"),
    (dict(score_mod=lambda s, q, kv: s + MASKED_BIAS[kv]), "masked array, whose mask"),
    (dict(score_mod=lambda s, q, kv: s + HUGE_BIAS[kv]),
     "holds 1e+300 (element 2 of the flattened table), beyond f32's largest"),
])
def test_tables_used_wrongly_say_what_to_write(mods, message):
    with pytest.raises(VyreError, match=None) as info:
        vx.flash_attention_2(seq_len=S, head_dim=D, num_heads=H, **mods)
    assert message in str(info.value), str(info.value)


MASKED_BIAS = np.ma.masked_array(np.zeros(S, np.float32), mask=[True] + [False] * (S - 1))
HUGE_BIAS = np.array([np.inf, np.nan, 1e300] + [0.0] * (S - 3))  # float64: inf, NaN are f32's


class _Holder:
    table = np.zeros(S, np.float32)  # reached through an attribute: not captured
