"""Every bad input at every entry point is a clear error: a VyreError naming
the parameter and the fix (Python API, Vulkan runtime), or an `error:` line
with exit code 1/2 and no traceback (vyre-run; vyre-opt is covered by the lit
tests and tests/test_fuzz_ir.py)."""

from __future__ import annotations

import contextlib
import zlib
from pathlib import Path
import io
import sys

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl.errors import VyreError
from requirements import needs_vulkan
from test_fuzz_ir import run_vyre_opt

FA2 = dict(seq_len=4, head_dim=2, tile_size=2)
MLA = dict(seq_len=5, num_heads=2, head_dim=3, kv_lora_rank=2, qk_rope_head_dim=1)


# builders -------------------------------------------------------------------------

@pytest.mark.parametrize("change, names", [
    (dict(seq_len=0), ["seq_len", "> 0"]),
    (dict(head_dim=-3), ["head_dim", "> 0"]),
    (dict(tile_size=0), ["tile_size", "> 0"]),
    (dict(seq_len=float("nan")), ["seq_len", "positive integer", "nan"]),
    (dict(head_dim=float("inf")), ["head_dim", "positive integer"]),
    (dict(seq_len=4.0), ["seq_len", "positive integer"]),
    (dict(seq_len="4"), ["seq_len", "positive integer"]),
    (dict(seq_len=None), ["seq_len", "positive integer"]),
    (dict(seq_len=True), ["seq_len", "positive integer"]),
    (dict(seq_len=2**40), ["seq_len", "u32"]),
    (dict(seq_len=2**20, head_dim=2**12), ["seq_len", "head_dim", "reduce"]),
    (dict(head_dim=2**26), ["head_dim", "q_scratch", "reduce head_dim"]),
    # a tile longer than the keys is one tile of them: too long only with as many keys
    (dict(seq_len=2**26, tile_size=2**26), ["tile_size", "score_tile", "reduce tile_size"]),
], ids=lambda x: str(x) if isinstance(x, dict) else "")
def test_flash_attention_2_bad_shapes(change, names):
    with pytest.raises(VyreError) as info:
        vx.flash_attention_2(**{**FA2, **change})
    for name in names:
        assert name in str(info.value), str(info.value)


@pytest.mark.parametrize("change, names", [
    (dict(num_heads=0), ["num_heads", "> 0"]),
    (dict(kv_lora_rank=-1), ["kv_lora_rank", "> 0"]),
    (dict(qk_rope_head_dim=0), ["qk_rope_head_dim", "> 0"]),
    (dict(qk_rope_head_dim=4), ["qk_rope_head_dim", "head_dim", "<="]),  # decided: rejected
    (dict(num_heads=float("nan")), ["num_heads", "positive integer"]),
    (dict(kv_lora_rank=2**12, num_heads=2**10, head_dim=2**10),
     ["w_uk", "kv_lora_rank", "num_heads", "head_dim", "reduce"]),
    (dict(seq_len=2**31, kv_lora_rank=2), ["kv_cache", "seq_len", "kv_lora_rank"]),
    (dict(num_heads=2**16, head_dim=2**16, qk_rope_head_dim=1), ["num_heads", "head_dim"]),
    (dict(seq_len=2**26, tile_size=2**26), ["tile_size", "reduce tile_size"]),
], ids=lambda x: str(x) if isinstance(x, dict) else "")
@pytest.mark.parametrize("builder", [vx.mla_decode, vx.mla_decode_absorbed],
                         ids=["seed", "absorbed"])
def test_mla_decode_bad_shapes(change, names, builder):
    with pytest.raises(VyreError) as info:
        builder(**{**MLA, **change})
    for name in names:
        assert name in str(info.value), str(info.value)


@pytest.mark.parametrize("kv_splits, message", [
    (0, "kv_splits must be > 0"), (-2, "kv_splits must be > 0"),
    (1.5, "kv_splits must be an int"), (None, "kv_splits must be an int"),
])
def test_oracle_rejects_bad_kv_splits(kv_splits, message):
    q = np.ones((8, 4), np.float32)
    with pytest.raises(VyreError, match=message):
        vx.reference.flash_attention_2(q, q, q, kv_splits=kv_splits)


@pytest.mark.parametrize("return_lse", [np.zeros(3), "yes", None, 1])
def test_oracle_rejects_a_return_lse_that_is_not_a_bool(return_lse):
    """An array was numpy's 'truth value of an array is ambiguous'."""
    q = np.ones((4, 2), np.float32)
    with pytest.raises(VyreError, match="return_lse must be True or False"):
        vx.reference.flash_attention_2(q, q, q, return_lse=return_lse)


@pytest.mark.parametrize("role", ["scores", "update", "prologue", "epilogue"])
def test_a_fragment_callback_must_be_a_function(role):
    fragments = {"scores": lambda f: None, "update": lambda f: None, role: 3}
    with pytest.raises(VyreError, match=f"{role} must be a function"):
        vx.tiled_online_softmax(
            "k", [vx.Buffer("q", (4, 2)), vx.Buffer("out", (4, 2), "write")],
            item_count=4, seq_len=4, head_dim=2, **fragments)


def test_numpy_integer_shapes_are_accepted():
    """numpy integers (e.g. from array.shape arithmetic) are dimensions like
    ints: the kernel is the same as with Python ints."""
    got = vx.flash_attention_2(seq_len=np.int64(4), head_dim=np.int32(2),
                               tile_size=np.uint8(2), num_heads=np.int64(2),
                               num_kv_heads=np.int16(1))
    want = vx.flash_attention_2(seq_len=4, head_dim=2, tile_size=2, num_heads=2,
                                num_kv_heads=1)
    assert str(got) == str(want)
    got = vx.mla_decode(**{k: np.int64(v) for k, v in MLA.items()}, tile_size=np.int32(2))
    assert str(got) == str(vx.mla_decode(**MLA, tile_size=2))


@pytest.mark.parametrize("value", [np.float32(4.0), np.float64("nan"), np.bool_(True),
                                   True, np.int64(0), np.int64(-4), np.uint64(2**40)])
def test_numpy_non_integer_or_bad_shapes_name_the_parameter(value):
    with pytest.raises(VyreError, match="head_dim"):
        vx.flash_attention_2(**{**FA2, "head_dim": value})


