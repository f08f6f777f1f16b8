"""f32-exact `math` on lane vectors (numpy float32; overflow gives inf)."""

from __future__ import annotations

import numpy as np
from xdsl.dialects import math
from xdsl.interpreter import impl, register_impls

from vyre_xdsl.interp.base import LaneFunctions, pointwise
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
    run_exp = impl(math.ExpOp)(pointwise(np.exp))
    run_exp2 = impl(math.Exp2Op)(pointwise(np.exp2))
    run_expm1 = impl(math.ExpM1Op)(pointwise(np.expm1))
    run_log = impl(math.LogOp)(pointwise(np.log))
    run_log2 = impl(math.Log2Op)(pointwise(np.log2))
    run_log10 = impl(math.Log10Op)(pointwise(np.log10))
    run_log1p = impl(math.Log1pOp)(pointwise(np.log1p))
    run_tanh = impl(math.TanhOp)(pointwise(np.tanh))
    run_absf = impl(math.AbsFOp)(pointwise(np.abs))
    run_sqrt = impl(math.SqrtOp)(pointwise(np.sqrt))
    run_rsqrt = impl(math.RsqrtOp)(pointwise(_rsqrt))
    run_floor = impl(math.FloorOp)(pointwise(np.floor))
    run_ceil = impl(math.CeilOp)(pointwise(np.ceil))
    run_trunc = impl(math.TruncOp)(pointwise(np.trunc))
    run_sin = impl(math.SinOp)(_f64("sin"))
    run_cos = impl(math.CosOp)(_f64("cos"))
    run_tan = impl(math.TanOp)(_f64("tan"))
    run_erf = impl(math.ErfOp)(_f64("erf"))
    run_roundeven = impl(math.RoundEvenOp)(pointwise(np.rint))
    run_fma = impl(math.FmaOp)(pointwise(fma))
    run_copysign = impl(math.CopySignOp)(pointwise(np.copysign))

    @impl(math.PowFOp)
    def run_powf(self, interpreter, op, args):
        return (f64_rounded(np.power, args[0], args[1])[()],)


__all__ = ["MathFunctions", "fma"]
