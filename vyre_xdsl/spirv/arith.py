"""arith -> SPIR-V core instructions.

index and i32 are both a 32-bit unsigned OpTypeInt (signedness lives in the
opcode), i1 is OpTypeBool, f32 is OpTypeFloat 32. Float predicates keep MLIR's
NaN semantics: ordered predicates are false on NaN (OpFOrd*), unordered true
(OpFUnord*), `ord`/`uno` are built from OpIsNan."""

from __future__ import annotations

import math as pymath

from xdsl.dialects import arith
from xdsl.dialects.builtin import FloatAttr, IntegerAttr
from xdsl.ir import Operation

from vyre_xdsl.errors import VyreError
from vyre_xdsl.spirv.builder import f32_bits
from vyre_xdsl.spirv.spec import Op


def _constant(e, op: Operation) -> None:
    attr = op.value
    result = op.results[0]
    if isinstance(attr, FloatAttr):
        e.type_of(result.type, "arith.constant")
        value = attr.value.data
        if pymath.isnan(value):
            bits = 0x7FC00000
        else:
            bits = f32_bits(value)
        e.bind(result, e.b.constant_f32_bits(bits))
        return
    if isinstance(attr, IntegerAttr):
        value = attr.value.data
        if e.is_bool(result):
            e.bind(result, e.b.constant_bool(value != 0))
        else:
            e.type_of(result.type, "arith.constant")
            e.bind(result, e.b.constant_uint(value))
        return
    raise VyreError(f"arith.constant: unsupported value {attr} (scalar only)")


def _binary(int_op: int | None, bool_op: int | None = None):
    def convert(e, op: Operation) -> None:
        lhs, rhs = op.operands
        result = op.results[0]
        code = bool_op if e.is_bool(result) else int_op
        if code is None:
            raise VyreError(f"'{op.name}' on {result.type} is not supported")
        ty = e.type_of(result.type, op.name)
        e.bind(result, e.fn.op(code, ty, e.value(lhs), e.value(rhs)))

    return convert


def _unary(code: int):
    def convert(e, op: Operation) -> None:
        result = op.results[0]
        ty = e.type_of(result.type, op.name)
        e.bind(result, e.fn.op(code, ty, e.value(op.operands[0])))

    return convert


def _min_max(compare: int):
    """minui/maxui/minsi/maxsi as compare + select (exact, no ext-inst)."""

    def convert(e, op: Operation) -> None:
        a, b = (e.value(v) for v in op.operands)
        ty = e.type_of(op.results[0].type, op.name)
        take_a = e.fn.op(compare, e.bool, a, b)
        e.bind(op.results[0], e.fn.op(Op.Select, ty, take_a, a, b))

    return convert


def _float_min_max(is_max: bool):
    """maximumf / minimumf with MLIR semantics: NaN if either operand is NaN,
    and -0.0 < +0.0. GLSL FMax/FMin leave both undefined, so spell it out."""

    def convert(e, op: Operation) -> None:
        fn = e.fn
        a, b = (e.value(v) for v in op.operands)
        f32, uint, boolean = e.f32, e.uint, e.bool
        strict = Op.FOrdGreaterThan if is_max else Op.FOrdLessThan
        other = Op.FOrdLessThan if is_max else Op.FOrdGreaterThan
        a_wins = fn.op(strict, boolean, a, b)
        b_wins = fn.op(other, boolean, a, b)
        # equal (or zeros of either sign): combine sign bits, AND for max, OR for min
        a_bits = fn.op(Op.Bitcast, uint, a)
        b_bits = fn.op(Op.Bitcast, uint, b)
        tie_bits = fn.op(Op.BitwiseAnd if is_max else Op.BitwiseOr, uint, a_bits, b_bits)
        tie = fn.op(Op.Bitcast, f32, tie_bits)
        r = fn.op(Op.Select, f32, b_wins, b, tie)
        r = fn.op(Op.Select, f32, a_wins, a, r)
        b_nan = fn.op(Op.IsNan, boolean, b)
        r = fn.op(Op.Select, f32, b_nan, b, r)
        a_nan = fn.op(Op.IsNan, boolean, a)
        e.bind(op.results[0], fn.op(Op.Select, f32, a_nan, a, r))

    return convert


_CMPI = {
    # MLIR arith.cmpi predicate numbers
    0: ("eq", Op.IEqual, Op.LogicalEqual),
    1: ("ne", Op.INotEqual, Op.LogicalNotEqual),
    2: ("slt", Op.SLessThan, None),
    3: ("sle", Op.SLessThanEqual, None),
    4: ("sgt", Op.SGreaterThan, None),
    5: ("sge", Op.SGreaterThanEqual, None),
    6: ("ult", Op.ULessThan, None),
    7: ("ule", Op.ULessThanEqual, None),
    8: ("ugt", Op.UGreaterThan, None),
    9: ("uge", Op.UGreaterThanEqual, None),
}

_CMPF = {
    # MLIR arith.cmpf predicate numbers -> SPIR-V opcode (None: special)
    0: ("false", None),
    1: ("oeq", Op.FOrdEqual),
    2: ("ogt", Op.FOrdGreaterThan),
    3: ("oge", Op.FOrdGreaterThanEqual),
    4: ("olt", Op.FOrdLessThan),
    5: ("ole", Op.FOrdLessThanEqual),
    6: ("one", Op.FOrdNotEqual),
    7: ("ord", None),
    8: ("ueq", Op.FUnordEqual),
    9: ("ugt", Op.FUnordGreaterThan),
    10: ("uge", Op.FUnordGreaterThanEqual),
    11: ("ult", Op.FUnordLessThan),
    12: ("ule", Op.FUnordLessThanEqual),
    13: ("une", Op.FUnordNotEqual),
    14: ("uno", None),
    15: ("true", None),
}


