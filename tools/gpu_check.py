"""Both decoders on a real GPU through Vulkan, checked against references.

Each case is lowered for the Vulkan device in use (`device="vulkan"`, the
default level), run once, and compared: small shapes and the NaN/inf cases
against the SEMANTICS.md oracle (`vx.reference`), the model-sized shapes
against dense attention computed in float64.  One line per case; the exit
status is 1 if any case failed.

    bash tools/gpu_check.sh [--all] [--match TEXT]

The `mma` cases run one subgroup's tile product through cooperative
matrices (tools/mma_kernels.py) against float64, the `layout` case reads
the device's accumulator layout and compares it with its profile's (the
H200's: PTX's mma fragments), the `tensor cores` cases
FlashAttention-2 in f16 (and bf16) through vyre-tensor-cores against dense
attention and the `latent tensor cores` cases MLA decode in f16 (and bf16)
through vyre-latent-tensor-cores against dense MLA, on a device with
VK_KHR_cooperative_matrix; elsewhere they say they are skipped (a bf16
case on a device without VK_KHR_shader_bfloat16's matrices fails with the
runtime's refusal).  An f16 case at the default level that the plan puts on the
matrix units is held to vyre-tensor-cores' tolerance.

`--all` runs FlashAttention-2 at every head_dim from 1 to 256 and MLA decode
at every head count from 1 to 128 (rank 512, rope 64), not a sample.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import vyre_xdsl as vx
from vyre_xdsl.compiler import compile_module, is_vyre_module
from vyre_xdsl.dtypes import numpy_dtype
from vyre_xdsl.mma_elements import MATRIX_TOLERANCE, SPLIT_TOLERANCE
from vyre_xdsl.run import prepare_buffers
from vyre_xdsl.tools.mma_kernels import MATMUL_SHAPES, MatmulShape, matmul_kernel
from vyre_xdsl.vulkan import device_report, execute, runtime

# max |ours - reference| / max |reference| that passes: the default level
# reorders f32 sums (docs/performance.md states its tolerance); a half
# output adds its one rounding, half an ulp of its type (2^-11, 2^-8)
TOLERANCE = {"f32": 1e-5, "f16": 1e-5 + 2.0**-11, "bf16": 1e-5 + 2.0**-8}
FA2_DIM_SAMPLE = (1, 2, 3, 5, 8, 24, 31, 63, 64, 65, 96, 127, 128, 129, 160, 192, 255, 256)
MLA_HEAD_SAMPLE = (1, 2, 3, 16, 32, 64, 100, 128)


@dataclass
class Case:
    name: str
    build: Callable[[], object]  # -> vyre module
    inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    reference: Callable[[dict[str, np.ndarray]], np.ndarray]
    dtype: str = "f32"
    tolerance: float | None = None  # None: TOLERANCE[dtype]
    cooperative_matrix: bool = False  # needs VK_KHR_cooperative_matrix
    optimize: str = "default"  # vx.lower_to_gpu's optimize= (a level or a pipeline)


def dense_attention(q, k, v, causal=False, soft_cap=None) -> np.ndarray:
    """softmax(q k^T / sqrt(D)) v in float64, heads [H, N, D], rows in chunks
    (GQA: k/v heads shared by H / Hkv query heads); a soft-cap maps each
    scaled score s to cap * tanh(s / cap)."""
    heads, n, d = q.shape
    group = heads // k.shape[0]
    out = np.empty((heads, n, v.shape[2]), np.float64)
    scale = 1.0 / np.sqrt(np.float32(d))
    for h in range(heads):
        kh, vh = k[h // group].astype(np.float64), v[h // group].astype(np.float64)
        for start in range(0, n, 1024):
            rows = q[h, start:start + 1024].astype(np.float64)
            s = rows @ kh.T * scale
            if soft_cap is not None:
                s = soft_cap * np.tanh(s / soft_cap)
            if causal:
                keys = np.arange(kh.shape[0])
                s[keys[None, :] > np.arange(start, start + len(rows))[:, None]] = -np.inf
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[h, start:start + len(rows)] = (p @ vh) / p.sum(axis=1, keepdims=True)
    return out


def dense_mla(ins: dict[str, np.ndarray]) -> np.ndarray:
    """MLA decode in float64, absorbed (SEMANTICS.md: kr_cache adds to the
    first P dims of each decompressed key)."""
    q = ins["q"].astype(np.float64)
    heads, d = q.shape
    rank = ins["kv_cache"].shape[1]
    rope = ins["kr_cache"].shape[1]
    kv = ins["kv_cache"].astype(np.float64)
    wk = ins["w_uk"].astype(np.float64).reshape(rank, heads, d)
    wv = ins["w_uv"].astype(np.float64).reshape(rank, heads, d)
    q_lat = np.einsum("hd,rhd->hr", q, wk)
    s = (q_lat @ kv.T + q[:, :rope] @ ins["kr_cache"].astype(np.float64).T) / np.sqrt(d)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    o_lat = (p @ kv) / p.sum(axis=1, keepdims=True)
    return np.einsum("hr,rhd->hd", o_lat, wv)


def fa2_case(heads, n, d, causal=False, kv_heads=None, nan_inf=False, dtype="f32",
             soft_cap=None) -> Case:
    kv_heads = kv_heads or heads
    label = f"fa2 H={heads} N={n} D={d}" + (f" Hkv={kv_heads}" if kv_heads != heads else "")
    label += " causal" * causal + " NaN/inf" * nan_inf + (f" {dtype}" if dtype != "f32" else "")
    label += f" softcap={soft_cap:g}" if soft_cap is not None else ""

    def score_mod(s, q, kv):
        return soft_cap * vx.tanh(s / soft_cap)

    def build():
        mask = (lambda q, kv: kv <= q) if causal else None
        return vx.flash_attention_2(seq_len=n, head_dim=d, num_heads=heads,
                                    num_kv_heads=kv_heads, mask_mod=mask, dtype=dtype,
                                    score_mod=score_mod if soft_cap is not None else None)

    def inputs(rng):
        host = numpy_dtype(dtype)
        q = rng.standard_normal((heads, n, d), dtype=np.float32).astype(host)
        k, v = (rng.standard_normal((kv_heads, n, d), dtype=np.float32).astype(host)
                for _ in range(2))
        if nan_inf:  # a NaN query row, keys at +inf and -inf
            q[0, 7 % n, 0] = np.nan
            k[0, 3 % n, 0] = np.inf
            k[-1, 9 % n, d // 2] = -np.inf
            if causal:  # values that earlier rows drop and later ones keep
                v[0, 5 % n, 1] = np.inf
                v[-1, n // 2, 2] = -np.inf
                v[-1, n // 2 + 1, 2] = np.nan
        return {"q": q, "k": k, "v": v}

    def reference(ins):
        if nan_inf:  # only the oracle defines NaN and inf (SEMANTICS.md)
            mask = (lambda q, kv: kv <= q) if causal else None
            return vx.reference.flash_attention_2(
                ins["q"], ins["k"], ins["v"], mask_mod=mask, dtype=dtype,
                score_mod=score_mod if soft_cap is not None else None)
        return dense_attention(ins["q"], ins["k"], ins["v"], causal, soft_cap)

    return Case(label, build, inputs, reference, dtype)


def mla_case(s, heads, d=128, rank=512, rope=64, nan_inf=False, dtype="f32") -> Case:
    label = f"mla S={s} H={heads} D={d} R={rank} P={rope}" + " NaN/inf" * nan_inf
    label += f" {dtype}" if dtype != "f32" else ""

    def build():
        return vx.mla_decode(seq_len=s, num_heads=heads, head_dim=d, kv_lora_rank=rank,
                             qk_rope_head_dim=rope, dtype=dtype)

    def inputs(rng):
        ins = dict(q=rng.standard_normal((heads, d)), kv_cache=rng.standard_normal((s, rank)),
                   kr_cache=rng.standard_normal((s, rope)),
                   w_uk=rng.standard_normal((rank, heads * d)) / np.sqrt(rank),
                   w_uv=rng.standard_normal((rank, heads * d)) / np.sqrt(rank))
        ins = {name: a.astype(np.float32).astype(numpy_dtype(dtype)) for name, a in ins.items()}
        if nan_inf:
            ins["q"][0, 1] = np.nan
            ins["kr_cache"][5 % s, 0] = np.inf
        return ins

    def reference(ins):
        return vx.reference.mla_decode(**ins, dtype=dtype) if nan_inf else dense_mla(ins)

    return Case(label, build, inputs, reference, dtype)


def decode_case(batch, heads, kv_heads, d, length, page=None, dtype="f32") -> Case:
    """Decode of one token per sequence: over dense caches of `length` keys,
    or with `page` over a paged cache of ragged lengths (a shuffled block
    table) with the log-sum-exp, whose oracle gathers the pages (out and lse
    are each compared)."""
    pages = batch * -(-length // page) if page else 0
    label = (f"fa2 {'paged' if page else 'decode'} B={batch} H={heads} Hkv={kv_heads} D={d} "
             + (f"L<={length} P={page}" if page else f"L={length}")
             + (f" {dtype}" if dtype != "f32" else ""))
    paging = dict(return_lse=True, page_size=page, num_pages=pages) if page else {}

    def build():
        return vx.flash_attention_2(seq_len=1, kv_len=length, batch=batch, num_heads=heads,
                                    num_kv_heads=kv_heads, head_dim=d, dtype=dtype, **paging)

    def inputs(rng):
        host = numpy_dtype(dtype)
        q = rng.standard_normal((batch, heads, 1, d), dtype=np.float32).astype(host)
        shape = (pages, page, kv_heads, d) if page else (batch, kv_heads, length, d)
        k, v = (rng.standard_normal(shape, dtype=np.float32).astype(host) for _ in range(2))
        if not page:
            return {"q": q, "k": k, "v": v}
        lens = rng.integers(1, length + 1, batch).astype(np.int32)
        table = rng.permutation(pages).astype(np.int32).reshape(batch, -1)
        return {"q": q, "k": k, "v": v, "kv_lens": lens, "block_table": table}

    def reference(ins):
        if not page:
            return vx.reference.flash_attention_2(ins["q"], ins["k"], ins["v"], dtype=dtype)
        return vx.reference.flash_attention_2(
            ins["q"], ins["k"], ins["v"], kv_lens=ins["kv_lens"], page_size=page,
            block_table=ins["block_table"], kv_len=length, return_lse=True, dtype=dtype)

    return Case(label, build, inputs, reference, dtype)


# an accumulator's unit roundoff: a device may round each of the K + 1
# partial sums of a tile product (tests/test_mma.py), with a margin for
# max|ref| below the sum of the terms' magnitudes
MMA_ROUNDOFF = {"f16": 2.0**-11, "f32": 2.0**-24}
MMA_MARGIN = 4


def mma_case(shape: MatmulShape) -> Case:
    def inputs(rng):
        t, acc = numpy_dtype(shape.inputs), numpy_dtype(shape.accumulator)
        return {"a": rng.standard_normal(shape.m * shape.k).astype(t),
                "b": rng.standard_normal(shape.k * shape.n).astype(t),
                "c": rng.standard_normal(shape.m * shape.n).astype(acc)}

    def reference(ins):
        a = ins["a"].astype(np.float64).reshape(shape.m, shape.k)
        b = ins["b"].astype(np.float64).reshape(shape.k, shape.n)
        return a @ b + ins["c"].astype(np.float64).reshape(shape.m, shape.n)

    tolerance = MMA_MARGIN * (shape.k + 1) * MMA_ROUNDOFF[shape.accumulator]
    return Case(shape.name, lambda: vx.parse_module(matmul_kernel(shape)), inputs,
                reference, tolerance=tolerance, cooperative_matrix=True)


def tensor_case(heads: int, n: int, d: int, dtype: str = "f16", nan_inf: bool = False,
                causal: bool = False, **tiling) -> Case:
    """FlashAttention-2 in f16 or bf16 (or f32 split into bf16 parts:
    `pieces`) through vyre-tensor-cores with the options `tiling` of its
    Tiling (keys, row_tiles, stage, prefetch, registers; its tolerance),
    for the Vulkan device's accumulator layout."""
    from dataclasses import asdict

    from vyre_xdsl.passes.tensor_cores import Tiling

    case = fa2_case(heads, n, d, dtype=dtype, nan_inf=nan_inf, causal=causal)
    tiling = Tiling(**tiling)
    options = " ".join(f"{key}={str(value).lower()}" for key, value in asdict(tiling).items())
    tolerance = SPLIT_TOLERANCE[tiling.pieces] if dtype == "f32" else MATRIX_TOLERANCE[dtype]
    pipeline = (f"vyre-tensor-cores{{device=vulkan force=true {options}}},"
                f"vyre-to-gpu{{optimize=exact}}")
    name = f"tensor cores {case.name} {options}"
    return Case(name, case.build, case.inputs, case.reference, dtype, tolerance,
                cooperative_matrix=True, optimize=pipeline)