def _parse_plain(body: str):
    """Parse with plain xDSL (no vyre LocatingParser), as xdsl-opt does."""
    from xdsl.parser import Parser

    text = f"""builtin.module {{
  vyre.kernel @k items 4 workgroup_size 64 {{
    {body}
  }}
}}"""
    return Parser(vx.make_context(), text).parse_module()


@pytest.mark.parametrize("body, message", [
    ('%q = vyre.buffer "q" binding 0 read [4, 18446744073709551616] : memref<8xf32>',
     "buffer shape entry 18446744073709551616 is out of range for type i64"),
    ('%q = vyre.buffer "q" binding 0 read [4, 9223372036854775808] : memref<8xf32>',
     "buffer shape entry 9223372036854775808 is out of range for type i64"),
    ('%q = vyre.buffer "q" binding 0 read [4, -2] : memref<8xf32>',
     "buffer shape entry must not be negative, got -2"),
    ('%q = vyre.buffer "q" binding 18446744073709551616 read [4, 2] : memref<8xf32>',
     "buffer binding 18446744073709551616 is out of range for type i64"),
    ('%q = vyre.buffer "q" binding -1 read [4, 2] : memref<8xf32>',
     "buffer binding must not be negative"),
    ('%q = vyre.buffer binding 0 read [4, 2] : memref<8xf32>',
     "attribute expected"),
    ('%q = vyre.buffer "q" binding 0 rw [4, 2] : memref<8xf32>',
     "Expected `read`, `write`, or `temp`."),
])
def test_vyre_buffer_bad_literals_are_parse_errors_in_plain_xdsl(body, message):
    from xdsl.utils.exceptions import ParseError

    with pytest.raises(ParseError) as info:
        _parse_plain(body)
    assert message in str(info.value), str(info.value)
    assert "<unknown>:3:" in str(info.value), str(info.value)  # located at the line


def test_vyre_kernel_count_beyond_i64_is_a_parse_error_in_plain_xdsl():
    from xdsl.parser import Parser
    from xdsl.utils.exceptions import ParseError

    text = "builtin.module {\n  vyre.kernel @k items 99999999999999999999 workgroup_size 64 {\n  }\n}"
    with pytest.raises(ParseError, match="item count 99999999999999999999 is out of range"):
        Parser(vx.make_context(), text).parse_module()


# vx.run -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fa2():
    return vx.flash_attention_2(**FA2)


def _qkv(**change):
    q = np.zeros((4, 2), np.float32)
    return {**{"q": q, "k": q, "v": q}, **change}


@pytest.mark.parametrize("inputs, names", [
    (_qkv(x=np.zeros(8, np.float32)), ["unknown input 'x'", "q, k, v"]),
    ({"q": np.zeros(8, np.float32), "k": np.zeros(8, np.float32)}, ["missing input 'v'"]),
    (_qkv(out=np.zeros(8, np.float32)), ["unknown input 'out'"]),
    (_qkv(q=np.zeros((4, 2), np.float64)), ["'q'", "float64", "astype(np.float32)"]),
    (_qkv(q=np.zeros((4, 2), np.float16)), ["'q'", "float16"]),
    (_qkv(q=np.zeros((4, 2), ">f4")), ["'q'", "astype(np.float32)"]),
    (_qkv(q=np.zeros((4, 2), np.int32)), ["'q'", "int32"]),
    (_qkv(q=np.zeros((4, 2), object)), ["'q'", "object"]),
    (_qkv(k=np.zeros(7, np.float32)), ["'k'", "7 elements", "expects 8"]),
    (_qkv(v=[[0.0, 0.0]] * 4), ["'v'", "numpy array", "np.asarray"]),
    (_qkv(q=np.float32(1.0)), ["'q'", "numpy array"]),
    ([np.zeros(8, np.float32)] * 3, ["dict"]),
    ({0: np.zeros(8, np.float32)}, ["unknown input 0"]),
], ids=lambda x: "" if not isinstance(x, list) else None)
@pytest.mark.parametrize("backend", ["interpreter", "vulkan"])
def test_run_bad_inputs(fa2, inputs, names, backend):
    with pytest.raises(VyreError) as info:
        vx.run(fa2, inputs, backend=backend)
    for name in names:
        assert name in str(info.value), str(info.value)


@pytest.mark.parametrize("backend", [None, "cuda", "", ["vulkan"]])
def test_run_unknown_backend(fa2, backend):
    with pytest.raises(VyreError, match="unknown backend .*interpreter, vulkan"):
        vx.run(fa2, _qkv(), backend=backend)


@pytest.mark.parametrize("module", ["x", None, 3])
def test_entry_points_reject_non_modules(module):
    for call in (lambda: vx.run(module, {}), lambda: vx.lower_to_gpu(module),
                 lambda: vx.compile_spirv(module)):
        with pytest.raises(VyreError, match="ModuleOp"):
            call()


@pytest.mark.parametrize("text, message", [
    (None, "expects MLIR text"),
    (b"\xff\xfe", "not UTF-8"),
    ("garbage", "not registered"),
    ("builtin.module { %x = arith.constant 0 : i644294967295 }", "too large"),
    # xDSL's string regex backtracked exponentially on an unterminated string
    # (this line: hours); now it is the lexer's error at once
    ('builtin.module {\n  "test.op"() {name = "q binding 0 read [4, 2] : memref<8xf32> '
     'and some more words\n}', r"in.mlir:2:\d+: error: End of file reached before closing"),
])
def test_parse_module_errors(text, message):
    with pytest.raises(VyreError, match=message):
        vx.parse_module(text, "in.mlir")


@pytest.mark.parametrize("pipeline, message", [
    ("no-such-pass", "Unrecognized passes"),
    ("vyre-to-gpu{x=1}", "pass 'vyre-to-gpu' has no option x; its options are optimize, "
                         "device, matrix_units, f32_parts"),
    ("cse{x=1}", "pass 'cse' has no option x; its options are none"),
    ("convert-vyre-to-gpu", "run vyre-inline-fragments"),
    # an option's value of the wrong type names the pass and the option
    ("vyre-unroll-jam{factor=abc}", r"pass 'vyre-unroll-jam': option factor takes an "
                                    r"integer \(e.g. vyre-unroll-jam\{factor=32\}\), got abc"),
    ("vyre-absorb-mla{kernels=true}", "option kernels takes an integer .*, got true"),
    ("cse,vyre-to-gpu{optimize=1}", "pass 'vyre-to-gpu': option optimize takes a name"),
    ("vyre-tensor-cores{force=yes}", "option force takes true or false .*, got yes"),
])
def test_apply_pipeline_errors(pipeline, message):
    with pytest.raises(VyreError, match=message):
        vx.apply_pipeline(vx.flash_attention_2(**FA2), pipeline)


