"""f32-exact `math` on lane vectors (numpy float32; overflow gives inf)."""

from __future__ import annotations

import numpy as np
from xdsl.dialects import math
from xdsl.interpreter import impl, register_impls

from vyre_xdsl.interp.base import LaneFunctions
from vyre_xdsl.trace import F64_ROUNDED, f64_rounded


def fma(a, b, c):
    """Correctly rounded fused multiply-add for float32 operands.

    The product of two float32 is exact in float64; the float64 sum is made
    round-to-odd (using the exact error of the addition), so rounding it once
    more to float32 gives the correctly rounded a*b+c."""
    dtype = np.result_type(a, b, c)
    if dtype != np.float32:
        return a * b + c
    p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    c64 = np.asarray(c, np.float64)
    s = p + c64
    # TwoSum: the exact error of s = p + c64
    bp = s - c64
    err = (p - bp) + (c64 - (s - bp))
    bits = s.view(np.uint64)
    fix = np.isfinite(s) & (err != 0) & ((bits & np.uint64(1)) == 0)
    if np.any(fix):
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)[()]


def _unary(fn):
    def run(self, interpreter, op, args):
        return (fn(args[0]),)

    return run


def _f64(name: str):
    """sin, cos, tan, erf: in float64, rounded once to f32, as the oracle
    computes them (vyre_xdsl.trace.f64_rounded)."""
    def run(self, interpreter, op, args):
        return (f64_rounded(F64_ROUNDED[name], args[0])[()],)

    return run


def _rsqrt(x):
    return x.dtype.type(1) / np.sqrt(x)


@register_impls
class MathFunctions(LaneFunctions):
    run_exp = impl(math.ExpOp)(_unary(np.exp))
    run_exp2 = impl(math.Exp2Op)(_unary(np.exp2))
    run_expm1 = impl(math.ExpM1Op)(_unary(np.expm1))
    run_log = impl(math.LogOp)(_unary(np.log))
    run_log2 = impl(math.Log2Op)(_unary(np.log2))
    run_log10 = impl(math.Log10Op)(_unary(np.log10))
    run_log1p = impl(math.Log1pOp)(_unary(np.log1p))
    run_tanh = impl(math.TanhOp)(_unary(np.tanh))
    run_absf = impl(math.AbsFOp)(_unary(np.abs))
    run_sqrt = impl(math.SqrtOp)(_unary(np.sqrt))
    run_rsqrt = impl(math.RsqrtOp)(_unary(_rsqrt))
    run_floor = impl(math.FloorOp)(_unary(np.floor))
    run_ceil = impl(math.CeilOp)(_unary(np.ceil))
    run_trunc = impl(math.TruncOp)(_unary(np.trunc))
    run_sin = impl(math.SinOp)(_f64("sin"))
    run_cos = impl(math.CosOp)(_f64("cos"))
    run_tan = impl(math.TanOp)(_f64("tan"))
    run_erf = impl(math.ErfOp)(_f64("erf"))
    run_roundeven = impl(math.RoundEvenOp)(_unary(np.rint))

    @impl(math.FmaOp)
    def run_fma(self, interpreter, op, args):
        return (fma(args[0], args[1], args[2]),)

    @impl(math.CopySignOp)
    def run_copysign(self, interpreter, op, args):
        return (np.copysign(args[0], args[1]),)

    @impl(math.PowFOp)
    def run_powf(self, interpreter, op, args):
        return (f64_rounded(np.power, args[0], args[1])[()],)


__all__ = ["MathFunctions", "fma"]
