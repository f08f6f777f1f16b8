"""Our attention kernels through Vulkan, side by side with what a PyTorch user gets.

FlashAttention-2 (fp32) against `torch.nn.functional.scaled_dot_product_attention`
on 4-D [B, H, N, D] tensors (3-D ones send PyTorch to its math fallback), every
SDPA backend timed on its own under `sdpa_kernel([backend])`; modifier cases
(causal, sliding window, soft-cap, ALiBi) also against
`torch.compile(flex_attention)` with a `BlockMask`. MLA decode against the
absorbed PyTorch form (W_uk folded into q, attention over the latent cache,
W_uv after) and the eager decompressing one. The ratio is best PyTorch ms /
our ms (> 1: we are faster). TF32 is off on the PyTorch side.

Our time is GPU time from Vulkan timestamp queries; PyTorch's from CUDA events
(`--device cpu`: host wall time); medians over --repeat runs after --warmup
runs. Every output is compared with PyTorch's before it is timed.

    python3 benchmarks/attention_gpu.py [--json out.json] [--plot out.png] [--quick]
    python3 benchmarks/attention_gpu.py --quick --device cpu   # lavapipe + CPU PyTorch

Needs a Vulkan device (VYRE_VULKAN_DEVICE picks one) and PyTorch (with CUDA
unless --device cpu).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
from _common import (
    AgainstTorch,
    BUDGET_MS,
    WRONG_BY_DTYPE,
    TorchPath,
    TorchResult,
    add_torch_options,
    compiled_flex,
    fmt,
    host_array,
    mla_torch_paths,
    paths_text,
    run_torch,
    sdpa_paths,
    start_torch,
    torch_tensor,
    warm_runs,
    write_json,
)

import vyre_xdsl as vx
from vyre_xdsl.kernel_info import program_info
from vyre_xdsl.spirv import emit_spirv_module
from vyre_xdsl.vulkan import device_report, execute, load

FP32_PEAK_TFLOPS = 67.0  # H200 f32 FMA peak (DESIGN.md)


# What is computed: pure functions over numpy, torch or traced vx values ------

@dataclass(frozen=True)
class Modifier:
    """An attention modifier written once for every side: `ops` is `vx`
    (our traced values), `torch` (FlexAttention, SDPA masks) or `numpy`
    (the tests); each has tanh, abs and exp2."""

    name: str = ""
    causal: bool = False  # keep kv <= q
    window: int | None = None  # and q - kv < window
    soft_cap: float | None = None  # score -> cap * tanh(score / cap)
    alibi: bool = False  # score -= 2^(-8(h+1)/H) * |q - kv|

    @property
    def masks(self) -> bool:
        return self.causal or self.window is not None

    @property
    def scores(self) -> bool:
        return self.soft_cap is not None or self.alibi

    def keep(self, q_idx, kv_idx):
        keep = kv_idx <= q_idx
        if self.window is not None:
            keep = keep & (q_idx - kv_idx < self.window)
        return keep

    def score(self, s, q_idx, kv_idx, head, heads: int, ops):
        if self.soft_cap is not None:
            s = self.soft_cap * ops.tanh(s / self.soft_cap)
        if self.alibi:
            s = s - ops.exp2(-8.0 * (head + 1) / heads) * ops.abs(q_idx - kv_idx)
        return s

    def sdpa_kwargs(self, q_idx, kv_idx, head_idx, heads: int, ops) -> dict | None:
        """The modifier as SDPA arguments (`ops.where` too), or None where SDPA
        cannot express it (soft-cap transforms the score, no mask adds it).
        Index arrays broadcast: q_idx [N, 1], kv_idx [1, N], head_idx [H, 1, 1]."""
        if self.soft_cap is not None:
            return None
        if not self.alibi:
            if self.window is None:
                return {"is_causal": True} if self.causal else {}
            return {"attn_mask": self.keep(q_idx, kv_idx)}
        bias = self.score(0.0, q_idx, kv_idx, head_idx, heads, ops)
        if self.masks:
            bias = ops.where(self.keep(q_idx, kv_idx), bias, -math.inf)
        return {"attn_mask": bias[None]}


PLAIN = Modifier()
CAUSAL = Modifier("causal", causal=True)
ALIBI = Modifier("alibi causal", causal=True, alibi=True)


def sliding_window(size: int) -> Modifier:
    return Modifier(f"window={size}", causal=True, window=size)


def soft_cap(cap: float) -> Modifier:
    return Modifier(f"softcap={cap:g}", soft_cap=cap)


def vx_mods(mod: Modifier, heads: int, batch: int) -> dict:
    """Our mask_mod / score_mod: batch folds into our heads (b*H + h)."""
    kwargs = {}
    if mod.masks:
        kwargs["mask_mod"] = lambda q, kv: mod.keep(q, kv)
    if mod.alibi:
        kwargs["score_mod"] = lambda s, q, kv, h: mod.score(
            s, q, kv, h % heads if batch > 1 else h, heads, vx)
    elif mod.scores:  # no head argument: the kernel computes no head index
        kwargs["score_mod"] = lambda s, q, kv: mod.score(s, q, kv, None, heads, vx)
    return kwargs


def kept_pairs(seq: int, mod: Modifier) -> int:
    """(query, key) pairs a modifier keeps out of seq*seq."""
    if not mod.masks:
        return seq * seq
    w = min(mod.window or seq, seq)
    return w * (w + 1) // 2 + (seq - w) * w


def fa2_flops(batch, heads, seq, dim, mod: Modifier) -> float:
    """4*D FLOPs per kept pair (Q K^T and P V)."""
    return 4.0 * batch * heads * dim * kept_pairs(seq, mod)


def mla_flops(seq, heads, dim, rank, rope) -> float:
    """Work of the absorbed form: q_lat, latent and rope scores, o_lat, W_uv."""
    return 2.0 * heads * (dim * rank + seq * (rank + rope) + seq * rank + rank * dim)


# Rows --------------------------------------------------------------------------

@dataclass
class Row(AgainstTorch):
    case: str
    shape: str
    variant: str
    flops: float
    params: dict = field(default_factory=dict)
    torch_ms: dict = field(default_factory=dict)  # path -> median ms, None: n/a
    torch_notes: dict = field(default_factory=dict)  # path -> why n/a / how it ran
    checked_against: str | None = None
    ours_ms: float | None = None
    max_abs_err: float | None = None
    note: str = ""
    ours_each_ms: list[float] = field(default_factory=list)
    # the driver's statistics of our kernels (registers a lane, ...), where
    # it reports them (vyre_xdsl.vulkan Dispatcher.statistics)
    compiled: dict = field(default_factory=dict)

    RATE = ("tflops", "flops", 1e9)
    ours_tflops = property(lambda self: self.rate(self.ours_ms))
    best_tflops = property(lambda self: self.rate(self.best[1]))


# PyTorch side (the shared baselines are in _common.py) ------------------------

def fa2_torch_paths(q, k, v, mod: Modifier, device: str) -> list[TorchPath]:
    import torch

    heads, seq = q.shape[1], q.shape[2]
    idx = torch.arange(seq, device=device)
    kwargs = mod.sdpa_kwargs(idx[:, None], idx[None, :],
                             torch.arange(heads, device=device)[:, None, None], heads, torch)
    paths = [] if kwargs is None else sdpa_paths(q, k, v, kwargs)
    if mod is not PLAIN:  # built at its first call, so a failure there is 'n/a'
        flex = functools.cache(lambda: flex_call(q, k, v, mod, device))
        paths.append(TorchPath("flex", [("", lambda: flex()())]))
    return paths


def flex_call(q, k, v, mod: Modifier, device: str) -> Callable:
    """`torch.compile(flex_attention)` with the modifier; the BlockMask is
    built once, here, and the compile happens at the first (untimed) call."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    heads, seq = q.shape[1], q.shape[2]
    block_mask = None
    if mod.masks:
        block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: mod.keep(q_idx, kv_idx),
                                       None, None, seq, seq, device=device)
    score_mod = None
    if mod.scores:
        score_mod = lambda score, b, h, q_idx, kv_idx: mod.score(  # noqa: E731
            score, q_idx, kv_idx, h, heads, torch)
    flex = compiled_flex()
    gqa = k.shape[1] < heads
    return lambda: flex(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa)