def _predicate(op: Operation) -> int:
    return op.predicate.value.data


def _cmpi(e, op: Operation) -> None:
    lhs, rhs = op.operands
    name, int_code, bool_code = _CMPI[_predicate(op)]
    code = bool_code if e.is_bool(lhs) else int_code
    if code is None:
        raise VyreError(f"arith.cmpi {name} on i1 is not supported")
    e.bind(op.results[0], e.fn.op(code, e.bool, e.value(lhs), e.value(rhs)))


def _cmpf(e, op: Operation) -> None:
    a, b = (e.value(v) for v in op.operands)
    name, code = _CMPF[_predicate(op)]
    fn, boolean = e.fn, e.bool
    if code is not None:
        result = fn.op(code, boolean, a, b)
    elif name in ("false", "true"):
        result = e.b.constant_bool(name == "true")
    else:
        either_nan = fn.op(Op.LogicalOr, boolean, fn.op(Op.IsNan, boolean, a),
                           fn.op(Op.IsNan, boolean, b))
        result = either_nan if name == "uno" else fn.op(Op.LogicalNot, boolean,
                                                        either_nan)
    e.bind(op.results[0], result)


def _select(e, op: Operation) -> None:
    cond, a, b = op.operands
    ty = e.type_of(op.results[0].type, "arith.select")
    e.bind(op.results[0], e.fn.op(Op.Select, ty, e.value(cond), e.value(a),
                                  e.value(b)))


def _index_cast(e, op: Operation) -> None:
    # index and i32 share one SPIR-V type; i1 is not an index_cast operand
    source = op.operands[0]
    if e.is_bool(source) or e.is_bool(op.results[0]):
        raise VyreError(f"'{op.name}' to or from i1 is not supported")
    e.type_of(op.results[0].type, op.name)
    e.bind(op.results[0], e.value(source))


def _bitcast(e, op: Operation) -> None:
    ty = e.type_of(op.results[0].type, op.name)
    e.type_of(op.operands[0].type, op.name)
    e.bind(op.results[0], e.fn.op(Op.Bitcast, ty, e.value(op.operands[0])))


def _int_to_float(code: int):
    def convert(e, op: Operation) -> None:
        source = op.operands[0]
        if e.is_bool(source):
            # i1 -> 0.0 / 1.0 (uitofp) or 0.0 / -1.0 (sitofp)
            one = e.b.constant_f32(-1.0 if code == Op.ConvertSToF else 1.0)
            e.bind(op.results[0], e.fn.op(Op.Select, e.f32, e.value(source), one,
                                          e.b.constant_f32(0.0)))
            return
        e.bind(op.results[0], e.fn.op(code, e.f32, e.value(source)))

    return convert


def _float_to_int(code: int):
    def convert(e, op: Operation) -> None:
        ty = e.type_of(op.results[0].type, op.name)
        if e.is_bool(op.results[0]):
            raise VyreError(f"'{op.name}' to i1 is not supported")
        e.bind(op.results[0], e.fn.op(code, ty, e.value(op.operands[0])))

    return convert


def _negf(e, op: Operation) -> None:
    e.bind(op.results[0], e.fn.op(Op.FNegate, e.f32, e.value(op.operands[0])))


HANDLERS = {
    arith.ConstantOp: _constant,
    arith.AddiOp: _binary(Op.IAdd),
    arith.SubiOp: _binary(Op.ISub),
    arith.MuliOp: _binary(Op.IMul),
    arith.DivUIOp: _binary(Op.UDiv),
    arith.DivSIOp: _binary(Op.SDiv),
    arith.RemUIOp: _binary(Op.UMod),
    arith.RemSIOp: _binary(Op.SRem),
    arith.AndIOp: _binary(Op.BitwiseAnd, Op.LogicalAnd),
    arith.OrIOp: _binary(Op.BitwiseOr, Op.LogicalOr),
    arith.XOrIOp: _binary(Op.BitwiseXor, Op.LogicalNotEqual),
    arith.ShLIOp: _binary(Op.ShiftLeftLogical),
    arith.ShRUIOp: _binary(Op.ShiftRightLogical),
    arith.ShRSIOp: _binary(Op.ShiftRightArithmetic),
    arith.MinUIOp: _min_max(Op.ULessThan),
    arith.MaxUIOp: _min_max(Op.UGreaterThan),
    arith.MinSIOp: _min_max(Op.SLessThan),
    arith.MaxSIOp: _min_max(Op.SGreaterThan),
    arith.CmpiOp: _cmpi,
    arith.CmpfOp: _cmpf,
    arith.SelectOp: _select,
    arith.AddfOp: _binary(Op.FAdd),
    arith.SubfOp: _binary(Op.FSub),
    arith.MulfOp: _binary(Op.FMul),
    arith.DivfOp: _binary(Op.FDiv),
    arith.NegfOp: _negf,
    arith.MaximumfOp: _float_min_max(True),
    arith.MinimumfOp: _float_min_max(False),
    arith.IndexCastOp: _index_cast,
    arith.UIToFPOp: _int_to_float(Op.ConvertUToF),
    arith.SIToFPOp: _int_to_float(Op.ConvertSToF),
    arith.FPToUIOp: _float_to_int(Op.ConvertFToU),
    arith.FPToSIOp: _float_to_int(Op.ConvertFToS),
    arith.BitcastOp: _bitcast,
}
