"""Decode speed: our kernels, compiled once with their caches resident,
beside PyTorch in the same run.

Two grids (#18 item 6), one row per grid point and kernel of ours:

    mla  FlashMLA's grid: batch 1, 32, 128; keys 4096 .. 32768; heads 16 .. 128;
         head_dim 128, kv_lora_rank 512, rope 64. Ours: vx.mla_decode(batch=B)
         (--mla-paged: also with page_size=64 over shuffled pages;
         --mla-lanes: also the plan kept off the matrix units).
         PyTorch: the absorbed form in batched matmuls (W_uk folded into q,
         scores against the latent cache and rope, softmax, the weighted latent
         sum, then W_uv) and the eager decompressing form where it fits in
         memory. GB/s: latent cache read (kv_cache + kr_cache bytes / time).
    gqa  One query, 32 heads, 8 kv heads, head_dim 128; keys 1024 .. 32768,
         batch 1 .. 128 (a subset; --all for every point). Ours:
         vx.flash_attention_2(seq_len=1, kv_len=L, batch=B, ...) dense, with
         kv_lens=True, and paged (page_size=16, shuffled pages). PyTorch: SDPA
         on 4-D tensors, each backend alone (sdpa_kernel), and
         torch.compile(flex_attention) (every kernel of ours against these
         dense paths). GB/s: K + V bytes / time.

Ours: vx.compile(module, backend) once, every input but the query uploaded
once (kernel.upload), the query passed at each call; the time is the median
GPU time of the dispatches (Vulkan timestamps, `timings=`), host wall time
per call where the backend has none. PyTorch: medians of CUDA events (host
wall time with --device cpu), TF32 off. ratio = best PyTorch ms / ours ms,
against the path named in the table (> 1: we are faster). Outputs are
compared with PyTorch's before anything is timed. A cache past the
device's largest buffer binding (maxStorageBufferRange: 4 GiB - 1 on
NVIDIA's Vulkan, reached by MLA at batch 128 with 32768 keys and by GQA's
K and V at batch 128 with 16384 keys in bf16) runs as calls of a kernel
of half the batch or less, as a user would split it (the row's `calls`;
its time the calls' times added), but for a paged pool, which the batch
shares; a point whose buffers exceed the device's limits otherwise is
skipped with the reason in the JSON.

    python benchmarks/decode_gpu.py --out docs/figures/decode_gpu_h200.json
    python benchmarks/decode_gpu.py --dtype bf16 --only mla --out mla_bf16.json
    python benchmarks/decode_gpu.py --device cpu --quick --out /tmp/decode.json

--max-seconds (450 by default, so that a run fits a 9-minute call) stops
starting points once spent, shared evenly by the grids still to run; the
JSON, written after every point, lists the points not run (settings.not_run)
and a summary per grid and kernel (settings.summary).

Needs PyTorch (with CUDA unless --device cpu) and, for --backend vulkan, a
Vulkan device (VYRE_VULKAN_DEVICE picks one).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
from _common import (
    AgainstTorch,
    BUDGET_MS,
    TORCH_DTYPES,
    WRONG_BY_DTYPE,
    TorchPath,
    add_torch_options,
    compiled_flex,
    fmt,
    mla_eager_bytes,
    mla_torch_paths,
    paths_text,
    run_torch,
    sdpa_paths,
    start_torch,
    warm_runs,
    write_json,
)

import vyre_xdsl as vx
from vyre_xdsl.errors import VyreError

NEEDS_BATCH = "n/a: needs mla_decode(batch=)"
OVER_BUDGET = "not run: --max-seconds spent"
CPU_EAGER_BYTES = 2 << 30  # the eager MLA form's working set allowed on the host
EAGER_MEMORY_SHARE = 0.5  # ... and the share of free GPU memory it may take


# Grids ---------------------------------------------------------------------------

@dataclass(frozen=True)
class MlaPoint:
    batch: int
    seq: int
    heads: int
    dim: int = 128
    rank: int = 512
    rope: int = 64
    page_size: int = 64  # FlashMLA's block size (--mla-paged)

    grid = "mla"

    @property
    def label(self) -> str:
        return f"B={self.batch} S={self.seq} H={self.heads}"

    def cache_bytes(self, itemsize: int) -> int:
        """What one decode step must read: the latent cache and its rope part."""
        return self.batch * self.seq * (self.rank + self.rope) * itemsize


@dataclass(frozen=True)
class GqaPoint:
    batch: int
    kv_len: int
    heads: int = 32
    kv_heads: int = 8
    dim: int = 128
    page_size: int = 16

    grid = "gqa"

    @property
    def label(self) -> str:
        return f"B={self.batch} L={self.kv_len} H={self.heads}/{self.kv_heads}"

    def cache_bytes(self, itemsize: int) -> int:
        """K and V of every sequence."""
        return 2 * self.batch * self.kv_heads * self.kv_len * self.dim * itemsize


GQA_VARIANTS = ("dense", "kv_lens", "paged")
MLA_VARIANTS = ("dense", "paged", "matrix", "lanes")  # paged with --mla-paged, matrix
# with --mla-tensor-cores: the dense caches' latent attention on the matrix
# units by hand (f16 or bf16; vyre-latent-tensor-cores, which the default
# plan takes on a device with the matrices, so there the two rows run
# alike but where --mla-latent-options asks for another tiling, e.g.
# "stage=false"); lanes with --mla-lanes: the default plan without the
# matrix units
LANES_PIPELINE = "vyre-to-gpu{optimize=default device=vulkan matrix_units=false}"
PIPELINES = {"lanes": LANES_PIPELINE}
# the device limit whose refusal splits an MLA batch into calls (at most
# MAX_CALLS) instead of skipping the point
RANGE_LIMIT = "maxStorageBufferRange"
MAX_CALLS = 8


def latent_pipeline(options: str = "") -> str:
    """The matrix rows' pipeline: vyre-latent-tensor-cores with `options`
    (--mla-latent-options, e.g. "stage=true")."""
    return (f"vyre-absorb-mla{{kernels=3}},vyre-latent-tensor-cores{{device=vulkan "
            f"force=true {options}}},vyre-to-gpu{{optimize=exact}}")


def mla_grid(quick: bool) -> list[MlaPoint]:
    if quick:  # lavapipe stops an invocation after 65535 loop iterations
        return [MlaPoint(b, 256, 4, dim=32, rank=64, rope=16, page_size=16) for b in (1, 2)]
    return [MlaPoint(b, s, h) for b in (1, 32, 128) for s in (4096, 8192, 16384, 32768)
            for h in (16, 32, 64, 128)]


def gqa_grid(quick: bool, every: bool) -> list[GqaPoint]:
    if quick:
        return [GqaPoint(b, 256, heads=4, kv_heads=2, dim=32) for b in (1, 2)]
    batches = (1, 2, 4, 8, 16, 32, 64, 128) if every else (1, 8, 32, 128)
    lengths = (1024, 2048, 4096, 8192, 16384, 32768) if every else (1024, 4096, 16384, 32768)
    return [GqaPoint(b, n) for b in batches for n in lengths]


# Rows ----------------------------------------------------------------------------

@dataclass
class Row(AgainstTorch):
    grid: str
    shape: str
    variant: str
    bytes_read: int  # of the cache, per decode step
    params: dict = field(default_factory=dict)
    torch_ms: dict = field(default_factory=dict)  # path -> median ms, None: n/a
    torch_notes: dict = field(default_factory=dict)  # path -> why n/a / how it ran
    checked_against: str | None = None
    ours_ms: float | None = None  # median, of `ours_timer`
    ours_timer: str = ""
    ours_device_ms: float | None = None  # median GPU time of the whole command buffer
    ours_call_ms: float | None = None  # median host wall time of a call
    ours_kernel_ms: dict = field(default_factory=dict)  # each kernel's median GPU time
    ours_launch: list[str] = field(default_factory=list)  # each dispatch: its kernel, grid
    # the driver's statistics of each kernel (registers a lane, ...), where
    # it reports them (vx.Kernel.statistics)
    compiled: dict = field(default_factory=dict)
    max_abs_err: float | None = None
    # calls of a kernel of batch / calls that ours took: a cache past the
    # device's largest buffer binding (maxStorageBufferRange) split by batch
    calls: int = 1
    skipped: str = ""  # why this kernel of ours did not run
    note: str = ""

    RATE = ("gbps", "bytes_read", 1e6)
    ours_gbps = property(lambda self: self.rate(self.ours_ms))
    best_gbps = property(lambda self: self.rate(self.best[1]))


# Data: made by torch on its device, copied to the host for ours ----------------

def random_tensor(shape, opts, scale: float = 1.0):
    """Normal values in the run's dtype on the PyTorch device (seeded)."""
    import torch

    values = torch.randn(shape, generator=opts.generator, device=opts.device,
                         dtype=torch.float32)
    if scale != 1.0:
        values *= scale
    return values.to(getattr(torch, TORCH_DTYPES[opts.dtype]))


