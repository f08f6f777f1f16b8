"""What the GPU benchmarks share: the PyTorch baselines (every SDPA backend
on its own, compiled FlexAttention, MLA's absorbed and eager forms), how
they are timed and checked against each other, and the table helpers.

Imported by attention_gpu.py and decode_gpu.py from beside them; torch is
imported only inside the functions that need it, so the pure parts load
without it (the tests).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

# a max |error| above this (or NaN) marks the output wrong; half outputs are
# rounded once to their type (bf16 keeps 8 bits)
WRONG_BY_DTYPE = {"f32": 1e-3, "f16": 1e-2, "bf16": 5e-2}
TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
BUDGET_MS = 3000.0  # a slow path gets fewer timed runs, so the run stays within minutes
# Each side is kept busy this long before it is timed: an idle GPU lowers its
# clocks, and a short kernel timed right after a compile or another path's
# cleanup ran several times slower (docs/performance.md, "Timing").
WARM_MS = 300.0
MAX_WARM_RUNS = 5000


def warm_runs(warmup: int, first_ms: float) -> int:
    """Warm-up runs for a case whose first run took `first_ms`: at least
    `warmup`, and enough for about WARM_MS of work."""
    return max(warmup, min(MAX_WARM_RUNS, int(WARM_MS / max(first_ms, 1e-3))))
SDPA_BACKENDS = {  # column name -> torch.nn.attention.SDPBackend member
    "eff": "EFFICIENT_ATTENTION",
    "math": "MATH",
    "cudnn": "CUDNN_ATTENTION",
    "flash": "FLASH_ATTENTION",
}


def mla_absorbed(q, kv_cache, kr_cache, w_uk, w_uv, einsum, softmax):
    """MLA decode, absorbed: numpy (tests) and torch (benchmark) run this code.
    q [..., H, D], kv_cache [..., S, R], kr_cache [..., S, P], w_uk/w_uv
    [R, H*D] -> [..., H, D] (the leading axes: a batch of sequences, each
    step a batched matmul); kr_cache adds to the first P key dims, so the
    score gets q[..., :P] . kr."""
    heads, dim = q.shape[-2:]
    rank, rope = kv_cache.shape[-1], kr_cache.shape[-1]
    q_lat = einsum("...hd,rhd->...hr", q, w_uk.reshape(rank, heads, dim))
    scores = (q_lat @ kv_cache.swapaxes(-1, -2)
              + q[..., :rope] @ kr_cache.swapaxes(-1, -2)) * (1.0 / math.sqrt(dim))
    o_lat = softmax(scores) @ kv_cache
    return einsum("...hr,rhd->...hd", o_lat, w_uv.reshape(rank, heads, dim))


def numpy_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "n/a"
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def paths_text(times: dict[str, float | None]) -> str:
    """'eff 4.03 / math 9.1 / cudnn n/a / flex 1.31'."""
    return " / ".join(f"{name} {fmt_ms(ms)}" for name, ms in times.items())


def best_path(times: dict[str, float | None]) -> tuple[str | None, float | None]:
    ran = {name: ms for name, ms in times.items() if ms is not None}
    if not ran:
        return None, None
    name = min(ran, key=ran.get)
    return name, ran[name]



class AgainstTorch:
    """`best`, `ratio`, work `rate` and `as_json` of a row with `torch_ms`
    (path -> median ms, None: n/a), `ours_ms` and a `RATE`."""

    @property
    def best(self) -> tuple[str | None, float | None]:
        return best_path(self.torch_ms)

    @property
    def ratio(self) -> float | None:
        """Our speed relative to PyTorch's best path (> 1: we are faster)."""
        best_ms = self.best[1]
        return best_ms / self.ours_ms if self.ours_ms and best_ms else None

    # (unit, the field with a run's work, work per ms in one unit): a rate
    RATE: tuple[str, str, float]

    def rate(self, ms: float | None) -> float | None:
        """The work rate of a run of `ms`, in the row's unit."""
        unit, work, per_unit = self.RATE
        return getattr(self, work) / ms / per_unit if ms else None

    def as_json(self) -> dict:
        name, best_ms = self.best
        unit = self.RATE[0]
        return dict(asdict(self), best_path=name, best_ms=best_ms, ratio=self.ratio,
                    **{f"ours_{unit}": self.rate(self.ours_ms),
                       f"best_{unit}": self.rate(best_ms)})


def fmt(value, spec: str) -> str:
    """format(value, spec), or '-' as wide as the spec's width."""
    return format(value, spec) if value is not None else "-".rjust(int(spec.split(".")[0] or 0))


