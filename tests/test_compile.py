"""vx.compile: a kernel lowered once and called many times, resident
DeviceArrays, and what misuse says (#18 item 5).

vx.run is vx.compile and one call, so every comparison with vx.run is also
one between a fresh kernel and a kernel that has been called before, with
other inputs, resident arrays, or a re-recorded command buffer. Vulkan runs
under the Khronos validation layer (any message fails the call), on
lavapipe in CI; `staging=True` forces the path of a discrete GPU
(device-local buffers, staging copies, uploads through transfers)."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl.errors import VyreError
from requirements import VULKAN_PROBLEM

FA2 = dict(seq_len=8, head_dim=4, tile_size=4)
MLA = dict(seq_len=8, num_heads=2, head_dim=4, kv_lora_rank=8, qk_rope_head_dim=4,
           tile_size=4)
BACKENDS = ["interpreter", pytest.param("vulkan", marks=pytest.mark.vyre_requires(
    None if VULKAN_PROBLEM is None else f"no Vulkan: {VULKAN_PROBLEM}"))]


@pytest.fixture(autouse=True)
def _validation(monkeypatch):
    if os.environ.get("VYRE_VULKAN_VALIDATION") is None:  # =0 on a GPU without the layer
        monkeypatch.setenv("VYRE_VULKAN_VALIDATION", "1")  # as tools/test.sh does


def _inputs(module, seed: int) -> dict[str, np.ndarray]:
    from vyre_xdsl.kernel_info import program_info

    rng = np.random.default_rng(seed)
    info = program_info(vx.lower_to_gpu(module, optimize="none"))
    return {b.name: rng.standard_normal(b.shape, dtype=np.float32) for b in info.inputs}


@pytest.fixture(scope="module")
def fa2():
    return vx.flash_attention_2(**FA2)


@pytest.fixture(scope="module")
def mla():
    return vx.mla_decode(**MLA)


@pytest.fixture(scope="module")
def kernels():
    """One compiled kernel per (decoder, backend, staging), shared by tests
    that leave it open; closed at the end."""
    made: dict = {}

    def get(module, backend, staging=None):
        key = (id(module), backend, staging)
        if key not in made or made[key].closed:
            made[key] = vx.compile(module, backend=backend, staging=staging)
        return made[key]

    yield get
    for kernel in made.values():
        kernel.close()


def _same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for name in a:
        assert a[name].shape == b[name].shape and a[name].dtype == b[name].dtype
        np.testing.assert_array_equal(a[name], b[name])


def _vulkan_params():
    return [pytest.param(staging, marks=pytest.mark.vyre_requires(
        None if VULKAN_PROBLEM is None else f"no Vulkan: {VULKAN_PROBLEM}"))
        for staging in (False, True)]


# results --------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("decoder", ["fa2", "mla"])
def test_calls_equal_vx_run_bit_for_bit(decoder, backend, kernels, request):
    """Changed inputs call after call, arrays and resident copies mixed:
    every result is vx.run's on the same inputs, bit for bit."""
    module = request.getfixturevalue(decoder)
    kernel = kernels(module, backend)
    first, second = _inputs(module, 1), _inputs(module, 2)
    expected = [vx.run(module, first, backend=backend),
                vx.run(module, second, backend=backend)]
    _same(kernel(**first), expected[0])
    _same(kernel(second), expected[1])  # a dict, as vx.run takes it
    resident = {name: kernel.upload(name, value) for name, value in first.items()
                if name != "q"}
    _same(kernel(q=first["q"], **resident), expected[0])
    _same(kernel(**second), expected[1])  # arrays again after resident copies
    _same(kernel(q=first["q"], **resident), expected[0])
    for handle in resident.values():
        handle.free()
    if decoder == "fa2":  # the oracle, within the tolerance of optimize=default
        ref = vx.reference.flash_attention_2(first["q"], first["k"], first["v"], tile_size=4)
        np.testing.assert_allclose(expected[0]["out"], ref, rtol=1e-5, atol=1e-6)


