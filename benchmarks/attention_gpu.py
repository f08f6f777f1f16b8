"""Our attention kernels on a GPU through Vulkan, side by side with PyTorch.

FlashAttention-2 (fp32) against `torch.nn.functional.scaled_dot_product_attention`
(fp32), and MLA decode against a PyTorch fp32 eager reference, in the same
process. Our time is GPU time from Vulkan timestamp queries, PyTorch's from
CUDA events; both are medians over --repeat runs after --warmup runs.
Correctness: every output is compared with PyTorch's before it is timed.

    python benchmarks/attention_gpu.py [--json out.json] [--plot out.png] [--quick]

Needs a Vulkan GPU (VYRE_VULKAN_DEVICE picks one) and PyTorch with CUDA.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

import vyre_xdsl as vx
from vyre_xdsl.kernel_info import program_info
from vyre_xdsl.spirv import emit_spirv
from vyre_xdsl.vulkan import device_report, execute

FP32_PEAK_TFLOPS = 67.0  # H200 f32 FMA peak (DESIGN.md)


@dataclass
class Row:
    case: str
    shape: str
    variant: str
    flops: float
    ours_ms: float | None = None
    torch_ms: float | None = None
    max_abs_err: float | None = None
    note: str = ""
    ours_each_ms: list[float] = field(default_factory=list)

    @property
    def ours_tflops(self) -> float | None:
        return self.flops / self.ours_ms / 1e9 if self.ours_ms else None

    @property
    def torch_tflops(self) -> float | None:
        return self.flops / self.torch_ms / 1e9 if self.torch_ms else None

    @property
    def ratio(self) -> float | None:
        """Our speed relative to PyTorch's (> 1: we are faster)."""
        return self.torch_ms / self.ours_ms if self.ours_ms and self.torch_ms else None


def torch_time_ms(fn, warmup: int, repeat: int) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def run_ours(module, inputs: dict[str, np.ndarray], optimize, warmup: int, repeat: int):
    lowered = lower(module, optimize)
    # one kernel, or a program (flash-decoding: partials, then a merge); the
    # timestamps cover every dispatch of it, temporaries stay on the device
    info = program_info(lowered)
    arrays = {
        b.name: np.zeros(b.count, np.float32)
        if b.is_output
        else np.ascontiguousarray(inputs[b.name], np.float32).reshape(-1).copy()
        for b in info.buffers
        if not b.is_temporary
    }
    spirv = emit_spirv(lowered)
    probe: dict = {}
    execute(spirv, info, arrays, timings=probe)
    # A slow variant (the seed's layout at large shapes) gets fewer runs, so
    # the whole benchmark stays within minutes.
    budget_ms = 3000.0
    repeat = max(3, min(repeat, int(budget_ms / max(probe["dispatch_ms"], 1e-3))))
    warmup = min(warmup, repeat)
    timings: dict = {}
    execute(spirv, info, arrays, timings=timings, repeat=warmup + repeat)
    each = timings["dispatch_ms_each"][warmup:]
    out = {b.name: arrays[b.name].reshape(b.shape) for b in info.outputs}
    return out, float(np.median(each)), each


def lower(module, optimize):
    return vx.lower_to_gpu(module) if optimize is None else vx.lower_to_gpu(module, optimize=optimize)


def supports(function, parameter: str) -> bool:
    return parameter in inspect.signature(function).parameters


def tile_size_of(optimize: str | None) -> tuple[int, str | None]:
    """`tile=N/OPTIMIZE` -> (N, OPTIMIZE); a plain OPTIMIZE keeps tile 64."""
    if optimize and optimize.startswith("tile="):
        tile, _, rest = optimize.partition("/")
        return int(tile.removeprefix("tile=")), rest or None
    return 64, optimize


