"""The loop-iteration bound that guards lavapipe's silent loop limit."""

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl.kernel_info import kernel_info


def fa2_iterations(seq_len: int, head_dim: int, tile_size: int) -> int:
    """Loop iterations of one FlashAttention-2 invocation, by SEMANTICS.md
    (a tile longer than the keys is one tile of them: the builder's)."""
    tile_size = min(tile_size, seq_len)

    def keys(n: int) -> int:
        return (
            n * (1 + head_dim)  # scores: j, then d
            + n  # tile max
            + n  # tile sum
            + head_dim * (1 + n)  # update: d, then j
        )

    # the whole tiles, each an iteration of the tile loop, then the last
    # tile's seq_len % tile_size keys after the loop
    whole, rest = divmod(seq_len, tile_size)
    last = keys(rest) if rest else 0
    return 3 * head_dim + whole * (1 + keys(tile_size)) + last  # load q, zero o_acc, write out


@pytest.mark.parametrize("shape", [(512, 64, 64), (100, 16, 32), (1, 1, 64), (130, 3, 7)])
def test_bound_counts_every_loop_of_flash_attention_2(shape):
    info = kernel_info(vx.lower_to_gpu(vx.flash_attention_2(*shape), optimize="none"))
    assert info.loop_iterations == fa2_iterations(*shape)


def test_unroll_jam_brings_fa2_512_under_the_lavapipe_limit():
    module = vx.flash_attention_2(512, 64)
    seed = kernel_info(vx.lower_to_gpu(module, optimize="none")).loop_iterations
    optimised = kernel_info(vx.lower_to_gpu(module, optimize="exact")).loop_iterations
    # 512 = 8 full tiles: every tile loop has a constant trip count, so the
    # unrolled loops need no remainder loops.
    assert seed == 67784 > 65535 > optimised == 1358


def test_bound_of_mla_decode_grows_with_the_rank():
    small = kernel_info(vx.lower_to_gpu(vx.mla_decode(64, 2, 8, 4, 2), optimize="none"))
    large = kernel_info(vx.lower_to_gpu(vx.mla_decode(64, 2, 8, 8, 2), optimize="none"))
    assert small.loop_iterations < large.loop_iterations


def test_lavapipe_refuses_a_kernel_it_would_cut_short():
    vulkan = pytest.importorskip("vyre_xdsl.vulkan")
    report = vulkan.device_report()
    if "llvmpipe" not in report.split("selected")[-1]:
        pytest.skip("the selected Vulkan device is not lavapipe")
    q = np.ones((512, 64), np.float32)
    seed_layout = vx.lower_to_gpu(vx.flash_attention_2(512, 64), optimize="none")
    with pytest.raises(vx.VyreError, match="stops every invocation after 65535"):
        vx.run(seed_layout, {"q": q, "k": q, "v": q}, backend="vulkan")


def test_unroll_jam_of_fragments_takes_at_most_a_tile_of_keys():
    # Unrolled before vyre-to-gpu, a fragment's loop to %tile_len (16 keys)
    # by 32 left a main loop that never runs but whose indexes the kernel's
    # bounds check could not clear: vx.run refused a correct kernel.
    module = vx.flash_attention_2(64, 16, tile_size=16)
    rng = np.random.default_rng(3)
    inputs = {n: rng.standard_normal((64, 16), dtype=np.float32) for n in ("q", "k", "v")}
    unrolled = vx.lower_to_gpu(module, optimize="vyre-unroll-jam{factor=32},"
                                                 "vyre-to-gpu{optimize=none}")
    seed = vx.lower_to_gpu(module, optimize="none")
    got = vx.run(unrolled, inputs)["out"]
    np.testing.assert_array_equal(got, vx.run(seed, inputs)["out"])


# hand-written kernels: a loop of `trips(item)` iterations adding 1.0 ----------

_LOOPING = """builtin.module attributes {{gpu.container_module}} {{
  "gpu.module"() <{{sym_name = "k"}}> ({{
    "gpu.func"() <{{function_type = (memref<8xf32>) -> (), kernel}}> ({{
    ^bb0(%out: memref<8xf32>):
      %item = "gpu.global_id"() <{{dimension = #gpu<dim x>}}> : () -> index
      %n = arith.constant 8 : index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %f0 = arith.constant 0.0 : f32
      %in = arith.cmpi ult, %item, %n : index
      scf.if %in {{
{trips}
        %r = scf.for %j = %c0 to %ub step %c1 iter_args(%acc = %f0) -> (f32) {{
          %one = arith.constant 1.0 : f32
          %y = arith.addf %acc, %one : f32
          scf.yield %y : f32
        }}{promise}
        memref.store %r, %out[%item] : memref<8xf32>
      }}
      "gpu.return"() : () -> ()
    }}) {{sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 8, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "out", binding = 0, access = write, shape = [8], dtype = f32>]>}} : () -> ()
  }}) : () -> ()
}}
"""
_PER_ITEM = """        %k = arith.constant 20000 : index
        %ub = arith.muli %item, %k : index"""
# 3 - 4 wraps to 2^64 - 1, so min(3 - 4, 20000) is 20000: it was bounded by 3
_WRAPPED = """        %three = arith.constant 3 : index
        %four = arith.constant 4 : index
        %wrapped = arith.subi %three, %four : index
        %cap = arith.constant 20000 : index
        %ub = arith.minui %wrapped, %cap : index"""