@pytest.mark.parametrize("pipeline", [
    # the split's first pass changes the kernel before its merge is refused
    "vyre-split-kv{merge=kernel splits=3 merge_teams=4}",
    "vyre-retile{tile_size=4},vyre-split-kv{merge=kernel splits=3 merge_teams=4}",
    "vyre-use-exp2,vyre-inline-fragments,convert-vyre-to-gpu,vyre-tensor-cores{force=true}",
])
def test_a_failed_pipeline_leaves_the_module_as_it_was(pipeline):
    """The module then still works: a pass that stopped half way left a
    split with no merge kernel, which later pipelines built on."""
    module = vx.flash_attention_2(seq_len=20, head_dim=4, tile_size=8)
    before = str(module)
    with pytest.raises(VyreError):
        vx.apply_pipeline(module, pipeline)
    assert str(module) == before
    module.verify()
    vx.apply_pipeline(module, "vyre-use-exp2")
    assert " exp2" in str(module)


def _integer_options():
    """(pass, option) for every integer option of our passes: counts and
    sizes, 0 where the pass chooses."""
    import dataclasses
    import typing

    from vyre_xdsl.passes import ALL_PASSES

    for name, get in sorted(ALL_PASSES.items()):
        pass_type = get()
        hints = typing.get_type_hints(pass_type)
        for field in dataclasses.fields(pass_type):
            if hints.get(field.name) is int:
                yield name, field.name


@pytest.mark.parametrize("name, option", list(_integer_options()))
def test_negative_integer_options_are_refused(name, option):
    """A negative count or size is refused before any pass runs (several
    passes took max_parts=-1 as 'no parts' and ran)."""
    with pytest.raises(VyreError, match=rf"pass '{name}': option {option} takes an integer "
                                        rf"of at least 0 .*, got -3"):
        vx.apply_pipeline(vx.flash_attention_2(**FA2), f"{name}{{{option}=-3}}")


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_non_contiguous_and_read_only_arrays_are_accepted(backend):
    """Documented: inputs are copied, so any strides and read-only views work."""
    rng = np.random.default_rng(0)
    big = rng.standard_normal((8, 4)).astype(np.float32)
    q = big[::2, ::2]                       # non-contiguous view
    k = np.asfortranarray(rng.standard_normal((4, 2)).astype(np.float32))
    v = rng.standard_normal((4, 2)).astype(np.float32)
    v.flags.writeable = False               # read-only
    assert not q.flags.c_contiguous
    out = vx.run(vx.flash_attention_2(**FA2), {"q": q, "k": k, "v": v},
                 backend=backend)["out"]
    ref = vx.reference.flash_attention_2(np.ascontiguousarray(q), np.ascontiguousarray(k),
                                         v, tile_size=2)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    assert not v.flags.writeable           # the caller's array is untouched


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
@pytest.mark.parametrize("view", ["fused_qkv", "every_other_column", "broadcast"])
def test_views_that_flatten_to_strided_views_are_accepted(backend, view):
    """q as a slice of a fused QKV array, a column stride, or a broadcast:
    flattened, each is still a strided view (not a copy), which the run
    copies row-major, through vx.run and a compiled kernel alike."""
    rng = np.random.default_rng(1)
    q = {"fused_qkv": lambda: rng.standard_normal((4, 2, 3)).astype(np.float32)[..., 0],
         "every_other_column": lambda: rng.standard_normal((4, 4)).astype(np.float32)[:, ::2],
         "broadcast": lambda: np.broadcast_to(np.float32(0.5), (4, 2))}[view]()
    k, v = (rng.standard_normal((4, 2)).astype(np.float32) for _ in range(2))
    assert q.reshape(-1).base is not None and not q.reshape(-1).flags.c_contiguous
    ref = vx.reference.flash_attention_2(np.ascontiguousarray(q), k, v, tile_size=2)
    module = vx.flash_attention_2(**FA2)
    out = vx.run(module, {"q": q, "k": k, "v": v}, backend=backend)["out"]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    kernel = vx.compile(module, backend=backend)
    try:
        np.testing.assert_allclose(kernel(q=q, k=k, v=v)["out"], ref, rtol=1e-5, atol=1e-6)
    finally:
        kernel.close()


@pytest.mark.parametrize("pipeline", [
    "vyre-block-rows{rows=2},vyre-stage-kv-tiles,vyre-to-gpu{optimize=exact}",
    "vyre-stage-kv-tiles,vyre-resize-workgroup{size=128},vyre-to-gpu{optimize=exact}",
])
def test_python_pipelines_are_verified_after_each_pass(pipeline):
    """As vyre-opt verifies between passes: these leave a barrier in a
    fragment whose last workgroup has lanes without an item, which the
    lowering would have turned into a kernel that is wrong on Vulkan."""
    module = vx.flash_attention_2(seq_len=64, head_dim=16, tile_size=16)
    with pytest.raises(VyreError, match="lanes without an item"):
        vx.lower_to_gpu(module, optimize=pipeline)


def test_masked_arrays_are_refused():
    q = np.ma.masked_array(np.ones((4, 2), np.float32), mask=np.eye(4, 2, dtype=bool))
    ones = np.ones((4, 2), np.float32)
    with pytest.raises(VyreError, match=r"input 'q' is a masked array.*q\.filled"):
        vx.run(vx.flash_attention_2(**FA2), {"q": q, "k": ones, "v": ones})
    # the oracle too: it would compute on the masked elements as they are
    with pytest.raises(VyreError, match=r"q is a masked array.*q\.filled"):
        vx.reference.flash_attention_2(q, ones, ones, tile_size=2)


# Vulkan runtime -------------------------------------------------------------------

