"""Integer buffers, ragged key counts at run time (kv_lens) and paged KV
caches (block_table): the oracle against dense attention in float64, the
interpreter bit-exact with the oracle at optimize="exact", `default` within
tolerance on the interpreter and lavapipe, one compiled kernel for every
length, and the errors for bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, f32

import vyre_xdsl as vx
from vyre_xdsl import reference
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import kernel_info
from vyre_xdsl.skeleton import Buffer, per_item_kernel
from helpers import assert_bad_paged_inputs_refused
from tests.requirements import (
    assert_mlir_opt_accepts,
    assert_spirv_valid,
    needs_mlir_opt,
    needs_val,
    needs_vulkan,
)


def causal(q, kv):
    return kv <= q


def dense(q, k, v, lens, mask_mod=None):
    """Attention in float64 over each sequence's first lens[b] keys of dense
    k/v [B,Hkv,L,D], queries at positions lens[b] - Sq + i; a row without
    keys gives 0 and lse -inf. Returns (out, lse)."""
    batch, heads, sq, d = q.shape
    group = heads // k.shape[1]
    out = np.zeros((batch, heads, sq, v.shape[3]))
    lse = np.full((batch, heads, sq), -np.inf)
    for b in range(batch):
        length = int(lens[b])
        if length == 0:
            continue
        kk, vv = (np.repeat(a[b, :, :length].astype(np.float64), group, axis=0)
                  for a in (k, v))
        s = np.einsum("hqd,hkd->hqk", q[b].astype(np.float64), kk) / np.sqrt(d)
        if mask_mod is not None:
            qi = (length - sq + np.arange(sq))[:, None]
            keep = np.broadcast_to(mask_mod(qi, np.arange(length)[None, :]), (sq, length))
            s = np.where(keep[None], s, -np.inf)
        top = s.max(-1, keepdims=True)
        rows = np.isfinite(top[..., 0])
        p = np.where(rows[..., None], np.exp(s - np.where(np.isfinite(top), top, 0)), 0)
        total = p.sum(-1)
        out[b] = np.einsum("hqk,hkd->hqd", p / np.where(total > 0, total, 1)[..., None], vv)
        lse[b] = np.where(total > 0, np.log(np.where(total > 0, total, 1)) + top[..., 0],
                          -np.inf)
    return out, lse


def paged_inputs(batch, heads, kv_heads, sq, kv_len, d, dv, page_size, num_pages,
                 lens, seed=0):
    """q, the k/v pools, a shuffled block table (distinct pages), kv_lens."""
    rng = np.random.default_rng(seed)
    pages_per_seq = -(-kv_len // page_size)
    assert num_pages >= batch * pages_per_seq
    q = rng.standard_normal((batch, heads, sq, d), dtype=np.float32)
    k = rng.standard_normal((num_pages, page_size, kv_heads, d), dtype=np.float32)
    v = rng.standard_normal((num_pages, page_size, kv_heads, dv), dtype=np.float32)
    table = rng.permutation(num_pages)[: batch * pages_per_seq]
    table = table.reshape(batch, pages_per_seq).astype(np.int32)
    return {"q": q, "k": k, "v": v, "kv_lens": np.asarray(lens, np.int32),
            "block_table": table}


# batch, heads, kv heads, queries, kv_len, head_dim, v_head_dim, tile,
# page_size, num_pages, lengths, mask
PAGED = [
    # decode of one token, GQA, lengths 0, 1, max and between
    (4, 4, 2, 1, 21, 8, 8, 8, 4, 28, [21, 1, 0, 13], None),
    # chunked prefill of 3 queries, causal to the run-time length, Dv != D
    (3, 2, 1, 3, 19, 4, 6, 4, 5, 13, [19, 2, 7], causal),
    # pages larger than tiles, a length shorter than the query count
    (2, 2, 2, 2, 33, 4, 4, 4, 16, 7, [33, 1], causal),
]


def _paged_module(case, **kwargs):
    batch, heads, kv_heads, sq, kv_len, d, dv, tile, page, pages, _, mask = case
    return vx.flash_attention_2(
        seq_len=sq, kv_len=kv_len, batch=batch, num_heads=heads, num_kv_heads=kv_heads,
        head_dim=d, v_head_dim=dv, tile_size=tile, page_size=page, num_pages=pages,
        mask_mod=mask, return_lse=True, **kwargs,
    )


def _paged_oracle(case, ins):
    kv_len, tile, page, mask = case[4], case[7], case[8], case[11]
    return reference.flash_attention_2(
        ins["q"], ins["k"], ins["v"], tile, mask_mod=mask, kv_lens=ins["kv_lens"],
        block_table=ins["block_table"], page_size=page, kv_len=kv_len, return_lse=True,
    )


def _case_inputs(case, seed=0):
    batch, heads, kv_heads, sq, kv_len, d, dv, _, page, pages, lens, _ = case
    return paged_inputs(batch, heads, kv_heads, sq, kv_len, d, dv, page, pages, lens, seed)


def _dense_of(case, ins):
    kv_len, page = case[4], case[8]
    k = reference.gather_pages(ins["k"], ins["block_table"], page, kv_len)
    v = reference.gather_pages(ins["v"], ins["block_table"], page, kv_len)
    return dense(ins["q"], k, v, ins["kv_lens"], case[11])


def _assert_close(got, want, atol):
    out, lse = want
    np.testing.assert_allclose(got["out"], out, atol=atol)
    np.testing.assert_allclose(got["lse"], lse, atol=atol)  # -inf where no keys


# -- integer buffers -----------------------------------------------------------


def _int_module(n):
    """out[i] = sitofp(x[i]): an i32 input read by both executors."""

    def body(b, v, item):
        value = b.emit(arith.SIToFPOp(b.load(v["x"], item), f32)).results[0]
        b.store(value, v["out"], item)

    return ModuleOp([per_item_kernel(
        "widen_ints", [Buffer("x", (n,), dtype="i32"), Buffer("out", (n,), "write")],
        n, body,
    )])


INTS = np.array([0, 1, -1, 7, -7, 2**31 - 1, -(2**31), 123456, -65536, 2**24 + 1],
                np.int32)


def test_i32_buffer_on_the_interpreter():
    got = vx.run(_int_module(INTS.size), {"x": INTS})["out"]
    np.testing.assert_array_equal(got, INTS.astype(np.float32))
    assert kernel_info(vx.lower_to_gpu(_int_module(4))).buffers[0].dtype == "i32"


@needs_vulkan
def test_i32_buffer_on_vulkan():
    got = vx.run(_int_module(INTS.size), {"x": INTS}, backend="vulkan")["out"]
    np.testing.assert_array_equal(got, INTS.astype(np.float32))


def test_i32_buffers_are_checked():
    module = _int_module(4)
    for bad in (np.zeros(4, np.float32), np.zeros(4, np.int64), np.zeros(4, np.uint32)):
        with pytest.raises(VyreError, match=r"'x' has dtype .*int32.*astype\(np.int32\)"):
            vx.run(module, {"x": bad})
    with pytest.raises(VyreError, match="integer buffers are inputs only"):
        Buffer("lens", (4,), "write", dtype="i32")
    with pytest.raises(VyreError, match="dtype must be one of 'f32', 'f16', 'bf16'"):
        vx.flash_attention_2(seq_len=4, head_dim=4, dtype="i32")


# -- the oracle ------------------------------------------------------------------


@pytest.mark.parametrize("case", PAGED)
def test_oracle_matches_dense_attention(case):
    ins = _case_inputs(case)
    out, lse = _paged_oracle(case, ins)
    assert out.shape == (*ins["q"].shape[:3], case[6]) and lse.shape == ins["q"].shape[:3]
    want_out, want_lse = _dense_of(case, ins)
    np.testing.assert_allclose(out, want_out, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, atol=1e-5)
    empty = np.asarray(case[10]) == 0
    assert np.all(out[empty] == 0) and np.all(lse[empty] == -np.inf)


def test_gather_pages_follows_the_block_table_and_clamps():
    pool = np.arange(4 * 2 * 1 * 1, dtype=np.float32).reshape(4, 2, 1, 1)
    table = np.array([[2, 0, 9], [-3, 1, 3]], np.int32)
    dense_k = reference.gather_pages(pool, table, 2, kv_len=5)
    assert dense_k.shape == (2, 1, 5, 1)
    np.testing.assert_array_equal(dense_k[0, 0, :, 0], [4, 5, 0, 1, 6])  # 9 -> page 3
    np.testing.assert_array_equal(dense_k[1, 0, :, 0], [0, 1, 2, 3, 6])  # -3 -> page 0


# -- the interpreter, bit for bit ------------------------------------------------


@pytest.mark.parametrize("case", PAGED)
def test_interpreter_is_bit_exact_with_the_oracle(case):
    ins = _case_inputs(case)
    got = vx.run(vx.lower_to_gpu(_paged_module(case), optimize="exact"), ins)
    out, lse = _paged_oracle(case, ins)
    np.testing.assert_array_equal(got["out"], out)
    np.testing.assert_array_equal(got["lse"], lse)


def test_ragged_without_pages_is_bit_exact_with_score_mod():
    def score_mod(s, q, kv, h):
        return s + 0.125 * h - 0.01 * (q - kv)

    rng = np.random.default_rng(4)
    batch, heads, sq, kv_len, d = 3, 2, 2, 11, 4
    q = rng.standard_normal((batch, heads, sq, d), dtype=np.float32)
    k, v = (rng.standard_normal((batch, 1, kv_len, d), dtype=np.float32) for _ in range(2))
    lens = np.array([11, 0, 4], np.int32)
    m = vx.flash_attention_2(seq_len=sq, kv_len=kv_len, batch=batch, num_heads=heads,
                             num_kv_heads=1, head_dim=d, tile_size=4, kv_lens=True,
                             score_mod=score_mod, mask_mod=causal, return_lse=True)
    got = vx.run(vx.lower_to_gpu(m, optimize="exact"), {"q": q, "k": k, "v": v,
                                                       "kv_lens": lens})
    out, lse = reference.flash_attention_2(q, k, v, 4, score_mod=score_mod, mask_mod=causal,
                                           kv_lens=lens, return_lse=True)
    np.testing.assert_array_equal(got["out"], out)
    np.testing.assert_array_equal(got["lse"], lse)
    assert np.all(got["out"][1] == 0) and np.all(got["lse"][1] == -np.inf)


def test_out_of_range_lengths_and_pages_are_clamped():
    """Lengths below 0 or above kv_len and page indices outside the pool
    give the clamped result, and the interpreter, which refuses any access
    outside an array, reads nothing outside."""
    case = PAGED[1]
    ins = _case_inputs(case)
    ins["kv_lens"] = np.array([-5, 1000, 3], np.int32)
    ins["block_table"][0, 0] = 2**31 - 1
    ins["block_table"][1, 2] = -(2**31)
    ins["block_table"][2, 1] = case[9]  # one past the last page
    got = vx.run(vx.lower_to_gpu(_paged_module(case), optimize="exact"), ins)
    out, lse = _paged_oracle(case, ins)
    np.testing.assert_array_equal(got["out"], out)
    np.testing.assert_array_equal(got["lse"], lse)
    assert np.all(out[0] == 0) and np.all(lse[0] == -np.inf)  # -5 keys: none
    clamped = dict(ins, kv_lens=np.array([0, case[4], 3], np.int32))
    np.testing.assert_array_equal(_paged_oracle(case, clamped)[0], out)


# -- default, within tolerance ---------------------------------------------------


@pytest.mark.parametrize("case", PAGED)
def test_default_on_the_interpreter_matches_dense_attention(case):
    ins = _case_inputs(case, seed=1)
    _assert_close(vx.run(_paged_module(case), ins), _dense_of(case, ins), 2e-6)


@needs_vulkan
@pytest.mark.parametrize("case", PAGED)
def test_default_on_vulkan_matches_dense_attention(case):
    ins = _case_inputs(case, seed=2)
    _assert_close(vx.run(_paged_module(case), ins, backend="vulkan"),
                  _dense_of(case, ins), 2e-6)


@pytest.mark.parametrize("pipeline", [
    "vyre-split-kv{splits=4 merge=workgroup},vyre-to-gpu{optimize=exact}",
    "vyre-split-kv{splits=3 merge=kernel},vyre-to-gpu{optimize=exact}",
    "vyre-retile{tile_size=4},vyre-split-head-dim{parts=2},vyre-to-gpu{optimize=exact}",
])
def test_split_and_retiled_kernels_skip_tiles_at_run_time(pipeline):
    """A decode step split over lanes or kernels: each split skips the
    tiles past its sequence's run-time length."""
    batch, heads, d, kv_len = 4, 4, 8, 96
    rng = np.random.default_rng(5)
    q = rng.standard_normal((batch, heads, 1, d), dtype=np.float32)
    k, v = (rng.standard_normal((batch, heads, kv_len, d), dtype=np.float32)
            for _ in range(2))
    lens = np.array([96, 17, 0, 33], np.int32)
    m = vx.flash_attention_2(seq_len=1, kv_len=kv_len, batch=batch, num_heads=heads,
                             head_dim=d, tile_size=16, kv_lens=True)
    got = vx.run(vx.lower_to_gpu(m, optimize=pipeline), {"q": q, "k": k, "v": v,
                                                         "kv_lens": lens})["out"]
    want, _ = dense(q, k, v, lens)
    np.testing.assert_allclose(got, want, atol=2e-6)
    assert np.all(got[2] == 0)