def test_vx_run_takes_the_optimisation_level():
    """vx.run lowers at `optimize` as vx.compile does: "exact" is the
    oracle's order (at this shape "default" orders the sums otherwise)."""
    module = vx.flash_attention_2(seq_len=40, head_dim=4, tile_size=64)
    inputs = _inputs(module, 5)
    ref = vx.reference.flash_attention_2(inputs["q"], inputs["k"], inputs["v"])
    np.testing.assert_array_equal(vx.run(module, inputs, optimize="exact")["out"], ref)
    with vx.compile(module) as kernel:
        _same(vx.run(module, inputs), kernel(**inputs))
    with pytest.raises(VyreError, match="optimi"):
        vx.run(module, inputs, optimize="fastest")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shared", [True, False], ids=["one_kernel", "a_kernel_each"])
def test_threads_calling_kernels_get_their_own_results(fa2, backend, shared):
    """Four threads, each with its inputs (a resident k among them), call
    one kernel or a kernel each: every result is vx.run's bit for bit, and
    the validation layer sees the queue used by one thread at a time."""
    import threading

    cases = [_inputs(fa2, 10 + i) for i in range(4)]
    expected = [vx.run(fa2, case, backend=backend) for case in cases]
    kernels = ([vx.compile(fa2, backend=backend)] * 4 if shared
               else [vx.compile(fa2, backend=backend) for _ in range(4)])
    wrong: list = []

    def calls(i: int) -> None:
        kernel, case = kernels[i], cases[i]
        try:
            k_dev = kernel.upload("k", case["k"])
            for _ in range(8):
                for out in (kernel(**case), kernel(q=case["q"], k=k_dev, v=case["v"])):
                    if not np.array_equal(out["out"], expected[i]["out"]):
                        wrong.append(i)
            k_dev.free()
        except Exception as error:  # noqa: BLE001 - reported below, with its thread
            wrong.append(f"thread {i}: {error}")

    threads = [threading.Thread(target=calls, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for kernel in set(kernels):
        kernel.close()
    assert wrong == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_device_array_collected_while_another_thread_calls_is_freed_later(fa2, backend):
    """A DeviceArray's finaliser does not wait for a kernel that another
    thread holds (that could deadlock): the kernel's next call frees it."""
    import threading

    inputs = _inputs(fa2, 4)
    with vx.compile(fa2, backend=backend) as kernel:
        k_dev = kernel.upload("k", inputs["k"])
        held, done = threading.Event(), threading.Event()

        def hold() -> None:
            with kernel._lock:
                held.set()
                done.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(10)
        del k_dev
        gc.collect()
        assert len(kernel._orphans) == 1
        done.set()
        holder.join()
        _same(kernel(**inputs), vx.run(fa2, inputs, backend=backend))
        assert len(kernel._orphans) == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_optimize_none_is_the_oracle_bit_for_bit(fa2, backend):
    inputs = _inputs(fa2, 3)
    with vx.compile(fa2, backend=backend, optimize="none") as kernel:
        out = kernel(**inputs)["out"]
    ref = vx.reference.flash_attention_2(inputs["q"], inputs["k"], inputs["v"], tile_size=4)
    if backend == "interpreter":
        np.testing.assert_array_equal(out, ref)
    else:  # Vulkan's exp is within a few ulp (tests/test_vulkan.py)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pass_pipeline_compiles_for_either_backend(fa2, backend):
    """On Vulkan `device` defaulted to "vulkan", which a pipeline refused
    ("device='vulkan' applies to an optimisation level") though the user
    named no device; a pipeline names its device in vyre-to-gpu{device=}."""
    inputs = _inputs(fa2, 3)
    with vx.compile(fa2, backend=backend, optimize="vyre-to-gpu{optimize=none},cse") as kernel:
        out = kernel(**inputs)["out"]
    ref = vx.reference.flash_attention_2(inputs["q"], inputs["k"], inputs["v"], tile_size=4)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(VyreError, match="applies to an optimisation level"):
        vx.compile(fa2, backend=backend, optimize="cse", device="vulkan")


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_are_new_arrays(fa2, backend, kernels):
    kernel = kernels(fa2, backend)
    inputs = _inputs(fa2, 4)
    first = kernel(**inputs)["out"]
    kept = first.copy()
    first[:] = 7.0
    second = kernel(**inputs)["out"]
    np.testing.assert_array_equal(second, kept)
    assert first.base is None or first.base is not second.base


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("decoder", ["fa2", "mla"])
def test_a_vulkan_kernel_gives_the_spirv_module_it_dispatches(decoder, backend, kernels,
                                                               request):
    """kernel.spirv: the program's whole module (MLA's three kernels' entry
    points in one, as vx.compile_spirv gives it) on Vulkan, None on the
    interpreter and once closed."""
    module = request.getfixturevalue(decoder)
    kernel = kernels(module, backend)
    if backend == "interpreter":
        assert kernel.spirv is None
        return
    assert kernel.spirv == vx.compile_spirv(module)
    assert kernel.spirv[:4] == b"\x03\x02\x23\x07"  # the SPIR-V magic
    kernel.close()
    assert kernel.spirv is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_statistics_are_the_drivers_where_it_reports_them(fa2, backend, kernels):
    """{kernel: {statistic: number}} from the driver (on NVIDIA: registers a
    lane, ...); {} where there is none: the interpreter, and Vulkan drivers
    without VK_KHR_pipeline_executable_properties (lavapipe)."""
    kernel = kernels(fa2, backend)
    stats = kernel.statistics()
    reports = backend == "vulkan" and vx.vulkan.device._context(False).statistics
    if not reports:
        assert stats == {}
    else:
        assert set(stats) == {k.name for k in kernel.info.kernels}
        assert all(isinstance(v, int | float | bool) for s in stats.values() for v in s.values())


@pytest.mark.parametrize("backend", BACKENDS)
def test_statistics_of_a_closed_kernel_are_refused(fa2, backend):
    kernel = vx.compile(fa2, backend=backend)
    kernel.close()
    with pytest.raises(VyreError, match="closed"):
        kernel.statistics()


# resident arrays ------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_resident_inputs_are_not_copied_again(fa2, backend, kernels):
    kernel = kernels(fa2, backend)
    inputs = _inputs(fa2, 5)
    k, v = kernel.upload("k", inputs["k"]), kernel.upload("v", inputs["v"])
    timings: dict = {}
    kernel(**inputs, timings=timings)
    assert timings["uploaded_bytes"] == 3 * inputs["q"].nbytes
    for _ in range(3):
        timings = {}
        kernel(q=inputs["q"], k=k, v=v, timings=timings)
        assert timings["uploaded_bytes"] == inputs["q"].nbytes
    if backend == "vulkan":  # the same bindings: nothing recorded again
        assert timings["recorded"] is False
        assert timings["wait_ms"] >= 0 and "dispatch_ms" in timings
    assert timings["total_ms"] >= timings["host_ms"] > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_captured_table_is_uploaded_once_and_may_be_overridden(backend):
    slopes = np.array([0.5, 0.25], np.float32)
    twice = 2 * slopes

    def alibi(score, q_idx, kv_idx, head):
        return score + slopes[head] * (kv_idx - q_idx)

    def doubled(score, q_idx, kv_idx, head):
        return score + twice[head] * (kv_idx - q_idx)

    module = vx.flash_attention_2(**FA2, num_heads=2, score_mod=alibi)
    inputs = {name: a for name, a in _inputs(module, 9).items() if name in ("q", "k", "v")}
    with vx.compile(module, backend=backend) as kernel:
        (table,) = [name for name in kernel.inputs if name not in inputs]
        k, v = kernel.upload("k", inputs["k"]), kernel.upload("v", inputs["v"])
        want = vx.run(module, inputs, backend=backend)["out"]
        for _ in range(2):  # the table resident from the first call on
            timings: dict = {}
            got = kernel(q=inputs["q"], k=k, v=v, timings=timings)["out"]
            assert got.tobytes() == want.tobytes()
            assert timings["uploaded_bytes"] == inputs["q"].nbytes
        # a table given with the call is the one it uses
        other = vx.run(vx.flash_attention_2(**FA2, num_heads=2, score_mod=doubled), inputs,
                       backend=backend)["out"]
        given = kernel(q=inputs["q"], k=k, v=v, **{table: twice})["out"]
        assert given.tobytes() == other.tobytes() != want.tobytes()
        assert kernel(q=inputs["q"], k=k, v=v)["out"].tobytes() == want.tobytes()


@pytest.mark.parametrize("staging", _vulkan_params())
def test_write_and_read_a_resident_array(fa2, staging, kernels):
    """write() updates in place, wholly or rows from an offset (a KV cache
    gaining a token); read() gives it back; on the staging path (a
    discrete GPU's) both go through transfers."""
    kernel = kernels(fa2, "vulkan", staging)
    inputs = _inputs(fa2, 6)
    k = kernel.upload("k", inputs["k"])
    np.testing.assert_array_equal(k.read(), inputs["k"])
    changed = inputs["k"].copy()
    changed[5] = np.arange(4, dtype=np.float32)
    k.write(changed[5], offset=5 * FA2["head_dim"])
    np.testing.assert_array_equal(k.read(), changed)
    expected = vx.run(fa2, {**inputs, "k": changed}, backend="vulkan")
    _same(kernel(q=inputs["q"], k=k, v=inputs["v"]), expected)
    k.write(inputs["k"])  # all of it
    _same(kernel(q=inputs["q"], k=k, v=inputs["v"]),
          vx.run(fa2, inputs, backend="vulkan"))
    k.free()


@pytest.mark.parametrize("staging", _vulkan_params())
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_precision_resident_arrays(dtype, staging):
    """Half buffers of an odd element count (rounded up to whole words on
    the device): uploads, a write at an odd offset, read-back, results."""
    from vyre_xdsl.dtypes import numpy_dtype

    module = vx.flash_attention_2(seq_len=5, head_dim=3, tile_size=4, dtype=dtype)
    half = numpy_dtype(dtype)
    inputs = {name: value.astype(half) for name, value in _inputs(module, 14).items()}
    with vx.compile(module, backend="vulkan", staging=staging) as kernel:
        k = kernel.upload("k", inputs["k"])
        changed = inputs["k"].copy()
        changed.reshape(-1)[7:10] = np.array([0.5, -1.0, 2.0], half)
        k.write(changed.reshape(-1)[7:10], offset=7)
        assert k.read().dtype == half
        np.testing.assert_array_equal(k.read(), changed)
        got = kernel(q=inputs["q"], k=k, v=inputs["v"])
    _same(got, vx.run(module, {**inputs, "k": changed}, backend="vulkan"))
    assert got["out"].dtype == half


@pytest.mark.parametrize("backend", BACKENDS)
def test_swapping_resident_arrays(fa2, backend, kernels):
    """Two caches passed in turn: the kernel binds whichever it is given."""
    kernel = kernels(fa2, backend)
    a, b = _inputs(fa2, 7), _inputs(fa2, 8)
    ka, kb = kernel.upload("k", a["k"]), kernel.upload("k", b["k"])
    for inputs, handle in ((a, ka), (b, kb), (a, ka)):
        _same(kernel(q=inputs["q"], k=handle, v=inputs["v"]),
              vx.run(fa2, inputs, backend=backend))


# misuse -----------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_handle_misuse_is_a_vyre_error(fa2, backend, kernels):
    kernel = kernels(fa2, backend)
    inputs = _inputs(fa2, 9)
    k = kernel.upload("k", inputs["k"])
    with vx.compile(fa2, backend=backend) as other:
        with pytest.raises(VyreError, match=r"input 'k' is DeviceArray\('k'.*another kernel"):
            other(q=inputs["q"], k=k, v=inputs["v"])
        with pytest.raises(VyreError, match="another kernel"):
            vx.run(fa2, {**inputs, "k": k}, backend=backend)
    with pytest.raises(VyreError, match=r"input 'v' is .*copy of input 'k'.*pass it as k="):
        kernel(q=inputs["q"], k=inputs["k"], v=k)  # same size, wrong buffer
    with pytest.raises(VyreError, match=r"input 'q' is .*copy of input 'k'.*32 elements"):
        kernel(q=k, k=inputs["k"], v=inputs["v"])
    k.free()
    k.free()  # idempotent
    assert k.freed and "freed" in repr(k)
    with pytest.raises(VyreError, match=r"input 'k' is DeviceArray.*freed.*upload"):
        kernel(q=inputs["q"], k=k, v=inputs["v"])
    for call in (k.read, lambda: k.write(inputs["k"])):
        with pytest.raises(VyreError, match="was freed"):
            call()


@pytest.mark.parametrize("backend", BACKENDS)
def test_upload_and_write_check_like_a_call(fa2, backend, kernels):
    kernel = kernels(fa2, backend)
    q = np.zeros((8, 4), np.float32)
    for name, value, message in [
        ("out", q, r"unknown input 'out'.*an output"),
        ("x", q, r"unknown input 'x'.*inputs are q, k, v"),
        (["k"], q, r"an input's name is a string, one of q, k, v; got \['k'\]"),
        (3, q, r"an input's name is a string.*got 3"),
        ("k", np.zeros(31, np.float32), r"'k' has 31 elements.*expects 32"),
        ("k", q.astype(np.float64), r"'k' has dtype float64"),
        ("k", [[0.0] * 4] * 8, r"'k' must be a numpy array"),
    ]:
        with pytest.raises(VyreError, match=message):
            kernel.upload(name, value)
    k = kernel.upload("k", q)
    for values, offset, message in [
        (np.zeros(4, np.float32), 29, r"cannot write 4 elements at offset 29 of 'k'"),
        (np.zeros(4, np.float32), -1, r"offset -1"),
        (np.zeros(4, np.float64), 0, r"dtype float64"),
        (np.zeros(32, np.float64), 0, r"'k' has dtype float64"),
        (np.zeros(4, np.float32), 1.0, r"offset must be an element index"),
        ([0.0], 0, r"must be a numpy array"),
    ]:
        with pytest.raises(VyreError, match=message):
            k.write(values, offset=offset)
    k.free()


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_errors_name_the_buffer(fa2, backend, kernels):
    kernel = kernels(fa2, backend)
    good = _inputs(fa2, 10)
    for inputs, message in [
        ({**good, "x": good["q"]}, r"unknown input 'x'"),
        ({"q": good["q"], "k": good["k"]}, r"missing input 'v'"),
        ({**good, "k": good["k"][:7]}, r"'k' has 28 elements"),
        ({**good, "v": good["v"].astype(np.float16)}, r"'v' has dtype float16"),
    ]:
        with pytest.raises(VyreError, match=message):
            kernel(**inputs)
    with pytest.raises(VyreError, match="must be a dict"):
        kernel([good["q"]])
    with pytest.raises(VyreError, match="'q' is given twice"):
        kernel({"q": good["q"]}, q=good["q"], k=good["k"], v=good["v"])
    with pytest.raises(VyreError, match="timings must be a dict"):
        kernel(**good, timings=[])
    _same(kernel(**good), vx.run(fa2, good, backend=backend))  # still usable


@pytest.mark.parametrize("backend", BACKENDS)
def test_well_formed_calls_skip_the_long_check(fa2, backend, kernels, monkeypatch):
    """A call whose inputs are arrays of the buffers' dtype and size, or
    this kernel's live DeviceArrays for them, does not go through
    check_inputs (a decode step's host time); anything else does, and is
    refused as before, naming the buffer. Any layout gives vx.run's
    results and the caller's arrays are left as they were."""
    import vyre_xdsl.kernel

    kernel = kernels(fa2, backend)
    good = _inputs(fa2, 14)
    expected = vx.run(fa2, good, backend=backend)
    k = kernel.upload("k", good["k"])
    other = vx.compile(fa2, backend=backend)
    foreign = other.upload("k", good["k"])
    checked = []
    check_inputs = vyre_xdsl.kernel.check_inputs
    monkeypatch.setattr(vyre_xdsl.kernel, "check_inputs",
                        lambda *args, **kw: checked.append(1) or check_inputs(*args, **kw))
    q = good["q"].copy()
    for layout in (q, np.asfortranarray(q), q.reshape(-1), q.reshape(2, 16)):
        _same(kernel(q=layout, k=k, v=good["v"]), expected)
        _same(kernel(q=layout, k=good["k"], v=good["v"]), expected)
    np.testing.assert_array_equal(q, good["q"])
    assert not checked
    for inputs, message in [
        ({**good, "q": good["q"].astype(">f4")}, r"'q' has dtype >f4"),
        ({**good, "q": np.ma.masked_array(good["q"])}, r"'q' is a masked array"),
        ({**good, "v": good["v"].tolist()}, r"'v' must be a numpy array"),
        ({**good, "v": good["v"][:7]}, r"'v' has 28 elements"),
        ({"q": good["q"], "k": k, "x": good["v"]}, r"unknown input 'x'"),
        ({**good, "v": k}, r"input 'v' is .*copy of input 'k'"),
        ({**good, "k": foreign}, r"input 'k' is .*another kernel"),
    ]:
        with pytest.raises(VyreError, match=message):
            kernel(**inputs)
    assert len(checked) == 7
    other.close()
    k.free()
    with pytest.raises(VyreError, match=r"input 'k' is DeviceArray.*freed"):
        kernel(q=q, k=k, v=good["v"])


def test_compile_argument_errors(fa2):
    with pytest.raises(VyreError, match="unknown backend 'cuda'"):
        vx.compile(fa2, backend="cuda")
    with pytest.raises(VyreError, match="ModuleOp"):
        vx.compile("fa2")
    lowered = vx.lower_to_gpu(fa2)
    with pytest.raises(VyreError, match="optimize='exact' applies to vyre IR"):
        vx.compile(lowered, optimize="exact")
    with pytest.raises(VyreError, match="device='h200' applies to vyre IR"):
        vx.compile(lowered, device="h200")  # was ignored
    with pytest.raises(VyreError, match="device='generic' applies to vyre IR"):
        vx.compile(vx.compile(fa2).compiled, device="generic")
    with pytest.raises(VyreError, match="staging= applies to backend='vulkan'"):
        vx.compile(fa2, staging=True)  # was ignored on the interpreter
    for empty in ("", "  "):  # was the plain lowering, silently
        with pytest.raises(VyreError, match="optimize is empty"):
            vx.compile(fa2, optimize=empty)
    kernel = vx.compile(lowered)  # a lowered module runs as it is
    assert kernel.inputs == ("q", "k", "v") and kernel.outputs == ("out",)
    assert kernel.spirv is None and "interpreter" in repr(kernel)


# lifetime ---------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_a_closed_kernel_refuses_calls(fa2, backend):
    inputs = _inputs(fa2, 11)
    with vx.compile(fa2, backend=backend) as kernel:
        k = kernel.upload("k", inputs["k"])
        kernel(**inputs)
    assert kernel.closed and "closed" in repr(kernel)
    kernel.close()  # idempotent
    assert k.freed  # close frees the kernel's DeviceArrays
    for call in (lambda: kernel(**inputs), lambda: kernel.upload("k", inputs["k"])):
        with pytest.raises(VyreError, match=r"was closed \(kernel.close\(\)\).*vx.compile"):
            call()
    # the array went with its kernel: say so, not "upload it again" to it
    for call in (k.read, lambda: k.write(inputs["k"])):
        with pytest.raises(VyreError, match=r"was on a kernel that is closed.*vx.compile, "
                                            r"and upload the array to the new kernel"):
            call()


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernels_and_device_arrays_refuse_copies_and_pickles(fa2, backend, kernels):
    """A copy of a DeviceArray shared its device buffer: freeing the copy
    destroyed the original's, whose read() then returned garbage and whose
    write() wrote to freed memory (a crash under validation); pickling
    recursed without end."""
    import copy
    import pickle

    kernel = kernels(fa2, backend)
    inputs = _inputs(fa2, 12)
    k = kernel.upload("k", inputs["k"])
    for thing, hint in ((k, r"\.read\(\)"), (kernel, "vx.compile")):
        for make in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(VyreError, match=f"cannot be copied or pickled; .*{hint}"):
                make(thing)
    assert np.array_equal(k.read(), inputs["k"])
    for call in (lambda: kernel.upload("k", k), lambda: k.write(k), lambda: k.write(k, 4)):
        with pytest.raises(VyreError, match=r"on the device already: pass it to a call as "
                                            r"input 'k', or read it back"):
            call()
    k.free()


@pytest.mark.parametrize("staging", _vulkan_params())
def test_the_vulkan_executor_refuses_a_destroyed_buffer(fa2, staging):
    """Below the DeviceArray: a buffer freed on the dispatcher is not read
    or written (its memory may be another's)."""
    kernel = vx.compile(fa2, backend="vulkan", staging=staging)
    inputs = _inputs(fa2, 13)
    k = kernel.upload("k", inputs["k"])
    dispatcher, buffer = kernel._impl.dispatcher, k._data
    dispatcher.free(buffer)
    for call in (lambda: dispatcher.read(buffer), lambda: dispatcher.write(buffer, inputs["k"])):
        with pytest.raises(VyreError, match="not resident on this kernel"):
            call()
    kernel.close()


def _users():
    from vyre_xdsl.vulkan import runtime

    return runtime._context(runtime._validation_requested(None)).users


@pytest.mark.parametrize("staging", _vulkan_params())
def test_vulkan_objects_are_freed_on_close_gc_and_device_close(fa2, staging):
    """close(), garbage collection and vulkan.close() each destroy the
    kernel's objects; the validation layer reports any leak at vulkan.close()."""
    from vyre_xdsl import vulkan

    inputs = _inputs(fa2, 12)
    before = len(_users())
    kernel = vx.compile(fa2, backend="vulkan", staging=staging)
    kernel.upload("k", inputs["k"])
    assert len(_users()) == before + 1
    kernel.close()
    assert len(_users()) == before
    kernel = vx.compile(fa2, backend="vulkan", staging=staging)
    k = kernel.upload("k", inputs["k"])
    del kernel, k
    gc.collect()
    assert len(_users()) == before
    kernel = vx.compile(fa2, backend="vulkan", staging=staging)
    k = kernel.upload("k", inputs["k"])
    vulkan.close()  # raises on leaked objects; closes the open kernel first
    with pytest.raises(VyreError, match=r"closed with its Vulkan device.*vx.compile"):
        kernel(**inputs)
    with pytest.raises(VyreError, match="closed"):
        k.read()
    k.free()
    kernel.close()


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@pytest.mark.parametrize("staging", _vulkan_params())
def test_soak_calls_and_kernels(fa2, staging, fuzz_stats):
    """200 calls (arrays and resident copies, uploads, writes, frees) and
    10 kernels made and closed: host memory stays flat, the kernel's own
    Vulkan objects stay as many as after its first call, and the
    validation layer reports nothing, leaks included."""
    from vyre_xdsl import vulkan

    inputs = _inputs(fa2, 13)
    expected = vx.run(fa2, inputs, backend="vulkan")["out"]
    kernel = vx.compile(fa2, backend="vulkan", staging=staging)
    dispatcher = kernel._impl.dispatcher
    kernel(**inputs)
    objects = len(dispatcher.res.items) + sum(len(b.res.items) for b in dispatcher.own.values())
    rss = []
    for i in range(200):
        if i == 50:
            rss.append(_rss())
        k = kernel.upload("k", inputs["k"]) if i % 3 else inputs["k"]
        if i % 5 == 0 and i % 3:
            k.write(inputs["k"][1], offset=4)
        out = kernel(q=inputs["q"], k=k, v=inputs["v"])["out"]
        if i % 37 == 0:
            np.testing.assert_array_equal(out, expected)
        if i % 2 and i % 3:
            k.free()  # the others go with garbage collection
    rss.append(_rss())
    assert len(dispatcher.res.items) + sum(
        len(b.res.items) for b in dispatcher.own.values()) == objects
    kernel.close()
    open_before = len(_users())
    for _ in range(10):
        with vx.compile(fa2, backend="vulkan", staging=staging) as other:
            other(**inputs)
    assert len(_users()) == open_before
    vulkan.close()  # the layer reports any object left behind
    fuzz_stats["soak: compiled kernel calls under validation"] += 210
    growth = rss[1] - rss[0]
    assert growth < 16 * 2**20, f"host memory grew {growth / 2**20:.1f} MiB"