def test_no_loader_names_what_to_install(monkeypatch, fa2):
    monkeypatch.setitem(sys.modules, "vulkan", None)  # `import vulkan` fails
    monkeypatch.setattr("vyre_xdsl.vulkan.device._CONTEXTS", {})
    with pytest.raises(VyreError, match="libvulkan1 mesa-vulkan-drivers.*pip install vulkan"):
        vx.run(fa2, _qkv(), backend="vulkan")


def test_no_driver_names_what_to_install(monkeypatch, fa2):
    """A loader without any driver (no ICD), in a fresh process."""
    import subprocess

    code = ("import numpy as np, vyre_xdsl as vx\n"
            "q = np.zeros((4, 2), np.float32)\n"
            "vx.run(vx.flash_attention_2(seq_len=4, head_dim=2, tile_size=2),"
            " {'q': q, 'k': q, 'v': q}, backend='vulkan')\n")
    env = {k: v for k, v in __import__("os").environ.items()}
    env.update(VK_DRIVER_FILES="/nonexistent/icd.json", VK_ICD_FILENAMES="/nonexistent/icd.json")
    env.pop("VYRE_VULKAN_VALIDATION", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert "VyreError" in proc.stderr and "mesa-vulkan-drivers" in proc.stderr, proc.stderr


@needs_vulkan
def test_no_device_names_what_to_install(monkeypatch):
    from vyre_xdsl.vulkan import runtime

    ctx = runtime._context(runtime._validation_requested(None))
    monkeypatch.setattr(ctx.vk, "vkEnumeratePhysicalDevices", lambda instance: [])
    monkeypatch.setattr("vyre_xdsl.vulkan.device._CONTEXTS", {})
    with pytest.raises(VyreError, match="no Vulkan device found.*mesa-vulkan-drivers"):
        runtime._context(False)


@needs_vulkan
@pytest.mark.parametrize("error_name, message", [
    ("VkErrorOutOfDeviceMemory", "ran out of device memory.*smaller shapes"),
    ("VkErrorOutOfHostMemory", "ran out of host memory"),
    ("VkErrorDeviceLost", "was lost"),
    ("VkErrorUnknown", "a Vulkan call failed.*VkErrorUnknown"),
])
def test_allocation_and_device_failures_are_vyre_errors(monkeypatch, fa2, error_name,
                                                        message):
    """vkAllocateMemory failing (simulated): a VyreError that says what to shrink,
    and every object created before the failure is destroyed (close() under
    the validation layer reports leaks)."""
    from vyre_xdsl import vulkan
    from vyre_xdsl.vulkan import runtime

    ctx = runtime._context(True)
    calls = {"n": 0}
    real = ctx.vk.vkAllocateMemory
    error_type = getattr(ctx.vk, error_name)

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] >= 3:  # a few buffers exist already
            raise error_type("simulated")
        return real(*args, **kwargs)

    monkeypatch.setattr(ctx.vk, "vkAllocateMemory", failing)
    lowered = vx.lower_to_gpu(fa2)
    from vyre_xdsl.kernel_info import program_info
    from vyre_xdsl.spirv import emit_spirv_module

    info = program_info(lowered)  # one kernel, or a program of several
    arrays = {b.name: np.zeros(b.count, np.float32) for b in info.buffers}
    with pytest.raises(VyreError, match=message):
        vulkan.execute(emit_spirv_module(lowered, info), info, arrays, validation=True)
    monkeypatch.undo()
    vulkan.close()  # raises if the layer saw a leaked object


@needs_vulkan
def test_interpreter_refuses_a_workgroup_no_device_runs(fa2):
    """A workgroup of 2**30 lanes (vyre-resize-workgroup{size=1073741824},
    valid u32, its scratch too) made the interpreter allocate lane vectors
    until it ran out of memory; Vulkan refuses it by the device's limits.
    (2**31 lanes: the scratch arrays pass u32, which the verifier says
    after the resize.)"""
    from vyre_xdsl.interp.execute import MAX_LANES

    pipeline = "vyre-resize-workgroup{size=%d},vyre-to-gpu{optimize=exact}"
    with pytest.raises(VyreError, match=r"has 1073741824 lanes; the interpreter runs at most"):
        vx.compile(fa2, optimize=pipeline % 2**30)
    with pytest.raises(VyreError, match=r"holds 4294967296 f32, which does not fit in u32"):
        vx.compile(fa2, optimize=pipeline % 2**31)
    vx.compile(fa2, optimize=pipeline % MAX_LANES).close()


def test_buffer_beyond_max_storage_buffer_range_says_what_to_shrink(fa2):
    from vyre_xdsl.vulkan import runtime

    ctx = runtime._context(runtime._validation_requested(None))
    limit = ctx.limits.maxStorageBufferRange
    # seq_len * head_dim * 4 bytes just over the device's limit, but the loop
    # budget check must not fire first: ask for the limit check directly.
    from vyre_xdsl.kernel_info import program_info
    from vyre_xdsl.spirv import emit_spirv_module

    lowered = vx.lower_to_gpu(vx.flash_attention_2(seq_len=4, head_dim=2, tile_size=2))
    info = program_info(lowered)  # one kernel, or a program of several
    arrays = {b.name: np.zeros(b.count, np.float32) for b in info.buffers}

    class Big(np.ndarray):
        @property
        def nbytes(self):  # a buffer one byte over the device's limit
            return limit + 1

    arrays["k"] = arrays["k"].view(Big)
    with pytest.raises(VyreError, match="maxStorageBufferRange.*smaller shapes"):
        runtime._check_limits(ctx, emit_spirv_module(lowered, info), info, arrays)


# vyre-run -------------------------------------------------------------------------

