"""benchmarks/decode_gpu.py: its grids, rows and the batched absorbed MLA
form without torch; with torch (CPU) and a Vulkan device, a --quick run on
the CPU whose JSON is checked (every number positive, each ratio against the
best PyTorch path), and a --max-seconds budget that stops it cleanly."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from benchmark_modules import BENCHMARKS, benchmark_fixture
from requirements import needs_vulkan

import vyre_xdsl as vx

bench = benchmark_fixture("decode_gpu")
# the baselines and helpers attention_gpu.py and decode_gpu.py share
common = benchmark_fixture("_common")


def test_batched_absorbed_mla_is_each_sequence_alone(common):
    """The PyTorch baseline's formula over a batch: each sequence against the
    oracle of one sequence (caches differ per sequence, weights are shared)."""
    rng = np.random.default_rng(5)
    batch, heads, dim, seq, rank, rope = 3, 2, 8, 40, 16, 4
    q = rng.standard_normal((batch, heads, dim))
    kv = rng.standard_normal((batch, seq, rank))
    kr = rng.standard_normal((batch, seq, rope))
    w_uk, w_uv = (rng.standard_normal((rank, heads * dim)) / 4 for _ in range(2))
    got = common.mla_absorbed(q, kv, kr, w_uk, w_uv, np.einsum, common.numpy_softmax)
    assert got.shape == (batch, heads, dim)
    for b in range(batch):
        want = vx.reference.mla_decode(*(a.astype(np.float32) for a in (
            q[b], kv[b], kr[b], w_uk, w_uv)))
        np.testing.assert_allclose(got[b], want, rtol=1e-4, atol=1e-5)


def test_mla_grid_is_flashmla_s(bench):
    points = bench.mla_grid(quick=False)
    assert len(points) == 3 * 4 * 4
    assert {(p.batch, p.seq, p.heads) for p in points} == {
        (b, s, h) for b in (1, 32, 128) for s in (4096, 8192, 16384, 32768)
        for h in (16, 32, 64, 128)}
    assert {(p.dim, p.rank, p.rope) for p in points} == {(128, 512, 64)}
    point = bench.MlaPoint(32, 4096, 16)
    assert point.cache_bytes(2) == 32 * 4096 * (512 + 64) * 2
    assert point.label == "B=32 S=4096 H=16"


def test_gqa_grid(bench):
    subset, every = bench.gqa_grid(False, False), bench.gqa_grid(False, True)
    assert {(p.heads, p.kv_heads, p.dim) for p in every} == {(32, 8, 128)}
    assert {p.batch for p in every} == {1, 2, 4, 8, 16, 32, 64, 128}
    assert {p.kv_len for p in every} == {1024, 2048, 4096, 8192, 16384, 32768}
    assert set(subset) < set(every)
    assert {1, 128} <= {p.batch for p in subset} and 32768 in {p.kv_len for p in subset}
    assert bench.GqaPoint(4, 1024).cache_bytes(4) == 2 * 4 * 8 * 1024 * 128 * 4


def test_row_ratio_and_bandwidth(bench):
    row = bench.Row("gqa", "x", "dense", bytes_read=8_000_000,
                    torch_ms={"eff": 4.0, "math": 8.0, "flash": None, "flex": 2.0})
    assert row.ratio is None and row.ours_gbps is None
    row.ours_ms = 1.0
    assert row.best == ("flex", 2.0)
    assert row.ratio == pytest.approx(2.0)
    assert row.ours_gbps == pytest.approx(8.0) and row.best_gbps == pytest.approx(4.0)
    record = row.as_json()
    assert record["best_path"] == "flex" and record["torch_ms"]["flash"] is None
    slow = bench.Row("gqa", "y", "dense", bytes_read=8_000_000, torch_ms={"eff": 1.0},
                     ours_ms=4.0)
    skipped = bench.Row("gqa", "z", "dense", bytes_read=1, skipped="too big")
    (line,) = bench.summary([row, slow, skipped])
    assert line.startswith("gqa dense: 2 points (1 skipped); ratio min 0.250 (y, vs eff), "
                           "median 1.125, >= 1.0 at 1; GB/s max ours 8, PyTorch 8")


def test_a_refused_shape_is_skipped_with_the_reason(bench):
    kernel, why = bench.compile_ours(lambda: vx.flash_attention_2(
        seq_len=1, kv_len=2**16, batch=2**16, num_heads=32, num_kv_heads=8, head_dim=128),
        "interpreter")
    assert kernel is None and "does not fit" in why

    def old_mla():  # an mla_decode without batch=
        raise TypeError("mla_decode() got an unexpected keyword argument 'batch'")

    assert bench.compile_ours(old_mla, "interpreter") == (None, bench.NEEDS_BATCH)

    def unpaged():
        raise TypeError("mla_decode() got an unexpected keyword argument 'page_size'")

    assert bench.compile_ours(unpaged, "interpreter")[1].startswith("n/a: mla_decode() got")

    def broken():  # a bug, not a missing feature: the run stops
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    with pytest.raises(TypeError):
        bench.compile_ours(broken, "interpreter")


def test_a_batch_in_calls_runs_each_share_and_adds_their_times(bench):
    """run_variant with row.calls = 2: a kernel of half the batch called on
    each half (the weights whole), its output checked against that half of
    the expected output, the step's time the two calls' times added."""
    point = bench.MlaPoint(2, 64, 2, dim=16, rank=32, rope=16)
    kernel = vx.compile(bench.mla_module(point, "dense", "f32", calls=2), "interpreter")
    rng = np.random.default_rng(3)
    inputs = {"q": rng.standard_normal((2, 2, 16)), "kv_cache": rng.standard_normal((2, 64, 32)),
              "kr_cache": rng.standard_normal((2, 64, 16)),
              "w_uk": rng.standard_normal((32, 32)) / 8, "w_uv": rng.standard_normal((32, 32)) / 8}
    inputs = {name: a.astype(np.float32) for name, a in inputs.items()}
    expected = np.stack([vx.reference.mla_decode(
        inputs["q"][b], inputs["kv_cache"][b], inputs["kr_cache"][b], inputs["w_uk"],
        inputs["w_uv"]) for b in range(2)])
    opts = type("Opts", (), dict(warmup=1, repeat=3, dtype="f32"))
    row = bench.Row("mla", point.label, "dense", 1, params={"batch": 2}, calls=2)
    bench.run_variant(row, kernel, inputs, expected, opts)
    assert row.note == "" and row.max_abs_err < 1e-4
    wrong = dict(expected=expected.copy())
    wrong["expected"][1] += 1.0  # the second call's half checked against its own rows
    row2 = bench.Row("mla", point.label, "dense", 1, params={"batch": 2}, calls=2)
    bench.run_variant(row2, vx.compile(bench.mla_module(point, "dense", "f32", calls=2),
                                       "interpreter"), inputs, wrong["expected"], opts)
    assert row2.max_abs_err > 0.5 and row2.note.startswith("WRONG")
    parts = [{"ours_ms": 1.0, "ours_device_ms": None, "ours_call_ms": 2.0,
              "max_abs_err": e, "ours_kernel_ms": {"k": 0.5}} for e in (1e-3, 2e-3)]
    total = bench.summed(parts)
    assert total["ours_ms"] == 2.0 and total["ours_call_ms"] == 4.0
    assert total["ours_device_ms"] is None and total["max_abs_err"] == 2e-3
    assert total["ours_kernel_ms"] == {"k": 1.0}


def test_a_gqa_batch_in_calls_runs_each_share_against_its_rows(bench):
    """GQA decode's batch in two calls (its K and V past the largest binding
    at batch 128 with 16384 keys): each call a kernel of half the batch,
    over that half's q, k, v and run-time lengths, checked against its
    rows of the expected output."""
    point = bench.GqaPoint(2, 64, heads=4, kv_heads=2, dim=8)
    kernel = vx.compile(bench.gqa_module(point, "kv_lens", "f32", calls=2), "interpreter")
    shapes = {b.name: b.shape for b in kernel.info.kernels[0].buffers}
    assert shapes["q"] == (1, 4, 1, 8) and shapes["k"] == (1, 2, 64, 8)  # half the batch
    rng = np.random.default_rng(4)
    inputs = {"q": rng.standard_normal((2, 4, 1, 8)), "k": rng.standard_normal((2, 2, 64, 8)),
              "v": rng.standard_normal((2, 2, 64, 8))}
    inputs = {name: a.astype(np.float32) for name, a in inputs.items()}
    inputs["kv_lens"] = np.array([64, 17], np.int32)
    expected = vx.reference.flash_attention_2(inputs["q"], inputs["k"], inputs["v"],
                                              kv_lens=inputs["kv_lens"])
    opts = type("Opts", (), dict(warmup=1, repeat=3, dtype="f32"))
    row = bench.Row("gqa", point.label, "kv_lens", 1, params={"batch": 2}, calls=2)
    bench.run_variant(row, kernel, inputs, expected, opts)
    assert row.note == "" and row.max_abs_err < 1e-5
    wrong = expected.copy()
    wrong[1] += 1.0  # the second call's sequence checked against its own rows
    row2 = bench.Row("gqa", point.label, "kv_lens", 1, params={"batch": 2}, calls=2)
    bench.run_variant(row2, vx.compile(bench.gqa_module(point, "kv_lens", "f32", calls=2),
                                       "interpreter"), inputs, wrong, opts)
    assert row2.max_abs_err > 0.5 and row2.note.startswith("WRONG")


def test_batch_in_calls_builds_a_share_of_the_batch(bench):
    """Both grids' `in_calls`: the kernel of batch / calls sequences, none
    for a paged pool (shared by the batch), a batch the calls do not divide
    or more than MAX_CALLS calls."""
    point = bench.GqaPoint(8, 64, heads=4, kv_heads=2, dim=8)
    opts = type("Opts", (), dict(dtype="f32"))
    in_calls = bench.batch_in_calls(point, bench.gqa_module, opts)
    build = in_calls("dense", 4)
    (q,) = [b for b in vx.compile(build(), "interpreter").info.kernels[0].buffers
            if b.name == "q"]
    assert q.shape == (2, 4, 1, 8)
    assert in_calls("paged", 2) is None and in_calls("dense", 3) is None
    assert in_calls("dense", 2 * bench.MAX_CALLS) is None


def test_a_cache_past_the_largest_binding_is_split_by_batch(bench, common, monkeypatch):
    """measure() halves the batch until the kernel compiles where the device
    refuses a buffer for maxStorageBufferRange, and says so in the row; any
    other refusal, or a variant that may not split, stays skipped."""
    refused = f"VyreError: buffer 'kv_cache' is 4294967296 bytes but ... {bench.RANGE_LIMIT}"

    def compile_ours(build, backend, optimize="default"):
        batch = build()
        return (("kernel", batch), None) if batch <= 32 else (None, refused)

    ran = {}

    def run_variant(row, kernel, inputs, expected, opts):
        ran[row.variant] = kernel
        row.ours_ms = 1.0

    monkeypatch.setattr(bench, "compile_ours", compile_ours)
    monkeypatch.setattr(bench, "run_variant", run_variant)
    monkeypatch.setattr(bench, "run_torch",
                        lambda *a: common.TorchResult(times={"absorbed": 1.0}, notes={}))
    point = bench.MlaPoint(128, 32768, 16)
    variants = {"dense": (lambda: 128, "default"), "paged": (lambda: 128, "default")}

    def in_calls(name, calls):
        return None if name == "paged" else (lambda: 128 // calls)

    opts = type("Opts", (), dict(dtype="bf16", device="cpu", warmup=1, repeat=3,
                                 backend="interpreter"))
    rows = {r.variant: r for r in bench.measure(
        point, variants, lambda: ([], {"dense": {}, "paged": {}}, {}), opts, in_calls)}
    assert rows["dense"].calls == 4 and rows["dense"].skipped == ""
    assert rows["dense"].note.startswith("batch in 4 calls of 32")
    assert ran == {"dense": ("kernel", 32)}
    assert rows["paged"].calls == 1 and rows["paged"].skipped == refused


def test_paged_pools_read_back_in_order(bench):
    torch = pytest.importorskip("torch")
    k, kr = torch.randn(2, 32, 3, 4), torch.randn(2, 32, 5)  # [B, L, ...]
    (k_pool, kr_pool), table = bench.paged([k, kr], 8, torch.Generator().manual_seed(1))
    assert k_pool.shape == (8, 8, 3, 4) and kr_pool.shape == (8, 8, 5)
    assert table.shape == (2, 4) and table.dtype == torch.int32
    assert sorted(table.reshape(-1).tolist()) == list(range(8))
    assert table.reshape(-1).tolist() != list(range(8))  # shuffled
    for pool, cache in ((k_pool, k), (kr_pool, kr)):  # key t of b: page table[b, t // 8]
        assert torch.equal(pool[table.long()].reshape(cache.shape), cache)


def run_script(tmp_path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "decode.json"
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "decode_gpu.py"), "--device", "cpu", "--quick",
         "--warmup", "1", "--repeat", "3", "--out", str(out), *args],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text()), result.stdout


@needs_vulkan
def test_quick_cpu_run(tmp_path):
    pytest.importorskip("torch")
    record, stdout = run_script(tmp_path, "--mla-paged", "--mla-lanes")
    settings, rows = record["settings"], record["rows"]
    assert settings["torch"] and settings["device"].startswith("cpu")
    assert settings["cuda.matmul.allow_tf32"] is False and settings["not_run"] == []
    assert {(r["grid"], r["variant"]) for r in rows} == {
        ("mla", "dense"), ("mla", "paged"), ("mla", "lanes"), ("gqa", "dense"),
        ("gqa", "kv_lens"), ("gqa", "paged")}
    measured = [r for r in rows if not r["skipped"]]
    assert {r["grid"] for r in measured} == {"mla", "gqa"}
    for r in rows:
        if r["skipped"]:  # only MLA at batch > 1, while mla_decode has no batch=
            assert r["skipped"] == "n/a: needs mla_decode(batch=)" and r["params"]["batch"] > 1
            continue
        ran = {path: ms for path, ms in r["torch_ms"].items() if ms is not None}
        assert ran and all(ms > 0 for ms in ran.values())
        best = min(ran, key=ran.get)
        assert (r["best_path"], r["best_ms"]) == (best, ran[best])
        assert r["ours_ms"] > 0 and r["ours_gbps"] > 0 and r["bytes_read"] > 0
        assert r["ratio"] == pytest.approx(r["best_ms"] / r["ours_ms"])
        assert r["ours_gbps"] == pytest.approx(r["bytes_read"] / r["ours_ms"] / 1e6)
        assert r["max_abs_err"] <= 1e-3 and "WRONG" not in r["note"]
        assert r["ours_launch"] and r["ours_timer"]
        # each kernel's GPU time (lavapipe's timestamps), by name, in launch order
        assert list(r["ours_kernel_ms"]) == [launch.split()[0] for launch in r["ours_launch"]]
        assert all(ms >= 0 for ms in r["ours_kernel_ms"].values())
        assert r["compiled"] == {}  # the interpreter has no driver statistics
        assert r["checked_against"] in ran
    assert set(rows[0]["torch_ms"]) == {"absorbed", "eager"}
    assert {"eff", "math", "cudnn", "flash", "flex"} == set(rows[-1]["torch_ms"])
    assert "ratio" in stdout and "absorbed" in stdout
    assert "kernels (ms): mla_decode_absorb_query " in stdout  # the MLA program's
    assert [line.split(":")[0] for line in settings["summary"]] == [
        "mla dense", "mla paged", "mla lanes", "gqa dense", "gqa kv_lens", "gqa paged"]


@needs_vulkan
def test_budget_stops_the_grid_and_writes_what_it_has(tmp_path):
    pytest.importorskip("torch")
    record, stdout = run_script(tmp_path, "--max-seconds", "0", "--dtype", "bf16")
    assert record["rows"] == [] and record["settings"]["dtype"] == "bf16"
    assert len(record["settings"]["not_run"]) == 4  # two MLA, two GQA points
    assert "not run: --max-seconds spent" in stdout