def _looping(trips: str, promise: str = "") -> object:
    return vx.parse_module(_LOOPING.format(trips=trips, promise=promise))


@pytest.mark.parametrize("trips, bound", [(_PER_ITEM, None), (_WRAPPED, 20000)])
def test_a_bound_is_never_below_the_trips(trips, bound):
    assert kernel_info(_looping(trips)).loop_iterations == bound
    out = vx.run(_looping(trips), {})["out"]
    assert out.max() == (140000 if trips == _PER_ITEM else 20000)


def test_lavapipe_refuses_a_loop_it_cannot_bound():
    """It returned 65535 where the loop runs 80000 trips and more."""
    vulkan = pytest.importorskip("vyre_xdsl.vulkan")
    if "llvmpipe" not in vulkan.device_report().split("selected")[-1]:
        pytest.skip("the selected Vulkan device is not lavapipe")
    with pytest.raises(vx.VyreError, match="has a loop whose trip count cannot be bounded"):
        vx.run(_looping(_PER_ITEM), {}, backend="vulkan")


def test_the_interpreter_holds_a_loop_to_its_promised_trips():
    """vyre.max_trips bounds the loop for lavapipe's guard: a loop that runs
    more trips than it promises is an error where it runs."""
    promised = _looping(_PER_ITEM, " {vyre.max_trips = 8 : i64}")
    assert kernel_info(promised).loop_iterations == 8
    with pytest.raises(vx.VyreError, match="scf.for runs 140000 trips where its "
                                           "vyre.max_trips promises at most 8"):
        vx.run(promised, {})


def test_a_constant_step_of_0_is_refused_before_it_runs():
    step0 = _LOOPING.format(trips="        %ub = arith.constant 4 : index", promise="")
    step0 = step0.replace("to %ub step %c1", "to %ub step %c0")
    with pytest.raises(vx.VyreError, match="an scf.for with a step of 0 never ends"):
        vx.compile_spirv(vx.parse_module(step0))


def _counting_decoder(seq_len: int, max_trips: int | None):
    """Each key's score counts up to the item's index in a loop whose bound
    is only known at run time: every key of a row scores alike, so each row
    is the mean of v."""

    def scores(f):
        def one_key(b, j, _):
            (count,) = b.loop(0, f.item, lambda b, i, acc: [vx.wrap(acc[0]) + 1.0], [0.0],
                              max_trips=max_trips)
            b.store(b.bounded_score(count), f.score_tile, b.score_index(j))
            return []

        f.loop(0, f.tile_len, one_key)

    def update(f):
        def one_dim(b, d, _):
            def add_key(b, j, acc):
                v_d = b.load(f.buffer("v"), b.flat_index(b.addi(f.tile_start, j), 1, d))
                return [vx.wrap(acc[0]) + vx.wrap(b.weight(j)) * vx.wrap(v_d)]

            (wv,) = b.loop(0, f.tile_len, add_key, [0.0])
            o = b.o_index(d)
            b.store(vx.wrap(f.rescale) * vx.wrap(b.load(f.o_acc, o)) + vx.wrap(wv), f.o_acc, o)
            return []

        f.loop(0, 1, one_dim)

    rows = (seq_len, 1)
    return vx.tiled_online_softmax(
        "counting", [vx.Buffer("q", rows), vx.Buffer("v", rows), vx.Buffer("out", rows, "write")],
        item_count=seq_len, seq_len=seq_len, head_dim=1, tile_size=4, scores=scores,
        update=update)


@pytest.mark.parametrize("backend", ["interpreter", "vulkan"])
def test_a_fragment_promises_its_loops_trips(backend):
    """f.loop(..., max_trips=N) bounds a loop whose end is read at run time:
    lavapipe refuses the kernel without it and runs it with it."""
    if backend == "vulkan":
        vulkan = pytest.importorskip("vyre_xdsl.vulkan")
        if "llvmpipe" not in vulkan.device_report().split("selected")[-1]:
            pytest.skip("the selected Vulkan device is not lavapipe")
    rng = np.random.default_rng(3)
    inputs = {"q": np.zeros((12, 1), np.float32),
              "v": rng.standard_normal((12, 1)).astype(np.float32)}
    out = vx.run(_counting_decoder(12, 12), inputs, backend=backend)["out"]
    np.testing.assert_allclose(out, np.full((12, 1), inputs["v"].mean()), rtol=1e-5)
    unbounded = _counting_decoder(12, None)
    if backend == "vulkan":
        with pytest.raises(vx.VyreError, match=r"f.loop\(\.\.\., max_trips=N\) in a fragment"):
            vx.run(unbounded, inputs, backend=backend)
    else:
        np.testing.assert_array_equal(vx.run(unbounded, inputs)["out"], out)
        with pytest.raises(vx.VyreError, match="runs 11 trips where its vyre.max_trips "
                                               "promises at most 4"):
            vx.run(_counting_decoder(12, 4), inputs)
    with pytest.raises(vx.VyreError, match="max_trips must be an integer"):
        _counting_decoder(12, -1)