def host_copy(tensor, dtype: str) -> np.ndarray:
    """The tensor's bits as a numpy array of our `dtype` (torch has no numpy
    bfloat16, so half types travel as int16)."""
    import torch

    from vyre_xdsl.dtypes import numpy_dtype

    if tensor.element_size() == 2:
        return tensor.view(torch.int16).cpu().numpy().view(numpy_dtype(dtype))
    return tensor.cpu().numpy()


def paged(caches, page_size: int, generator):
    """Caches [B, L, ...] (one row per key) as pools of the same shuffled
    pages [B*L/P, P, ...], and the block table [B, L/P] (int32) that reads
    them back in order."""
    import torch

    batch, length = caches[0].shape[:2]
    pages = batch * length // page_size
    where = torch.randperm(pages, generator=generator, device=generator.device)
    pools = []
    for cache in caches:
        pool = torch.empty((pages, page_size, *cache.shape[2:]), dtype=cache.dtype,
                           device=cache.device)
        pool[where] = cache.reshape(pool.shape)
        pools.append(pool)
    return pools, where.to(torch.int32).reshape(batch, length // page_size)


def paged_inputs(dense: dict, caches: dict, page_size: int, opts) -> dict:
    """`dense` (host inputs) with `caches` (name -> tensor [B, L, ...]) as
    pools of shuffled pages, with the block table and kv_lens (every
    sequence full)."""
    pools, table = paged(list(caches.values()), page_size, opts.generator)
    batch, length = table.shape[0], table.shape[1] * page_size
    return {**dense, **{name: host_copy(pool, opts.dtype) for name, pool in zip(caches, pools)},
            "block_table": table.cpu().numpy(), "kv_lens": np.full(batch, length, np.int32)}


# Our side ------------------------------------------------------------------------

def mla_module(point: MlaPoint, variant: str, dtype: str, calls: int = 1):
    """vx.mla_decode of the point, its batch in `calls` calls; batch=1 is
    built without `batch=` so that it runs where mla_decode predates it
    (TypeError at batch > 1 there)."""
    batch = point.batch // calls
    extra = {} if batch == 1 else {"batch": batch}
    if variant == "paged":
        extra.update(page_size=point.page_size,
                     num_pages=point.batch * point.seq // point.page_size)
    return vx.mla_decode(point.seq, point.heads, point.dim, point.rank, point.rope,
                         dtype=dtype, **extra)


def gqa_module(point: GqaPoint, variant: str, dtype: str, calls: int = 1):
    """vx.flash_attention_2 of the decode point, its batch in `calls` calls."""
    extra = {"dense": {}, "kv_lens": {"kv_lens": True},
             "paged": {"page_size": point.page_size,
                       "num_pages": point.batch * point.kv_len // point.page_size}}[variant]
    return vx.flash_attention_2(seq_len=1, kv_len=point.kv_len, batch=point.batch // calls,
                                num_heads=point.heads, num_kv_heads=point.kv_heads,
                                head_dim=point.dim, dtype=dtype, **extra)


def compile_ours(build: Callable, backend: str, optimize: str = "default"):
    """(kernel, None), or (None, why not) for a shape the builder or the
    device refuses (the point is skipped, not the run)."""
    try:
        return vx.compile(build(), backend=backend, optimize=optimize), None
    except TypeError as error:  # a builder without a keyword the point needs
        if "unexpected keyword" not in str(error):
            raise
        return None, NEEDS_BATCH if "'batch'" in str(error) else f"n/a: {error}"
    except VyreError as error:
        return None, f"VyreError: {error}"[:400]


def time_ours(kernel, query: dict, resident: dict, expected: np.ndarray | None,
              warmup: int, repeat: int) -> dict:
    """Call `kernel` with the resident caches; its output checked against
    `expected` first. Medians of the GPU timestamps of the dispatches
    (`timings=`), or of host wall time where the backend has none."""
    probe: dict = {}
    out = kernel(**query, **resident, timings=probe)["out"]
    err = None
    if expected is not None:
        got = out.astype(np.float32).reshape(-1)
        err = float(np.max(np.abs(got - expected.reshape(-1))))
    gpu = "dispatch_ms" in probe
    first_ms = probe["dispatch_ms"] if gpu else probe["total_ms"]
    repeat = max(3, min(repeat, int(BUDGET_MS / max(first_ms, 1e-3))))
    for _ in range(warm_runs(warmup, first_ms)):
        kernel(**query, **resident)
    calls = []
    for _ in range(repeat):
        timings: dict = {}
        kernel(**query, **resident, timings=timings)
        calls.append(timings)

    def median(key):
        return statistics.median(t[key] for t in calls) if key in calls[0] else None

    kernel_ms = {name: statistics.median(t["kernel_ms"][name] for t in calls)
                 for name in calls[0].get("kernel_ms", {})}
    return dict(max_abs_err=err, ours_ms=median("dispatch_ms" if gpu else "total_ms"),
                ours_timer="GPU timestamps (dispatches)" if gpu else "host wall per call",
                ours_device_ms=median("device_ms"), ours_call_ms=median("total_ms"),
                ours_kernel_ms=kernel_ms)


def batch_part(array: np.ndarray, batch: int, calls: int, part: int) -> np.ndarray:
    """Call `part`'s share of an input whose leading dim is the batch (the
    whole of any other: MLA's weights)."""
    if calls == 1 or array.ndim == 0 or array.shape[0] != batch:
        return array
    size = batch // calls
    return array[part * size:(part + 1) * size]


def summed(parts: list[dict]) -> dict:
    """time_ours' results of the calls of one step: times added (the calls
    run one after another), the largest error."""
    total = dict(parts[0])
    for key in ("ours_ms", "ours_device_ms", "ours_call_ms"):
        values = [p[key] for p in parts]
        total[key] = None if None in values else sum(values)
    errors = [p["max_abs_err"] for p in parts]
    total["max_abs_err"] = None if None in errors else max(errors)
    total["ours_kernel_ms"] = {name: sum(p["ours_kernel_ms"][name] for p in parts)
                               for name in parts[0]["ours_kernel_ms"]}
    return total


def run_variant(row: Row, kernel, inputs: dict[str, np.ndarray], expected, opts) -> Row:
    """Upload every input but q once; time calls that copy q in (a decode
    step's new query); with row.calls > 1, each call's share of the batch
    resident at once, the step's time the calls' times added."""
    row.ours_launch = [f"{k.name} grid={k.grid_size} workgroup={k.workgroup_size}"
                       for k in kernel.info.kernels]
    batch, calls = row.params["batch"], row.calls
    try:
        row.compiled = kernel.statistics()
        parts = []
        for part in range(calls):
            share = {name: batch_part(value, batch, calls, part)
                     for name, value in inputs.items()}
            want = None if expected is None else batch_part(
                expected.reshape(batch, -1), batch, calls, part)
            resident = {name: kernel.upload(name, share[name])
                        for name in kernel.inputs if name != "q"}
            parts.append(time_ours(kernel, {"q": share["q"]}, resident, want,
                                   opts.warmup, opts.repeat))
        for name, value in summed(parts).items():
            setattr(row, name, value)
    except Exception as error:  # one kernel failing is a result, not the end of the run
        row.note += f"{type(error).__name__}: {error}"[:300]
    finally:
        kernel.close()  # frees its resident caches too
    wrong = WRONG_BY_DTYPE[opts.dtype]
    if row.max_abs_err is not None and not row.max_abs_err <= wrong:
        row.note = f"WRONG (max|err| > {wrong:g}) " + row.note
    return row


# Points: ours compiled first (a refused shape costs no data), then PyTorch, then ours

def measure(point, variants: dict[str, tuple[Callable, str]], make_inputs: Callable,
            opts, in_calls: Callable[[str, int], Callable] | None = None) -> list[Row]:
    """One row per variant of ours, {name: (module builder, optimize=)}.
    `make_inputs()` returns (PyTorch's paths, {variant: host inputs},
    {PyTorch path left out: why}). `in_calls(variant, calls)`: the builder
    of a variant whose batch may run in `calls` calls where a buffer is
    past the device's largest binding (None where it may not)."""
    from vyre_xdsl.dtypes import numpy_dtype

    bytes_read = point.cache_bytes(numpy_dtype(opts.dtype).itemsize)
    rows = {name: Row(point.grid, point.label, name, bytes_read,
                      params={**asdict(point), "dtype": opts.dtype}) for name in variants}
    kernels = {}
    for name, (build, optimize) in variants.items():
        kernels[name], why_not = compile_ours(build, opts.backend, optimize)
        calls = 1
        while (why_not and RANGE_LIMIT in why_not and in_calls is not None
               and in_calls(name, 2 * calls) is not None):
            calls *= 2
            kernels[name], why_not = compile_ours(in_calls(name, calls), opts.backend,
                                                  optimize)
        rows[name].skipped, rows[name].calls = why_not or "", calls
        if calls > 1 and not why_not:
            rows[name].note = (f"batch in {calls} calls of {point.batch // calls} "
                               f"({RANGE_LIMIT}) ")
    if not any(kernels.values()):
        return list(rows.values())
    paths, inputs, left_out = make_inputs()
    result = run_torch(paths, opts.device, opts.warmup, opts.repeat)
    for name, row in rows.items():
        row.torch_ms = {**result.times, **{path: None for path in left_out}}
        row.torch_notes = {**result.notes, **left_out}
        row.checked_against = result.checked_against
        row.note += result.disagree
        if kernels[name] is not None:
            run_variant(row, kernels[name], inputs[name], result.expected, opts)
    return list(rows.values())


def mla_point(point: MlaPoint, opts) -> list[Row]:
    def make_inputs():
        import torch

        b, h, d, r = point.batch, point.heads, point.dim, point.rank
        w_scale = 1.0 / math.sqrt(r)
        t = dict(q=random_tensor((b, h, d), opts),
                 kv_cache=random_tensor((b, point.seq, r), opts),
                 kr_cache=random_tensor((b, point.seq, point.rope), opts),
                 w_uk=random_tensor((r, h * d), opts, w_scale),
                 w_uv=random_tensor((r, h * d), opts, w_scale))
        host = {name: host_copy(value, opts.dtype) for name, value in t.items()}
        need = mla_eager_bytes(b, point.seq, h, d, t["q"].element_size())
        room = (torch.cuda.mem_get_info()[0] * EAGER_MEMORY_SHARE if opts.device == "cuda"
                else CPU_EAGER_BYTES)
        left_out = {} if need <= room else {
            "eager": f"left out: needs {need / 2**30:.1f} GiB, more than {room / 2**30:.1f} GiB"}
        inputs = {"dense": host, "matrix": host, "lanes": host}
        if "paged" in variants:
            inputs["paged"] = paged_inputs(host, {name: t[name] for name in (
                "kv_cache", "kr_cache")}, point.page_size, opts)
        return mla_torch_paths(t, r, point.rope, eager=not left_out), inputs, left_out

    wanted = {"dense": True, "paged": opts.mla_paged, "matrix": opts.mla_tensor_cores,
              "lanes": opts.mla_lanes}
    pipelines = dict(PIPELINES, matrix=latent_pipeline(opts.mla_latent_options))
    variants = {name: (lambda name=name: mla_module(point, name, opts.dtype),
                       pipelines.get(name, "default"))
                for name in MLA_VARIANTS if wanted[name]}

    return measure(point, variants, make_inputs, opts, batch_in_calls(point, mla_module, opts))


def batch_in_calls(point, module: Callable, opts) -> Callable[[str, int], Callable | None]:
    """measure()'s `in_calls` for a point whose `module(point, variant,
    dtype, calls)` builds the kernel of a share of the batch: None where a
    variant may not split so (a paged pool is shared by the batch) or the
    batch does not divide."""
    def in_calls(name: str, calls: int):
        if name == "paged" or point.batch % calls or calls > MAX_CALLS:
            return None
        return lambda: module(point, name, opts.dtype, calls)

    return in_calls


def gqa_point(point: GqaPoint, opts) -> list[Row]:
    def make_inputs():
        b, hkv, n, d = point.batch, point.kv_heads, point.kv_len, point.dim
        q = random_tensor((b, point.heads, 1, d), opts)
        k, v = (random_tensor((b, hkv, n, d), opts) for _ in range(2))
        paths = sdpa_paths(q, k, v, {})
        if opts.flex:
            paths.append(TorchPath("flex", [("", lambda: compiled_flex()(
                q, k, v, enable_gqa=hkv < point.heads))]))
        dense = {name: host_copy(value, opts.dtype) for name, value in
                 (("q", q), ("k", k), ("v", v))}
        pages = paged_inputs(dense, {"k": k.transpose(1, 2), "v": v.transpose(1, 2)},
                             point.page_size, opts)
        left_out = {} if opts.flex else {"flex": "left out: --no-flex"}
        lengths = {"kv_lens": pages["kv_lens"]}
        return paths, {"dense": dense, "kv_lens": {**dense, **lengths}, "paged": pages}, left_out

    variants = {name: (lambda name=name: gqa_module(point, name, opts.dtype), "default")
                for name in GQA_VARIANTS}
    return measure(point, variants, make_inputs, opts, batch_in_calls(point, gqa_module, opts))


# Output ------------------------------------------------------------------------

HEADER = (f"{'grid':4} {'shape':24} {'variant':8} {'ours ms':>9} {'GB/s':>7}  "
          f"{'PyTorch paths (ms)':58} {'best':8} {'best ms':>8} {'GB/s':>7} {'ratio':>6} "
          f"{'max|err|':>9}  note")


def print_row(r: Row) -> None:
    name, best_ms = r.best
    if r.skipped:
        print(f"{r.grid:4} {r.shape:24} {r.variant:8} skipped: {r.skipped}", flush=True)
        return
    print(f"{r.grid:4} {r.shape:24} {r.variant:8} {fmt(r.ours_ms, '9.4f')} "
          f"{fmt(r.ours_gbps, '7.1f')}  {paths_text(r.torch_ms):58} {name or '-':8} "
          f"{fmt(best_ms, '8.4f')} {fmt(r.best_gbps, '7.1f')} {fmt(r.ratio, '6.3f')} "
          f"{fmt(r.max_abs_err, '9.2e')}  {r.note}", flush=True)
    if len(r.ours_kernel_ms) > 1:  # a program: where its time goes
        print(f"{'':38}kernels (ms): " + ", ".join(
            f"{name} {ms:.4f}" for name, ms in r.ours_kernel_ms.items()), flush=True)


def summary(rows: list[Row]) -> list[str]:
    """Per grid and kernel of ours: how many points ran, the lowest and the
    median ratio, and the highest GB/s (of ours and of PyTorch's best)."""
    lines = []
    for key in dict.fromkeys((r.grid, r.variant) for r in rows):
        ran = [r for r in rows if (r.grid, r.variant) == key and r.ratio is not None]
        skipped = sum(1 for r in rows if (r.grid, r.variant) == key and r.skipped)
        if not ran:
            lines.append(f"{key[0]} {key[1]}: no point measured ({skipped} skipped)")
            continue
        worst = min(ran, key=lambda r: r.ratio)
        ratios = [r.ratio for r in ran]
        lines.append(
            f"{key[0]} {key[1]}: {len(ran)} points ({skipped} skipped); ratio min "
            f"{worst.ratio:.3f} ({worst.shape}, vs {worst.best[0]}), median "
            f"{statistics.median(ratios):.3f}, >= 1.0 at {sum(x >= 1.0 for x in ratios)}; "
            f"GB/s max ours {max(r.ours_gbps for r in ran):.0f}, "
            f"PyTorch {max(r.best_gbps for r in ran):.0f}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the settings and rows as JSON here")
    parser.add_argument("--only", choices=["mla", "gqa"], help="run one grid")
    parser.add_argument("--match", default="",
                        help="run only the points whose name ('mla B=32 S=4096 H=16', "
                             "'gqa B=8 L=1024 H=32/8') contains this text")
    parser.add_argument("--all", action="store_true",
                        help="every GQA point (batch 1..128 x keys 1024..32768)")
    parser.add_argument("--quick", action="store_true", help="a tiny grid (smoke test)")
    parser.add_argument("--backend", choices=["vulkan", "interpreter"], default="vulkan",
                        help="what runs ours (vx.compile's backend)")
    parser.add_argument("--mla-paged", action="store_true",
                        help="also time vx.mla_decode(page_size=64) on shuffled pages")
    parser.add_argument("--mla-latent-options", default="", metavar="OPTIONS",
                        help="options of vyre-latent-tensor-cores for the --mla-tensor-cores "
                             "rows (e.g. 'stage=true')")
    parser.add_argument("--mla-tensor-cores", action="store_true",
                        help="also time MLA's latent attention on the matrix units "
                             "(--dtype f16 or bf16, a device with cooperative matrices of it)")
    parser.add_argument("--mla-lanes", action="store_true",
                        help="also time the default plan kept off the matrix units "
                             "(vyre-to-gpu{matrix_units=false}), to compare with them")
    parser.add_argument("--no-flex", dest="flex", action="store_false",
                        help="leave FlexAttention out (its compile takes seconds per shape)")
    add_torch_options(parser)
    parser.add_argument("--max-seconds", type=float, default=450.0,
                        help="stop starting points after this (shared evenly by the grids "
                             "still to run); what was measured is kept")
    args = parser.parse_args(argv)
    report = None
    if args.backend == "vulkan":
        from vyre_xdsl.vulkan import device_report

        report = device_report()
        print(report)
    settings = start_torch(parser, args)
    import torch

    settings.update(backend=args.backend, quick=args.quick,
                    max_seconds=args.max_seconds,
                    ours="vx.compile(module, backend) once; inputs but q uploaded once; "
                         "median of timings['dispatch_ms'] (GPU timestamps around the "
                         "dispatches; zeroing temporaries between calls is outside, "
                         "ours_device_ms is the whole command buffer)",
                    ratio="best PyTorch ms / ours ms", vulkan=report)
    print("MLA: absorbed = batched matmuls over the latent cache, eager = K/V decompressed; "
          "GB/s of kv_cache + kr_cache. GQA: SDPA per backend (eff, math, cudnn, flash), "
          "flex = torch.compile(flex_attention); GB/s of K + V. ratio = best ms / ours ms, "
          "best = the PyTorch path it is against.")
    opts = argparse.Namespace(device=args.device, dtype=args.dtype, backend=args.backend,
                              warmup=args.warmup, repeat=args.repeat, flex=args.flex,
                              mla_paged=args.mla_paged, mla_tensor_cores=args.mla_tensor_cores,
                              mla_lanes=args.mla_lanes,
                              mla_latent_options=args.mla_latent_options, generator=None)
    grids = [(grid, points, run) for grid, points, run in (
        ("mla", mla_grid(args.quick), mla_point),
        ("gqa", gqa_grid(args.quick, args.all), gqa_point))
        if args.only in (None, grid)]
    rows: list[Row] = []
    started = time.perf_counter()
    settings["not_run"] = []
    print(HEADER)
    print("-" * len(HEADER))
    for index, (grid, points, run) in enumerate(grids):
        points = [p for p in points if args.match in f"{grid} {p.label}"]
        left = args.max_seconds - (time.perf_counter() - started)
        deadline = time.perf_counter() + left / (len(grids) - index)
        last = 0.0  # a guess: the next point takes as long as the last one did
        for point in points:
            now = time.perf_counter()
            if now + last > deadline:
                settings["not_run"].append(f"{grid} {point.label}")
                continue
            opts.generator = torch.Generator(device=args.device).manual_seed(0)
            new_rows = run(point, opts)
            last = time.perf_counter() - now
            for row in new_rows:
                print_row(row)
            rows.extend(new_rows)
            if args.device == "cuda":
                torch.cuda.empty_cache()
            settings["elapsed_s"] = time.perf_counter() - started
            if args.out:  # after every point, so a stopped run keeps what it measured
                write_json(args.out, settings, rows)
    if settings["not_run"]:
        print(f"{OVER_BUDGET}: {len(settings['not_run'])} points "
              f"({', '.join(settings['not_run'])})")
    settings["summary"] = summary(rows)
    print("\n".join(settings["summary"]))
    settings["elapsed_s"] = time.perf_counter() - started
    if args.out:
        write_json(args.out, settings, rows)
    print(f"(benchmark wall time {settings['elapsed_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
