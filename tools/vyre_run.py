"""vyre-run: execute a vyre or lowered kernel (or a program of several
kernels, run in order) from an .mlir file.

    vyre-run FILE.mlir [-p PIPELINE] [--backend interpreter|vulkan]
             [--input NAME=IN.npy ...] [--output NAME=OUT.npy ...]
             [--random [--seed N]] [--check]

Inputs come from .npy files (`--input q=q.npy`) or, with `--random`, from a
seeded normal distribution for every input not given. `--check` compares the
outputs with the numpy oracle (`vyre_xdsl.reference`, chosen by kernel name,
shapes from the buffers' logical shapes), prints the max abs error and exits
1 on a mismatch. Errors are one `file:line:col: error: ...` diagnostic on
stderr where the input has a place to point at (else `error: ...`), exit code
1 (2 for bad command-line usage). `--output NAME=PATH` writes the .npy format
to exactly PATH.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

import numpy as np

from vyre_xdsl.device import DEVICE_NAMES, LIVE
from vyre_xdsl.errors import VyreError

# --check tolerance for backends that are not bit-exact (e.g. a GPU's exp)
RTOL = 1e-4
ATOL = 1e-5


class _Usage(Exception):
    """A command-line usage error (exit code 2)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vyre-run",
        description="Run a vyre or lowered kernel (.mlir) on numpy inputs.",
    )
    p.add_argument("file", help="the .mlir file ('-' for stdin)")
    p.add_argument(
        "-p",
        "--passes",
        dest="pipeline",
        default=None,
        help="pass pipeline to apply before running, e.g. vyre-to-gpu",
    )
    p.add_argument(
        "--backend", choices=("interpreter", "vulkan"), default="interpreter"
    )
    p.add_argument(
        "--device",
        choices=DEVICE_NAMES,
        default=None,
        help="the device profile a vyre kernel is lowered for (default: the "
        "Vulkan device with --backend vulkan, else generic)",
    )
    p.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input buffer from a .npy file (float32); repeatable",
    )
    p.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="save an output buffer to a .npy file; repeatable",
    )
    p.add_argument(
        "--random",
        action="store_true",
        help="feed seeded random normal values to every input not given",
    )
    p.add_argument("--seed", type=_seed, default=0, help="seed for --random")
    p.add_argument(
        "--check",
        action="store_true",
        help="compare the outputs with the numpy oracle; exit 1 on mismatch",
    )
    return p


