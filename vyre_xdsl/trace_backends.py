"""How traced operations are computed: the IR backend emits arith/math ops
at the innermost builder of the frontend (a context variable), the numpy
backend computes in f32/i32 with the same rounding (the oracle, the tile
classification).  Errors name the first stack frame outside vyre_xdsl."""

from __future__ import annotations

import contextlib
import math as pymath
import os
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import FloatAttr, IndexType, IntegerAttr, f32, i1, i32
from xdsl.ir import Operation, SSAValue

from vyre_xdsl.errors import VyreError

if TYPE_CHECKING:
    from vyre_xdsl.captured import Table

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
KINDS = ("f32", "int", "bool")

# --------------------------------------------------------------------------
# Where errors point: the first stack frame outside this package
# --------------------------------------------------------------------------


def user_location(skip_package: bool = True) -> str:
    """`file:line (in function)` of the innermost frame outside vyre_xdsl."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not (skip_package and filename.startswith(_PACKAGE_DIR + os.sep)):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} (in {frame.f_code.co_name})"
        frame = frame.f_back
    return "<unknown>"


def function_location(fn: Any) -> str:
    """`file:line (function name)` where `fn` is defined."""
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", repr(fn))
    if code is None:
        return name
    return f"{code.co_filename}:{code.co_firstlineno} ({name})"


# --------------------------------------------------------------------------
# The builder stack: IR handles emit at the innermost active builder
# --------------------------------------------------------------------------

# The builders of the kernels being traced, innermost last: a context
# variable (not a module global), so that a thread or task tracing one kernel
# never emits into another's.
_BUILDERS: ContextVar[tuple[Any, ...]] = ContextVar("vyre_builders", default=())


@contextlib.contextmanager
def building(builder: Any) -> Iterator[Any]:
    """Make `builder` (an IRBuilder) where traced operations emit."""
    token = _BUILDERS.set((*_BUILDERS.get(), builder))
    try:
        yield builder
    finally:
        _BUILDERS.reset(token)


def _builder() -> Any:
    builders = _BUILDERS.get()
    if not builders:
        raise VyreError(
            f"a traced value was used outside of a kernel builder at "
            f"{user_location()}; use traced values only inside score_mod, "
            f"mask_mod or fragment callbacks"
        )
    return builders[-1]


def _unsupported(what: str, fix: str) -> VyreError:
    return VyreError(f"{what} at {user_location()}; {fix}")


# --------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------


class _IR:
    """Emit arith/math ops."""

    name = "ir"

    @staticmethod
    def _emit(op: Operation) -> SSAValue:
        return _builder()._result(op)

    def const(self, kind: str, value) -> SSAValue:
        if kind == "f32":
            return self._emit(arith.ConstantOp(FloatAttr(float(value), f32)))
        if kind == "int":
            return self._emit(arith.ConstantOp(IntegerAttr(int(value), i32)))
        return self._emit(arith.ConstantOp(IntegerAttr(1 if value else 0, i1)))

    def binary(self, op: str, kind: str, a, b):
        if kind == "f32":
            if op == "**":
                return self._emit(math.PowFOp(a, b))
            cls = {"+": arith.AddfOp, "-": arith.SubfOp, "*": arith.MulfOp,
                   "/": arith.DivfOp}[op]
        elif kind == "int":
            cls = {"+": arith.AddiOp, "-": arith.SubiOp, "*": arith.MuliOp,
                   "&": arith.AndIOp, "|": arith.OrIOp, "^": arith.XOrIOp}[op]
        else:
            cls = {"&": arith.AndIOp, "|": arith.OrIOp, "^": arith.XOrIOp}[op]
        return self._emit(cls(a, b))

    def _int(self, value: int):
        return self.const("int", value)

    def floor_divmod(self, op: str, a, b, divisor: int | None, nonnegative=False):
        """Python's `a // b` or `a % b` on i32 (floor rounding; 0 for b == 0;
        INT_MIN // -1 wraps to INT_MIN), from arith.divsi/remsi (which
        truncate and are undefined for those two divisors).  `divisor` is b
        when it is a Python constant: then only the rounding is fixed."""
        e = self._emit
        if nonnegative:  # a >= 0, b > 0: truncation is floor rounding
            return e((arith.DivSIOp if op == "//" else arith.RemSIOp)(a, b))
        if divisor == 0:
            return self._int(0)
        if divisor == -1:
            return e(arith.SubiOp(self._int(0), a)) if op == "//" else self._int(0)
        if divisor is not None:
            safe = b
        else:  # a zero or -1 divisor divides by 1 and is fixed after
            special = e(arith.OrIOp(e(arith.CmpiOp(b, self._int(0), "eq")),
                                    e(arith.CmpiOp(b, self._int(-1), "eq"))))
            safe = e(arith.SelectOp(special, self._int(1), b))
        q = e(arith.DivSIOp(a, safe))
        r = e(arith.RemSIOp(a, safe))
        # truncation rounded towards zero: step down where the remainder is
        # non-zero and its sign differs from the divisor's
        if divisor is not None:
            predicate = "slt" if divisor > 0 else "sgt"
            adjust = e(arith.CmpiOp(r, self._int(0), predicate))
        else:
            adjust = e(arith.AndIOp(
                e(arith.CmpiOp(r, self._int(0), "ne")),
                e(arith.XOrIOp(e(arith.CmpiOp(r, self._int(0), "slt")),
                               e(arith.CmpiOp(safe, self._int(0), "slt")))),
            ))
        if op == "//":
            result = e(arith.SelectOp(adjust, e(arith.SubiOp(q, self._int(1))), q))
            if divisor is None:  # b == -1: -a (wrapping); b == 0: 0
                minus_one = e(arith.CmpiOp(b, self._int(-1), "eq"))
                result = e(arith.SelectOp(minus_one, e(arith.SubiOp(self._int(0), a)),
                                          result))
                zero = e(arith.CmpiOp(b, self._int(0), "eq"))
                result = e(arith.SelectOp(zero, self._int(0), result))
            return result
        # with b == 0 or -1 the remainder of a / 1 is already 0
        return e(arith.SelectOp(adjust, e(arith.AddiOp(r, safe)), r))

    def shift(self, op: str, a, b, count: int | None):
        """`a << b` (0 for a count outside [0, 31]) or `a >> b` (arithmetic,
        by at most 31), defined for every count: SPIR-V and MLIR leave
        shifts by the width or more undefined."""
        e = self._emit
        if count is not None:
            if op == ">>":
                return e(arith.ShRSIOp(a, self._int(count if 0 <= count <= 31 else 31)))
            if not 0 <= count <= 31:
                return self._int(0)
            return e(arith.ShLIOp(a, b))
        if op == ">>":
            return e(arith.ShRSIOp(a, e(arith.MinUIOp(b, self._int(31)))))
        too_far = e(arith.CmpiOp(b, self._int(32), "uge"))
        return e(arith.SelectOp(too_far, self._int(0), e(arith.ShLIOp(a, b))))

    def compare(self, pred: str, kind: str, a, b):
        if kind == "f32":
            names = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq",
                     "!=": "une"}
            return self._emit(arith.CmpfOp(a, b, names[pred]))
        names = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq",
                 "!=": "ne"}
        return self._emit(arith.CmpiOp(a, b, names[pred]))

    def to_f32(self, a):
        return self._emit(arith.SIToFPOp(a, f32))

    def negf(self, a):
        return self._emit(arith.NegfOp(a))

    def unary(self, fn: str, a):
        cls = {"exp": math.ExpOp, "exp2": math.Exp2Op, "log": math.LogOp,
               "tanh": math.TanhOp, "abs": math.AbsFOp, "sqrt": math.SqrtOp,
               "sin": math.SinOp, "cos": math.CosOp, "tan": math.TanOp,
               "erf": math.ErfOp, "floor": math.FloorOp, "ceil": math.CeilOp,
               "trunc": math.TruncOp, "round": math.RoundEvenOp}[fn]
        return self._emit(cls(a))

    def minmax(self, fn: str, kind: str, a, b):
        if kind == "f32":
            cls = arith.MaximumfOp if fn == "maximum" else arith.MinimumfOp
            return self._emit(cls(a, b))
        cls = arith.MaxSIOp if fn == "maximum" else arith.MinSIOp
        return self._emit(cls(a, b))

    def select(self, c, a, b):
        return self._emit(arith.SelectOp(c, a, b))

    def gather(self, table: Table, flat, ok):
        """Element `flat` of `table` (its index already wrapped and, where
        not `ok`, 0), from the kernel's read buffer for it (declared by the
        fragment at its first use), then the fill where not `ok`."""
        builder = _builder()
        capture = getattr(builder, "captured_buffer", None)
        if capture is None:
            raise _unsupported(
                "a captured table indexed outside score_mod, mask_mod or a fragment",
                "index tables in modifiers",
            )
        buffer = capture(table)
        index = self._emit(arith.IndexCastOp(self.select(ok, flat, self._int(0)),
                                             IndexType()))
        from xdsl.dialects import memref

        value = self._emit(memref.LoadOp.get(buffer, [index]))
        if table.kind == "bool":
            value = self._emit(arith.CmpiOp(value, self._int(0), "ne"))
        return self.select(ok, value, self.const(table.kind, table.fill))


def f64_rounded(fn, *args):
    """`fn` of f32 arguments computed in float64 and rounded once to f32:
    the same bits whatever path numpy takes (its float32 sin/cos differ
    between SIMD and scalar code), in the oracle and in the interpreter."""
    with np.errstate(all="ignore"):
        wide = [np.asarray(a, np.float64) for a in args]
        return np.asarray(fn(*wide)).astype(np.float32)


_erf64 = np.vectorize(pymath.erf, otypes=[np.float64])
F64_ROUNDED = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "erf": _erf64}


def _np_exp(x):
    with np.errstate(all="ignore"):
        return np.exp(np.ascontiguousarray(x, dtype=np.float32))


class _NP:
    """Compute with numpy: f32 as float32, int as int32, bool as bool."""

    name = "numpy"
    DTYPES = {"f32": np.float32, "int": np.int32, "bool": np.bool_}

    def const(self, kind: str, value):
        return np.asarray(value, dtype=self.DTYPES[kind])

    def binary(self, op: str, kind: str, a, b):
        with np.errstate(all="ignore"):
            if op == "+":
                r = a + b
            elif op == "-":
                r = a - b
            elif op == "*":
                r = a * b
            elif op == "/":
                r = a / b
            elif op == "**":
                r = f64_rounded(np.power, a, b)
            elif op == "&":
                r = a & b
            elif op == "|":
                r = a | b
            else:
                r = a ^ b
        return np.asarray(r).astype(self.DTYPES[kind], copy=False)

    def compare(self, pred: str, kind: str, a, b):
        with np.errstate(all="ignore"):
            r = {"<": np.less, "<=": np.less_equal, ">": np.greater,
                 ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}[pred](a, b)
        return np.asarray(r, dtype=np.bool_)

    def floor_divmod(self, op: str, a, b, divisor: int | None, nonnegative=False):
        # numpy's int32 // and %: Python's floor rounding, 0 for a zero
        # divisor, INT_MIN // -1 wrapping (what the kernel's select chain does)
        with np.errstate(all="ignore"):
            r = np.floor_divide(a, b) if op == "//" else np.remainder(a, b)
        return np.asarray(r).astype(np.int32, copy=False)

    def shift(self, op: str, a, b, count: int | None):
        wide, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        if op == ">>":
            return (wide >> np.where((b < 0) | (b > 31), 31, b)).astype(np.int32)
        shifted = (wide << np.where((b < 0) | (b > 31), 0, b)) & 0xFFFFFFFF
        shifted = np.where((b < 0) | (b > 31), 0, shifted)
        return shifted.astype(np.uint32).view(np.int32)

    def to_f32(self, a):
        return np.asarray(a).astype(np.float32)

    def negf(self, a):
        return np.negative(a).astype(np.float32, copy=False)

    def unary(self, fn: str, a):
        with np.errstate(all="ignore"):
            x = np.ascontiguousarray(a, dtype=np.float32)
            if fn == "exp":
                return _np_exp(x)
            if fn in F64_ROUNDED:
                return f64_rounded(F64_ROUNDED[fn], x)
            return {"exp2": np.exp2, "log": np.log, "tanh": np.tanh,
                    "abs": np.abs, "sqrt": np.sqrt, "floor": np.floor,
                    "ceil": np.ceil, "trunc": np.trunc,
                    "round": np.rint}[fn](x).astype(np.float32, copy=False)

    def minmax(self, fn: str, kind: str, a, b):
        r = (np.maximum if fn == "maximum" else np.minimum)(a, b)
        return np.asarray(r).astype(self.DTYPES[kind], copy=False)

    def select(self, c, a, b):
        return np.where(c, a, b).astype(a.dtype, copy=False)

    def gather(self, table: Table, flat, ok):
        safe = np.where(ok, flat, 0)
        values = table.values[safe]
        if table.kind == "bool":
            values = values != 0
        fill = self.const(table.kind, table.fill)
        return np.where(ok, values, fill).astype(self.DTYPES[table.kind], copy=False)


IR = _IR()
NUMPY = _NP()