def fa2_case(batch, heads, seq, dim, *, causal, variants, warmup, repeat, rng,
             match="") -> list[Row]:
    label = f"B={batch} H={heads} N={seq} D={dim}" + (" causal" if causal else "")
    if match not in f"fa2 {label}":
        return []
    import torch
    import torch.nn.functional as F

    flops = 4.0 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
    rows = []
    groups = batch * heads  # batch and heads are both independent (q, k, v) groups
    if groups > 1 and not supports(vx.flash_attention_2, "num_heads"):
        return [Row("fa2", label, "-", flops, note="needs num_heads in vx.flash_attention_2")]
    if causal and not supports(vx.flash_attention_2, "mask_mod"):
        return [Row("fa2", label, "-", flops, note="needs mask_mod in vx.flash_attention_2")]
    q, k, v = (rng.standard_normal((groups, seq, dim), dtype=np.float32) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(a).cuda() for a in (q, k, v))
    with torch.no_grad():
        expected = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    torch_ms = torch_time_ms(
        lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal), warmup, repeat
    )
    expected = expected.cpu().numpy()
    kwargs = dict(seq_len=seq, head_dim=dim)
    if groups > 1:
        kwargs["num_heads"] = groups
    if causal:
        kwargs["mask_mod"] = lambda q_idx, kv_idx: kv_idx <= q_idx
    inputs = {"q": q, "k": k, "v": v}
    for variant, optimize in variants:
        row = Row("fa2", label, variant, flops, torch_ms=torch_ms)
        tile, optimize = tile_size_of(optimize)
        try:
            module = vx.flash_attention_2(**kwargs, tile_size=tile)
            out, ms, each = run_ours(module, inputs, optimize, warmup, repeat)
        except Exception as error:  # report and go on: one variant failing is a result
            row.note = f"{type(error).__name__}: {error}"[:300]
        else:
            row.ours_ms, row.ours_each_ms = ms, each
            row.max_abs_err = float(np.max(np.abs(out["out"].reshape(expected.shape) - expected)))
        rows.append(row)
    return rows


def mla_case(seq, heads, dim, rank, rope, *, variants, warmup, repeat, rng,
             match="") -> list[Row]:
    label = f"S={seq} H={heads} D={dim} R={rank} P={rope}"
    if match not in f"mla {label}":
        return []
    import torch

    ins = dict(
        q=rng.standard_normal((heads, dim)),
        kv_cache=rng.standard_normal((seq, rank)),
        kr_cache=rng.standard_normal((seq, rope)),
        w_uk=rng.standard_normal((rank, heads * dim)) / math.sqrt(rank),
        w_uv=rng.standard_normal((rank, heads * dim)) / math.sqrt(rank),
    )
    ins = {name: a.astype(np.float32) for name, a in ins.items()}
    t = {name: torch.from_numpy(a).cuda() for name, a in ins.items()}
    scale = 1.0 / math.sqrt(dim)

    def eager():
        # What a PyTorch user writes: decompress K and V, then attend per head.
        k = torch.einsum("sr,rhd->hsd", t["kv_cache"], t["w_uk"].view(rank, heads, dim)).clone()
        k[:, :, :rope] += t["kr_cache"]
        v = torch.einsum("sr,rhd->hsd", t["kv_cache"], t["w_uv"].view(rank, heads, dim))
        scores = torch.einsum("hd,hsd->hs", t["q"], k) * scale
        return torch.einsum("hs,hsd->hd", torch.softmax(scores, dim=-1), v)

    with torch.no_grad():
        expected = eager().cpu().numpy()
        torch_ms = torch_time_ms(eager, warmup, repeat)
    # Work of the decompressing formulation (K and V decompression + attention).
    flops = 2.0 * seq * rank * heads * dim * 2 + 4.0 * heads * seq * dim
    module = vx.mla_decode(seq_len=seq, num_heads=heads, head_dim=dim, kv_lora_rank=rank,
                           qk_rope_head_dim=rope)
    rows = []
    for variant, optimize in variants:
        row = Row("mla", label, variant, flops, torch_ms=torch_ms)
        try:
            out, ms, each = run_ours(module, ins, optimize, warmup, repeat)
        except Exception as error:
            row.note = f"{type(error).__name__}: {error}"[:300]
        else:
            row.ours_ms, row.ours_each_ms = ms, each
            row.max_abs_err = float(np.max(np.abs(out["out"] - expected)))
        rows.append(row)
    return rows


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


HEADER = (f"{'case':4} {'shape':30} {'variant':12} {'ours ms':>9} {'TFLOP/s':>8} "
          f"{'%peak':>6} {'torch ms':>9} {'TFLOP/s':>8} {'ratio':>6} {'max|err|':>9}  note")


