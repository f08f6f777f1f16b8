"""f16 and bf16 buffers in SPIR-V, with no half-precision arithmetic.

A buffer of f16 or bf16 is a runtime array of 16-bit unsigned integers
(ArrayStride 2), which needs one capability, StorageBuffer16BitAccess
(16-bit loads and stores of storage buffers; Vulkan 1.1's
`storageBuffer16BitAccess` feature, which the runtime enables).  A value
of MLIR type f16 or bf16 is held as its 16 bits in the low half of a
32-bit uint: `memref.load` zero-extends the element (OpUConvert),
`memref.store` truncates it back.  `arith.extf` decodes those bits into an
f32 and `arith.truncf` encodes an f32 into them, rounding to nearest even,
with integer instructions only:

- exact on every device: no dependence on how a driver converts (OpFConvert
  may round either way and flush subnormals unless float controls say
  otherwise), on Float16 arithmetic, or on a bfloat16 type in SPIR-V (which
  lavapipe does not have);
- race-free: every invocation writes whole 16-bit elements, so neighbouring
  outputs written by different invocations (split merges, one invocation
  per output element) never share a read-modify-write of a 32-bit word.

Conversions (x the f32 bits, h the 16 bits):

    bf16 -> f32   h << 16
    f16  -> f32   exponent 0: the subnormal h * 2^-24 (an exact f32 product),
                  exponent 31: inf/NaN (payload kept), else rebias by 112
    f32 -> bf16   NaN: the quiet NaN of its sign (as ml_dtypes); else
                  (x + 0x7FFF + bit 16 of x) >> 16
    f32 -> f16    NaN: its top 10 payload bits, at least 1 (as numpy);
                  |x| >= 65520: inf; |x| >= 2^-14: rebias and
                  round the 13 dropped bits to even; smaller: the f16
                  subnormal, the 24-bit significand shifted right with the
                  shifted-out bits rounding to even
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type
from xdsl.ir import Attribute, Operation

from vyre_xdsl.errors import VyreError
from vyre_xdsl.spirv.spec import Op

F32_EXPONENT_BIAS_GAP = 112 << 23  # f32 bias 127 - f16 bias 15, in place
F16_OVERFLOW = 0x477FF000  # |x| from here rounds to inf (65520: ties to 65536)
F16_MIN_NORMAL = 0x38800000  # 2^-14 as f32 bits


def half_kind(attr: Attribute) -> str | None:
    """"f16" or "bf16" for those types, else None."""
    if isinstance(attr, Float16Type):
        return "f16"
    if isinstance(attr, BFloat16Type):
        return "bf16"
    return None


class _Ints:
    """32-bit unsigned integer instructions at the current point."""

    def __init__(self, e):
        self.e, self.fn, self.uint = e, e.fn, e.uint

    def c(self, value: int) -> int:
        return self.e.b.constant_uint(value)

    def op(self, code: int, a: int, b: int) -> int:
        return self.fn.op(code, self.uint, a, b)

    def and_(self, a, mask: int) -> int:
        return self.op(Op.BitwiseAnd, a, self.c(mask))

    def or_(self, a, b) -> int:
        return self.op(Op.BitwiseOr, a, b)

    def shr(self, a, bits: int) -> int:
        return self.op(Op.ShiftRightLogical, a, self.c(bits))

    def shl(self, a, bits: int) -> int:
        return self.op(Op.ShiftLeftLogical, a, self.c(bits))

    def add(self, a, b) -> int:
        return self.op(Op.IAdd, a, b)

    def sub(self, a, b) -> int:
        return self.op(Op.ISub, a, b)

    def cmp(self, code: int, a, b) -> int:
        return self.fn.op(code, self.e.bool, a, b)

    def select(self, cond, a, b) -> int:
        return self.fn.op(Op.Select, self.uint, cond, a, b)


def _f16_bits_to_f32(e, h: int) -> int:
    i = _Ints(e)
    sign = i.shl(i.and_(h, 0x8000), 16)
    magnitude = i.and_(h, 0x7FFF)
    exponent = i.shr(magnitude, 10)
    shifted = i.shl(magnitude, 13)
    normal = i.add(shifted, i.c(F32_EXPONENT_BIAS_GAP))
    special = i.or_(shifted, i.c(0x7F800000))
    # a subnormal's significand times 2^-24: a normal f32, exactly
    scaled = e.fn.op(Op.FMul, e.f32, e.fn.op(Op.ConvertUToF, e.f32, magnitude),
                     e.b.constant_f32(2.0**-24))
    subnormal = e.fn.op(Op.Bitcast, e.uint, scaled)
    bits = i.select(i.cmp(Op.IEqual, exponent, i.c(31)), special, normal)
    bits = i.select(i.cmp(Op.IEqual, exponent, i.c(0)), subnormal, bits)
    return e.fn.op(Op.Bitcast, e.f32, i.or_(bits, sign))


def _round_shift(i: _Ints, value: int, shift: int) -> int:
    """value >> shift (a uint id, 1 <= shift <= 31) rounded to nearest even."""
    kept = i.op(Op.ShiftRightLogical, value, shift)
    dropped = i.op(Op.BitwiseAnd, value,
                   i.sub(i.op(Op.ShiftLeftLogical, i.c(1), shift), i.c(1)))
    half = i.op(Op.ShiftLeftLogical, i.c(1), i.sub(shift, i.c(1)))
    above = i.cmp(Op.UGreaterThan, dropped, half)
    tie_odd = i.e.fn.op(
        Op.LogicalAnd, i.e.bool, i.cmp(Op.IEqual, dropped, half),
        i.cmp(Op.IEqual, i.and_(kept, 1), i.c(1)),
    )
    up = i.e.fn.op(Op.LogicalOr, i.e.bool, above, tie_odd)
    return i.add(kept, i.select(up, i.c(1), i.c(0)))


def _f32_to_f16_bits(e, x: int) -> int:
    i = _Ints(e)
    bits = e.fn.op(Op.Bitcast, e.uint, x)
    sign = i.and_(i.shr(bits, 16), 0x8000)
    a = i.and_(bits, 0x7FFFFFFF)
    # the interpreter converts as numpy: a signalling NaN stays one
    payload = i.and_(i.shr(a, 13), 0x3FF)
    payload = i.select(i.cmp(Op.IEqual, payload, i.c(0)), i.c(1), payload)
    nan = i.or_(i.c(0x7C00), payload)
    # normal f16: rebias, round the 13 bits that do not fit to even
    rebiased = i.sub(a, i.c(F32_EXPONENT_BIAS_GAP))
    odd = i.and_(i.shr(rebiased, 13), 1)
    normal = i.shr(i.add(i.add(rebiased, i.c(0xFFF)), odd), 13)
    # subnormal f16 (units of 2^-24): significand >> (126 - exponent)
    exponent = i.shr(a, 23)
    significand = i.or_(i.and_(a, 0x7FFFFF), i.c(0x800000))
    shift = i.sub(i.c(126), exponent)
    shift = i.select(i.cmp(Op.ULessThan, shift, i.c(31)), shift, i.c(31))
    subnormal = _round_shift(i, significand, shift)
    result = i.select(i.cmp(Op.UGreaterThanEqual, a, i.c(F16_MIN_NORMAL)), normal, subnormal)
    result = i.select(i.cmp(Op.UGreaterThanEqual, a, i.c(F16_OVERFLOW)), i.c(0x7C00), result)
    result = i.select(i.cmp(Op.UGreaterThan, a, i.c(0x7F800000)), nan, result)
    return i.or_(result, sign)


def _f32_to_bf16_bits(e, x: int) -> int:
    i = _Ints(e)
    bits = e.fn.op(Op.Bitcast, e.uint, x)
    high = i.shr(bits, 16)
    nan = i.or_(i.and_(high, 0x8000), i.c(0x7FC0))
    rounded = i.shr(i.add(i.add(bits, i.c(0x7FFF)), i.and_(high, 1)), 16)
    is_nan = i.cmp(Op.UGreaterThan, i.and_(bits, 0x7FFFFFFF), i.c(0x7F800000))
    return i.select(is_nan, nan, rounded)


def _extf(e, op: Operation) -> None:
    source, result = op.operands[0], op.results[0]
    kind = half_kind(source.type)
    if kind is None or not isinstance(result.type, Float32Type):
        raise VyreError(
            f"arith.extf from {source.type} to {result.type}: the SPIR-V emitter "
            f"widens f16 and bf16 to f32 only"
        )
    h = e.value(source)
    if kind == "bf16":
        i = _Ints(e)
        e.bind(result, e.fn.op(Op.Bitcast, e.f32, i.shl(h, 16)))
    else:
        e.bind(result, _f16_bits_to_f32(e, h))


def _truncf(e, op: Operation) -> None:
    source, result = op.operands[0], op.results[0]
    kind = half_kind(result.type)
    if kind is None or not isinstance(source.type, Float32Type):
        raise VyreError(
            f"arith.truncf from {source.type} to {result.type}: the SPIR-V emitter "
            f"narrows f32 to f16 and bf16 only"
        )
    if op.properties.get("roundingmode") is not None or op.attributes.get("roundingmode"):
        raise VyreError(
            "arith.truncf with a rounding mode: the SPIR-V emitter rounds to "
            "nearest even only (the default)"
        )
    x = e.value(source)
    convert = _f32_to_bf16_bits if kind == "bf16" else _f32_to_f16_bits
    e.bind(result, convert(e, x))


HANDLERS = {
    arith.ExtFOp: _extf,
    arith.TruncFOp: _truncf,
}