# -- one compiled kernel, every length --------------------------------------------


def _reuse(backend):
    case = PAGED[0]
    ins = _case_inputs(case)
    optimize = "exact" if backend == "interpreter" else "default"
    with vx.compile(_paged_module(case), backend=backend, optimize=optimize) as kernel:
        for lens in ([21, 1, 0, 13], [0, 0, 0, 0], [5, 21, 20, 8], [1, 2, 3, 4]):
            call = dict(ins, kv_lens=np.array(lens, np.int32))
            got = kernel(**call)
            out, lse = _paged_oracle(case, call)
            if backend == "interpreter":
                np.testing.assert_array_equal(got["out"], out)
                np.testing.assert_array_equal(got["lse"], lse)
            else:
                _assert_close(got, _dense_of(case, call), 2e-6)


def test_one_compiled_kernel_serves_every_length():
    _reuse("interpreter")


@needs_vulkan
def test_one_compiled_kernel_serves_every_length_on_vulkan():
    _reuse("vulkan")


# -- the lowered form ----------------------------------------------------------


def test_lavapipe_loop_bound_uses_the_static_length():
    m = _paged_module(PAGED[2])
    bounds = {opt: kernel_info(vx.lower_to_gpu(m, optimize=opt)).loop_iterations
              for opt in ("none", "exact")}
    assert all(b is not None for b in bounds.values()), bounds
    # at most ceil(33 / 4) = 9 tiles of at most 4 keys each
    assert bounds["none"] >= 9 * 4