# Our side ----------------------------------------------------------------------

def lower(module, optimize: str | None):
    """Lowered for the Vulkan device that runs it, where lower_to_gpu can
    read a device's limits (else "default" would fit a generic device)."""
    from vyre_xdsl.passes.vyre_to_gpu import OPTIMISATION_LEVELS

    optimize = optimize or "default"
    kwargs = {}
    if "device" in inspect.signature(vx.lower_to_gpu).parameters \
            and optimize in OPTIMISATION_LEVELS:
        kwargs["device"] = "vulkan"
    return vx.lower_to_gpu(module, optimize, **kwargs)


def run_ours(module, inputs: dict[str, np.ndarray], optimize, warmup: int, repeat: int,
             expected: np.ndarray | None):
    """(max |out - expected| of the first run, median ms, each ms, the
    driver's statistics of the kernels)."""
    from vyre_xdsl.run import prepare_buffers

    lowered = lower(module, optimize)
    # one kernel, or a program (flash-decoding: partials, then a merge); the
    # timestamps cover every dispatch of it, temporaries stay on the device
    info = program_info(lowered)
    arrays = {name: a for name, a in prepare_buffers(
        info, {b.name: inputs[b.name] for b in info.inputs}).items()
        if not info.buffer(name).is_temporary}
    spirv = emit_spirv_module(lowered, info)
    probe: dict = {}
    execute(spirv, info, arrays, timings=probe)
    err = None
    if expected is not None:
        out = arrays["out"].astype(np.float32).reshape(expected.shape)
        err = float(np.max(np.abs(out - expected)))
    repeat = max(3, min(repeat, int(BUDGET_MS / max(probe["dispatch_ms"], 1e-3))))
    warmup = warm_runs(warmup, probe["dispatch_ms"])
    timings: dict = {}
    execute(spirv, info, arrays, timings=timings, repeat=warmup + repeat)
    each = timings["dispatch_ms_each"][warmup:]
    dispatcher = load(spirv, info)
    try:
        compiled = dispatcher.statistics()
    finally:
        dispatcher.close()
    return err, float(np.median(each)), each, compiled