# PyTorch side ------------------------------------------------------------------

@dataclass
class TorchPath:
    """One way PyTorch computes a case: the first of `attempts` (how, fn)
    that runs is timed, inside `context`."""

    name: str
    attempts: list[tuple[str, Callable]]
    context: Callable = contextlib.nullcontext


@dataclass
class TorchResult:
    times: dict
    notes: dict
    expected: np.ndarray | None = None
    checked_against: str | None = None
    disagree: str = ""


def configure_torch() -> None:
    import torch
    import torch._dynamo

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # Every (shape, modifier) compiles flex_attention anew; past the limit
    # dynamo would fall back to eager and make Flex look slow.
    for name, value in (("recompile_limit", 64), ("cache_size_limit", 64),
                        ("accumulated_recompile_limit", 4096),
                        ("accumulated_cache_size_limit", 4096)):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, value)


def torch_settings(device: str) -> dict:
    import torch
    import torch.nn.functional as F

    def read(getter):  # reading a TF32 flag may raise where the APIs were mixed
        try:
            return getter()
        except Exception as error:
            return f"unreadable ({error})"[:200]

    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    return {
        "torch": torch.__version__,
        "device": f"{device} ({name})",
        "cuda.matmul.allow_tf32": read(lambda: torch.backends.cuda.matmul.allow_tf32),
        "cudnn.allow_tf32": read(lambda: torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": read(torch.get_float32_matmul_precision),
        "gqa": "enable_gqa=True" if sdpa_has_gqa(F) else "K/V heads repeat_interleave'd",
    }


def add_torch_options(parser) -> None:
    """--warmup, --repeat, --dtype and --device, as every GPU benchmark takes them."""
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dtype", choices=sorted(TORCH_DTYPES), default="f32",
                        help="element type of the inputs and outputs, ours and PyTorch's "
                             "(our scores and accumulators stay f32)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="where PyTorch runs (cpu: a smoke test with host timings)")


def start_torch(parser, args) -> dict:
    """PyTorch configured for the baselines (configure_torch); returns the
    run's settings (torch_settings and the dtype), and prints them."""
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("PyTorch sees no CUDA device; use --device cpu for a smoke test")
    configure_torch()
    settings = torch_settings(args.device)
    settings["dtype"] = args.dtype
    print(f"PyTorch {settings['torch']} on {settings['device']}, {args.dtype}; TF32 off "
          f"(torch.backends.cuda.matmul.allow_tf32={settings['cuda.matmul.allow_tf32']}, "
          f"torch.backends.cudnn.allow_tf32={settings['cudnn.allow_tf32']}); "
          f"GQA: {settings['gqa']}")
    return settings


def write_json(path: str, settings: dict, rows: list) -> None:
    """The run's settings and rows (each has as_json())."""
    with open(path, "w") as f:
        json.dump({"settings": settings, "rows": [r.as_json() for r in rows]}, f, indent=1)


def sdpa_has_gqa(F) -> bool:
    sdpa = F.scaled_dot_product_attention
    try:
        return "enable_gqa" in inspect.signature(sdpa).parameters
    except (TypeError, ValueError):  # a builtin: its docstring has the signature
        return "enable_gqa" in (sdpa.__doc__ or "").split("->")[0]


def time_torch(fn, device: str, warmup: int, repeat: int) -> float:
    """Median ms of `fn`. On CUDA the runs are queued back to back with an
    event pair each, so Python's launch overhead hides behind the GPU work
    (as it does in a model) instead of being counted."""
    import torch

    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    start = time.perf_counter()
    fn()
    sync()
    first_ms = (time.perf_counter() - start) * 1e3
    repeat = max(3, min(repeat, int(BUDGET_MS / max(first_ms, 1e-3))))
    for _ in range(warm_runs(warmup, first_ms)):
        fn()
    sync()
    if not cuda:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeat)]
    for begin, end in events:
        begin.record()
        fn()
        end.record()
    sync()
    return statistics.median(begin.elapsed_time(end) for begin, end in events)


def dtype_of(tensor) -> str:
    """Our name ("f32", "f16", "bf16") of a tensor's dtype."""
    torch_name = str(tensor.dtype).removeprefix("torch.")
    return next(ours for ours, name in TORCH_DTYPES.items() if name == torch_name)


