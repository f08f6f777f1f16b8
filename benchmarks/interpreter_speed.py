"""How fast the interpreter runs a lowered FlashAttention-2 kernel.

    python benchmarks/interpreter_speed.py [--seq-len 64 --head-dim 32
        --tile-size 16] [--repeat 3] [--stock-lanes 1] [--json PATH]

Two executors of the same lowered IR, both xDSL's `Interpreter`:

- vyre: this project's InterpreterFunctions (vyre_xdsl.interp): a workgroup's
  lanes in lock-step, each SSA value a numpy vector over lanes; f32-exact.
- stock: xDSL's own arith/math/memref/scf InterpreterFunctions (Python
  floats, one lane at a time), plus a minimal shim for the ops xDSL lacks
  (gpu ids and return, arith.divf, arith.minui, math.absf). It runs only
  `--stock-lanes` lanes of the kernel (the seed layout needs no barrier, so
  lanes may run one after the other); its full-kernel time is extrapolated.

"ops" are op executions by the Interpreter (one lock-step op covers every
lane of a workgroup); "lane-ops" count one per lane, the unit stock executes.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np
from xdsl.dialects import arith, gpu, math
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    OpCounter,
    ReturnedValues,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.interpreters.arith import ArithFunctions as StockArith
from xdsl.interpreters.math import MathFunctions as StockMath
from xdsl.interpreters.memref import MemRefFunctions as StockMemRef
from xdsl.interpreters.scf import ScfFunctions as StockScf
from xdsl.interpreters.shaped_array import ShapedArray
from xdsl.interpreters.utils.ptr import TypedPtr

import vyre_xdsl as vx
from vyre_xdsl import reference
from vyre_xdsl.compiler import lower_to_gpu
from vyre_xdsl.interp import execute
from vyre_xdsl.kernel_info import kernel_info


@register_impls
class _StockShim(InterpreterFunctions):
    """Only what stock xDSL cannot run; one lane at a time."""

    def __init__(self, lane: int, lanes: int, block: int) -> None:
        self.lane, self.lanes, self.block = lane, lanes, block

    @impl(gpu.ThreadIdOp)
    def run_thread_id(self, interpreter, op, args):
        return (self.lane,)

    @impl(gpu.BlockIdOp)
    def run_block_id(self, interpreter, op, args):
        return (self.block,)

    @impl(gpu.GlobalIdOp)
    def run_global_id(self, interpreter, op, args):
        return (self.block * self.lanes + self.lane,)

    @impl_terminator(gpu.ReturnOp)
    def run_return(self, interpreter, op, args):
        return ReturnedValues(args), ()

    @impl(arith.DivfOp)
    def run_divf(self, interpreter, op, args):
        return (args[0] / args[1],)

    @impl(arith.MinUIOp)
    def run_minui(self, interpreter, op, args):
        return (min(args[0], args[1]),)

    @impl(math.AbsFOp)
    def run_absf(self, interpreter, op, args):
        return (abs(args[0]),)


def _inputs(info, seed=0):
    rng = np.random.default_rng(seed)
    return {
        b.name: (
            np.zeros(b.count, np.float32)
            if b.is_output
            else rng.standard_normal(b.count).astype(np.float32)
        )
        for b in info.buffers
    }


def bench_vyre(module, info, repeat: int, optimize: str) -> dict:
    arrays = _inputs(info)
    counter = OpCounter()
    execute(module, info, arrays, listeners=(counter,))
    ops = sum(counter.ops.values())
    times = []
    for _ in range(repeat):
        arrays = _inputs(info)
        start = time.perf_counter()
        execute(module, info, arrays)
        times.append(time.perf_counter() - start)
    seq_len, head_dim = info.buffer("q").shape
    q, k, v = (arrays[n].reshape(seq_len, head_dim) for n in "qkv")
    tile = _tile_size(info)
    exact = bool(
        np.array_equal(
            arrays["out"].reshape(seq_len, head_dim),
            reference.flash_attention_2(q, k, v, tile_size=tile),
        )
    )
    wall = min(times)
    lanes = info.workgroup_size[0] * info.workgroup_size[1] * info.workgroup_size[2]
    return {
        "executor": f"vyre (lock-step numpy lanes), optimize={optimize}",
        "ops": ops,
        "lane_ops": ops * lanes,
        "wall_s": wall,
        "ops_per_s": ops / wall,
        "lane_ops_per_s": ops * lanes / wall,
        "bit_exact_vs_oracle": exact,
    }


def _tile_size(info) -> int:
    from vyre_xdsl.tools.vyre_run import _tile_size as tile_size

    return tile_size(None, info)


def bench_stock(module, info, stock_lanes: int) -> dict:
    arrays = _inputs(info)
    lanes = info.workgroup_size[0]
    args = tuple(
        ShapedArray(TypedPtr.new_float32(arrays[b.name].tolist()), [b.count])
        for b in info.buffers
    )

    def run_lane(lane: int, listeners=()) -> float:
        interpreter = Interpreter(module, index_bitwidth=32, listeners=listeners)
        for functions in (StockArith(), StockMath(), StockMemRef(), StockScf()):
            interpreter.register_implementations(functions)
        interpreter.register_implementations(_StockShim(lane, lanes, 0))
        start = time.perf_counter()
        interpreter.run_ssacfg_region(info.func.body, args, "stock")
        return time.perf_counter() - start

    counter = OpCounter()
    run_lane(0, (counter,))
    ops_per_lane = sum(counter.ops.values())
    wall = sum(run_lane(lane) for lane in range(stock_lanes))
    ops = ops_per_lane * stock_lanes
    total_lanes = info.item_count
    # float64 arithmetic: close to the oracle, not equal
    seq_len, head_dim = info.buffer("q").shape
    q, k, v = (arrays[n].reshape(seq_len, head_dim) for n in "qkv")
    want = reference.flash_attention_2(q, k, v, tile_size=_tile_size(info))
    got = np.array(args[-1].data, dtype=np.float64).reshape(seq_len, head_dim)
    err = float(np.abs(got[:stock_lanes] - want[:stock_lanes]).max())
    return {
        "executor": f"stock xDSL (Python floats, {stock_lanes} lane(s) run)",
        "ops": ops,
        "lane_ops": ops,
        "wall_s": wall,
        "ops_per_s": ops / wall,
        "lane_ops_per_s": ops / wall,
        "extrapolated_full_kernel_s": wall / stock_lanes * total_lanes,
        "max_abs_error_vs_oracle": err,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--tile-size", type=int, default=16)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--stock-lanes", type=int, default=1,
                   help="lanes stock xDSL runs (0: skip stock)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)

    kernel = vx.flash_attention_2(
        seq_len=args.seq_len, head_dim=args.head_dim, tile_size=args.tile_size
    )
    rows, lower_s = [], 0.0
    # The seed's layout first: stock xDSL runs it too (it has no memref.alloca,
    # which the default optimisation introduces).
    for optimize in ("none", "default"):
        start = time.perf_counter()
        module = lower_to_gpu(kernel, optimize=optimize)
        lower_s += time.perf_counter() - start
        info = kernel_info(module)
        rows.append(bench_vyre(module, info, args.repeat, optimize))
        if optimize == "none" and args.stock_lanes:
            stock = bench_stock(module, info, args.stock_lanes)
    if args.stock_lanes:
        rows.append(stock)

    shape = f"FlashAttention-2 seq_len={args.seq_len} head_dim={args.head_dim} " \
        f"tile_size={args.tile_size}"
    print(f"{shape} (lowering {lower_s:.2f} s; {platform.python_implementation()} "
          f"{platform.python_version()}, numpy {np.__version__})")
    header = f"{'executor':44} {'ops':>9} {'wall s':>8} {'ops/s':>10} {'lane-ops/s':>11}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row['executor']:44} {row['ops']:>9} {row['wall_s']:>8.3f} "
              f"{row['ops_per_s']:>10.0f} {row['lane_ops_per_s']:>11.0f}")
    for row in rows[:2]:
        print(f"{row['executor']}: bit-exact vs oracle: {row['bit_exact_vs_oracle']}")
    if args.stock_lanes:
        vyre = rows[0]
        print(f"stock: full kernel extrapolated to "
              f"{stock['extrapolated_full_kernel_s']:.1f} s "
              f"({stock['extrapolated_full_kernel_s'] / vyre['wall_s']:.0f}x the "
              f"vyre wall time); max abs error vs oracle "
              f"{stock['max_abs_error_vs_oracle']:.2e} (float64 arithmetic)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"kernel": shape, "lowering_s": lower_s, "results": rows}, f,
                      indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