@needs_mlir_opt
@pytest.mark.parametrize("optimize", ["none", "exact", "default"])
def test_mlir_opt_accepts_the_lowered_paged_kernel(optimize):
    assert_mlir_opt_accepts(vx.lower_to_gpu(_paged_module(PAGED[1]), optimize=optimize))


@needs_val
def test_spirv_of_a_paged_kernel_validates(tmp_path):
    assert_spirv_valid(vx.compile_spirv(_paged_module(PAGED[0])), tmp_path)


# -- bad inputs ------------------------------------------------------------------


def test_bad_inputs_are_refused():
    case = PAGED[1]
    assert_bad_paged_inputs_refused(_paged_module(case), _case_inputs(case))


@pytest.mark.parametrize("kwargs, match", [
    (dict(page_size=4), "give num_pages too"),
    (dict(num_pages=4), "give page_size too"),
    (dict(page_size=4, num_pages=8, kv_lens=False), "imply kv_lens"),
    (dict(kv_lens="yes"), "kv_lens must be True or False"),
    (dict(page_size=0, num_pages=8), "page_size"),
    (dict(page_size=4, num_pages=-1), "num_pages"),
    (dict(page_size=2**20, num_pages=2**20), "buffer k"),
])
def test_bad_paged_shapes_are_refused(kwargs, match):
    with pytest.raises(VyreError, match=match):
        vx.flash_attention_2(seq_len=2, kv_len=8, head_dim=4, tile_size=4, **kwargs)


