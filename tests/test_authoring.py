"""The authoring API: score_mod / mask_mod with tile skipping, heads and GQA,
new decoders from two fragments, vyre-use-exp2, and build-time errors."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl import reference
from vyre_xdsl.dialects import vyre
from requirements import needs_vulkan

REPO = Path(__file__).resolve().parents[1]
THIS_FILE = str(Path(__file__).resolve())


def alibi(num_heads):
    """ALiBi: a per-head linear penalty on distance, slopes 2^(-8(h+1)/H)."""
    return lambda s, q, kv, h: s - vx.exp2(-8.0 * (h + 1) / num_heads) * vx.abs(q - kv)


VARIANTS = {
    "causal": dict(mask_mod=lambda q, kv: kv <= q),
    "sliding_window": dict(mask_mod=lambda q, kv: (kv <= q) & (q - kv < 24)),
    "soft_cap": dict(score_mod=lambda s, q, kv: 30.0 * vx.tanh(s / 30.0)),
    "alibi": dict(score_mod=alibi(4)),
    "alibi_causal": dict(score_mod=alibi(4), mask_mod=lambda q, kv: kv <= q),
    "prefix_lm": dict(mask_mod=lambda q, kv: (kv < 8) | (kv <= q)),
    "head_mask": dict(mask_mod=lambda q, kv, h: (kv <= q) | (h == 1)),
    "where": dict(score_mod=lambda s, q, kv: vx.where(kv > q, s - 2.0, vx.maximum(s, -1.0))),
}
# (seq_len, head_dim, tile_size, num_heads, num_kv_heads): blocks of 64 items
# straddle heads (40 rows per head), the last tile is short.
SHAPES = {"1head": (70, 3, 16, 1, 1), "gqa": (40, 2, 16, 4, 2)}


def inputs(seq_len, head_dim, num_heads, num_kv_heads, seed=0):
    rng = np.random.default_rng(seed)
    q_shape = (seq_len, head_dim) if num_heads == 1 else (num_heads, seq_len, head_dim)
    kv_shape = (seq_len, head_dim) if num_heads == 1 else (num_kv_heads, seq_len, head_dim)
    q = rng.standard_normal(q_shape, dtype=np.float32) * 2
    k = rng.standard_normal(kv_shape, dtype=np.float32) * 2
    v = rng.standard_normal(kv_shape, dtype=np.float32)
    return q, k, v


PER_HEAD = {"alibi", "alibi_causal", "head_mask"}  # they read the head index


def variant_cases(names):
    """(name, shape) pairs; per-head variants only where there are heads."""
    return [
        (name, shape)
        for shape, (_, _, _, heads, _) in SHAPES.items()
        for name in names
        if heads > 1 or name not in PER_HEAD
    ]


def run_variant(name, shape, backend):
    S, D, T, H, KV = SHAPES[shape]
    mods = VARIANTS[name]
    q, k, v = inputs(S, D, H, KV)
    module = vx.flash_attention_2(S, D, T, num_heads=H, num_kv_heads=KV, **mods)
    # "exact": the oracle's order of operations (the default level may split
    # a kernel with few rows over several invocations: tests/test_split_kv.py)
    lowered = vx.lower_to_gpu(module, optimize="exact")
    out = vx.run(lowered, {"q": q, "k": k, "v": v}, backend=backend)["out"]
    want = reference.flash_attention_2(q, k, v, T, **mods)
    assert out.shape == q.shape
    return out, want


@pytest.mark.parametrize("name, shape", variant_cases(VARIANTS))
def test_modifiers_match_the_oracle_bit_for_bit_on_the_interpreter(name, shape):
    out, want = run_variant(name, shape, "interpreter")
    np.testing.assert_array_equal(out, want)


@needs_vulkan
@pytest.mark.parametrize(
    "name, shape", variant_cases(["causal", "sliding_window", "soft_cap", "alibi_causal"])
)
def test_modifiers_match_the_oracle_on_vulkan(name, shape):
    out, want = run_variant(name, shape, "vulkan")
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)


def test_an_always_true_mask_and_an_identity_score_mod_are_bit_exact_with_plain_fa2():
    q, k, v = inputs(70, 3, 1, 1)
    plain = vx.run(vx.flash_attention_2(70, 3, 16), {"q": q, "k": k, "v": v})["out"]
    for mods in (dict(mask_mod=lambda q, kv: kv >= 0), dict(score_mod=lambda s, q, kv: s)):
        module = vx.flash_attention_2(70, 3, 16, **mods)
        np.testing.assert_array_equal(vx.run(module, {"q": q, "k": k, "v": v})["out"], plain)
    np.testing.assert_array_equal(plain, reference.flash_attention_2(q, k, v, 16))


def test_fully_masked_rows_output_zero():
    q, k, v = inputs(20, 2, 1, 1)
    mask = lambda q, kv: q >= 10  # noqa: E731 - rows < 10 see no key
    out = vx.run(vx.flash_attention_2(20, 2, 8, mask_mod=mask), {"q": q, "k": k, "v": v})["out"]
    assert np.all(out[:10] == 0)
    np.testing.assert_array_equal(out, reference.flash_attention_2(q, k, v, 8, mask_mod=mask))


def test_masked_keys_have_weight_exactly_zero():
    # A masked key with a huge value would show through any weight > 0.
    q, k, v = inputs(10, 1, 1, 1)
    v[9] = 3e38
    k[9] = -50.0  # its score would be clamped to -80: exp(-80) * 3e38 > 1e3
    mask = lambda q, kv: kv < 9  # noqa: E731
    out = vx.run(vx.flash_attention_2(10, 1, 4, mask_mod=mask), {"q": q, "k": k, "v": v})["out"]
    assert np.all(np.abs(out) < 10)
    np.testing.assert_array_equal(out, reference.flash_attention_2(q, k, v, 4, mask_mod=mask))



# --------------------------------------------------------------------------
# Tile classification
# --------------------------------------------------------------------------


def test_causal_skips_120_of_256_tiles_at_seq_1024():
    module = vx.flash_attention_2(1024, 16, 64, mask_mod=lambda q, kv: kv <= q)
    assert vx.tile_class_counts(module) == {"empty": 120, "full": 120, "partial": 16}


def brute_force_classes(mask, items, seq_len, tile_size):
    classes = []
    for block in range(-(-items // 64)):
        for tile in range(-(-seq_len // tile_size)):
            kept = [
                bool(mask(i, kv))
                for i in range(block * 64, min(block * 64 + 64, items))
                for kv in range(tile * tile_size, min(tile * tile_size + tile_size, seq_len))
            ]
            classes.append(
                vyre.TILE_FULL if all(kept) else vyre.TILE_PARTIAL if any(kept) else vyre.TILE_EMPTY
            )
    return classes


@pytest.mark.parametrize("seq_len,heads,tile", [(100, 1, 16), (40, 3, 16), (70, 2, 32)])
def test_classification_matches_brute_force_with_blocks_straddling_heads(seq_len, heads, tile):
    def mask(q, kv):
        return (kv <= q) & (q - kv < 20)

    module = vx.flash_attention_2(seq_len, 2, tile, num_heads=heads, mask_mod=mask)
    (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
    got = [int(x) for x in op.tile_classes.get_values()]
    want = brute_force_classes(
        lambda item, kv: mask(item % seq_len, kv), heads * seq_len, seq_len, tile
    )
    assert got == want


def test_skipping_is_exactly_the_same_as_masking_every_tile():
    q, k, v = inputs(40, 2, 3, 3)
    mask = lambda q, kv: (kv <= q) & (q - kv < 10)  # noqa: E731
    module = vx.flash_attention_2(40, 2, 8, num_heads=3, mask_mod=mask)
    skipping = vx.run(module, {"q": q, "k": k, "v": v})["out"]
    plugin = load_example("no_tile_skipping")
    plugin.NoTileSkippingPass().apply(None, module)
    (op,) = [o for o in module.walk() if isinstance(o, vyre.TiledOnlineSoftmaxOp)]
    assert op.tile_classes is None
    np.testing.assert_array_equal(vx.run(module, {"q": q, "k": k, "v": v})["out"], skipping)


# --------------------------------------------------------------------------
# Heads and grouped-query attention
# --------------------------------------------------------------------------


def test_gqa_buffers_and_head_mapping():
    module = vx.flash_attention_2(8, 2, 4, num_heads=6, num_kv_heads=2)
    shapes = {b.sym_name.data: b.logical_shape for b in module.walk() if isinstance(b, vyre.BufferOp)}
    assert shapes == {"q": (6, 8, 2), "k": (2, 8, 2), "v": (2, 8, 2), "out": (6, 8, 2)}
    q, k, v = inputs(8, 2, 6, 2)
    # "exact": the default splits these 48 rows' keys (a kernel merges them)
    out = vx.run(vx.lower_to_gpu(module, optimize="exact"), {"q": q, "k": k, "v": v})["out"]
    for h in range(6):  # query head h reads kv head h // 3
        one = reference.flash_attention_2(q[h], k[h // 3], v[h // 3], 4)
        np.testing.assert_array_equal(out[h], one)


def test_num_heads_must_be_a_multiple_of_num_kv_heads():
    with pytest.raises(vx.VyreError, match="multiple of num_kv_heads"):
        vx.flash_attention_2(8, 2, num_heads=6, num_kv_heads=4)
    with pytest.raises(vx.VyreError, match="num_kv_heads must be > 0"):
        vx.flash_attention_2(8, 2, num_heads=6, num_kv_heads=0)


# --------------------------------------------------------------------------
# Build-time errors point at the user's function and line
# --------------------------------------------------------------------------


def line_of(marker: str) -> int:
    for number, text in enumerate(Path(THIS_FILE).read_text().splitlines(), 1):
        if marker in text and "line_of(" not in text:
            return number
    raise AssertionError(marker)


def test_a_data_dependent_if_is_an_error_at_the_users_line():
    def score_mod(s, q, kv):
        if s > 0:  # MARK-IF
            return s
        return -s

    with pytest.raises(vx.VyreError, match="data-dependent") as error:
        vx.flash_attention_2(8, 2, score_mod=score_mod)
    assert f"{THIS_FILE}:{line_of('MARK-IF')}" in str(error.value)
    assert "vx.where" in str(error.value)


def test_bool_of_a_traced_value_is_an_error():
    with pytest.raises(vx.VyreError, match="bool") as error:
        vx.flash_attention_2(8, 2, mask_mod=lambda q, kv: bool(kv <= q))  # MARK-BOOL
    assert f"{THIS_FILE}:{line_of('MARK-BOOL')}" in str(error.value)


def test_python_and_is_an_error():
    with pytest.raises(vx.VyreError, match="&, |, ~"):
        vx.flash_attention_2(8, 2, mask_mod=lambda q, kv: kv <= q and kv >= 0)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(score_mod=lambda s, q, kv: s > 0), "must return an f32 score, got bool"),
        (dict(mask_mod=lambda q, kv: q - kv), "must return a boolean"),
        (dict(score_mod=lambda s, q: s), "takes 2 arguments"),
        (dict(mask_mod=lambda q, kv, h, x: True), "takes 4 arguments"),
        (dict(score_mod=lambda s, q, kv: s + "x"), "str"),
        (dict(score_mod=lambda s, q, kv: (s > 0) ** 2), r"'\*\*' on a boolean"),
        (dict(score_mod=lambda s, q, kv: s % 2), "integer indices only"),
        (dict(mask_mod=lambda q, kv: (kv <= q) + 1), "on a boolean"),
    ],
)
def test_bad_modifiers_fail_at_build_time(kwargs, message):
    with pytest.raises(vx.VyreError, match=message) as error:
        vx.flash_attention_2(8, 2, **kwargs)
    assert THIS_FILE in str(error.value)


def test_reading_a_buffer_that_does_not_exist_points_at_the_fragment():
    def scores(f):
        f.buffer("bias")  # MARK-BUFFER

    with pytest.raises(vx.VyreError, match="'bias'") as error:
        vx.tiled_online_softmax(
            "x", [vx.Buffer("q", (4, 1)), vx.Buffer("out", (4, 1), "write")],
            item_count=4, seq_len=4, head_dim=1, scores=scores, update=lambda f: None,
        )
    assert f"{THIS_FILE}:{line_of('MARK-BUFFER')}" in str(error.value)


def test_the_verifier_requires_tile_weight_in_a_masked_update():
    text = str(vx.flash_attention_2(8, 2, 4, mask_mod=lambda q, kv: kv <= q))
    broken = text.replace(
        "%weight = vyre.tile_weight %j_1 : f32",
        "%sj = memref.load %score_tile_2[%j_1] : memref<256xf32>\n"
        "          %weight = math.exp %sj : f32",
    )
    assert broken != text
    with pytest.raises(vx.VyreError, match="vyre.tile_weight"):
        vx.parse_module(broken)
    assert "tile_classes [2, 2]" in text
    with pytest.raises(vx.VyreError, match="entries"):
        vx.parse_module(text.replace("tile_classes [2, 2]", "tile_classes [2, 2, 2]"))


def test_masked_ir_round_trips():
    module = vx.flash_attention_2(70, 2, 16, num_heads=2, mask_mod=lambda q, kv: kv <= q)
    text = str(module)
    assert "tile_classes [" in text and "mask(" in text
    assert str(vx.parse_module(text)) == text


# --------------------------------------------------------------------------
# A new decoder from two fragments (examples/biased_attention.py)
# --------------------------------------------------------------------------


def load_example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def biased_inputs(S, D):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((S, D), dtype=np.float32) for _ in range(3))
    bias = rng.standard_normal((S, S), dtype=np.float32) * 3
    return q, k, v, bias


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_biased_attention_example_matches_its_oracle(backend):
    example = load_example("biased_attention")
    q, k, v, bias = biased_inputs(70, 3)
    out = vx.run(example.build(70, 3, 16), {"q": q, "k": k, "v": v, "bias": bias}, backend=backend)["out"]
    want = example.reference(q, k, v, bias, 16)
    if backend == "interpreter":
        np.testing.assert_array_equal(out, want)
    else:
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)
    # a zero bias is plain FlashAttention-2
    zero = example.reference(q, k, v, np.zeros_like(bias), 16)
    np.testing.assert_array_equal(zero, reference.flash_attention_2(q, k, v, 16))


# --------------------------------------------------------------------------
# vyre-use-exp2 and plugins
# --------------------------------------------------------------------------


@pytest.mark.parametrize("mods", [{}, VARIANTS["causal"], VARIANTS["soft_cap"]], ids=["plain", "causal", "soft_cap"])
def test_use_exp2_keeps_the_result(mods):
    q, k, v = inputs(70, 3, 1, 1)
    module = vx.apply_pipeline(vx.flash_attention_2(70, 3, 16, **mods), "vyre-use-exp2")
    assert "exp2" in str(module)
    out = vx.run(module, {"q": q, "k": k, "v": v})["out"]
    np.testing.assert_allclose(out, reference.flash_attention_2(q, k, v, 16, **mods), rtol=1e-5, atol=1e-6)


def test_use_exp2_on_mla_decode():
    rng = np.random.default_rng(1)
    S, H, D, R, P = 33, 2, 3, 2, 1
    args = dict(
        q=rng.standard_normal((H, D), dtype=np.float32),
        kv_cache=rng.standard_normal((S, R), dtype=np.float32),
        kr_cache=rng.standard_normal((S, P), dtype=np.float32),
        w_uk=rng.standard_normal((R, H * D), dtype=np.float32),
        w_uv=rng.standard_normal((R, H * D), dtype=np.float32),
    )
    module = vx.mla_decode(seq_len=S, num_heads=H, head_dim=D, kv_lora_rank=R, qk_rope_head_dim=P)
    module = vx.apply_pipeline(module, "vyre-use-exp2")
    out = vx.run(module, args)["out"]
    np.testing.assert_allclose(out, reference.mla_decode(*args.values()), rtol=1e-5, atol=1e-6)


def self_weighing_attention(seq_len, head_dim, tile_size, weigh):
    """FlashAttention-2 whose update weighs each key itself, as
    `weigh(score, m_new)`, instead of taking the skeleton's weight."""
    scale = float(np.float32(1) / np.sqrt(np.float32(head_dim)))

    def scores(f):
        def one_key(b, j, _):
            t = b.addi(f.tile_start, j)
            (dot,) = b.loop(0, head_dim, lambda b, d, acc: [vx.wrap(acc[0]) + vx.wrap(
                b.load(f.q_scratch, b.q_index(d))) * vx.wrap(
                b.load(f.buffer("k"), b.flat_index(t, head_dim, d)))], [0.0])
            b.store(b.bounded_score(vx.wrap(dot) * scale), f.score_tile, b.score_index(j))
            return []

        f.loop(0, f.tile_len, one_key)

    def update(f):
        def one_dim(b, d, _):
            def add_key(b, j, acc):
                s = b.load(f.score_tile, b.score_index(j))
                v_d = b.load(f.buffer("v"), b.flat_index(b.addi(f.tile_start, j), head_dim, d))
                return [vx.wrap(acc[0]) + vx.wrap(weigh(b, s, f.m_new)) * vx.wrap(v_d)]

            (wv,) = b.loop(0, f.tile_len, add_key, [0.0])
            o = b.o_index(d)
            b.store(vx.wrap(f.rescale) * vx.wrap(b.load(f.o_acc, o)) + vx.wrap(wv), f.o_acc, o)
            return []

        f.loop(0, head_dim, one_dim)

    rows = (seq_len, head_dim)
    return vx.tiled_online_softmax(
        "self_weighing", [vx.Buffer("q", rows), vx.Buffer("k", rows), vx.Buffer("v", rows),
                          vx.Buffer("out", rows, "write")],
        item_count=seq_len, seq_len=seq_len, head_dim=head_dim, tile_size=tile_size,
        scores=scores, update=update)