def split_plan_case(heads: int, n: int, d: int, parts: int, batch: int = 1,
                    causal: bool = False) -> Case:
    """FlashAttention-2 in f32 through the default plan with `f32_parts`
    (its operands split into bf16 parts on the matrix units where the plan
    takes them; that tolerance)."""
    case = fa2_case(batch * heads, n, d, causal=causal)
    return Case(f"{case.name} f32_parts={parts}", case.build, case.inputs, case.reference,
                "f32", SPLIT_TOLERANCE[parts], cooperative_matrix=True,
                optimize=f"vyre-to-gpu{{device=vulkan f32_parts={parts}}}")


def latent_paged_case(batch: int, length: int, heads: int, page: int,
                      dtype: str = "f16", stage: bool = False,
                      projections: bool = False, plan: bool = False) -> Case:
    """MLA decode in f16 or bf16 over a paged latent cache of ragged
    lengths (a shuffled block table; rows past each end NaN) through
    vyre-latent-tensor-cores (`stage`: its staged tiles; `projections`:
    the projections through vyre-projection-tensor-cores; `plan`: as the
    default plan chooses instead), against the
    program's oracle over the pages."""

    d, rank, rope, pages = 128, 512, 64, batch * -(-length // page)

    def build():
        return vx.mla_decode(seq_len=length, num_heads=heads, head_dim=d, kv_lora_rank=rank,
                             qk_rope_head_dim=rope, batch=batch, kv_lens=True, page_size=page,
                             num_pages=pages, dtype=dtype)

    def inputs(rng):
        ins = dict(q=rng.standard_normal((batch, heads, d)),
                   kv_cache=rng.standard_normal((pages, page, rank)),
                   kr_cache=rng.standard_normal((pages, page, rope)),
                   w_uk=rng.standard_normal((rank, heads * d)) / np.sqrt(rank),
                   w_uv=rng.standard_normal((rank, heads * d)) / np.sqrt(rank))
        ins = {name: a.astype(numpy_dtype(dtype)) for name, a in ins.items()}
        ins["kv_lens"] = rng.integers(1, length + 1, batch).astype(np.int32)
        ins["block_table"] = rng.permutation(pages).astype(np.int32).reshape(batch, -1)
        for b, end in enumerate(ins["kv_lens"]):  # a cache's rows past the end: anything
            for t in range(end, length):
                for name in ("kv_cache", "kr_cache"):
                    ins[name][ins["block_table"][b, t // page], t % page] = np.nan
        return ins

    def reference(ins):
        return vx.reference.mla_decode_program(
            *(ins[n] for n in ("q", "kv_cache", "kr_cache", "w_uk", "w_uv")),
            kv_lens=ins["kv_lens"], block_table=ins["block_table"], page_size=page,
            kv_len=length, dtype=dtype)

    projected = ("vyre-projection-tensor-cores{device=vulkan force=true},"
                 if projections else "")
    pipeline = "default" if plan else (
        f"vyre-absorb-mla{{kernels=3}},vyre-latent-tensor-cores{{device=vulkan "
        f"force=true stage={str(stage).lower()}}},{projected}vyre-to-gpu{{optimize=exact}}")
    return Case(f"latent tensor cores mla paged B={batch} S<={length} H={heads} P={page} "
                f"{dtype}{' staged' if stage else ''}{' projections' if projections else ''}"
                f"{' plan' if plan else ''}",
                build, inputs, reference, dtype,
                MATRIX_TOLERANCE[dtype], cooperative_matrix=True, optimize=pipeline)


def latent_case(s: int, heads: int, splits: int = 0, dtype: str = "f16", stage: bool = False,
                row_tiles: int = 1, skip_rescale: bool = False, row_groups: int = 1,
                **kwargs) -> Case:
    """MLA decode in f16 or bf16 with its latent attention through
    vyre-latent-tensor-cores (`splits`, 0: the tuning's; `stage`: its
    staged tiles; `row_tiles` row blocks a workgroup; `skip_rescale`; its
    tolerance) and mla_case's `kwargs`."""
    case = mla_case(s, heads, dtype=dtype, **kwargs)
    options = (f"splits={splits} stage={str(stage).lower()} row_tiles={row_tiles} "
               f"skip_rescale={str(skip_rescale).lower()} row_groups={row_groups}")
    pipeline = (f"vyre-absorb-mla{{kernels=3}},vyre-latent-tensor-cores{{device=vulkan "
                f"force=true {options}}},vyre-to-gpu{{optimize=exact}}")
    rows = f" row_tiles={row_tiles}" if row_tiles != 1 else ""
    skip = " skip_rescale" if skip_rescale else ""
    groups = f" row_groups={row_groups}" if row_groups != 1 else ""
    return Case(f"latent tensor cores {case.name} splits={splits}{' staged' if stage else ''}"
                f"{rows}{skip}{groups}",
                case.build, case.inputs, case.reference, dtype, MATRIX_TOLERANCE[dtype],
                cooperative_matrix=True, optimize=pipeline)


def block_case(heads: int, n: int, d: int, lanes: int, key_lanes: int, rows: int, keys: int,
               **kwargs) -> Case:
    """FlashAttention-2 through vyre-block-product with that blocking (and
    fa2_case's `kwargs`)."""
    case = fa2_case(heads, n, d, **kwargs)
    options = f"lanes={lanes} key_lanes={key_lanes} rows={rows} keys={keys}"
    pipeline = f"vyre-block-product{{force=true {options}}},vyre-to-gpu{{optimize=exact}}"
    return Case(f"register blocks {case.name} {options}", case.build, case.inputs,
                case.reference, case.dtype, optimize=pipeline)


def cases(every: bool) -> list[Case]:
    found = [
        fa2_case(1, 512, 64, nan_inf=True),
        fa2_case(2, 200, 128, causal=True, nan_inf=True),
        mla_case(1000, 8, 64, 32, 16, nan_inf=True),
        fa2_case(32, 4096, 64),
        fa2_case(32, 4096, 128),
        fa2_case(32, 4096, 64, causal=True),
        fa2_case(16, 8192, 128, causal=True),
        fa2_case(32, 1024, 64, kv_heads=8),
        fa2_case(32, 16384, 64),
        fa2_case(4, 300, 256),
        mla_case(4096, 16),
        mla_case(4096, 128),
        mla_case(32768, 16),
        fa2_case(32, 4096, 64, dtype="f16"),
        fa2_case(32, 4096, 64, dtype="f16", soft_cap=30.0),
        fa2_case(32, 4096, 64, soft_cap=30.0),
        fa2_case(1, 512, 64, nan_inf=True, soft_cap=30.0),
        fa2_case(32, 4096, 128, causal=True, dtype="bf16"),
        fa2_case(4, 300, 256, dtype="bf16"),
        mla_case(4096, 16, dtype="bf16"),
        decode_case(8, 32, 8, 128, 4096, page=16),
        decode_case(64, 32, 8, 128, 1024, page=16, dtype="bf16"),
        decode_case(128, 32, 8, 128, 1024, page=16),  # four splits, rows over two lanes
        # the eighth session's splits for decode, and halves read 16 bytes at a time
        decode_case(8, 32, 8, 128, 4096),
        decode_case(8, 32, 8, 128, 4096, dtype="bf16"),
        decode_case(128, 32, 8, 128, 1024, dtype="f16"),
        decode_case(8, 32, 8, 128, 4096, page=16, dtype="bf16"),
        # a key head's rows on one lane, in splits of any length: 1024 keys
        # each at batch 128, 512 at batch 8 with 32768 keys
        decode_case(128, 32, 8, 128, 4096, page=16, dtype="bf16"),
        decode_case(8, 32, 8, 128, 32768, dtype="bf16"),
        # merge kernels in teams: 512 splits at batch 1, 8 teams of 64
        decode_case(1, 32, 8, 128, 16384, dtype="bf16"),
        decode_case(1, 32, 8, 128, 32768, page=16, dtype="bf16"),
        *(mma_case(shape) for shape in MATMUL_SHAPES),
        tensor_case(32, 4096, 64),
        tensor_case(32, 4096, 64, keys=64, row_tiles=4),
        tensor_case(32, 4096, 64, keys=32, stage=True),
        tensor_case(32, 4096, 64, row_tiles=4, stage=True, prefetch=True, registers=True),
        tensor_case(32, 4096, 128, keys=32, row_tiles=2, stage=True),
        tensor_case(32, 4096, 128, keys=64, row_tiles=2),
        tensor_case(32, 4096, 128, row_tiles=2, stage=True, prefetch=True, registers=True),
        tensor_case(32, 4096, 128, row_tiles=2, stage=True, prefetch=True, registers=True,
                    skip_rescale=True),
        tensor_case(2, 128, 16, row_tiles=2, skip_rescale=True),
        tensor_case(2, 128, 16, row_tiles=2),
        tensor_case(2, 128, 16, row_tiles=2, keys=32, registers=True),
        # MLA's latent attention on the matrix units, a sequence's heads as rows
        latent_case(4096, 16),
        latent_case(4096, 128),
        latent_case(4096, 128, splits=1),
        latent_case(32768, 16),
        latent_case(1024, 16, d=64, rank=64, rope=16, nan_inf=True, splits=2),
        latent_paged_case(8, 4096, 16, 64),
        latent_paged_case(4, 2048, 128, 16),
        # bf16 matrices (VK_KHR_shader_bfloat16): the f16 plan's tilings
        tensor_case(2, 128, 16, dtype="bf16", row_tiles=2),
        tensor_case(32, 4096, 64, dtype="bf16", keys=32, row_tiles=2, stage=True,
                    prefetch=True, registers=True, rolled=True),
        tensor_case(32, 4096, 128, dtype="bf16", row_tiles=2, stage=True, prefetch=True,
                    registers=True, skip_rescale=True),
        # two (three) tiles a trip of the rolled tile loop, the trips left
        # over in a second loop; the plan's at 64 dims without modifiers
        tensor_case(32, 4096, 64, dtype="bf16", keys=32, row_tiles=2, stage=True,
                    prefetch=True, registers=True, rolled=True, unroll=2),
        tensor_case(2, 256, 32, dtype="f16", nan_inf=True, keys=32, stage=True, prefetch=True,
                    registers=True, rolled=True, unroll=3),
        fa2_case(32, 4096, 64, dtype="bf16"),
        fa2_case(32, 4096, 128, dtype="bf16"),
        # the plan (exp2, each weight's bound in one compare and select) with
        # NaN and inf at 64 and 128 dims
        fa2_case(2, 512, 64, nan_inf=True, dtype="bf16"),
        fa2_case(2, 512, 128, nan_inf=True, dtype="bf16"),
        latent_case(4096, 16, dtype="bf16"),
        latent_case(4096, 128, dtype="bf16"),
        latent_paged_case(8, 4096, 16, 64, dtype="bf16"),
        # the latent attention's key rows staged by the workgroup
        latent_case(4096, 16, dtype="bf16", stage=True),
        latent_case(4096, 128, dtype="bf16", stage=True),
        latent_case(32768, 16, dtype="bf16", stage=True),
        latent_case(4096, 128, stage=True),
        latent_case(4096, 128, dtype="bf16", stage=True, row_tiles=2),
        latent_case(4096, 128, dtype="bf16", stage=True, skip_rescale=True),
        # two groups of four subgroups sharing each staged tile
        latent_case(4096, 128, dtype="bf16", stage=True, row_groups=2),
        latent_case(1024, 32, d=64, rank=64, rope=64, nan_inf=True, splits=2, stage=True,
                    row_groups=2),
        # ... as the plan takes them from 32 heads: bf16 dense, and f16 paged
        # with run-time lengths (48,640 bytes of workgroup memory)
        mla_case(4096, 128, dtype="bf16"),
        latent_paged_case(4, 2048, 128, 64, plan=True),
        latent_case(1024, 16, d=64, rank=64, rope=64, nan_inf=True, splits=2, stage=True,
                    skip_rescale=True),
        latent_case(1024, 16, d=64, rank=64, rope=64, nan_inf=True, splits=2, stage=True),
        latent_paged_case(8, 4096, 16, 64, dtype="bf16", stage=True),
        latent_paged_case(4, 2048, 128, 16, stage=True),
        # the projections on the matrix units: one row block (batch 4 of 16
        # rows), three with the last one's rows past the batch
        latent_paged_case(4, 2048, 128, 16, stage=True, projections=True),
        latent_paged_case(40, 1024, 16, 16, dtype="bf16", stage=True, projections=True),
        # f32 split into bf16 parts on the matrix units
        tensor_case(32, 4096, 64, dtype="f32", pieces=3, row_tiles=2, stage=True,
                    registers=True),
        tensor_case(32, 4096, 128, dtype="f32", pieces=3, stage=True, registers=True),
        tensor_case(32, 4096, 64, dtype="f32", pieces=2, row_tiles=2, stage=True,
                    prefetch=True, registers=True),
        tensor_case(2, 128, 16, dtype="f32", nan_inf=True, pieces=3, stage=True,
                    registers=True),
        split_plan_case(32, 4096, 64, 3),
        split_plan_case(32, 1024, 64, 3, batch=4),
        split_plan_case(32, 4096, 128, 2),
        # masks on the matrix units: partial tiles masked, values with
        # infinities cleared for the keys the mask drops
        tensor_case(32, 4096, 64, dtype="bf16", causal=True, keys=32, row_tiles=2, stage=True,
                    prefetch=True, registers=True, rolled=True),
        tensor_case(16, 8192, 128, dtype="bf16", causal=True, row_tiles=2, stage=True,
                    prefetch=True, registers=True, skip_rescale=True),
        tensor_case(2, 256, 32, dtype="f16", causal=True, nan_inf=True, keys=32, stage=True,
                    prefetch=True, registers=True),
        tensor_case(2, 256, 32, dtype="f32", causal=True, nan_inf=True, pieces=3, stage=True,
                    registers=True),
        tensor_case(32, 4096, 64, dtype="f32", causal=True, pieces=3, row_tiles=2, stage=True,
                    registers=True),
        split_plan_case(32, 4096, 64, 3, causal=True),
        split_plan_case(16, 8192, 128, 2, causal=True),
        fa2_case(32, 4096, 64, causal=True, dtype="bf16"),
        # one head: the plan's register blocks
        fa2_case(1, 4096, 64),
        fa2_case(1, 4096, 128),
        fa2_case(1, 1024, 64, soft_cap=30.0),
        block_case(32, 4096, 64, 128, 8, 2, 4),
        block_case(2, 512, 64, 128, 8, 4, 4, nan_inf=True, soft_cap=30.0),
        block_case(1, 1024, 128, 128, 16, 2, 2, dtype="bf16"),
    ]
    dims = range(1, 257) if every else FA2_DIM_SAMPLE
    found += [fa2_case(2, 70, d) for d in dims]
    heads = range(1, 129) if every else MLA_HEAD_SAMPLE
    found += [mla_case(300, h) for h in heads]
    return found


def _tolerance(info, dtype: str) -> float:
    """TOLERANCE[dtype], or the matrix expansions' where the plan put a
    kernel on the matrix units (its launch records their layout)."""
    on_matrices = any(kernel.accumulator is not None for kernel in info.kernels)
    return MATRIX_TOLERANCE[dtype] if on_matrices else TOLERANCE[dtype]


def bias_toward_zero(out: np.ndarray, want: np.ndarray, scale: float) -> str:
    """How far the outputs lean away from zero: the mean of (out - want) *
    sign(want) over max|ref|, and its z-score (about +-2 where the errors
    are not biased; a conversion that truncates gives a negative one far
    outside).  Reported, not checked: the device's exp, division and matrix
    units round as they do."""
    toward = (out.astype(np.float64) - want) * np.sign(want)
    spread = float(toward.std())
    z = float(toward.mean()) / spread * np.sqrt(toward.size) if spread else 0.0
    return f"{float(toward.mean()) / scale:+.1e} (z {z:+.1f})"


def compile_case(case: Case):
    """The case's kernel lowered for the Vulkan device in use (vyre IR at
    a level), or as it is (lowered IR: the mma kernels), with its SPIR-V."""
    module = case.build()
    level = case.optimize in ("none", "exact", "default") and is_vyre_module(module)
    return compile_module(module, device="vulkan" if level else None,
                          optimize=case.optimize, spirv=True)


def check(case: Case, rng: np.random.Generator) -> bool:
    started = time.perf_counter()
    try:
        compiled = compile_case(case)
        info = compiled.info
        ins = case.inputs(rng)
        arrays = prepare_buffers(info, ins)
        timings: dict = {}
        execute(compiled.spirv, info, arrays, timings=timings)
    except vx.VyreError as error:
        print(f"FAIL {case.name}: {error}", flush=True)
        return False
    wanted = case.reference(ins)
    wanted = wanted if isinstance(wanted, tuple) else (wanted,)
    nan_ok, err, bias = True, 0.0, None
    for buffer, want in zip(info.outputs, wanted, strict=True):  # out[, lse]
        out = arrays[buffer.name].astype(np.float32).reshape(-1)
        want = np.asarray(want, np.float64).reshape(-1)
        nan_ok &= bool(np.array_equal(np.isnan(out), np.isnan(want)))
        finite = np.isfinite(want)
        if not np.array_equal(out[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)]):
            nan_ok = False  # an infinite reference (lse of a row with no key) exactly
        if finite.any():
            scale = float(np.abs(want[finite]).max()) or 1.0
            err = max(err, float(np.abs(out[finite] - want[finite]).max()) / scale)
            if bias is None:
                bias = bias_toward_zero(out[finite], want[finite], scale)
    ok = nan_ok and err <= (case.tolerance or _tolerance(info, case.dtype))
    print(f"{'ok  ' if ok else 'FAIL'} {case.name}: {len(info.kernels)} kernel(s), "
          f"max|err|/max|ref| {err:.2e}, NaN/inf placement {'ok' if nan_ok else 'WRONG'}, "
          f"mean outward error {bias or 'none'}, "
          f"GPU {timings.get('dispatch_ms', float('nan')):.3f} ms, "
          f"{time.perf_counter() - started:.1f} s in all", flush=True)
    return ok


def check_layout(ctx) -> bool:
    """The device's accumulator layout, read by the layout kernel, against
    the profile's of the same GPU (the H200's), where there is one."""
    from vyre_xdsl.device import H200

    layout = runtime.device_accumulator(ctx)
    ok = layout is not None and ("H200" not in ctx.name or layout == H200.accumulator_layout)
    rows = "none" if layout is None else (f"{layout.row_count} rows a lane, xor {layout.masks}, "
                                          f"A operand in order {layout.operand_a}, bf16 "
                                          f"matrices {runtime.bfloat16_matrices(ctx)}")
    print(f"{'ok  ' if ok else 'FAIL'} layout: accumulator layout of {ctx.name}: {rows}"
          + (", as the h200 profile's" if ok and "H200" in ctx.name else ""), flush=True)
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true",
                        help="every FA2 head_dim 1..256 and MLA head count 1..128")
    parser.add_argument("--match", default="", help="only the cases whose name has this text")
    args = parser.parse_args(argv)
    print(device_report(), flush=True)
    rng = np.random.default_rng(0)
    chosen = [c for c in cases(args.all) if args.match in c.name]
    ctx = runtime._context(runtime._validation_requested(None))
    skipped = [c for c in chosen if c.cooperative_matrix
               and not (ctx.cooperative_matrix and ctx.float16 and ctx.memory_model
                        and (ctx.int16 or c.optimize == "default"))]
    for case in skipped:
        print(f"skip {case.name}: skipped: no VK_KHR_cooperative_matrix on {ctx.name}",
              flush=True)
    chosen = [c for c in chosen if c not in skipped]
    failed = [c.name for c in chosen if not check(c, rng)]
    if args.match in "layout" and ctx.cooperative_matrix:
        chosen.append("layout")
        if not check_layout(ctx):
            failed.append("layout")
    print(f"{len(chosen) - len(failed)} passed, {len(failed)} failed"
          + (f", {len(skipped)} skipped" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