def test_bad_oracle_arguments_are_refused():
    ins = _case_inputs(PAGED[1])
    with pytest.raises(VyreError, match="block_table, page_size and kv_lens together"):
        reference.flash_attention_2(ins["q"], ins["k"], ins["v"], 4,
                                    block_table=ins["block_table"], page_size=5)
    with pytest.raises(VyreError, match="block_table must be a 2-D np.int32 array"):
        reference.flash_attention_2(ins["q"], ins["k"], ins["v"], 4, kv_lens=ins["kv_lens"],
                                    block_table=ins["block_table"].ravel(), page_size=5)
    with pytest.raises(VyreError, match="kv_lens must have one entry per sequence"):
        reference.flash_attention_2(ins["q"], ins["k"], ins["v"], 4,
                                    kv_lens=np.zeros(2, np.int32),
                                    block_table=ins["block_table"], page_size=5)


def test_vyre_run_checks_a_paged_kernel_against_its_oracle(tmp_path, capsys):
    """vyre-run --check gives the oracle the kernel's kv_lens and block table."""
    from vyre_xdsl.tools.vyre_run import main

    case = PAGED[0]  # no mask: a flash_attention_2 kernel
    path = tmp_path / "paged.mlir"
    path.write_text(str(_paged_module(case)))
    ins = _case_inputs(case)
    args = [str(path), "--random", "--check"]
    for name in ("kv_lens", "block_table"):
        np.save(tmp_path / f"{name}.npy", ins[name])
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "out: max abs error" in printed and "lse: max abs error" in printed