def _seed(text: str) -> int:
    """An argparse type: numpy's generators take seeds >= 0 only."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if seed < 0:
        raise argparse.ArgumentTypeError(f"the seed must be >= 0, got {seed}")
    return seed


def _pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise _Usage(f"{flag} expects NAME=FILE.npy, got {item!r}")
        if name in pairs:
            raise _Usage(f"{flag} {name} given twice")
        pairs[name] = path
    return pairs


def _load_npy(name: str, path: str) -> np.ndarray:
    try:
        value = np.load(path, allow_pickle=False)
    except OSError as error:
        raise VyreError(f"cannot read input {name!r} from {path}: {error}") from None
    except ValueError as error:
        raise VyreError(f"{path} is not a numpy .npy array: {error}") from None
    if not isinstance(value, np.ndarray):
        raise VyreError(f"{path} holds several arrays (.npz); give one .npy per input")
    if value.dtype == np.dtype("V2"):
        # np.save writes an ml_dtypes.bfloat16 array's 16-bit elements as
        # raw bytes (|V2), which np.load cannot name: read them as bf16
        from vyre_xdsl.dtypes import numpy_dtype

        value = value.view(numpy_dtype("bf16"))
    return value


def _tile_size(info) -> int:
    """The tile size the program's skeleton had when it was lowered (after
    vyre-retile and the other rewrites), from the first kernel's launch
    that records one."""
    for kernel in info.kernels:
        if kernel.tile_size is not None:
            return kernel.tile_size
    raise VyreError(
        f"cannot tell the tile size of {info.label} for --check: no kernel "
        f"records the skeleton it was expanded from ('skeleton' of its "
        f"'vyre.launch'); lower it with the vyre-to-gpu pipeline"
    )


def _oracle(info, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from vyre_xdsl import reference

    def shaped(name: str) -> np.ndarray:
        buffer = info.buffer(name)
        shape = buffer.shape if len(buffer.shape) in (2, 3, 4) else (-1, buffer.count)
        return np.asarray(arrays[name], dtype=np.float32).reshape(shape)

    # a program holds the decoder's kernel beside those flash-decoding adds
    names = {kernel.name for kernel in info.kernels}
    if not names & {"flash_attention_2", "mla_decode"}:
        raise VyreError(
            f"--check knows the oracles of flash_attention_2 and mla_decode, "
            f"not of {info.label}"
        )
    tile_size = _tile_size(info)
    fa2 = "flash_attention_2" in names
    try:
        ragged = {}  # run-time lengths and pages (int32 inputs)
        inputs = {b.name for b in info.inputs}
        if "kv_lens" in inputs:
            ragged["kv_lens"] = np.asarray(arrays["kv_lens"], np.int32).reshape(-1)
        if "block_table" in inputs:
            table = info.buffer("block_table")
            ragged["block_table"] = np.asarray(arrays["block_table"], np.int32).reshape(
                table.shape)
            # the pools: k [pages, P, heads, D], kv_cache [pages, P, R]
            ragged["page_size"] = info.buffer("k" if fa2 else "kv_cache").shape[1]
            # the kernel's keys, which a pool does not say
            ragged["kv_len"] = max(k.keys for k in info.kernels if k.keys is not None)
        if fa2:
            with_lse = "lse" in {b.name for b in info.outputs}
            out = reference.flash_attention_2(
                shaped("q"), shaped("k"), shaped("v"), tile_size=tile_size,
                return_lse=with_lse, **ragged,
            )
            if with_lse:
                return dict(zip(("out", "lse"), out))
        else:
            out = reference.mla_decode(
                shaped("q"),
                shaped("kv_cache"),
                shaped("kr_cache"),
                shaped("w_uk"),
                shaped("w_uv"),
                tile_size=tile_size,
                **ragged,
            )
    except KeyError as error:
        raise VyreError(
            f"{info.label} lacks buffer {error} that its oracle needs"
        ) from None
    return {"out": out}


def _run(args: argparse.Namespace) -> int:
    from vyre_xdsl.compiler import apply_pipeline, compile_module, is_vyre_module, parse_module
    from vyre_xdsl.dtypes import distance, ulp
    from vyre_xdsl.run import run

    input_paths = _pairs(args.input, "--input")
    output_paths = _pairs(args.output, "--output")
    try:
        if args.file == "-":
            raw, path = sys.stdin.buffer.read(), "<stdin>"
        else:
            with open(args.file, "rb") as f:
                raw, path = f.read(), args.file
    except OSError as error:
        raise VyreError(f"cannot read {args.file}: {error.strerror or error}") from None
    module = parse_module(raw, path)  # bytes: non-UTF-8 input is located there
    if not list(module.body.block.ops):
        raise VyreError(
            f"{path}:1:1: error: the input holds no operation (it is empty, or only "
            f"whitespace and comments); give a vyre.kernel or a lowered kernel to run"
        )
    if args.pipeline:
        module = apply_pipeline(module, args.pipeline)
    # lowered IR (a file of it, or a --pipeline that lowers) has its device
    device = args.device or (LIVE if args.backend == "vulkan" and is_vyre_module(module)
                             else None)
    # lowered and read once: one kernel, or a program of several
    compiled = compile_module(module, device, spirv=args.backend == "vulkan")
    info = compiled.info

    for name in output_paths:
        if name not in {b.name for b in info.outputs}:
            raise VyreError(
                f"--output {name}: {info.label} has no output {name!r}; its "
                f"outputs are {', '.join(b.name for b in info.outputs)}"
            )
    inputs = {name: _load_npy(name, p) for name, p in input_paths.items()}
    if args.random:
        rng = np.random.default_rng(args.seed)
        for buffer in info.inputs:
            if buffer.name not in inputs and buffer.captured is None:  # tables: theirs
                inputs[buffer.name] = _random_input(rng, buffer, info)

    outputs = run(compiled, inputs, backend=args.backend)

    for name, p in output_paths.items():
        try:
            # the .npy format at exactly the path given (np.save would add .npy)
            with open(p, "wb") as f:
                np.save(f, outputs[name])
        except OSError as error:
            raise VyreError(f"cannot write output {name!r} to {p}: {error}") from None

    status = 0
    if args.check:
        expected = _oracle(info, inputs)
        for name, want in expected.items():
            if name not in outputs:
                raise VyreError(
                    f"--check compares output {name!r} with its oracle, but {info.label} "
                    f"writes no buffer {name!r} (its outputs: "
                    f"{', '.join(outputs) or 'none'}); a `write` buffer {name!r} of the "
                    f"decoder's shape is what the oracle computes"
                )
            got = outputs[name].reshape(want.shape)
            with np.errstate(all="ignore"):
                diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            same_nan = np.array_equal(np.isnan(got), np.isnan(want))
            finite = ~np.isnan(diff)
            max_err = float(diff[finite].max()) if finite.any() else 0.0
            exact = np.array_equal(got, want, equal_nan=True)
            close = same_nan and np.allclose(
                got, want, rtol=RTOL, atol=ATOL, equal_nan=True
            )
            if got.dtype != want.dtype:  # f16/bf16: within 1 ulp of the f32 oracle
                dtype = info.buffer(name).dtype
                close = same_nan and bool(np.all(distance(got, want, dtype)
                                                 <= ulp(want, dtype)))
            verdict = "bit-exact" if exact else ("ok" if close else "MISMATCH")
            print(f"{name}: max abs error {max_err:.3e} vs oracle ({verdict})")
            if not close:
                status = 1
        if status:
            print(
                f"error: {args.backend} result differs from the oracle "
                f"(rtol {RTOL}, atol {ATOL})",
                file=sys.stderr,
            )
    elif not output_paths:
        for name, value in outputs.items():
            print(f"{name} = {np.array2string(value, threshold=64)}")
    return status


def _random_input(rng, buffer, info) -> np.ndarray:
    """--random's values for `buffer`: normal ones (rounded to an f16/bf16
    buffer's type); run-time lengths from 0 to the kernel's keys and a
    block table's pages of the pool, so that --check sees ragged, paged
    sequences rather than mostly empty ones."""
    names = {b.name for b in info.inputs}
    if buffer.name == "kv_lens":
        keys = max(k.keys for k in info.kernels if k.keys is not None)
        return rng.integers(0, keys + 1, buffer.shape, dtype=np.int32)
    if buffer.name == "block_table":
        pool = info.buffer("k" if "k" in names else "kv_cache")
        return rng.integers(0, pool.shape[0], buffer.shape, dtype=np.int32)
    return rng.standard_normal(buffer.shape).astype(np.float32).astype(buffer.numpy_dtype)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # exits 2 with usage on bad flags
    try:
        return _run(args)
    except _Usage as error:
        parser.print_usage(sys.stderr)
        print(f"error: {error}", file=sys.stderr)
        return 2
    except VyreError as error:
        print(_diagnostic(error), file=sys.stderr)
        return 1
    except ImportError as error:
        print(f"error: backend {args.backend!r} is not available: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # never a traceback for a user
        print(
            f"error: internal error ({type(error).__name__}: {error}); please "
            f"report it with the input file",
            file=sys.stderr,
        )
        return 1


def _diagnostic(error: VyreError) -> str:
    """`file:line:col: error: ...` where the error knows its op or already
    starts with a location, else `error: ...`."""
    from vyre_xdsl.diagnostics import located, location_of

    message = str(error)
    if LOCATED.match(message):
        return message
    op = getattr(error, "op", None)
    if op is not None and location_of(op) is not None:
        return located(op, message)
    return f"error: {message}"


LOCATED = re.compile(r"^[^\n]*?:(\d+:\d+:)? error: ")


if __name__ == "__main__":
    sys.exit(main())