def _vyre_run(args):
    from vyre_xdsl.tools import vyre_run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = vyre_run.main(args)
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("args, code, message", [
    (["/nonexistent/k.mlir"], 1, "cannot read"),
    (["{corpus}/memref_load_without_index.mlir"], 1, "expected an index for each dimension"),
    (["{corpus}/int_type_absurd_width.mlir"], 1, "too large"),
    (["{corpus}/lowered_negative_binding.mlir", "--random"], 1, "binding"),
    (["{corpus}/lowered_scf_if_missing_yield.mlir", "--random"], 1, "scf.yield"),
    (["{example}", "-p", "no-such-pass"], 1, "Unrecognized passes"),
    (["{example}", "--backend", "cuda"], 2, "invalid choice"),
    (["{example}", "--input", "q"], 2, "NAME=FILE.npy"),
    (["{example}", "--input", "x=/nonexistent.npy"], 1, "cannot read input"),
    (["{example}", "--output", "nope=o.npy", "--random"], 1, "no output 'nope'"),
    ([], 2, "required"),
    # numpy's ValueError came out as an internal error
    (["{example}", "--random", "--seed", "-1"], 2, "the seed must be >= 0, got -1"),
    (["{example}", "--random", "--seed", "x"], 2, "--seed: invalid int value: 'x'"),
])
def test_vyre_run_errors(args, code, message):
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    args = [a.format(corpus=root / "tests" / "corpus",
                     example=root / "examples" / "flash_attention_2.mlir") for a in args]
    got, out, err = _vyre_run(args)
    assert got == code, (got, err)
    assert "error:" in err and message in err, err
    assert "Traceback" not in err and "internal error" not in err, err


@pytest.mark.parametrize("optimize, message", [
    (None, "optimize must be a level"),
    (3, "optimize must be a level"),
    ("cse{", "Error parsing pass pipeline specification"),
    ("no-such-pass", "Unrecognized passes"),
])
def test_lower_to_gpu_rejects_a_bad_optimize(optimize, message):
    with pytest.raises(VyreError, match=message):
        vx.lower_to_gpu(vx.flash_attention_2(seq_len=4, head_dim=2), optimize=optimize)


# public arguments (vyre_xdsl.checks): wrong types and values at the boundary --------

def _noop(f):
    pass


def _skeleton(buffers=None, **change):
    if buffers is None:
        buffers = [vx.Buffer("q", (4, 2)), vx.Buffer("out", (4, 2), "write")]
    args = dict(item_count=4, seq_len=4, head_dim=2, tile_size=2, scores=_noop,
                update=_noop)
    return vx.tiled_online_softmax("k", buffers, **{**args, **change})


def _fragment(scores):
    return lambda: _skeleton(scores=scores)


_LOOP_BODY = lambda b, i, carried: []  # noqa: E731