def _resident_decode(backend):
    """A decode loop as a server runs it: the pools and the block table stay
    on the device, the lengths are rewritten in place before each step."""
    case = PAGED[0]
    ins = _case_inputs(case)
    optimize = "exact" if backend == "interpreter" else "default"
    with vx.compile(_paged_module(case), backend=backend, optimize=optimize) as kernel:
        resident = {name: kernel.upload(name, ins[name])
                    for name in ("k", "v", "block_table", "kv_lens")}
        lens = np.array([3, 0, 20, 1], np.int32)
        for step in range(3):
            resident["kv_lens"].write(lens)
            got = kernel(q=ins["q"], **resident)
            np.testing.assert_array_equal(resident["kv_lens"].read(), lens)
            want = _paged_oracle(case, dict(ins, kv_lens=lens))
            if backend == "interpreter":
                np.testing.assert_array_equal(got["out"], want[0])
                np.testing.assert_array_equal(got["lse"], want[1])
            else:
                _assert_close(got, _dense_of(case, dict(ins, kv_lens=lens)), 2e-6)
            lens = np.minimum(lens + 1, case[4]).astype(np.int32)
        resident["kv_lens"].write(np.array([21], np.int32), offset=1)  # one sequence's length
        np.testing.assert_array_equal(resident["kv_lens"].read(), [5, 21, 21, 3])


def test_resident_caches_with_lengths_rewritten_in_place():
    _resident_decode("interpreter")


@needs_vulkan
def test_resident_caches_with_lengths_rewritten_in_place_on_vulkan():
    _resident_decode("vulkan")


# -- rows over two lanes without a split ------------------------------------------


