"""f32-exact `arith` on lane vectors.

Floating-point values are numpy float32 (IEEE-exact for + - * /), integers
and `index` are unsigned numpy integers that wrap like the device's, `i1` is
numpy bool. Comparisons follow MLIR: ordered predicates are false when an
operand is NaN, unordered ones true; `maximumf`/`minimumf` propagate NaN and
order -0 < +0; `select` never looks at the value it does not pick.
"""

from __future__ import annotations

import operator

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
)
from xdsl.interpreter import Interpreter, PythonValues, impl, register_impls

from vyre_xdsl.errors import VyreError
from vyre_xdsl.interp.base import LaneFunctions, pointwise
from vyre_xdsl.interp.lanes import dtype_of, is_uniform, select, signed


def _cmpf(pred: str):
    # numpy comparisons are false on NaN except `!=`, which is true:
    # exactly MLIR's ordered predicates, and `une`.
    table = {
        "false": lambda a, b: np.zeros(np.broadcast(a, b).shape, np.bool_)[()],
        "oeq": lambda a, b: a == b,
        "ogt": lambda a, b: a > b,
        "oge": lambda a, b: a >= b,
        "olt": lambda a, b: a < b,
        "ole": lambda a, b: a <= b,
        "one": lambda a, b: (a < b) | (a > b),
        "ord": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
        "ueq": lambda a, b: ~((a < b) | (a > b)),
        "ugt": lambda a, b: ~(a <= b),
        "uge": lambda a, b: ~(a < b),
        "ult": lambda a, b: ~(a >= b),
        "ule": lambda a, b: ~(a > b),
        "une": lambda a, b: a != b,
        "uno": lambda a, b: np.isnan(a) | np.isnan(b),
        "true": lambda a, b: np.ones(np.broadcast(a, b).shape, np.bool_)[()],
    }
    return table[pred]


def _cmpi(pred: str):
    table = {
        "eq": lambda a, b: a == b,
        "ne": lambda a, b: a != b,
        "slt": lambda a, b: signed(a) < signed(b),
        "sle": lambda a, b: signed(a) <= signed(b),
        "sgt": lambda a, b: signed(a) > signed(b),
        "sge": lambda a, b: signed(a) >= signed(b),
        "ult": lambda a, b: a < b,
        "ule": lambda a, b: a <= b,
        "ugt": lambda a, b: a > b,
        "uge": lambda a, b: a >= b,
    }
    return table[pred]


def _zero_sign(r, a, b, larger: bool):
    """`r`, but where a == b (identical except for signed zeros) the larger
    zero (+0) for a max, the smaller (-0) for a min."""
    negative, positive = (b, a) if larger else (a, b)
    return select(a == b, select(np.signbit(a), negative, positive), r)


def maximumf(a, b):
    """MLIR arith.maximumf: NaN if either operand is NaN; +0 > -0."""
    return _zero_sign(np.maximum(a, b), a, b, larger=True)


def minimumf(a, b):
    """MLIR arith.minimumf: NaN if either operand is NaN; -0 < +0."""
    return _zero_sign(np.minimum(a, b), a, b, larger=False)


def maxnumf(a, b):
    """MLIR arith.maxnumf: the non-NaN operand if only one is NaN."""
    return _zero_sign(np.fmax(a, b), a, b, larger=True)


def minnumf(a, b):
    """MLIR arith.minnumf: the non-NaN operand if only one is NaN."""
    return _zero_sign(np.fmin(a, b), a, b, larger=False)


def _resized(sign_extend: bool):
    """The impl of an integer cast: `_int_resize` of its operand."""

    def run(self, interpreter, op, args):
        return (self._int_resize(op, args[0], sign_extend=sign_extend),)

    return run


def _compare(predicates: list[str], comparison):
    """The impl of a compare op: `comparison(predicate)` of its operands,
    the predicate (an index into `predicates`) decoded once per op."""

    def run(self, interpreter, op, args):
        fn = self.cache.get(op)
        if fn is None:
            fn = self.cache[op] = comparison(predicates[op.predicate.value.data])
        return (fn(args[0], args[1]),)

    return run