def tile_size_of(optimize: str | None) -> tuple[int | None, str | None]:
    """`tile=N/OPTIMIZE` -> (N, OPTIMIZE); a plain OPTIMIZE keeps the default tile."""
    if optimize and optimize.startswith("tile="):
        tile, _, rest = optimize.partition("/")
        return int(tile.removeprefix("tile=")), rest or None
    return None, optimize


def our_rows(template: Row, build: Callable, inputs, expected, variants, warmup,
             repeat) -> list[Row]:
    """One row per variant; a failing variant notes its error and the run goes on."""
    rows = []
    for variant, optimize in variants:
        row = Row(**{**asdict(template), "variant": variant})
        tile, optimize = tile_size_of(optimize)
        try:
            module = build(tile)
            row.max_abs_err, row.ours_ms, row.ours_each_ms, row.compiled = run_ours(
                module, inputs, optimize, warmup, repeat, expected)
        except Exception as error:  # one variant failing is a result
            row.note += f"{type(error).__name__}: {error}"[:300]
        wrong = WRONG_BY_DTYPE[template.params.get("dtype", "f32")]
        if row.max_abs_err is not None and not row.max_abs_err <= wrong:
            row.note = f"WRONG (max|err| > {wrong:g}) " + row.note
        rows.append(row)
    return rows


def with_torch(template: Row, result: TorchResult) -> Row:
    template.torch_ms, template.torch_notes = result.times, result.notes
    template.checked_against = result.checked_against
    template.note = result.disagree
    return template


# Cases -------------------------------------------------------------------------

def fa2_case(batch, heads, seq, dim, mod: Modifier = PLAIN, kv_heads=None, *, opts) -> list[Row]:
    kv_heads = kv_heads or heads
    label = " ".join([f"B={batch} H={heads} N={seq} D={dim}"]
                     + ([f"Hkv={kv_heads}"] if kv_heads != heads else [])
                     + ([mod.name] if mod.name else [])
                     + ([opts.dtype] if opts.dtype != "f32" else []))
    if opts.match not in f"fa2 {label}":
        return []

    q = host_array(opts.rng.standard_normal((batch, heads, seq, dim), dtype=np.float32), opts)
    k, v = (host_array(opts.rng.standard_normal((batch, kv_heads, seq, dim), dtype=np.float32),
                       opts) for _ in range(2))
    tq, tk, tv = (torch_tensor(a, opts) for a in (q, k, v))
    result = run_torch(fa2_torch_paths(tq, tk, tv, mod, opts.device), opts.device,
                       opts.warmup, opts.repeat)
    del tq, tk, tv
    template = with_torch(Row("fa2", label, "", fa2_flops(batch, heads, seq, dim, mod),
                              params=dict(B=batch, H=heads, Hkv=kv_heads, N=seq, D=dim,
                                          modifier=mod.name, dtype=opts.dtype)), result)

    def build(tile):
        return vx.flash_attention_2(seq, dim, **({} if tile is None else {"tile_size": tile}),
                                    num_heads=batch * heads, num_kv_heads=batch * kv_heads,
                                    dtype=opts.dtype, **vx_mods(mod, heads, batch))

    return our_rows(template, build, {"q": q, "k": k, "v": v}, result.expected,
                    opts.variants, opts.warmup, opts.repeat)