@pytest.mark.parametrize("call, names", [
    (lambda: vx.Buffer(3, (4, 2)), ["buffer name 3", "letters, digits"]),
    (lambda: vx.Buffer("q x", (4, 2)), ["'q x'", "letters, digits"]),
    (lambda: vx.Buffer("", (4, 2)), ["buffer name ''"]),
    (lambda: vx.Buffer("q", 32), ["shape of buffer 'q'", "tuple", "(n,)"]),
    (lambda: vx.Buffer("q", "32"), ["shape of buffer 'q'", "tuple"]),
    (lambda: vx.Buffer("q", ()), ["shape of buffer 'q' is empty"]),
    (lambda: vx.Buffer("q", (4, 2.0)), ["q.shape[1]", "positive integer"]),
    (lambda: vx.Buffer("q", (4, 0)), ["q.shape[1]", "> 0"]),
    (lambda: vx.Buffer("q", (2**20, 2**20)), ["buffer 'q'", "u32"]),
    (lambda: vx.Buffer("q", (4, 2), "rw"), ["access of buffer 'q'", '"read"']),
    (lambda: vx.Buffer("q", (4, 2), binding="0"), ["binding of buffer 'q'", "'0' (str)"]),
    (lambda: vx.Buffer("q", (4, 2), binding=2**70), ["binding of buffer 'q'", "2147483647"]),
    (lambda: vx.Buffer("q", (4, 2), binding=2**40), ["binding of buffer 'q'", "32-bit"]),
    (lambda: vx.Buffer("q", (4, 2), binding=-1), ["binding of buffer 'q' is -1"]),
    (lambda: vx.Buffer("q", (4, 2), binding=1.0), ["binding of buffer 'q'", "float"]),
    (lambda: _skeleton({"q": 1, "out": 2}), ["buffers must be a list", "dict"]),
    (lambda: _skeleton([("q", (4, 2)), ("out", (4, 2), "write")]), ["buffers[0]", "tuple"]),
    (lambda: _skeleton(()), ["the q buffer 'q' is not among"]),
    (lambda: _skeleton("qo"), ["buffers must be a list", "str"]),
    (lambda: _skeleton(scratch=["a"]), ["scratch must be a dict", "list"]),
    (lambda: _skeleton(scratch={3: 4}), ["scratch array name 3"]),
    (lambda: _skeleton(scratch={"a": "4"}), ["scratch 'a' length", "positive integer"]),
    (lambda: _skeleton(q=None), ["the q buffer name None"]),
    (lambda: _skeleton(out=["out"]), ["the out buffer name ['out']"]),
    (lambda: _skeleton(scores=None), ["scores must be a function"]),
    # a callback of the wrong arity, a bad mask_period: named, not a TypeError
    (lambda: _skeleton(scores=lambda: None),
     ["scores must take 1 positional argument (f)", "scores()"]),
    (lambda: _skeleton(update=lambda f, g: None), ["update must take 1", "update(f, g)"]),
    (lambda: _skeleton(mask=lambda i, kv, h: i >= kv),
     ["mask must take 2 positional arguments (item, kv_idx)", "mask(i, kv, h)"]),
    (lambda: _skeleton(mask=lambda i, kv: i >= kv, mask_period=1.5),
     ["mask_period must be a positive integer", "1.5"]),
    (lambda: _skeleton(mask=lambda i, kv: i >= kv, mask_period=0), ["mask_period must be > 0"]),
    (_fragment(lambda f: f.load("q", 0)), ["an operand must be an IR value", "'q'",
                                           "f.buffer(name)", "test_errors.py"]),
    (_fragment(lambda f: f.store(1.0, f.score_tile, 0)), ["an operand", "1.0 (float)"]),
    (_fragment(lambda f: f.load(f.item, 0)), ["loads and stores take a buffer", "index"]),
    (_fragment(lambda f: f.load(f.buffer("q"), "0")), ["an index or loop bound", "'0'"]),
    (_fragment(lambda f: f.load(f.buffer("q"), f.load(f.buffer("q"), 0))),
     ["must have type index", "f32"]),
    (_fragment(lambda f: f.loop(0, "x", _LOOP_BODY)), ["an index or loop bound", "'x'"]),
    (_fragment(lambda f: f.loop(0, 2.5, _LOOP_BODY)), ["an index or loop bound", "2.5"]),
    (_fragment(lambda f: f.loop(-1, 2, _LOOP_BODY)), ["index constant", "got -1"]),
    (_fragment(lambda f: f.loop(0, 2**32, _LOOP_BODY)), ["index constant", "4294967296"]),
    (_fragment(lambda f: f.loop(0, 2, None)), ["loop body must be a function"]),
    (_fragment(lambda f: f.loop(0, 2, lambda b, i, c: 3)), ["loop body must return a list"]),
    (_fragment(lambda f: f.loop(0, 2, lambda b, i, c: [], [0.0])),
     ["loop body returned values of types ()", "(f32)"]),
    (_fragment(lambda f: f.loop(0, 2, lambda b, i, c: [i], [0.0])),
     ["loop body returned values of types (index)", "(f32)"]),
    (_fragment(lambda f: f.if_else(f.cmpi(f.item, f.lane, "eq"), lambda b: [b.f32(1.0)],
                                   lambda b: [b.index(1)])),
     ["else-branch", "(index)", "(f32)"]),
    (_fragment(lambda f: f.cmpi(f.item, f.lane, "bogus")),
     ["a wrong value reached the IR builder at", "test_errors.py", "bogus"]),
    (_fragment(lambda f: f.index("3")), ["index constant", "'3'"]),
    (_fragment(lambda f: f.f32("x")), ["f32 constant", "'x' (str)"]),
    (_fragment(lambda f: f.f32(None)), ["f32 constant", "None"]),
    (_fragment(lambda f: f.m_new), ["no 'm_new'", "update fragments", "tile_start"]),
    (_fragment(lambda f: f.rescale), ["no 'rescale'", "update fragments"]),
    (_fragment(lambda f: f.addf(f.item, "s")), ["an operand", "'s'"]),
    (lambda: vx.apply_pipeline(None, "cse"), ["apply_pipeline", "ModuleOp", "NoneType"]),
    (lambda: vx.apply_pipeline(vx.flash_attention_2(**FA2), None),
     ["pipeline must be a string", "vyre-to-gpu"]),
    (lambda: vx.apply_pipeline(vx.flash_attention_2(**FA2), 3), ["pipeline must be a string"]),
    (lambda: vx.apply_pipeline(vx.flash_attention_2(**FA2), ""), ["pipeline must be a string"]),
    (lambda: vx.apply_pipeline(vx.lower_to_gpu(vx.flash_attention_2(**FA2)),
                               "convert-arith-to-riscv"),
     ["pass 'convert-arith-to-riscv' failed", "NotImplementedError", "leave it out"]),
    (lambda: vx.wrap(None), ["vx.wrap takes an SSA value", "NoneType"]),
    (lambda: vx.wrap(3.0), ["vx.wrap takes an SSA value", "float"]),
    (lambda: vx.run(vx.flash_attention_2(**FA2), _qkv(), backend=np.array(["vulkan"])),
     ["unknown backend"]),
    (lambda: vx.tile_class_counts(None), ["tile_class_counts", "ModuleOp"]),
    (lambda: vx.classify_tiles(None, 4, 4, 2), ["mask must be a function"]),
    (lambda: vx.classify_tiles(lambda q, kv: kv <= q, 4, 0, 2), ["seq_len", "> 0"]),
    (lambda: vx.parse_module("builtin.module {}", 3), ["parse_module's path", "int"]),
    # found by test_public_functions_return_or_raise_a_vyre_error
    (lambda: vx.flash_attention_2(seq_len=4, head_dim=2, score_mod={}),
     ["score_mod must be a function", "dict"]),
    (lambda: vx.flash_attention_2(seq_len=4, head_dim=2, mask_mod=np.zeros(3)),
     ["mask_mod must be a function", "ndarray"]),
    (lambda: vx.flash_attention_2(seq_len=4, head_dim=2,
                                  score_mod=lambda s, q, kv: vx.where(s > 0, (0,), s)),
     ["vx.where's branch is a tuple"]),
    (lambda: vx.Buffer("q", (4, 2), np.zeros(3)), ["access of buffer 'q'"]),
    (lambda: vx.lower_to_gpu(vx.flash_attention_2(**FA2), device=np.zeros(3)),
     ["unknown device"]),
], ids=lambda x: "" if callable(x) else None)
def test_public_arguments_are_checked(call, names):
    with pytest.raises(VyreError) as info:
        call()
    for name in names:
        assert name in str(info.value), str(info.value)


def test_a_loop_body_without_carried_values_may_return_none():
    """`return []` or no return at all: both mean nothing is carried."""
    def scores(f):
        f.loop(0, f.tile_len, lambda b, j, _: None)

    _skeleton(scores=scores)


def test_a_users_own_bug_in_a_fragment_is_not_hidden():
    """Exceptions raised by the user's code (not by a helper given a wrong
    value) propagate as they are."""
    def scores(f):
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        _skeleton(scores=scores)


@pytest.mark.parametrize("kept", ["fragment", "loop body", "branch"])
def test_a_builder_used_after_its_callback_returned_is_refused(kept):
    """It appended ops after the region's terminator, and the kernel failed
    to verify much later with nothing that pointed at the cause."""
    saved = {}

    def scores(f):
        saved["fragment"] = f

        def body(b, j, _):
            saved["loop body"] = b
            b.if_then(b.cmpi(j, j, "eq"), lambda inner: saved.setdefault("branch", inner))
            return []

        f.loop(0, f.tile_len, body)

    module = _skeleton(scores=scores)
    before = str(module)
    builder = saved[kept]
    with pytest.raises(VyreError, match=r"a builder was used after the (scores fragment|loop "
                                        r"body|branch of if_then) it was given to had "
                                        r"returned .*; build arith.constant inside that "
                                        r"callback"):
        builder.f32(1.0)
    assert str(module) == before


def test_fragment_attribute_errors_still_work_with_hasattr():
    seen = {}

    def scores(f):
        seen["m_new"] = hasattr(f, "m_new")
        seen["tile_len"] = hasattr(f, "tile_len")

    _skeleton(scores=scores)
    assert seen == {"m_new": False, "tile_len": True}


