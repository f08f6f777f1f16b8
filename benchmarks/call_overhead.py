"""Per-call host overhead of a compiled kernel whose caches are resident.

A decode step of a serving loop calls one compiled kernel again and again
with a new query while the KV cache (and MLA's weights) stay on the device
(`kernel.upload`). What the host adds to each step, on top of the GPU time
of the dispatches, is this script's measure:

    overhead    wall time of a call - the GPU time of all its work
                (timestamps around the command buffer: the dispatches, and
                zeroing the temporaries, MLA's split partials)
    host        what the host spent itself: input checks, the query's copy,
                submission, the outputs' read-back (wall - fence wait)
    call        wall time of a plain call (no timings= requested)
    GPU         the kernels' time (timestamps around the dispatches)

Medians (and 90th percentiles) over --calls calls after --warmup calls, per
case; beside them a call with every input passed as an array (copied each
time) and one vx.run (compile + call). The goal on an H200 is an overhead of
at most 50 microseconds for a decode step with resident caches (#18).

    python3 benchmarks/call_overhead.py [--calls 200] [--json out.json]
    python3 benchmarks/call_overhead.py --only mla --calls 50   # lavapipe: a smoke test

Needs a Vulkan device (VYRE_VULKAN_DEVICE picks one). On lavapipe the GPU
time is CPU time of the driver's threads, so the figures are a smoke test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

import vyre_xdsl as vx
from vyre_xdsl.vulkan import device_report

GOAL_US = 50.0

CASES = {
    # MLA decode of one token: latent cache of S rows, 16 heads (DeepSeek's shapes)
    "mla": ("MLA decode S=4096 H=16 D=128 R=512 P=64", lambda: vx.mla_decode(
        seq_len=4096, num_heads=16, head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64)),
    # FlashAttention-2 at a small sequence (a short prompt or a chunk)
    "fa2": ("FA2 seq_len=64 head_dim=64", lambda: vx.flash_attention_2(
        seq_len=64, head_dim=64)),
}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(label: str, build, calls: int, warmup: int) -> dict:
    """Time one case; returns its row (times in ms, overheads in us)."""
    module = build()
    start = time.perf_counter()
    kernel = vx.compile(module, backend="vulkan")
    compile_ms = (time.perf_counter() - start) * 1e3
    rng = np.random.default_rng(0)
    arrays = {b.name: rng.standard_normal(b.shape, dtype=np.float32)
              for b in kernel.info.inputs}
    query = kernel.inputs[0]  # q: the one input that changes every step
    resident = {name: kernel.upload(name, value) for name, value in arrays.items()
                if name != query}
    queries = [rng.standard_normal(arrays[query].shape, dtype=np.float32)
               for _ in range(4)]
    expected = vx.run(module, {**arrays, query: queries[0]}, backend="vulkan")
    got = kernel(**{query: queries[0]}, **resident)
    for name, value in expected.items():  # resident or not, the same bits
        np.testing.assert_array_equal(got[name], value)

    for i in range(warmup):
        kernel(**{query: queries[i % 4]}, **resident)
    plain = []
    for i in range(calls):
        t = time.perf_counter()
        kernel(**{query: queries[i % 4]}, **resident)
        plain.append((time.perf_counter() - t) * 1e3)
    timed = []
    for i in range(calls):
        timings: dict = {}
        kernel(**{query: queries[i % 4]}, **resident, timings=timings)
        timed.append(timings)
    assert all(t["uploaded_bytes"] == arrays[query].nbytes for t in timed)
    copied = []
    for i in range(max(3, calls // 20)):  # every input copied, as vx.run would
        timings = {}
        kernel(**{**arrays, query: queries[i % 4]}, timings=timings)
        copied.append(timings["total_ms"])
    start = time.perf_counter()
    vx.run(module, arrays, backend="vulkan")
    run_ms = (time.perf_counter() - start) * 1e3
    kernel.close()

    has_gpu_time = "device_ms" in timed[0]
    overhead = [(t["total_ms"] - t.get("device_ms", 0.0)) * 1e3 for t in timed]
    host = [t["host_ms"] * 1e3 for t in timed]
    return {
        "case": label,
        "calls": calls,
        "compile_ms": compile_ms,
        "call_ms": statistics.median(plain),
        "call_ms_p90": _percentile(plain, 0.9),
        "total_ms": statistics.median(t["total_ms"] for t in timed),
        "dispatch_ms": (statistics.median(t["dispatch_ms"] for t in timed)
                        if has_gpu_time else None),
        "device_ms": (statistics.median(t["device_ms"] for t in timed)
                      if has_gpu_time else None),
        "overhead_us": statistics.median(overhead) if has_gpu_time else None,
        "overhead_us_p90": _percentile(overhead, 0.9) if has_gpu_time else None,
        "host_us": statistics.median(host),
        "host_us_p90": _percentile(host, 0.9),
        "resident_bytes": sum(h.nbytes for h in resident.values()),
        "query_bytes": int(arrays[query].nbytes),
        "all_copied_ms": statistics.median(copied),
        "vx_run_ms": run_ms,
    }


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict]) -> str:
    head = ("case", "call ms", "GPU ms", "GPU all ms", "overhead us", "(p90)", "host us",
            "(p90)", "all copied ms", "vx.run ms")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        lines.append(" | ".join((
            r["case"], _fmt(r["call_ms"], 3), _fmt(r["dispatch_ms"], 3),
            _fmt(r["device_ms"], 3),
            _fmt(r["overhead_us"]), _fmt(r["overhead_us_p90"]), _fmt(r["host_us"]),
            _fmt(r["host_us_p90"]), _fmt(r["all_copied_ms"], 3), _fmt(r["vx_run_ms"], 1))))
    return "\n".join(f"| {line} |" for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="timed calls per case")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--only", choices=sorted(CASES), action="append",
                        help="run only this case (repeatable)")
    parser.add_argument("--json", help="write the rows and the device here")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.warmup < 0:
        parser.error("--calls must be >= 1 and --warmup >= 0")
    report = device_report()
    device = next((line.split(":", 1)[1].split("(set")[0].strip()
                   for line in report.splitlines() if line.startswith("selected:")), "?")
    print(f"device: {device}")
    rows = []
    for key in args.only or list(CASES):
        label, build = CASES[key]
        print(f"measuring {label} ...", file=sys.stderr, flush=True)
        rows.append(measure(label, build, args.calls, args.warmup))
    print(table(rows))
    print(f"goal (H200): overhead <= {GOAL_US:.0f} us per decode step with resident caches")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "goal_us": GOAL_US, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