def run_torch(paths: list[TorchPath], device: str, warmup: int, repeat: int) -> TorchResult:
    """Time every path; a path that refuses the case is n/a with its reason.
    The first path that ran gives the expected output; the others are
    checked against it too (a baseline computing something else is a bug)."""
    import torch

    result = TorchResult(times={}, notes={})
    reference = None
    for path in paths:
        result.times[path.name] = None
        reasons = []
        for how, fn in path.attempts:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    with path.context(), torch.no_grad():
                        out = fn()
                        if reference is None:
                            reference, result.checked_against = out, path.name
                        else:
                            diff = (out - reference).abs().max().item()
                            if not diff <= WRONG_BY_DTYPE[dtype_of(out)]:
                                result.disagree += f"{path.name} differs from " \
                                                   f"{result.checked_against} by {diff:.2e}; "
                        del out
                        result.times[path.name] = time_torch(fn, device, warmup, repeat)
                except Exception as error:  # n/a: the backend refuses (or OOM)
                    said = [str(w.message) for w in caught] + [f"{type(error).__name__}: {error}"]
                    reasons.append((f"{how}: " if how else "") + " | ".join(said)[:400])
                    if device == "cuda":
                        torch.cuda.empty_cache()
                    continue
            if how:
                result.notes[path.name] = how
            break
        else:
            result.notes[path.name] = " || ".join(reasons)
    if reference is not None:
        result.expected = reference.float().cpu().numpy()
    del reference
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # our Vulkan buffers need that memory next
    return result


@functools.cache
def compiled_flex():
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def sdpa_paths(q, k, v, kwargs: dict) -> list[TorchPath]:
    """SDPA on 4-D [B, H, N, D] tensors, one path per backend (sdpa_kernel);
    with fewer K/V heads, enable_gqa=True where the installed torch has it,
    else (or where a backend refuses it) K/V repeat_interleave'd."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    heads, kv_heads = q.shape[1], k.shape[1]
    attempts = [("", lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))]
    if kv_heads < heads:
        group = heads // kv_heads
        k_rep, v_rep = (t.repeat_interleave(group, dim=1) for t in (k, v))
        attempts = [("K/V repeated", lambda: F.scaled_dot_product_attention(
            q, k_rep, v_rep, **kwargs))]
        if sdpa_has_gqa(F):  # a backend that refuses enable_gqa falls back to repeating
            attempts.insert(0, ("enable_gqa", lambda: F.scaled_dot_product_attention(
                q, k, v, enable_gqa=True, **kwargs)))
    return [TorchPath(name, attempts, functools.partial(sdpa_kernel, [getattr(SDPBackend,
                                                                             member)]))
            for name, member in SDPA_BACKENDS.items()]


def mla_torch_paths(t: dict, rank: int, rope: int, eager: bool = True) -> list[TorchPath]:
    """The absorbed form, and (`eager`) the decompressing one, over q
    [..., H, D] and caches [..., S, R] / [..., S, P] (mla_absorbed)."""
    import torch

    heads, dim = t["q"].shape[-2:]

    def absorbed():
        return mla_absorbed(t["q"], t["kv_cache"], t["kr_cache"], t["w_uk"], t["w_uv"],
                            torch.einsum, lambda s: torch.softmax(s, dim=-1))

    def decompressed():
        # Decompress K and V for every head, then attend per head.
        k = torch.einsum("...sr,rhd->...hsd", t["kv_cache"],
                         t["w_uk"].view(rank, heads, dim))
        k[..., :rope] += t["kr_cache"].unsqueeze(-3)
        v = torch.einsum("...sr,rhd->...hsd", t["kv_cache"],
                         t["w_uv"].view(rank, heads, dim))
        scores = torch.einsum("...hd,...hsd->...hs", t["q"], k) * (1.0 / math.sqrt(dim))
        return torch.einsum("...hs,...hsd->...hd", torch.softmax(scores, dim=-1), v)

    paths = [TorchPath("absorbed", [("", absorbed)])]
    return paths + [TorchPath("eager", [("", decompressed)])] if eager else paths


def mla_eager_bytes(batch: int, seq: int, heads: int, dim: int, itemsize: int) -> int:
    """What the eager form holds at once: decompressed K and V, and the scores."""
    return batch * heads * seq * (2 * dim + 2) * itemsize


def host_array(values: np.ndarray, opts) -> np.ndarray:
    """f32 `values` as the host array of the benchmark's dtype."""
    from vyre_xdsl.dtypes import numpy_dtype

    return values.astype(numpy_dtype(opts.dtype))


def torch_tensor(values: np.ndarray, opts):
    """The same values as a tensor of the benchmark's dtype on its device
    (through f32: torch cannot read ml_dtypes' bfloat16)."""
    import torch

    return torch.from_numpy(values.astype(np.float32)).to(opts.device).to(
        getattr(torch, TORCH_DTYPES[opts.dtype]))