SELF_WEIGHTS = {
    # exp((s - m) / 2): the scores' differences only, so exp2 applies
    "tempered": (lambda b, s, m: b.exp(b.bounded_exp_arg(b.divf(b.subf(s, m), b.f32(2.0)))), True),
    # exp(s - m - 1/2): a constant beside the scores, so it does not
    "offset": (lambda b, s, m: b.exp(b.bounded_exp_arg(b.subf(b.subf(s, m), b.f32(0.5)))), False),
    # s itself as a weight would see log2(e)
    "linear": (lambda b, s, m: b.mulf(s, b.exp(b.bounded_exp_arg(b.subf(s, m)))), False),
}


@pytest.mark.parametrize("name", SELF_WEIGHTS)
def test_use_exp2_applies_only_where_the_scores_scale(name):
    """The pass scales every score by log2(e): it takes a skeleton only where
    each value derived from them reaches an exponent through ops that the
    scale commutes with, and otherwise leaves it unchanged."""
    weigh, applies = SELF_WEIGHTS[name]
    q, k, v = inputs(20, 2, 1, 1)
    module = self_weighing_attention(20, 2, 8, weigh)
    exp2 = vx.apply_pipeline(module.clone(), "vyre-use-exp2")
    assert (" exp2" in str(exp2)) == applies
    want = vx.run(module, {"q": q, "k": k, "v": v})["out"]
    got = vx.run(exp2, {"q": q, "k": k, "v": v})["out"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if not applies:
        assert str(exp2) == str(module)


def vyre_opt(*args, stdin=None):
    return subprocess.run(
        ["vyre-opt", *args],
        capture_output=True, text=True, input=stdin, cwd=REPO,
    )


def test_a_plugin_file_registers_its_pass(tmp_path):
    text = str(vx.flash_attention_2(100, 2, 32, mask_mod=lambda q, kv: kv <= q))
    source = tmp_path / "causal.mlir"
    source.write_text(text)
    result = vyre_opt(str(source), "--plugin", "examples/no_tile_skipping.py", "-p", "no-tile-skipping")
    assert result.returncode == 0, result.stderr
    assert "tile_classes" in text and "tile_classes" not in result.stdout
    # a module name works too, and the built-in name without --plugin
    for extra in (["--plugin", "vyre_xdsl.passes.use_exp2"], []):
        result = vyre_opt(str(source), *extra, "-p", "vyre-use-exp2")
        assert result.returncode == 0, result.stderr
        assert "tile_count 4 tile_classes" in result.stdout and " exp2" in result.stdout


def test_a_missing_plugin_is_a_clean_error(tmp_path):
    result = vyre_opt("--plugin", str(tmp_path / "nope.py"), "-p", "x", stdin="")
    assert result.returncode == 2 and "does not exist" in result.stderr
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    result = vyre_opt("--plugin", str(empty), "-p", "x", stdin="")
    assert result.returncode == 2 and "defines no ModulePass" in result.stderr
    # a file that is not Python, whatever its name: the error says so
    text = tmp_path / "notes.txt"
    text.write_text("not python (\n")
    result = vyre_opt("--plugin", str(text), "-p", "x", stdin="")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "is not valid Python: '(' was never closed (line 1)" in result.stderr


def test_the_universe_entry_point_lists_the_new_pass():
    from vyre_xdsl.universe import VYRE_UNIVERSE

    assert "vyre-use-exp2" in VYRE_UNIVERSE.all_passes


def test_the_textual_example_is_what_the_builder_makes_and_runs_right():
    alibi2 = lambda s, q, kv, h: s - vx.exp2(-8.0 * (h + 1) / 2) * vx.abs(q - kv)  # noqa: E731
    causal = VARIANTS["causal"]["mask_mod"]
    built = vx.flash_attention_2(128, 2, 32, num_heads=2, num_kv_heads=1,
                                 mask_mod=causal, score_mod=alibi2)
    text = (REPO / "examples" / "gqa_causal_alibi.mlir").read_text()
    module = vx.parse_module(text)
    assert str(module) == str(built)
    q, k, v = inputs(128, 2, 2, 1)
    exact = vx.lower_to_gpu(module, optimize="exact")  # the oracle's order of sums
    out = vx.run(exact, {"q": q, "k": k, "v": v})["out"]
    want = reference.flash_attention_2(q, k, v, 32, mask_mod=causal, score_mod=alibi2)
    np.testing.assert_array_equal(out, want)
