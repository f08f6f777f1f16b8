"""math -> GLSL.std.450 extended instructions.

Vulkan gives these a documented precision, not correct rounding: exp/exp2 are
within 3 + 2*|x| ULP, log/log2 within 3 ULP (absolute 2^-21 near 1), sqrt and
inversesqrt as 1/sqrt(x) within 2 ULP, fabs and fma's product+sum are exact
(fma may or may not be fused). Tests compare against the f32 oracle with a
tolerance for that reason (see tests/test_vulkan.py)."""

from __future__ import annotations

from xdsl.dialects import math
from xdsl.ir import Operation

from vyre_xdsl.spirv.spec import GLSL, Op


def _ext(number: int):
    def convert(e, op: Operation) -> None:
        ty = e.type_of(op.results[0].type, op.name)
        args = [e.value(v) for v in op.operands]
        e.bind(op.results[0], e.glsl(number, ty, *args))

    return convert


# erf has no GLSL.std.450 instruction.  Polynomials fitted here by least
# squares (relative error, 400 and 600 Chebyshev nodes, in float64) to
# math.erf and math.erfc; in float64 they are within 1.4e-9 (SMALL) and
# 3e-11 (LARGE) of them, relative (tests/test_spirv.py checks).  In f32 the
# whole is within about 2e-7 of erf.
# |x| < 1:       erf(x) = x * SMALL(x^2)
ERF_SMALL = (1.1283791665100529, -0.3761262884332531, 0.11283612428247117,
             -0.02685480853731579, 0.005190053578019341, -0.0008024354130395388,
             7.898210213113243e-05)
# 1 <= |x| < 4:  erfc(|x|) = exp(-x^2) * LARGE(1 / (1 + |x| / 2))
ERF_LARGE = (-0.00010492100549833461, 0.28406129783358813, 0.2660674697869943,
             0.32071931798583186, -0.03239291553127985, 0.444489524629199,
             -0.3485030737276118, 0.047573341933238006, 0.018206616926583007)
# |x| >= 4: +-1 (1 - erf(x) < 2^-25 there: it rounds to 1 in f32)
ERF_ONE = 4.0


def erf_reference(x: float) -> float:
    """The emitted erf, evaluated in float64 (for the tests)."""
    import math as pymath

    def horner(coefficients, t):
        acc = coefficients[-1]
        for c in reversed(coefficients[:-1]):
            acc = acc * t + c
        return acc

    if pymath.isnan(x):
        return x
    ax = abs(x)
    if ax < 1:
        return x * horner(ERF_SMALL, x * x)
    if ax >= ERF_ONE:
        return pymath.copysign(1.0, x)
    large = 1 - pymath.exp(-x * x) * horner(ERF_LARGE, 1 / (1 + 0.5 * ax))
    return -large if x < 0 else large


def _erf(e, op: Operation) -> None:
    fn, f32, boolean, c = e.fn, e.f32, e.bool, e.b.constant_f32

    def horner(coefficients, t):
        acc = c(coefficients[-1])
        for k in reversed(coefficients[:-1]):
            acc = fn.op(Op.FAdd, f32, fn.op(Op.FMul, f32, acc, t), c(k))
        return acc

    x = e.value(op.operands[0])
    x2 = fn.op(Op.FMul, f32, x, x)
    small = fn.op(Op.FMul, f32, x, horner(ERF_SMALL, x2))
    ax = e.glsl(GLSL.FAbs, f32, x)
    t = fn.op(Op.FDiv, f32, c(1.0), fn.op(Op.FAdd, f32, c(1.0), fn.op(Op.FMul, f32, c(0.5), ax)))
    erfc = fn.op(Op.FMul, f32, e.glsl(GLSL.Exp, f32, fn.op(Op.FNegate, f32, x2)),
                 horner(ERF_LARGE, t))
    large = fn.op(Op.FSub, f32, c(1.0), erfc)
    # NaN fails both ordered tests and stays NaN through the formula
    large = fn.op(Op.Select, f32, fn.op(Op.FOrdGreaterThanEqual, boolean, ax, c(ERF_ONE)),
                  c(1.0), large)
    large = fn.op(Op.Select, f32, fn.op(Op.FOrdLessThan, boolean, x, c(0.0)),
                  fn.op(Op.FNegate, f32, large), large)
    e.bind(op.results[0], fn.op(Op.Select, f32,
                                fn.op(Op.FOrdLessThan, boolean, ax, c(1.0)), small, large))