# vyre-opt / vyre-run on what a lexer chokes on: located, named, exit 1 -------------

_MODULE = b"builtin.module {\n  %x = arith.constant 1.0 : f32\n}\n"


@pytest.mark.parametrize("content, where, message", [
    (_MODULE.replace(b"1.0 : f32", b"1.0 : f32 \xff\xfe"), "2:33", "byte 0xff is not UTF-8 text"),
    (b"\xc3" + _MODULE, "1:1", "byte 0xc3 is not UTF-8 text"),
    (b"\xef\xbb\xbf" + _MODULE, "1:1", "byte-order mark (U+FEFF)"),
    (_MODULE.replace(b"%x =", b"%x\xe2\x80\x8b ="), "2:5", "invisible character U+200B (ZERO WIDTH SPACE)"),
    (_MODULE.replace(b"%x =", b"%x\xc2\xa0="), "2:5", "invisible character U+00A0 (NO-BREAK SPACE)"),
    (_MODULE.replace(b"1.0", b"1.0\x00"), "2:26", "U+0000 (a control character)"),
    (_MODULE.replace(b"%x", "%\u00e9t\u00e9".encode()), "2:4", "non-ASCII character 'é' U+00E9"),
    (_MODULE.replace(b"%x", "%\u0445".encode()), "2:4", "non-ASCII character 'х' U+0445 (CYRILLIC"),
    (_MODULE.replace(b"builtin", b"\xe2\x80\xaebuiltin"), "1:1", "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
    (b'builtin.module {\n  "test.op"() {name = "q\xe2\x80\x8b"} : () -> ()\n}\n', "2:25",
     "invisible character U+200B (ZERO WIDTH SPACE) in a string literal"),
    (b"builtin.module {\n" + b'"test.op"() ({\n' * 400 + b"}) : () -> ()\n" * 400 + b"}\n",
     None, "nest too deeply"),
    (b"builtin.module {\n  func.func @f() {\n    func.return\n  }\n"
     b"  func.func @f() {\n    func.return\n  }\n}\n", "5:3", 'Redefinition of symbol "f"'),
], ids=["non-utf8", "non-utf8-first-byte", "bom", "zero-width-space", "nbsp", "nul",
        "non-ascii-name", "cyrillic-lookalike", "bidi-override", "invisible-in-string",
        "deep-nesting", "symbol-redefinition"])
@pytest.mark.parametrize("tool", ["vyre-opt", "vyre-run"])
def test_bad_characters_and_structure_are_located(tmp_path, content, where, message, tool):
    path = tmp_path / "in.mlir"
    path.write_bytes(content)
    code, out, err = (run_vyre_opt if tool == "vyre-opt" else _vyre_run)([str(path)])
    assert code == 1, (code, out, err)
    first = err.strip().split("\n")[0]
    prefix = f"{path}:{where}: error: " if where else f"{path}:"
    assert first.startswith(prefix) and "error:" in first, first
    assert message in err, err
    assert "Traceback" not in err and "internal" not in err, err


def test_comments_and_non_ascii_strings_are_fine(tmp_path):
    path = tmp_path / "in.mlir"
    path.write_bytes("// caf\u00e9 \u200b\nbuiltin.module {\n  \"test.op\"() {n = \"caf\u00e9\"} : () -> ()\n}\n"
                     .encode())
    code, out, err = run_vyre_opt([str(path)])
    assert code == 0 and '"test.op"() {n = "caf' in out, err


@pytest.mark.parametrize("content", [b"", b"  \n\t\n", b"// only a comment\n\n"])
def test_empty_input_is_an_empty_module_for_vyre_opt_and_an_error_for_vyre_run(tmp_path, content):
    """vyre-opt does what mlir-opt-22 does (an empty module, exit 0); vyre-run
    has nothing to run."""
    path = tmp_path / "empty.mlir"
    path.write_bytes(content)
    code, out, err = run_vyre_opt([str(path)])
    assert code == 0 and out.split() == ["builtin.module", "{", "}"], (code, out, err)
    code, out, err = _vyre_run([str(path)])
    assert code == 1 and err.startswith(f"{path}:1:1: error: the input holds no operation"), err
    with pytest.raises(VyreError, match="expected at least one lowered vyre kernel"):
        vx.run(vx.parse_module(content), {})


def test_a_plugin_pass_that_raises_is_a_diagnostic(tmp_path):
    plugin = tmp_path / "boom.py"
    plugin.write_text(
        "from xdsl.passes import ModulePass\n"
        "class Boom(ModulePass):\n"
        "    name = 'boom'\n"
        "    def apply(self, ctx, op):\n"
        "        raise RuntimeError('the plugin is broken')\n")
    example = Path(__file__).resolve().parent.parent / "examples" / "flash_attention_2.mlir"
    code, out, err = run_vyre_opt([str(example), "--plugin", str(plugin), "-p", "boom"])
    assert code == 1, (code, err)
    assert "error: pass 'boom' failed" in err and "RuntimeError: the plugin is broken" in err
    assert "Traceback" not in err and "internal compiler error" not in err


def test_vyre_run_output_writes_exactly_the_path_given(tmp_path):
    example = Path(__file__).resolve().parent.parent / "examples" / "flash_attention_2.mlir"
    target = tmp_path / "result.bin"
    code, out, err = _vyre_run([str(example), "--random", "--output", f"out={target}"])
    assert code == 0, err
    assert target.exists() and not (tmp_path / "result.bin.npy").exists()
    assert np.load(target).shape == (100, 16)


# public arguments, fuzzed: every call returns or raises a VyreError ---------------

_API_VALUES = [None, 0, -1, 1, 2, 2**31, 2**40, 1.5, float("nan"), "q", "q x", "", "read",
               b"q", [], [4], (4, 2), (0,), {}, {"a": 1}, np.int64(3), np.float32(2.0), True,
               object(), np.zeros(3), np.zeros((4, 2), np.float32), lambda *a: None]

_API_CALLS = {
    "Buffer": lambda a, b, c: vx.Buffer(a, b, c),
    "Buffer binding": lambda a, b, c: vx.Buffer("q", (4, 2), "read", a),
    "tiled_online_softmax buffers": lambda a, b, c: _skeleton(a),
    "tiled_online_softmax scratch": lambda a, b, c: _skeleton(scratch=a),
    "tiled_online_softmax q": lambda a, b, c: _skeleton(q=a, out=b),
    "tiled_online_softmax shape": lambda a, b, c: _skeleton(item_count=a, tile_size=b),
    "tiled_online_softmax callbacks": lambda a, b, c: _skeleton(scores=a, prologue=b),
    "fragment load": lambda a, b, c: _skeleton(scores=lambda f: f.load(a, b)),
    "fragment loop": lambda a, b, c: _skeleton(
        scores=lambda f: f.loop(a, b, lambda bb, i, carried: c)),
    "fragment store": lambda a, b, c: _skeleton(scores=lambda f: f.store(a, f.score_tile, b)),
    "fragment constants": lambda a, b, c: _skeleton(scores=lambda f: f.addf(f.f32(a), f.index(b))),
    "fragment args": lambda a, b, c: _skeleton(scores=lambda f: getattr(f, str(a))),
    "fragment if_else": lambda a, b, c: _skeleton(
        scores=lambda f: f.if_else(f.cmpi(f.item, f.lane, "eq"), lambda x: a, lambda x: b)),
    "apply_pipeline": lambda a, b, c: vx.apply_pipeline(a, b),
    "apply_pipeline pipeline": lambda a, b, c: vx.apply_pipeline(vx.flash_attention_2(**FA2), a),
    "wrap": lambda a, b, c: vx.wrap(a),
    "run": lambda a, b, c: vx.run(vx.flash_attention_2(**FA2), a, backend=b),
    "run inputs": lambda a, b, c: vx.run(vx.flash_attention_2(**FA2), {"q": a, "k": b, "v": c}),
    "lower_to_gpu": lambda a, b, c: vx.lower_to_gpu(a, optimize=b),
    "lower_to_gpu optimize": lambda a, b, c: vx.lower_to_gpu(vx.flash_attention_2(**FA2),
                                                            optimize=a, device=b),
    "compile_spirv": lambda a, b, c: vx.compile_spirv(a),
    "parse_module": lambda a, b, c: vx.parse_module(a, b),
    "score_mod": lambda a, b, c: vx.flash_attention_2(seq_len=4, head_dim=2, score_mod=a),
    "mask_mod": lambda a, b, c: vx.flash_attention_2(seq_len=4, head_dim=2, mask_mod=a),
    "modifier value": lambda a, b, c: vx.flash_attention_2(
        seq_len=4, head_dim=2, score_mod=lambda s, q, kv: s + a),
    "where": lambda a, b, c: vx.flash_attention_2(
        seq_len=4, head_dim=2, score_mod=lambda s, q, kv: vx.where(s > 0, a, b)),
    "tile_class_counts": lambda a, b, c: vx.tile_class_counts(a),
    "classify_tiles": lambda a, b, c: vx.classify_tiles(a, b, c, 2),
    "mla_decode": lambda a, b, c: vx.mla_decode(a, b, c, 2, 1),
    "reference": lambda a, b, c: vx.reference.flash_attention_2(a, b, c),
}


@pytest.mark.parametrize("name", list(_API_CALLS))
def test_public_functions_return_or_raise_a_vyre_error(name, fuzz_stats):
    """Seeded: 30 random argument triples per function, drawn from values of
    every wrong (and some right) type; anything but a result or a VyreError
    fails (a VyreError from inside a user callback counts)."""
    call = _API_CALLS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for _ in range(30):
        args = [_API_VALUES[i] for i in rng.integers(0, len(_API_VALUES), 3)]
        try:
            call(*args)
        except VyreError:
            fuzz_stats["(api fuzz: rejected)"] += 1
        except Exception as error:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{name}{tuple(map(repr, args))}: {type(error).__name__}: {error}")
        fuzz_stats["api fuzz: public function calls"] += 1


# hangs: work that grew with the square of the input ---------------------------------

def test_locating_the_ops_of_a_large_module_is_linear(monkeypatch):
    """Each op's location came from Span.get_location, which counts the
    newlines before it: a module of 100k constants took 106 s through
    vyre-to-gpu (50k: 29 s).  The parser now keeps a table of line starts."""
    from xdsl.utils.lexer import Span

    from vyre_xdsl.diagnostics import LocatingParser

    calls = []
    real = Span.get_location
    monkeypatch.setattr(Span, "get_location", lambda self: calls.append(1) or real(self))
    n = 3000
    text = ("builtin.module {\n  func.func @f() {\n"
            + "".join(f"    %c{i} = arith.constant {i} : index\n" for i in range(n))
            + "    func.return\n  }\n}\n")
    module = LocatingParser(vx.make_context(), text, "big.mlir").parse_module()
    assert not calls
    ops = list(module.walk())  # module, func, n constants, return
    assert [op.location.line.data for op in ops[2:-1]] == list(range(3, n + 3))
    assert {op.location.column.data for op in ops[2:-1]} == {5}
    assert str(ops[-1].location) == f'loc("big.mlir":{n + 3}:5)'


def test_numpy_booleans_are_flags_like_python_ones():
    """kv_lens took np.True_ as not a bool while return_lse took it."""
    module = vx.flash_attention_2(seq_len=2, kv_len=4, head_dim=2, batch=2, kv_lens=np.True_,
                                  return_lse=np.True_)
    assert "kv_lens" in str(module) and "lse" in str(module)


def test_compile_refuses_a_staging_that_is_not_a_flag():
    with pytest.raises(VyreError, match="staging must be True, False or None .* got 'yes'"):
        vx.compile(vx.flash_attention_2(**FA2), staging="yes")


def test_the_oracle_refuses_pools_of_different_page_counts():
    """The kernel's pools share one num_pages; the oracle clamped each pool
    on its own."""
    q = np.ones((2, 1, 4, 4), np.float32)
    k, v = np.ones((3, 4, 1, 4), np.float32), np.ones((2, 4, 1, 4), np.float32)
    with pytest.raises(VyreError, match="pools must have as many pages .* k 3, v 2"):
        vx.reference.flash_attention_2(q, k, v, kv_lens=np.array([8, 8], np.int32),
                                       block_table=np.zeros((2, 2), np.int32), page_size=4,
                                       kv_len=8)
