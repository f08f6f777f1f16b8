"""math -> GLSL.std.450 extended instructions.

Vulkan gives these a documented precision, not correct rounding: exp/exp2 are
within 3 + 2*|x| ULP, log/log2 within 3 ULP (absolute 2^-21 near 1), sqrt and
inversesqrt as 1/sqrt(x) within 2 ULP, fabs and fma's product+sum are exact
(fma may or may not be fused). Tests compare against the f32 oracle with a
tolerance for that reason (see tests/test_vulkan.py)."""

from __future__ import annotations

from xdsl.ir import Operation

from vyre_xdsl.spirv.spec import GLSL


def _ext(number: int):
    def convert(e, op: Operation) -> None:
        ty = e.type_of(op.results[0].type, op.name)
        args = [e.value(v) for v in op.operands]
        e.bind(op.results[0], e.glsl(number, ty, *args))

    return convert


HANDLERS = {
    "math.exp": _ext(GLSL.Exp),
    "math.exp2": _ext(GLSL.Exp2),
    "math.log": _ext(GLSL.Log),
    "math.log2": _ext(GLSL.Log2),
    "math.tanh": _ext(GLSL.Tanh),
    "math.absf": _ext(GLSL.FAbs),
    "math.sqrt": _ext(GLSL.Sqrt),
    "math.rsqrt": _ext(GLSL.InverseSqrt),
    "math.fma": _ext(GLSL.Fma),
}
