"""vyre-absorb-mla: MLA decode with W_uk and W_uv absorbed.

What is checked:
- the pass turns the seed's `mla_decode` into exactly `mla_decode_absorbed`
  (batched, ragged and paged too), by the kernel's `vyre.mla` record, and
  leaves every other kernel alone; optimize=default absorbs (into the
  three-kernel form, tests/test_mla_program.py), the other levels do not;
- the kernels below are that one-kernel form at the default's tuning
  (ONE_KERNEL);
- interpreter == `reference.mla_decode_absorbed` bit for bit (the absorbed
  order of operations), NaN and infinities included;
- close to the SEMANTICS.md oracle `reference.mla_decode`: within
  TOL * max|out of the head| (see below);
- NaN in any input reaches exactly the outputs it reaches in the seed;
- lavapipe runs the absorbed kernel within the Vulkan tolerance;
- far fewer loop iterations than the seed form.

Tolerance.  The absorbed form sums in another order: the scores as
(q W_uk) . c_t instead of q . (W_uk c_t), the output as W_uv (sum_t w_t c_t)
instead of sum_t w_t (W_uv c_t).  Measured on random normal inputs (w_uk
scaled 0.1 to 1), |absorbed - seed| / max|out| was at most 4.6e-7 for the
shapes tested here (seq <= 130, rank <= 32), 1.9e-6 at seq 200 / head_dim
32 / rank 64 and 8.5e-6 at seq 512 / head_dim 128 / rank 256; against a
float64 evaluation the absorbed form is about as accurate as the seed
(5.6e-6 vs 4.2e-6 at worst).  The error grows with the size of the sums and
with the spread of the scores (softmax amplifies a score's rounding), so the
tests use TOL = 1e-5 relative to the largest |out| of the head, which leaves
a margin of 20x at the shapes tested.

NaN and infinities.  A NaN anywhere in q, kv_cache, kr_cache, w_uk or w_uv
gives NaN in exactly the outputs where the seed gives NaN (every product
that meets it is NaN in both orders: a NaN in q, w_uk or one key poisons the
head or every head through the softmax denominator, a NaN in w_uv at (r, h,
d) only out[h, d]).  An infinity (or an overflow to one) is different: the
two orders meet it with different partners.  E.g. kv_cache[t, r] = inf
gives, in the seed, keys W_uk c_t whose dims are +inf and -inf, so q . k_t
is inf - inf = NaN and the whole output is NaN; absorbed, q_lat . c_t is
+-inf, which bounded_score clamps to -80, and the output is +-inf.  Likewise
q = inf (seed: every score +-inf, clamped; absorbed: q_lat holds +inf and
-inf, scores NaN) and w_uv = inf (seed: +-inf values of both signs across
keys sum to NaN; absorbed: one +-inf output).  So with infinities only the
absorbed oracle is the reference (bit-exact, NaN pattern included).
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre_xdsl as vx
from requirements import needs_vulkan
from test_fuzz_numeric import SETTINGS, _arrays, assert_close, assert_exact
from vyre_xdsl import reference, tuning
from vyre_xdsl.compiler import apply_pipeline, parse_module
from vyre_xdsl.decoders import mla_decode_absorbed
from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import program_info

TOL = 1e-5  # of max |out| of the head, see the module docstring
NAMES = ("q", "kv_cache", "kr_cache", "w_uk", "w_uv")

SHAPES = [
    # seq_len, num_heads, head_dim, kv_lora_rank, qk_rope_head_dim, tile_size
    (1, 1, 1, 1, 1, 64),    # everything 1
    (5, 1, 3, 2, 3, 64),    # seq_len < tile_size, rope == head_dim
    (10, 3, 4, 5, 2, 4),    # short last tile
    (9, 2, 4, 3, 1, 4),
    (8, 2, 4, 4, 2, 4),     # the lit test's shape: whole tiles
    (3, 70, 2, 2, 1, 64),   # 70 heads: two workgroups
    (70, 2, 3, 5, 1, 16),   # five tiles, the last of 6 keys
    (33, 3, 8, 16, 4, 1),   # tiles of one key
]


def mla_inputs(S, H, D, R, P, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "q": rng.standard_normal((H, D)).astype(np.float32),
        "kv_cache": rng.standard_normal((S, R)).astype(np.float32),
        "kr_cache": rng.standard_normal((S, P)).astype(np.float32),
        "w_uk": (0.5 * rng.standard_normal((R, H * D))).astype(np.float32),
        "w_uv": (0.5 * rng.standard_normal((R, H * D))).astype(np.float32),
    }


# The one-kernel absorbed form, tuned as optimize=default tunes it.
ONE_KERNEL = "vyre-absorb-mla,vyre-to-gpu"


@functools.lru_cache(maxsize=64)
def lowered(S, H, D, R, P, T, optimize=ONE_KERNEL):
    return vx.lower_to_gpu(vx.mla_decode(S, H, D, R, P, T), optimize=optimize)


def absorbed_oracle(inputs, T):
    return reference.mla_decode_absorbed(*(inputs[n] for n in NAMES), tile_size=T)


def seed_oracle(inputs, T):
    return reference.mla_decode(*(inputs[n] for n in NAMES), tile_size=T)


def assert_bit_exact(got, want, what=""):
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{what}: differs at {np.argwhere(~same)[:3].tolist()}"


def assert_near_seed(got, seed, what=""):
    """The NaN pattern of the seed; other values within TOL * max|out| of
    their head (finite outputs only; an infinite one must be equal)."""
    assert np.array_equal(np.isnan(got), np.isnan(seed)), f"{what}: NaN pattern differs"
    with np.errstate(all="ignore"):
        finite = np.where(np.isfinite(seed), np.abs(seed), 0)
        scale = finite.max(axis=1, keepdims=True)
        ok = np.isnan(seed) | (got == seed) | (
            np.abs(got.astype(np.float64) - seed) <= TOL * scale)
    assert ok.all(), (f"{what}: differs at {np.argwhere(~ok)[:3].tolist()}: "
                      f"{got[~ok][:3]} vs seed oracle {seed[~ok][:3]}")


def skeleton_of(module):
    return next(op for op in module.walk() if isinstance(op, vyre.TiledOnlineSoftmaxOp))


# The pass -------------------------------------------------------------------------


SERVING = [dict(batch=3), dict(batch=3, kv_lens=True), dict(batch=2, page_size=4, num_pages=9),
           dict(batch=1, page_size=8, num_pages=2, dtype="bf16")]


@pytest.mark.parametrize("shape, serving", [(shape, {}) for shape in SHAPES]
                         + [(SHAPES[3], kwargs) for kwargs in SERVING], ids=str)
def test_pass_turns_the_seed_into_the_absorbed_builder(shape, serving):
    seed = vx.mla_decode(*shape, **serving)
    before = str(seed)
    assert "vyre.mla = #vyre.mla<" in before
    absorbed = apply_pipeline(parse_module(before), "vyre-absorb-mla")
    assert str(absorbed) == str(mla_decode_absorbed(*shape, **serving))
    # ...and once is enough: the absorbed kernel is not the seed any more
    again = apply_pipeline(absorbed, "vyre-absorb-mla")
    assert str(again) == str(mla_decode_absorbed(*shape, **serving))
    program = apply_pipeline(parse_module(before), "vyre-absorb-mla{kernels=3}")
    rows = tuning.projection_rows(serving.get("batch", 1))  # the pass's default
    assert str(program) == str(vx.mla_decode_program(*shape, **serving, rows=rows))


def test_only_the_default_level_absorbs():
    def private_arrays(optimize):
        module = lowered(9, 2, 4, 3, 1, 4, optimize)
        return sorted(op.memref.name_hint for op in module.walk()
                      if op.name in ("memref.alloc", "memref.alloca"))

    seed_arrays = ["o_acc", "q_scratch", "score_tile"]
    assert private_arrays("none") == private_arrays("exact") == seed_arrays
    assert private_arrays(ONE_KERNEL) == sorted(seed_arrays + ["q_lat", "o_lat"])
    # default: the three-kernel form, whose latent vectors are temp buffers
    assert private_arrays("default") == seed_arrays
    from vyre_xdsl.passes import ALL_PASSES
    from vyre_xdsl.passes.absorb_mla import AbsorbMlaPass

    assert ALL_PASSES["vyre-absorb-mla"]() is AbsorbMlaPass


def _modified_scale(text):
    assert text.count("arith.constant 5.000000e-01 : f32") == 1
    return text.replace("arith.constant 5.000000e-01 : f32", "arith.constant 2.500000e-01 : f32")


def _without_record(text):
    kernel = parse_module(text).body.block.first_op
    del kernel.attributes["vyre.mla"]
    return str(kernel.parent_op())


def _record_says(text, **fields):
    for field, value in fields.items():
        text, count = re.subn(rf"\b{field} = \d+", f"{field} = {value}", text, count=1)
        assert count == 1
    return text


def _swapped_bindings(text):
    return (text.replace('"w_uk" binding 3', '"w_uk" binding 9')
                .replace('"w_uv" binding 4', '"w_uk" binding 3')
                .replace('"w_uk" binding 9', '"w_uv" binding 4'))


NOT_SEED_MLA = {
    "fa2": lambda: str(vx.flash_attention_2(16, 4, 4)),
    "fa2_causal": lambda: str(vx.flash_attention_2(16, 4, 4, mask_mod=lambda q, kv: kv <= q)),
    "fa2_named_like_mla": lambda: str(vx.flash_attention_2(16, 4, 4)).replace(
        "@flash_attention_2", "@mla_decode"),
    # no record: not MLA to the pass, whatever the fragments compute
    "mla_without_record": lambda: _without_record(str(vx.mla_decode(8, 2, 4, 4, 2, 4))),
    "mla_other_scale_without_record": lambda: _without_record(
        _modified_scale(str(vx.mla_decode(8, 2, 4, 4, 2, 4)))),
    # a record the buffers or the skeleton contradict
    "mla_record_other_rank": lambda: _record_says(
        str(vx.mla_decode(8, 2, 4, 4, 2, 4)), kv_lora_rank=3),
    "mla_record_other_batch": lambda: _record_says(
        str(vx.mla_decode(8, 2, 4, 4, 2, 4, batch=2)), batch=3),
    "mla_record_without_pages": lambda: str(vx.mla_decode(8, 2, 4, 4, 2, 4, batch=2,
                                                          page_size=4, num_pages=5)).replace(
        ", page_size = 4, num_pages = 5>", ">"),
    "mla_split": lambda: str(apply_pipeline(vx.mla_decode(8, 2, 4, 4, 2, 4),
                                            "vyre-split-kv{splits=2 merge=kernel}")),
    "mla_resized": lambda: str(apply_pipeline(vx.mla_decode(8, 2, 4, 4, 2, 4),
                                              "vyre-resize-workgroup{size=32}")),
    # w_uk and w_uv trade bindings: the fragments read them the other way round
    "mla_swapped_weights": lambda: _swapped_bindings(str(vx.mla_decode(8, 2, 4, 4, 2, 4))),
    "mla_exp2": lambda: str(apply_pipeline(vx.mla_decode(8, 2, 4, 4, 2, 4), "vyre-use-exp2")),
    "mla_absorbed": lambda: str(mla_decode_absorbed(8, 2, 4, 4, 2, 4)),
}


@pytest.mark.parametrize("build", NOT_SEED_MLA.values(), ids=NOT_SEED_MLA.keys())
def test_pass_leaves_other_kernels_alone(build):
    text = build()
    module = parse_module(text)
    assert str(apply_pipeline(module, "vyre-absorb-mla")) == str(parse_module(text))


def test_the_record_is_the_builders_word():
    """The pass reads the record, not the fragments: a kernel that keeps the
    record of vx.mla_decode is rewritten whatever its fragments compute (a
    rewrite that changes them must drop the record)."""
    text = _modified_scale(str(vx.mla_decode(8, 2, 4, 4, 2, 4)))
    absorbed = apply_pipeline(parse_module(text), "vyre-absorb-mla")
    assert str(absorbed) == str(mla_decode_absorbed(8, 2, 4, 4, 2, 4))


def test_mla_with_other_fragments_is_left_alone():
    """MLA's buffers and shape, FlashAttention-like fragments, no record:
    not the seed."""
    S, H, D, R, P = 8, 2, 4, 4, 2

    def scores(f):
        def one(b, j, _):
            b.store(b.bounded_score(b.load(f.buffer("kv_cache"), b.addi(f.tile_start, j))),
                    f.score_tile, b.score_index(j))
            return []

        f.loop(0, f.tile_len, one)

    def update(f):
        def one(b, d, _):
            index = b.o_index(d)
            b.store(b.mulf(b.load(f.o_acc, index), f.rescale), f.o_acc, index)
            return []

        f.loop(0, D, one)

    module = vx.tiled_online_softmax(
        "mla_decode",
        [vx.Buffer("q", (H, D)), vx.Buffer("kv_cache", (S, R)), vx.Buffer("kr_cache", (S, P)),
         vx.Buffer("w_uk", (R, H * D)), vx.Buffer("w_uv", (R, H * D)),
         vx.Buffer("out", (H, D), "write")],
        item_count=H, seq_len=S, head_dim=D, tile_size=4, scores=scores, update=update,
    )
    before = str(module)
    assert str(apply_pipeline(module, "vyre-absorb-mla")) == before


# Interpreter: bit-exact with the absorbed oracle, close to the seed's ---------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_absorbed_mla_is_the_absorbed_oracle_bit_for_bit(shape):
    S, H, D, R, P, T = shape
    inputs = mla_inputs(S, H, D, R, P, seed=S * H + R)
    got = vx.run(lowered(*shape), inputs, backend="interpreter")["out"]
    assert_bit_exact(got, absorbed_oracle(inputs, T), f"mla {shape}")
    assert_near_seed(got, seed_oracle(inputs, T), f"mla {shape}")
    # the plain lowering of the absorbed builder computes the same bits
    none = vx.run(vx.lower_to_gpu(mla_decode_absorbed(*shape), optimize="none"), inputs)["out"]
    assert_bit_exact(none, got, f"mla {shape} at optimize=none")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("count", [1, 3])
def test_nan_reaches_the_outputs_it_reaches_in_the_seed(name, count):
    S, H, D, R, P, T = 10, 3, 4, 5, 2, 4
    rng = np.random.default_rng(sum(map(ord, name)) + count)
    inputs = mla_inputs(S, H, D, R, P, seed=count)
    flat = inputs[name].reshape(-1)
    flat[rng.choice(flat.size, size=min(count, flat.size), replace=False)] = np.nan
    got = vx.run(lowered(S, H, D, R, P, T), inputs)["out"]
    seed = seed_oracle(inputs, T)
    assert np.isnan(seed).any()
    assert_bit_exact(got, absorbed_oracle(inputs, T), name)
    assert_near_seed(got, seed, name)


def test_nan_in_w_uv_stays_in_its_output():
    inputs = mla_inputs(10, 3, 4, 5, 2)
    inputs["w_uv"].reshape(5, 3, 4)[2, 1, 3] = np.nan  # rank 2, head 1, dim 3
    got = vx.run(lowered(10, 3, 4, 5, 2, 4), inputs)["out"]
    assert np.argwhere(np.isnan(got)).tolist() == [[1, 3]]
    assert_near_seed(got, seed_oracle(inputs, 4))


def test_infinite_latent_entry_differs_from_the_seed_as_documented():
    """kv_cache[t, r] = inf: the seed's decompressed key holds +inf and -inf,
    its score is NaN and so is every output; absorbed, the score is +-inf,
    clamped to -80, and the outputs are infinite, none NaN."""
    inputs = mla_inputs(10, 3, 4, 5, 2, seed=3)
    inputs["kv_cache"][4, 1] = np.inf
    got = vx.run(lowered(10, 3, 4, 5, 2, 4), inputs)["out"]
    assert np.isnan(seed_oracle(inputs, 4)).all()
    assert not np.isnan(got).any() and np.isinf(got).any()
    assert_bit_exact(got, absorbed_oracle(inputs, 4))


@st.composite
def mla_cases(draw, max_seq=12, nan_only=False):
    s = draw(st.integers(1, max_seq))
    h = draw(st.integers(1, 3))
    d = draw(st.integers(1, 4))
    r = draw(st.integers(1, 4))
    p = draw(st.integers(1, d))
    t = draw(st.integers(1, 6))
    shapes = {"q": (h, d), "kv_cache": (s, r), "kr_cache": (s, p),
              "w_uk": (r, h * d), "w_uv": (r, h * d)}
    if nan_only:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        inputs = {n: rng.standard_normal(shape).astype(np.float32)
                  for n, shape in shapes.items()}
        for _ in range(draw(st.integers(0, 3))):
            flat = inputs[draw(st.sampled_from(NAMES))].reshape(-1)
            flat[draw(st.integers(0, flat.size - 1))] = np.nan
    else:
        inputs = {n: _arrays(draw, shape) for n, shape in shapes.items()}
    return (s, h, d, r, p, t), inputs


@settings(max_examples=100, **SETTINGS)
@given(case=mla_cases())
def test_fuzz_interpreter_matches_absorbed_oracle_bit_exactly(case, fuzz_stats):
    """NaN, +-inf, huge, subnormal: as tests/test_fuzz_numeric.py draws them."""
    shape, inputs = case
    out = vx.run(lowered(*shape), inputs, backend="interpreter")["out"]
    fuzz_stats["numeric: absorbed mla interpreter vs absorbed oracle"] += 1
    assert_exact(out, absorbed_oracle(inputs, shape[5]), f"absorbed mla {shape}")


@settings(max_examples=100, **SETTINGS)
@given(case=mla_cases(nan_only=True))
def test_fuzz_nan_pattern_is_the_seeds(case, fuzz_stats):
    shape, inputs = case
    out = vx.run(lowered(*shape), inputs, backend="interpreter")["out"]
    fuzz_stats["numeric: absorbed mla NaN pattern vs seed oracle"] += 1
    assert_exact(out, absorbed_oracle(inputs, shape[5]), f"absorbed mla {shape}")
    assert_near_seed(out, seed_oracle(inputs, shape[5]), f"absorbed mla {shape}")


# Vulkan (lavapipe) ----------------------------------------------------------------

VULKAN_SHAPES = [
    (130, 3, 16, 8, 4, 64),    # tests/test_vulkan.py's MLA shape
    (37, 5, 8, 6, 3, 16),      # short last tile
    (1000, 8, 64, 32, 16, 64), # tests/test_spirv.py's MLA shape, the seed's too big for lavapipe
]


@needs_vulkan
@pytest.mark.parametrize("shape", VULKAN_SHAPES, ids=str)
def test_vulkan_runs_the_absorbed_kernel(shape):
    S, H, D, R, P, T = shape
    inputs = mla_inputs(S, H, D, R, P, seed=S)
    inputs["w_uk"] *= np.float32(0.6)
    out = vx.run(lowered(*shape), inputs, backend="vulkan")["out"]
    # GLSL.std.450 Exp is not correctly rounded: the Vulkan tolerance of
    # tests/test_vulkan.py against the absorbed oracle...
    assert_close(out, absorbed_oracle(inputs, T), f"vulkan absorbed mla {shape}")
    # ...and the reordering tolerance against the seed's
    assert_near_seed(out, seed_oracle(inputs, T), f"vulkan absorbed mla {shape}")


# Cost ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape,none_gain,exact_gain", [
    ((130, 3, 16, 8, 4, 64), 8, 1.5),
    # DeepSeek-V2-like; only a static count, nothing runs (at none: seed
    # 537,944,512, absorbed 4,633,664; at exact 4,235,852 and 147,296; the
    # default, split 64 ways, 4,921 per invocation)
    ((4096, 16, 128, 512, 64, 64), 100, 25),
], ids=["small", "deepseek"])
def test_absorbed_kernel_runs_far_fewer_loop_iterations(shape, none_gain, exact_gain):
    """The static bound (KernelInfo.loop_iterations, what the Vulkan runtime
    checks against lavapipe's budget):"""
    def iterations(module, level):
        kernels = program_info(vx.lower_to_gpu(module, optimize=level)).kernels
        return max(kernel.loop_iterations for kernel in kernels)

    seed = {level: iterations(vx.mla_decode(*shape), level) for level in ("none", "exact")}
    absorbed = {level: iterations(mla_decode_absorbed(*shape), level)
                for level in ("none", "exact")}
    # the absorbed forms, retiled and split over invocations
    assert iterations(vx.mla_decode(*shape), ONE_KERNEL) < seed["exact"]
    assert iterations(vx.mla_decode(*shape), "default") < seed["exact"]
    assert absorbed["none"] * none_gain < seed["none"]
    assert absorbed["exact"] * exact_gain < seed["exact"]


# Shape checks ----------------------------------------------------------------------


def test_latent_scratch_must_fit_u32():
    # w_uk (2^27 f32) and kv_cache fit; 64 lanes * 2^27 latent floats do not
    with pytest.raises(VyreError, match=r"scratch q_lat = workgroup_size \(64\) \* "
                                         r"kv_lora_rank \(134217728\).*reduce kv_lora_rank"):
        mla_decode_absorbed(1, 1, 1, 2**27, 1)


def test_absorbed_builder_checks_shapes_like_the_seed():
    for bad in (dict(qk_rope_head_dim=5), dict(seq_len=0), dict(head_dim=2.0)):
        args = dict(seq_len=4, num_heads=2, head_dim=4, kv_lora_rank=3, qk_rope_head_dim=2)
        args.update(bad)
        with pytest.raises(VyreError) as seed_error:
            vx.mla_decode(**args)
        with pytest.raises(VyreError) as absorbed_error:
            mla_decode_absorbed(**args)
        assert str(seed_error.value) == str(absorbed_error.value)


def test_decoder_scratch_is_declared_and_checked():
    def scores(f):
        f.store(f.f32(0.0), f.scratch("extra"), f.scratch_index("extra", f.index(0)))

    def update(f):
        f.scratch("missing")

    common = dict(item_count=2, seq_len=4, head_dim=2, tile_size=2)
    buffers = [vx.Buffer("q", (2, 2)), vx.Buffer("out", (2, 2), "write")]
    module = vx.tiled_online_softmax(
        "k", buffers, scores=scores, update=lambda f: None, scratch={"extra": 3}, **common)
    kernel = skeleton_of(module).parent_op()
    assert [(s.sym_name.data, s.result.type.get_shape()) for s in kernel.scratch_arrays][-1] \
        == ("extra", (192,))
    with pytest.raises(VyreError, match="scratch array 'missing'.*declared: extra"):
        vx.tiled_online_softmax("k", buffers, scores=scores, update=update,
                                scratch={"extra": 3}, **common)
    with pytest.raises(VyreError, match="'o_acc' is the skeleton's own"):
        vx.tiled_online_softmax("k", buffers, scores=scores, update=lambda f: None,
                                scratch={"o_acc": 3}, **common)
    with pytest.raises(VyreError, match="'q' names both a buffer and a scratch array"):
        vx.tiled_online_softmax("k", buffers, scores=scores, update=lambda f: None,
                                scratch={"q": 3}, **common)
    with pytest.raises(VyreError, match="scratch 'extra' length must be > 0"):
        vx.tiled_online_softmax("k", buffers, scores=scores, update=lambda f: None,
                                scratch={"extra": 0}, **common)