def _unsplit_paged(backend: str) -> None:
    """Rows with run-time lengths over two lanes of one item, unsplit: both
    lanes run the item's tiles, so their shuffles pair lanes that are both
    there (the H200's plan at batch 128: docs/performance.md)."""
    case = PAGED[0]
    ins = _case_inputs(case, seed=3)
    lowered = vx.lower_to_gpu(_paged_module(case), optimize=(
        "vyre-split-head-dim{parts=2},vyre-to-gpu{optimize=exact}"))
    assert "gpu.shuffle" in str(lowered)
    _assert_close(vx.run(lowered, ins, backend=backend), _dense_of(case, ins), 2e-6)


def test_unsplit_paged_rows_over_two_lanes_on_the_interpreter():
    _unsplit_paged("interpreter")


@needs_vulkan
def test_unsplit_paged_rows_over_two_lanes_on_vulkan():
    _unsplit_paged("vulkan")


@needs_vulkan
def test_default_at_batch_128_puts_paged_rows_over_two_lanes_on_vulkan():
    """4096 items are not split; lavapipe's plan still gives a row of 128
    dims two lanes."""
    batch, heads, kv_heads, kv_len, d, page = 128, 32, 8, 8, 128, 4
    pages = batch * kv_len // page
    ins = paged_inputs(batch, heads, kv_heads, 1, kv_len, d, d, page, pages,
                       np.arange(batch, dtype=np.int32) % (kv_len + 1))
    module = vx.flash_attention_2(seq_len=1, kv_len=kv_len, batch=batch, num_heads=heads,
                                  num_kv_heads=kv_heads, head_dim=d, page_size=page,
                                  num_pages=pages)
    lowered = vx.lower_to_gpu(module, optimize="default", device="lavapipe")
    assert "gpu.shuffle" in str(lowered)
    got = vx.run(lowered, {n: ins[n] for n in ("q", "k", "v", "kv_lens", "block_table")},
                 backend="vulkan")["out"]
    k = reference.gather_pages(ins["k"], ins["block_table"], page, kv_len)
    v = reference.gather_pages(ins["v"], ins["block_table"], page, kv_len)
    want, _ = dense(ins["q"], k, v, ins["kv_lens"], None)
    np.testing.assert_allclose(got, want, atol=2e-6)


@pytest.mark.parametrize("backend", ["interpreter", pytest.param("vulkan", marks=needs_vulkan)])
def test_out_of_range_pages_are_clamped_with_half_pools_read_as_vectors(backend):
    """bf16 pools read eight halves at a time (vyre-vectorize-loads): page
    indices outside the pool still read the clamped page, nothing outside;
    the interpreter matches the oracle bit for bit, and lavapipe its own
    scalar loads."""
    import ml_dtypes

    case = PAGED[0]
    ins = _case_inputs(case, seed=3)
    for name in ("q", "k", "v"):
        ins[name] = ins[name].astype(ml_dtypes.bfloat16)
    ins["block_table"][0, 0] = 2**31 - 1
    ins["block_table"][3, 1] = -(2**31)
    module = _paged_module(case, dtype="bf16")
    lowered = vx.lower_to_gpu(module, optimize="exact")
    assert any(str(op.result.type) == "vector<8xbf16>" for op in lowered.walk()
               if op.name == "vector.load")
    got = vx.run(lowered, ins, backend=backend)
    if backend == "interpreter":
        kv_len, tile, page, mask = case[4], case[7], case[8], case[11]
        want = dict(zip(("out", "lse"), reference.flash_attention_2(
            ins["q"], ins["k"], ins["v"], tile, mask_mod=mask, kv_lens=ins["kv_lens"],
            block_table=ins["block_table"], page_size=page, kv_len=kv_len,
            return_lse=True, dtype="bf16")))
    else:
        scalar = "vyre-to-gpu{optimize=none},vyre-promote-scratch,vyre-unroll-jam,cse,dce"
        want = vx.run(vx.lower_to_gpu(module, optimize=scalar), ins, backend=backend)
    np.testing.assert_array_equal(got["out"].view(np.uint16), want["out"].view(np.uint16))
    np.testing.assert_array_equal(got["lse"], want["lse"])