def _logical_shift(shift):
    """`shift` (<< or >>) of a by b, and 0 where b >= the bit width."""

    def shifted(a, b):
        bits = 8 * a.dtype.itemsize
        return select(b >= bits, a.dtype.type(0), shift(a, b % bits))

    return shifted


def _signed_pick(keep_a):
    """a where `keep_a` (<= or >=) of the signed views of a and b, else b."""
    return lambda a, b: select(keep_a(signed(a), signed(b)), a, b)


def _astype():
    """The impl of a conversion that numpy's astype to the result's dtype
    does exactly (uitofp, extf, truncf)."""

    def run(self, interpreter, op, args):
        return (args[0].astype(self._result_dtype(op)),)

    return run


def _trunc_div(a, b):
    """Signed division rounding towards zero (C semantics), on signed views.
    numpy's floor division stepped up where it rounded down: |INT_MIN| does
    not fit, so dividing the magnitudes gave INT_MIN / 3 the wrong sign."""
    safe = np.where(b == 0, np.ones_like(b), b)
    q = np.floor_divide(a, safe)
    inexact = np.remainder(a, safe) != 0
    return np.where(inexact & ((a < 0) != (safe < 0)), q + 1, q)


@register_impls
class ArithFunctions(LaneFunctions):
    # ---- constants -------------------------------------------------------
    @impl(arith.ConstantOp)
    def run_constant(
        self, interpreter: Interpreter, op: arith.ConstantOp, args: PythonValues
    ) -> PythonValues:
        cache = self.cache
        if op in cache:
            return cache[op]
        value = op.value
        dtype = dtype_of(op.result.type) if not isinstance(
            value, DenseIntOrFPElementsAttr
        ) else None
        if isinstance(value, IntegerAttr):
            v = value.value.data
            if dtype == np.bool_:
                result = np.bool_(v & 1)
            else:
                result = dtype.type(v % (1 << (8 * dtype.itemsize)))
        elif isinstance(value, FloatAttr):
            result = dtype.type(value.value.data)
        else:
            raise VyreError(
                f"the interpreter supports only scalar arith.constant, not {value}"
            )
        cache[op] = (result,)
        return cache[op]

    # ---- float arithmetic ------------------------------------------------
    run_addf = impl(arith.AddfOp)(pointwise(operator.add))
    run_subf = impl(arith.SubfOp)(pointwise(operator.sub))
    run_mulf = impl(arith.MulfOp)(pointwise(operator.mul))
    run_divf = impl(arith.DivfOp)(pointwise(operator.truediv))
    run_negf = impl(arith.NegfOp)(pointwise(np.negative))
    run_maximumf = impl(arith.MaximumfOp)(pointwise(maximumf))
    run_minimumf = impl(arith.MinimumfOp)(pointwise(minimumf))
    run_maxnumf = impl(arith.MaxnumfOp)(pointwise(maxnumf))
    run_minnumf = impl(arith.MinnumfOp)(pointwise(minnumf))

    run_cmpf = impl(arith.CmpfOp)(_compare(arith.CMPF_COMPARISON_OPERATIONS, _cmpf))

    # ---- integer arithmetic (wraps like the device) ----------------------
    run_addi = impl(arith.AddiOp)(pointwise(operator.add))
    run_subi = impl(arith.SubiOp)(pointwise(operator.sub))
    run_muli = impl(arith.MuliOp)(pointwise(operator.mul))
    run_divui = impl(arith.DivUIOp)(pointwise(operator.floordiv))
    run_remui = impl(arith.RemUIOp)(pointwise(operator.mod))

    @impl(arith.CeilDivUIOp)
    def run_ceildivui(self, interpreter, op, args):
        a, b = args
        q = a // b
        return (q + (q * b != a).astype(q.dtype),)

    @impl(arith.DivSIOp)
    def run_divsi(self, interpreter, op, args):
        a, b = args
        q = _trunc_div(signed(a), signed(b)).astype(signed(a).dtype)
        return (q.view(a.dtype)[()],)

    @impl(arith.RemSIOp)
    def run_remsi(self, interpreter, op, args):
        a, b = args
        sa, sb = signed(a), signed(b)
        q = _trunc_div(sa, sb).astype(sa.dtype)
        return ((sa - q * sb).astype(sa.dtype).view(a.dtype)[()],)

    run_minui = impl(arith.MinUIOp)(pointwise(np.minimum))
    run_maxui = impl(arith.MaxUIOp)(pointwise(np.maximum))

    run_minsi = impl(arith.MinSIOp)(pointwise(_signed_pick(operator.le)))
    run_maxsi = impl(arith.MaxSIOp)(pointwise(_signed_pick(operator.ge)))

    run_andi = impl(arith.AndIOp)(pointwise(operator.and_))
    run_ori = impl(arith.OrIOp)(pointwise(operator.or_))
    run_xori = impl(arith.XOrIOp)(pointwise(operator.xor))

    run_shli = impl(arith.ShLIOp)(pointwise(_logical_shift(operator.lshift)))
    run_shrui = impl(arith.ShRUIOp)(pointwise(_logical_shift(operator.rshift)))

    @impl(arith.ShRSIOp)
    def run_shrsi(self, interpreter, op, args):
        a, b = args
        bits = 8 * a.dtype.itemsize
        sa = signed(a)
        r = sa >> np.minimum(b, bits - 1).astype(sa.dtype)
        return (r.astype(sa.dtype).view(a.dtype)[()],)

    run_cmpi = impl(arith.CmpiOp)(_compare(arith.CMPI_COMPARISON_OPERATIONS, _cmpi))

    run_select = impl(arith.SelectOp)(pointwise(select))

    # ---- casts -----------------------------------------------------------
    def _result_dtype(self, op) -> np.dtype:
        key = (op, "dtype")
        dtype = self.cache.get(key)
        if dtype is None:
            dtype = self.cache[key] = dtype_of(op.results[0].type)
        return dtype

    def _int_resize(self, op, x, sign_extend: bool):
        dtype = self._result_dtype(op)
        if x.dtype == dtype:
            return x
        if dtype == np.bool_:
            return (x & 1).astype(np.bool_)
        if sign_extend and x.dtype != np.bool_:
            x = signed(x)
            return x.astype(signed(np.zeros(1, dtype)).dtype).view(dtype)[()]
        if sign_extend:  # i1 true is -1
            return np.negative(x.astype(dtype))
        return x.astype(dtype)

    run_index_cast = impl(arith.IndexCastOp)(_resized(sign_extend=True))
    run_extsi = impl(arith.ExtSIOp)(_resized(sign_extend=True))
    run_extui = impl(arith.ExtUIOp)(_resized(sign_extend=False))
    run_trunci = impl(arith.TruncIOp)(_resized(sign_extend=False))

    run_uitofp = impl(arith.UIToFPOp)(_astype())

    @impl(arith.SIToFPOp)
    def run_sitofp(self, interpreter, op, args):
        x = args[0]
        if x.dtype == np.bool_:  # i1 true is -1
            return (np.negative(x.astype(self._result_dtype(op))),)
        return (signed(x).astype(self._result_dtype(op)),)

    @impl(arith.FPToUIOp)
    def run_fptoui(self, interpreter, op, args):
        # out-of-range conversions are poison in MLIR; any value will do
        dtype = self._result_dtype(op)
        x = np.trunc(args[0]).astype(np.float64)
        x = np.where(np.isfinite(x), x, 0.0)
        return (np.clip(x, 0, np.iinfo(dtype).max).astype(dtype)[()],)

    @impl(arith.FPToSIOp)
    def run_fptosi(self, interpreter, op, args):
        dtype = self._result_dtype(op)
        sdt = signed(np.zeros(1, dtype)).dtype
        info = np.iinfo(sdt)
        x = np.trunc(args[0]).astype(np.float64)
        x = np.where(np.isfinite(x), x, 0.0)
        return (np.clip(x, info.min, info.max).astype(sdt).view(dtype)[()],)

    run_extf = impl(arith.ExtFOp)(_astype())

    run_truncf = impl(arith.TruncFOp)(_astype())

    @impl(arith.BitcastOp)
    def run_bitcast(self, interpreter, op, args):
        x = args[0]
        dtype = self._result_dtype(op)
        if is_uniform(x):
            return (np.asarray(x).view(dtype)[()],)
        return (x.view(dtype),)