def mla_case(seq, heads, dim, rank, rope, *, opts) -> list[Row]:
    label = f"S={seq} H={heads} D={dim} R={rank} P={rope}" + (
        f" {opts.dtype}" if opts.dtype != "f32" else "")
    if opts.match not in f"mla {label}":
        return []

    rng, w_scale = opts.rng, np.float32(1.0 / math.sqrt(rank))
    ins = dict(
        q=rng.standard_normal((heads, dim), dtype=np.float32),
        kv_cache=rng.standard_normal((seq, rank), dtype=np.float32),
        kr_cache=rng.standard_normal((seq, rope), dtype=np.float32),
        w_uk=rng.standard_normal((rank, heads * dim), dtype=np.float32) * w_scale,
        w_uv=rng.standard_normal((rank, heads * dim), dtype=np.float32) * w_scale,
    )
    ins = {name: host_array(a, opts) for name, a in ins.items()}
    t = {name: torch_tensor(a, opts) for name, a in ins.items()}
    result = run_torch(mla_torch_paths(t, rank, rope), opts.device, opts.warmup, opts.repeat)
    del t
    template = with_torch(Row("mla", label, "", mla_flops(seq, heads, dim, rank, rope),
                              params=dict(S=seq, H=heads, D=dim, R=rank, P=rope,
                                          dtype=opts.dtype)), result)

    def build(tile):
        return vx.mla_decode(seq_len=seq, num_heads=heads, head_dim=dim, kv_lora_rank=rank,
                             qk_rope_head_dim=rope, dtype=opts.dtype,
                             **({} if tile is None else {"tile_size": tile}))

    return our_rows(template, build, ins, result.expected, opts.variants, opts.warmup,
                    opts.repeat)


def fa2_cases(quick: bool) -> list[tuple]:
    """(B, H, N, D, modifier[, Hkv]) of the FlashAttention-2 rows."""
    if quick:  # lavapipe stops an invocation after 65535 loop iterations
        return [(1, 2, 256, 64, PLAIN), (2, 4, 128, 32, PLAIN, 2),
                (2, 2, 256, 32, CAUSAL), (2, 2, 256, 32, sliding_window(64)),
                (2, 2, 256, 32, soft_cap(30)), (2, 2, 256, 32, ALIBI)]
    return [(1, 32, 4096, 64, PLAIN), (1, 32, 4096, 128, PLAIN), (4, 32, 1024, 64, PLAIN),
            (1, 1, 4096, 64, PLAIN), (1, 1, 4096, 128, PLAIN), (1, 32, 4096, 64, CAUSAL),
            (1, 16, 8192, 128, CAUSAL), (1, 32, 16384, 64, PLAIN), (1, 4, 300, 256, PLAIN),
            (1, 32, 4096, 64, sliding_window(256)), (1, 32, 4096, 64, soft_cap(30)),
            (1, 32, 4096, 64, ALIBI)]


def mla_cases(quick: bool) -> list[tuple]:
    """(S, H, D, R, P) of the MLA decode rows."""
    if quick:
        return [(512, 4, 64, 32, 16)]
    return [(4096, 16, 128, 512, 64), (4096, 128, 128, 512, 64), (32768, 16, 128, 512, 64)]


SWEEP = dict(batch=1, heads=32, dim=64)  # the plot: TFLOP/s vs N at these


# Output ------------------------------------------------------------------------

HEADER = (f"{'case':4} {'shape':34} {'variant':10} {'ours ms':>9} {'TFLOP/s':>7}  "
          f"{'PyTorch paths (ms)':56} {'best':8} {'best ms':>8} {'ratio':>6} {'max|err|':>9}  note")


def print_row(r: Row) -> None:
    name, best_ms = r.best
    print(f"{r.case:4} {r.shape:34} {r.variant:10} {fmt(r.ours_ms, '9.3f')} "
          f"{fmt(r.ours_tflops, '7.2f')}  {paths_text(r.torch_ms):56} {name or '-':8} "
          f"{fmt(best_ms, '8.3f')} {fmt(r.ratio, '6.3f')} {fmt(r.max_abs_err, '9.2e')}  "
          f"{r.note}", flush=True)