def print_row(r: Row) -> None:
    peak = r.ours_tflops / FP32_PEAK_TFLOPS * 100 if r.ours_tflops else None
    print(f"{r.case:4} {r.shape:30} {r.variant:12} {fmt(r.ours_ms, '9.3f')} "
          f"{fmt(r.ours_tflops, '8.2f')} {fmt(peak, '6.1f')} {fmt(r.torch_ms, '9.3f')} "
          f"{fmt(r.torch_tflops, '8.2f')} {fmt(r.ratio, '6.3f')} "
          f"{fmt(r.max_abs_err, '9.2e')}  {r.note}", flush=True)


def plot(rows: list[Row], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = [r for r in rows if r.case == "fa2" and r.shape.startswith("sweep")]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant in sorted({r.variant for r in sweep}):
        pts = sorted((int(r.shape.split("N=")[1].split()[0]), r.ours_tflops)
                     for r in sweep if r.variant == variant and r.ours_tflops)
        if pts:
            ax.plot(*zip(*pts), marker="o", label=f"vyre-xdsl ({variant})")
    torch_pts = sorted({(int(r.shape.split("N=")[1].split()[0]), r.torch_tflops)
                        for r in sweep if r.torch_tflops})
    if torch_pts:
        ax.plot(*zip(*torch_pts), marker="s", color="black", label="PyTorch SDPA fp32")
    ax.axhline(FP32_PEAK_TFLOPS, color="grey", linestyle=":", label="f32 FMA peak")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length N (B=1, H=32, D=64)")
    ax.set_ylabel("TFLOP/s (4·B·H·N²·D / time)")
    ax.set_title("FlashAttention-2 forward, fp32, NVIDIA H200")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the rows as JSON here")
    parser.add_argument("--plot", help="write a PNG of TFLOP/s vs N here")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="small shapes only (smoke test)")
    parser.add_argument("--only", choices=["fa2", "mla"], help="run one decoder's cases")
    parser.add_argument("--match", default="",
                        help="run only the cases whose name ('fa2 B=1 H=32 N=4096 D=128', "
                             "'mla S=4096 ...') contains this text")
    parser.add_argument("--variants", default="none;default",
                        help="';'-separated optimize= choices of vx.lower_to_gpu: "
                             "'none' (the seed's layout), 'exact', 'default', or a pass "
                             "pipeline; 'tile=N/CHOICE' builds FA2 with tile_size N")
    args = parser.parse_args(argv)
    print(device_report())
    rng = np.random.default_rng(0)
    variants = []
    for name in args.variants.split(";"):
        if name == "default":
            variants.append(("default", None))
        else:
            variants.append((name, name))
    common = dict(variants=variants, warmup=args.warmup, repeat=args.repeat, rng=rng,
                  match=args.match)
    rows: list[Row] = []
    started = time.perf_counter()
    print(HEADER)
    print("-" * len(HEADER))

    def add(new_rows: list[Row]) -> None:
        for row in new_rows:
            print_row(row)
        rows.extend(new_rows)

    if args.quick:
        add(fa2_case(1, 1, 512, 64, causal=False, **common))
        add(mla_case(512, 4, 64, 32, 16, **common))
    else:
        if args.only != "mla":
            for b, h, n, d in [(1, 32, 4096, 64), (1, 32, 4096, 128), (1, 1, 4096, 64),
                               (1, 1, 4096, 128), (4, 32, 1024, 64)]:
                add(fa2_case(b, h, n, d, causal=False, **common))
            add(fa2_case(1, 32, 4096, 64, causal=True, **common))
        if args.only != "fa2":
            add(mla_case(4096, 16, 128, 512, 64, **common))
        if args.plot and args.only != "mla":
            for n in (512, 1024, 2048, 4096):
                sweep = fa2_case(1, 32, n, 64, causal=False, **common)
                for r in sweep:
                    r.shape = "sweep " + r.shape
                add(sweep)
    print(f"(benchmark wall time {time.perf_counter() - started:.1f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(asdict(r), ours_tflops=r.ours_tflops, torch_tflops=r.torch_tflops,
                            ratio=r.ratio) for r in rows], f, indent=1)
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