def _powf(e, op: Operation) -> None:
    """numpy's power (C's powf).  GLSL Pow is only defined for a finite base
    > 0 and a finite exponent (lavapipe's gives neither NaN nor infinity
    outside), so every other case is selected here, as C defines it:
    base 0 gives 0 or inf, an infinite base or exponent 0, 1 or inf, a
    negative finite base the sign of an odd whole exponent (NaN for a
    fractional one), NaN gives NaN, and y == 0 or x == 1 gives 1."""
    fn, f32, boolean, c = e.fn, e.f32, e.bool, e.b.constant_f32
    inf, nan = c(float("inf")), c(float("nan"))

    def select(cond, a, b):
        return fn.op(Op.Select, f32, cond, a, b)

    def cmp(code, a, b):
        return fn.op(code, boolean, a, b)

    x, y = (e.value(v) for v in op.operands)
    ax = e.glsl(GLSL.FAbs, f32, x)
    ay = e.glsl(GLSL.FAbs, f32, y)
    r = e.glsl(GLSL.Pow, f32, ax, y)
    y_positive = cmp(Op.FOrdGreaterThan, y, c(0.0))
    r = select(cmp(Op.FOrdEqual, ax, c(0.0)), select(y_positive, c(0.0), inf), r)
    r = select(cmp(Op.FOrdEqual, ax, inf), select(y_positive, inf, c(0.0)), r)
    # |base| > 1 grows to inf with y = +inf and vanishes with -inf; < 1 the opposite
    above_one = cmp(Op.FOrdGreaterThan, ax, c(1.0))
    grows = fn.op(Op.LogicalEqual, boolean, above_one, y_positive)
    infinite_y = cmp(Op.FOrdEqual, ay, inf)
    r = select(infinite_y, select(grows, inf, c(0.0)), r)
    r = select(fn.op(Op.LogicalAnd, boolean, infinite_y, cmp(Op.FOrdEqual, ax, c(1.0))),
               c(1.0), r)
    whole = cmp(Op.FOrdEqual, e.glsl(GLSL.Floor, f32, y), y)
    half = fn.op(Op.FMul, f32, y, c(0.5))
    odd = fn.op(Op.LogicalAnd, boolean, whole,
                cmp(Op.FOrdNotEqual, e.glsl(GLSL.Floor, f32, half), half))
    signed = select(odd, fn.op(Op.FNegate, f32, r), r)
    finite_x = cmp(Op.FOrdLessThan, ax, inf)
    fractional = fn.op(Op.LogicalAnd, boolean, finite_x, fn.op(Op.LogicalNot, boolean, whole))
    r = select(cmp(Op.FOrdLessThan, x, c(0.0)), select(fractional, nan, signed), r)
    either_nan = fn.op(Op.LogicalOr, boolean, fn.op(Op.IsNan, boolean, x),
                       fn.op(Op.IsNan, boolean, y))
    r = select(either_nan, nan, r)
    one = fn.op(Op.LogicalOr, boolean, cmp(Op.FOrdEqual, y, c(0.0)),
                cmp(Op.FOrdEqual, x, c(1.0)))
    e.bind(op.results[0], select(one, c(1.0), r))


HANDLERS = {
    math.ErfOp: _erf,
    math.PowFOp: _powf,
    math.SinOp: _ext(GLSL.Sin),
    math.CosOp: _ext(GLSL.Cos),
    math.TanOp: _ext(GLSL.Tan),
    math.FloorOp: _ext(GLSL.Floor),
    math.CeilOp: _ext(GLSL.Ceil),
    math.TruncOp: _ext(GLSL.Trunc),
    math.RoundEvenOp: _ext(GLSL.RoundEven),
    math.ExpOp: _ext(GLSL.Exp),
    math.Exp2Op: _ext(GLSL.Exp2),
    math.LogOp: _ext(GLSL.Log),
    math.Log2Op: _ext(GLSL.Log2),
    math.TanhOp: _ext(GLSL.Tanh),
    math.AbsFOp: _ext(GLSL.FAbs),
    math.SqrtOp: _ext(GLSL.Sqrt),
    math.RsqrtOp: _ext(GLSL.InverseSqrt),
    math.FmaOp: _ext(GLSL.Fma),
}