def plot(rows: list[Row], path: str, device_name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = [r for r in rows if r.case == "fa2" and r.params.get("modifier") == ""
             and r.params["H"] == r.params["Hkv"]
             and all(r.params[k] == SWEEP[n] for k, n in (("B", "batch"), ("H", "heads"),
                                                         ("D", "dim")))]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant in sorted({r.variant for r in sweep}):
        pts = sorted((r.params["N"], r.ours_tflops)
                     for r in sweep if r.variant == variant and r.ours_tflops)
        if pts:
            ax.plot(*zip(*pts), marker="o", label=f"vyre-xdsl ({variant})")
    torch_pts = sorted({(r.params["N"], r.best_tflops) for r in sweep if r.best_tflops})
    if torch_pts:
        ax.plot(*zip(*torch_pts), marker="s", color="black",
                label="PyTorch SDPA fp32, best backend")
    if "H200" in device_name:
        ax.axhline(FP32_PEAK_TFLOPS, color="grey", linestyle=":", label="H200 f32 FMA peak")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(f"sequence length N (B={SWEEP['batch']}, H={SWEEP['heads']}, "
                  f"D={SWEEP['dim']})")
    ax.set_ylabel("TFLOP/s (4·B·H·N²·D / time)")
    ax.set_title(f"FlashAttention-2 forward, fp32, {device_name}")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def parse_variants(text: str) -> list[tuple[str, str | None]]:
    """'none;default' -> [('none', 'none'), ('default', None)] (None: lower_to_gpu's default)."""
    return [(name, None if name == "default" else name) for name in text.split(";") if name]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the settings and rows as JSON here")
    parser.add_argument("--plot", help="write a PNG of TFLOP/s vs N here (adds an N sweep)")
    parser.add_argument("--quick", action="store_true", help="small shapes only (smoke test)")
    parser.add_argument("--only", choices=["fa2", "mla"], help="run one decoder's cases")
    parser.add_argument("--match", default="",
                        help="run only the cases whose name ('fa2 B=1 H=32 N=4096 D=128', "
                             "'fa2 ... window=256', 'mla S=4096 ...') contains this text")
    parser.add_argument("--variants", default="none;default",
                        help="';'-separated optimize= choices of vx.lower_to_gpu: "
                             "'none' (the seed's layout), 'exact', 'default', or a pass "
                             "pipeline; 'tile=N/CHOICE' builds with tile_size N")
    add_torch_options(parser)
    args = parser.parse_args(argv)
    print(device_report())
    settings = start_torch(parser, args)
    settings["ours"] = ("lower_to_gpu(optimize=level, device='vulkan')"
                        if "device" in inspect.signature(vx.lower_to_gpu).parameters
                        else "lower_to_gpu(optimize=level)")
    print("SDPA on 4-D [B, H, N, D], each backend alone (sdpa_kernel): eff = "
          "EFFICIENT_ATTENTION, math = MATH, cudnn = CUDNN_ATTENTION, flash = "
          "FLASH_ATTENTION; n/a = refused (reasons in the JSON). Modifiers: SDPA with "
          "is_causal or a dense attn_mask where it can express them (soft-cap: no), "
          "flex = torch.compile(flex_attention) + BlockMask. MLA: absorbed and eager forms "
          "(TFLOP/s count the absorbed form's work). ratio = best PyTorch ms / ours ms. "
          f"Ours: {settings['ours']}.")
    opts = argparse.Namespace(variants=parse_variants(args.variants), warmup=args.warmup,
                              repeat=args.repeat, rng=np.random.default_rng(0),
                              match=args.match, device=args.device, dtype=args.dtype)
    rows: list[Row] = []
    started = time.perf_counter()
    print(HEADER)
    print("-" * len(HEADER))

    def add(new_rows: list[Row]) -> None:
        for row in new_rows:
            print_row(row)
        rows.extend(new_rows)
        if args.json:  # after every case, so an interrupted run keeps what it measured
            write_json(args.json, settings, rows)

    if args.only != "mla":
        cases = fa2_cases(args.quick)
        if args.plot:
            done = {(b, h, n, d) for b, h, n, d, mod, *_ in cases if mod is PLAIN}
            cases += [(SWEEP["batch"], SWEEP["heads"], n, SWEEP["dim"], PLAIN)
                      for n in ((128, 256) if args.quick else (512, 1024, 2048, 4096))
                      if (SWEEP["batch"], SWEEP["heads"], n, SWEEP["dim"]) not in done]
        for b, h, n, d, mod, *kv in cases:
            add(fa2_case(b, h, n, d, mod, *kv, opts=opts))
    if args.only != "fa2":
        for case in mla_cases(args.quick):
            add(mla_case(*case, opts=opts))
    print(f"(benchmark wall time {time.perf_counter() - started:.1f} s)")
    if args.plot:
        plot(rows, args.plot, settings["device"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
