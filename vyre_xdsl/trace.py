"""Traced value handles: ordinary Python over IR (or over numpy).

A modifier such as `lambda s, q, kv: 30.0 * vx.tanh(s / 30.0)` is run on
`Traced` handles instead of numbers.  Each operator on a handle either emits
the matching arith/math op at the innermost active `IRBuilder` (when building
a kernel) or computes it with numpy in f32/i32 (the oracle and the compile-time
tile classification), with the same types and rounding, so one Python
function means the same thing in the kernel and in `vx.reference`.

Types (`Traced.kind`):
  "f32"  IEEE f32                      `score`, results of float arithmetic
  "int"  signed 32-bit integer (i32)   `q_idx`, `kv_idx`, `head`
  "bool" i1                            comparisons, `mask_mod` results

Rules: int op int stays int for `+ - * // % << >> & | ^ ~`, wrapping
around like i32 (PyTorch's int32 tensors); `//` and `%` round towards minus
infinity as in Python (`-7 // 2 == -4`, `-7 % 2 == 1`), and, as numpy's,
give 0 for a zero divisor; `<<` by a count outside [0, 31] gives 0 and `>>`
shifts by at most 31 (the sign fills).  `/` is true division (f32); an int
meets an f32 or a Python float -> converted to f32 (sitofp); Python
int/float/bool constants take the type of the other operand.  Comparisons
on f32 are ordered (false on NaN) except `!=` (true on NaN), as in Python.
`&`, `|`, `^`, `~` work on booleans too.  `x ** n` with a Python integer n
multiplies (exact, any base); other powers are `math.powf` (f32).
Builtins (`abs`, `round`, `divmod`, `math.floor`/`ceil`/`trunc`) and numpy
functions (`np.exp`, `np.where`, `np.maximum`, ... and `scipy.special.erf`,
through `__array_ufunc__` / `__array_function__`) work on handles as they do
on numbers; `round` and `np.rint` round half to even and keep f32.  There is
no `bool()` of a handle: Python's `if`, `and`, `or`, `not` on a traced value
raise a VyreError that names the user's line; write `vx.where(c, a, b)`,
`&`, `|`, `~` instead.

f32 functions that no executor computes exactly the same way (sin, cos,
tan, erf, powf) are evaluated in float64 and rounded to f32 by the oracle
and the interpreter, so that both agree bit for bit.
"""

from __future__ import annotations

import contextlib
import math as pymath
import numbers
import operator
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import (
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    f32,
    i1,
    i32,
)
from xdsl.ir import Operation, SSAValue

from vyre_xdsl.errors import VyreError

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

_BUILDERS: list[Any] = []


@contextlib.contextmanager
def building(builder: Any) -> Iterator[Any]:
    """Make `builder` (an IRBuilder) where traced operations emit."""
    _BUILDERS.append(builder)
    try:
        yield builder
    finally:
        _BUILDERS.pop()


def _builder() -> Any:
    if not _BUILDERS:
        raise VyreError(
            f"a traced value was used outside of a kernel builder at "
            f"{user_location()}; use traced values only inside score_mod, "
            f"mask_mod or fragment callbacks"
        )
    return _BUILDERS[-1]


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


# --------------------------------------------------------------------------
# The handle
# --------------------------------------------------------------------------


def _kind_of_type(t) -> str:
    if t == f32:
        return "f32"
    if isinstance(t, IntegerType) and t.width.data == 1:
        return "bool"
    if isinstance(t, IntegerType | IndexType):
        return "int"
    raise VyreError(f"cannot trace a value of type {t}; only f32, integers and i1")


def _unsupported(what: str, fix: str):
    return VyreError(f"{what} at {user_location()}; {fix}")


class Traced:
    """A value being traced: f32, int or bool, over IR or numpy arrays."""

    __slots__ = ("kind", "value", "backend")
    __array_priority__ = 1000  # numpy scalars defer to our operators

    def __init__(self, kind: str, value, backend) -> None:
        self.kind = kind
        self.value = value
        self.backend = backend

    # -- conversion helpers ----------------------------------------------

    @property
    def ssa(self) -> SSAValue:
        """The SSA value (IR handles only)."""
        if self.backend is not IR:
            raise VyreError("this traced value is evaluated with numpy, it has no IR")
        return self.value

    def _lift(self, other, *, op: str) -> Traced:
        if isinstance(other, Traced):
            if other.backend is not self.backend:
                raise _unsupported(
                    f"'{op}' mixes an IR value and a numpy value",
                    "trace a modifier with one backend at a time",
                )
            return other
        if isinstance(other, SSAValue | Operation):
            return wrap(other)
        if isinstance(other, bool | np.bool_):
            return Traced("bool", self.backend.const("bool", bool(other)), self.backend)
        if isinstance(other, int | np.integer):
            kind = "f32" if self.kind == "f32" else "int"
            return Traced(kind, self.backend.const(kind, int(other)), self.backend)
        if isinstance(other, np.ndarray) and other.ndim == 0:
            return self._lift(other.item(), op=op)
        if isinstance(other, float | np.floating):
            return Traced("f32", self.backend.const("f32", float(other)), self.backend)
        if isinstance(other, np.ndarray):
            _from_numpy(other, op)  # a 0-d array is a number; others are refused
        raise _unsupported(
            f"'{op}' with a {type(other).__name__} ({other!r})",
            "traced values combine with traced values and Python numbers only",
        )

    def _as_f32(self) -> Traced:
        if self.kind == "f32":
            return self
        if self.kind == "bool":
            raise _unsupported(
                "a boolean used as a number",
                "use vx.where(cond, 1.0, 0.0) to turn a condition into a number",
            )
        return Traced("f32", self.backend.to_f32(self.value), self.backend)

    def _numeric_pair(self, other, op: str) -> tuple[Traced, Traced, str]:
        b = self._lift(other, op=op)
        a = self
        if "bool" in (a.kind, b.kind):
            raise _unsupported(
                f"'{op}' on a boolean",
                "booleans support &, |, ~ and vx.where; compare numbers instead",
            )
        if a.kind == b.kind:
            return a, b, a.kind
        return a._as_f32(), b._as_f32(), "f32"

    def _arith(self, op: str, other, reflected: bool = False) -> Traced:
        a, b, kind = self._numeric_pair(other, op)
        if reflected:
            a, b = b, a
        if op == "/" and kind == "int":
            a, b, kind = a._as_f32(), b._as_f32(), "f32"
        if op in ("//", "%"):
            if kind != "int":
                raise _unsupported(
                    f"'{op}' on f32 values",
                    "use it on integer indices only, or vx.floor(x / y) for floats",
                )
            # a Python divisor is known here: only the rounding needs fixing
            divisor = int(other) if not reflected and _is_int(other) else None
            value = self.backend.floor_divmod(op, a.value, b.value, divisor)
            return Traced("int", value, self.backend)
        return Traced(kind, self.backend.binary(op, kind, a.value, b.value), self.backend)

    def __add__(self, o): return self._arith("+", o)
    def __radd__(self, o): return self._arith("+", o, True)
    def __sub__(self, o): return self._arith("-", o)
    def __rsub__(self, o): return self._arith("-", o, True)
    def __mul__(self, o): return self._arith("*", o)
    def __rmul__(self, o): return self._arith("*", o, True)
    def __truediv__(self, o): return self._arith("/", o)
    def __rtruediv__(self, o): return self._arith("/", o, True)
    def __floordiv__(self, o): return self._arith("//", o)
    def __rfloordiv__(self, o): return self._arith("//", o, True)
    def __mod__(self, o): return self._arith("%", o)
    def __rmod__(self, o): return self._arith("%", o, True)

    def __divmod__(self, o): return self // o, self % o
    def __rdivmod__(self, o): return o // self, o % self

    def __neg__(self) -> Traced:
        if self.kind == "f32":
            return Traced("f32", self.backend.negf(self.value), self.backend)
        if self.kind == "int":
            return self._arith("-", 0, reflected=True)
        raise _unsupported("unary '-' on a boolean", "use ~ to negate a condition")

    def __pos__(self) -> Traced:
        return self

    def _compare(self, pred: str, other) -> Traced:
        a, b, kind = self._numeric_pair(other, pred)
        return Traced("bool", self.backend.compare(pred, kind, a.value, b.value), self.backend)

    def __lt__(self, o): return self._compare("<", o)
    def __le__(self, o): return self._compare("<=", o)
    def __gt__(self, o): return self._compare(">", o)
    def __ge__(self, o): return self._compare(">=", o)

    def __eq__(self, o):  # type: ignore[override]
        if isinstance(o, Traced) and self.kind == o.kind == "bool":
            return ~(self ^ o)
        return self._compare("==", o)

    def __ne__(self, o):  # type: ignore[override]
        if isinstance(o, Traced) and self.kind == o.kind == "bool":
            return self ^ o
        return self._compare("!=", o)

    __hash__ = None  # type: ignore[assignment]

    def _logic(self, op: str, other, reflected: bool = False) -> Traced:
        """&, |, ^ of two booleans or of two integers (bitwise, i32)."""
        b = self._lift(other, op=op)
        if self.kind != b.kind or self.kind == "f32":
            raise _unsupported(
                f"'{op}' between a {self.kind} and a {b.kind} value",
                f"{op} combines two booleans (comparisons) or two integers "
                f"(bitwise); compare floats first, or convert with vx.where",
            )
        a = self
        if reflected:
            a, b = b, a
        return Traced(a.kind, self.backend.binary(op, a.kind, a.value, b.value), self.backend)

    def _shift(self, op: str, other, reflected: bool = False) -> Traced:
        b = self._lift(other, op=op)
        if self.kind != "int" or b.kind != "int":
            raise _unsupported(
                f"'{op}' on a {self.kind if self.kind != 'int' else b.kind} value",
                "shifts take integers (q_idx, kv_idx, head and integer constants)",
            )
        a = self
        if reflected:
            a, b = b, a
        count = int(other) if not reflected and _is_int(other) else None
        return Traced("int", self.backend.shift(op, a.value, b.value, count), self.backend)

    def __lshift__(self, o): return self._shift("<<", o)
    def __rlshift__(self, o): return self._shift("<<", o, True)
    def __rshift__(self, o): return self._shift(">>", o)
    def __rrshift__(self, o): return self._shift(">>", o, True)

    def __and__(self, o): return self._logic("&", o)
    def __rand__(self, o): return self._logic("&", o, True)
    def __or__(self, o): return self._logic("|", o)
    def __ror__(self, o): return self._logic("|", o, True)
    def __xor__(self, o): return self._logic("^", o)
    def __rxor__(self, o): return self._logic("^", o, True)

    def __invert__(self) -> Traced:
        if self.kind == "int":
            return self._logic("^", -1)
        if self.kind == "f32":
            raise _unsupported("'~' on an f32 value", "~ negates a boolean or an integer")
        return self._logic("^", True)

    # -- builtins and numpy ------------------------------------------------

    def __abs__(self) -> Traced:
        return abs(self)

    def __round__(self, ndigits=None) -> Traced:
        if ndigits not in (None, 0):
            raise _unsupported(
                f"round(x, {ndigits!r}) of a traced value",
                f"write vx.round(x * 10**{ndigits}) / 10**{ndigits}",
            )
        return round_(self)

    def __floor__(self) -> Traced:
        return floor(self)

    def __ceil__(self) -> Traced:
        return ceil(self)

    def __trunc__(self) -> Traced:
        return trunc(self)

    def __pow__(self, other) -> Traced:
        return pow(self, other)

    def __rpow__(self, other) -> Traced:
        return pow(other, self)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """numpy ufuncs on a handle (np.exp(s), np.float32(2) * s, ...):
        the same operation as the Python operator or vx function."""
        name = getattr(ufunc, "__name__", repr(ufunc))
        if method != "__call__" or kwargs:
            raise _unsupported(
                f"np.{name}.{method}(...) or a ufunc keyword ({', '.join(kwargs)}) "
                f"on a traced value",
                "call the ufunc plainly, e.g. np.exp(s)",
            )
        fn = _UFUNCS.get(name)
        if fn is None:
            raise _unsupported(
                f"np.{name} on a traced value",
                f"supported: {', '.join(sorted(_UFUNCS))}; or write it with "
                f"operators and vx functions",
            )
        return fn(*(_from_numpy(x, name) for x in inputs))

    def __array_function__(self, func, types, args, kwargs):
        """np.where, np.clip and np.round on handles."""
        name = getattr(func, "__name__", repr(func))
        fn = _ARRAY_FUNCTIONS.get(name)
        if fn is None:
            raise _unsupported(
                f"np.{name} on a traced value",
                f"supported numpy functions: {', '.join(sorted(_ARRAY_FUNCTIONS))} "
                f"and the ufuncs {', '.join(sorted(_UFUNCS))}",
            )
        return fn(*(_from_numpy(x, name) for x in args),
                  **{k: _from_numpy(v, name) for k, v in kwargs.items()})

    # -- what tracing cannot do ------------------------------------------

    def __bool__(self):
        raise _unsupported(
            "a traced value was used as a Python bool (a data-dependent `if`, "
            "`and`, `or`, `not`, or bool())",
            "the value is only known on the GPU: write vx.where(cond, a, b) "
            "instead of `if`, and &, |, ~ instead of and, or, not",
        )

    def __index__(self):
        raise _unsupported(
            "a traced value was used as a Python int (e.g. to index a list)",
            "index a buffer in a fragment instead, or compute the value with "
            "traced arithmetic",
        )

    def __int__(self):
        return self.__index__()

    def __float__(self):
        raise _unsupported(
            "a traced value was converted with float() (or np.float32(), "
            "np.asarray())",
            "keep it traced: arithmetic on it builds the kernel (an integer "
            "times 1.0 is an f32)",
        )

    def __iter__(self):
        raise _unsupported("iteration over a traced value", "a traced value is a scalar")

    def __array__(self, *args, **kwargs):
        # numpy indexing (`array[traced]`) and np.asarray call this; numpy
        # would turn an error from __index__ into an unhelpful IndexError
        raise _unsupported(
            "a traced value was used as a numpy index or array (array[i], "
            "np.asarray(x))",
            "index a numpy array named by the modifier (a global or closure "
            "variable, captured as a table), or wrap it with vx.table(array)",
        )

    def __repr__(self) -> str:
        return f"Traced({self.kind}, {self.backend.name})"


def wrap(value: SSAValue | Operation) -> Traced:
    """An IR handle for an SSA value: `index` values are cast to i32."""
    if not isinstance(value, SSAValue | Operation):
        raise VyreError(
            f"vx.wrap takes an SSA value of a fragment (e.g. f.item, or the result "
            f"of f.load), got {value!r} ({type(value).__name__}) at {user_location()}"
        )
    ssa = SSAValue.get(value)
    kind = _kind_of_type(ssa.type)
    if isinstance(ssa.type, IndexType):
        ssa = IR._emit(arith.IndexCastOp(ssa, i32))
    return Traced(kind, ssa, IR)


def array(kind: str, values) -> Traced:
    """A numpy handle (the oracle and tile classification use these)."""
    return Traced(kind, np.asarray(values, dtype=_NP.DTYPES[kind]), NUMPY)


def as_index(value: Traced) -> SSAValue:
    """An `index` SSA value for an integer IR handle (to address memory)."""
    if value.kind != "int":
        raise _unsupported(
            f"a {value.kind} value used as a memory index", "index with integers"
        )
    ssa = value.ssa
    if isinstance(ssa.type, IndexType):
        return ssa
    return IR._emit(arith.IndexCastOp(ssa, IndexType()))


# --------------------------------------------------------------------------
# The functions modifiers call (vx.where, vx.exp, ...)
# --------------------------------------------------------------------------


def _first_traced(*values) -> Traced:
    for value in values:
        if isinstance(value, Traced):
            return value
    raise _unsupported(
        "a vx function was called on Python numbers only",
        "compute constants in Python (e.g. with the math module)",
    )


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def _is_boolean(value) -> bool:
    if isinstance(value, Traced):
        return value.kind == "bool"
    return isinstance(value, bool | np.bool_)


def where(cond, a, b) -> Traced:
    """`a` where `cond` else `b` (arith.select; never looks at the other).
    `a` and `b` are both numbers (int and f32 meet as f32) or both
    booleans (head-dependent masks: `vx.where(h == 0, kv <= q, True)`)."""
    anchor = _first_traced(cond, a, b)
    c = anchor._lift(cond, op="where") if not isinstance(cond, Traced) else cond
    if c.kind != "bool":
        raise _unsupported(
            f"vx.where's condition is {c.kind}", "pass a comparison (a boolean)"
        )
    backend = c.backend
    for branch in (a, b):
        if not isinstance(branch, Traced | numbers.Real | np.bool_):
            raise _unsupported(
                f"vx.where's branch is a {type(branch).__name__} ({branch!r})",
                "choose between traced values, Python numbers and booleans",
            )
    if _is_boolean(a) or _is_boolean(b):
        if not (_is_boolean(a) and _is_boolean(b)):
            raise _unsupported(
                "vx.where chooses between a boolean and a number",
                "give both branches booleans (comparisons, True/False) or both "
                "numbers; vx.where(c, 1.0, 0.0) turns a condition into a number",
            )
        x, y = (v if isinstance(v, Traced) else Traced("bool", backend.const("bool", v), backend)
                for v in (a, b))
        for v in (x, y):
            if v.backend is not backend:
                raise _unsupported("vx.where mixes an IR value and a numpy value", "")
        return Traced("bool", backend.select(c.value, x.value, y.value), backend)
    if not isinstance(a, Traced) and not isinstance(b, Traced):
        kind = "int" if _is_int(a) and _is_int(b) else "f32"
        a = Traced(kind, backend.const(kind, a), backend)
    if isinstance(a, Traced):
        x, y, kind = a._numeric_pair(b, "where")
    else:
        y, x, kind = b._numeric_pair(a, "where")
    return Traced(kind, backend.select(c.value, x.value, y.value), backend)


def _unary(fn: str, x) -> Traced:
    value = _first_traced(x)._as_f32()
    return Traced("f32", value.backend.unary(fn, value.value), value.backend)


def exp(x) -> Traced:
    """f32 e**x (math.exp)."""
    return _unary("exp", x)


def exp2(x) -> Traced:
    """f32 2**x (math.exp2)."""
    return _unary("exp2", x)


def log(x) -> Traced:
    """f32 natural logarithm (math.log)."""
    return _unary("log", x)


def tanh(x) -> Traced:
    """f32 tanh (math.tanh)."""
    return _unary("tanh", x)


def abs(x) -> Traced:  # noqa: A001 - mirrors numpy's name
    """|x|: math.absf on f32, a select on integers."""
    value = _first_traced(x)
    if value.kind == "f32":
        return Traced("f32", value.backend.unary("abs", value.value), value.backend)
    if value.kind == "int":
        return where(value < 0, -value, value)
    raise _unsupported("vx.abs of a boolean", "")


def _minmax(fn: str, a, b) -> Traced:
    x, y, kind = _first_traced(a, b)._numeric_pair(
        b if isinstance(a, Traced) else a, fn
    )
    if not isinstance(a, Traced):
        x, y = y, x
    return Traced(kind, x.backend.minmax(fn, kind, x.value, y.value), x.backend)


def maximum(a, b) -> Traced:
    """The larger of a and b (f32: arith.maximumf, NaN propagates)."""
    return _minmax("maximum", a, b)


def minimum(a, b) -> Traced:
    """The smaller of a and b (f32: arith.minimumf, NaN propagates)."""
    return _minmax("minimum", a, b)


def sqrt(x) -> Traced:
    """f32 square root (math.sqrt; NaN below 0)."""
    return _unary("sqrt", x)


def sin(x) -> Traced:
    """f32 sine (math.sin)."""
    return _unary("sin", x)


def cos(x) -> Traced:
    """f32 cosine (math.cos)."""
    return _unary("cos", x)


def tan(x) -> Traced:
    """f32 tangent (math.tan)."""
    return _unary("tan", x)


def erf(x) -> Traced:
    """f32 error function (math.erf), e.g. exact GELU:
    `0.5 * s * (1 + vx.erf(s / sqrt(2)))`."""
    return _unary("erf", x)


def _rounding(fn: str, x) -> Traced:
    value = _first_traced(x)
    if value.kind == "int":
        return value  # already whole
    return _unary(fn, value)


def floor(x) -> Traced:
    """The largest whole f32 <= x (math.floor); integers pass."""
    return _rounding("floor", x)


def ceil(x) -> Traced:
    """The smallest whole f32 >= x (math.ceil); integers pass."""
    return _rounding("ceil", x)


def trunc(x) -> Traced:
    """x rounded towards 0 (math.trunc); integers pass."""
    return _rounding("trunc", x)


def round_(x) -> Traced:
    """x rounded to the nearest whole f32, ties to even, like Python's
    round() and torch.round (math.roundeven); integers pass."""
    return _rounding("round", x)


def _integral_exponent(y) -> int | None:
    """y as an int if it is a Python/numpy whole number (|y| <= 2^31)."""
    if _is_int(y):
        n = int(y)
    elif isinstance(y, float | np.floating) and float(y).is_integer():
        n = int(y)
    else:
        return None
    return n if -(2**31) <= n < 2**31 else None


def pow(x, y) -> Traced:  # noqa: A001 - mirrors Python's name
    """`x ** y`.  A whole-number Python exponent multiplies (binary
    powering, exact for any base, e.g. `s ** 2`; a negative one divides 1
    by the power, in f32); any other exponent is f32 `math.powf` with
    numpy's semantics (a negative base with a non-integer exponent is NaN)."""
    anchor = _first_traced(x, y)
    backend = anchor.backend
    n = None if isinstance(y, Traced) else _integral_exponent(y)
    if n is None or not isinstance(x, Traced):
        if isinstance(x, Traced):
            bx, by, _ = x._numeric_pair(y, "**")
        else:
            by, bx, _ = y._numeric_pair(x, "**")
        bx, by = bx._as_f32(), by._as_f32()
        return Traced("f32", backend.binary("**", "f32", bx.value, by.value), backend)
    if x.kind == "bool":
        raise _unsupported("'**' on a boolean", "use vx.where(cond, 1.0, 0.0) first")
    base = x._as_f32() if n < 0 else x
    result, power, left = None, base, -n if n < 0 else n
    while left:
        if left & 1:
            result = power if result is None else result * power
        left >>= 1
        if left:
            power = power * power
    if result is None:  # x ** 0 is 1, even for NaN (as Python and numpy)
        result = Traced(base.kind, backend.const(base.kind, 1), backend)
    return 1.0 / result if n < 0 else result


def index_div(index: Traced, divisor: int) -> Traced:
    """`index // divisor` for an index known to be >= 0 (an item, a
    position) and a Python divisor > 0: the plain arith.divsi, since
    truncation and Python's floor rounding agree there."""
    return _index_divmod("//", index, divisor)


def index_mod(index: Traced, divisor: int) -> Traced:
    """`index % divisor` for an index >= 0 and a divisor > 0 (arith.remsi)."""
    return _index_divmod("%", index, divisor)


def _index_divmod(op: str, index: Traced, divisor: int) -> Traced:
    assert index.kind == "int" and divisor > 0
    b = index._lift(divisor, op=op)
    value = index.backend.floor_divmod(op, index.value, b.value, divisor, nonnegative=True)
    return Traced("int", value, index.backend)


def _from_numpy(value, name: str):
    """A numpy scalar as the Python number it holds (so that operators
    dispatch to Traced, not back to numpy); arrays are refused."""
    if isinstance(value, np.ndarray) and value.ndim == 0 or isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        raise _unsupported(
            f"{name if name in _OPERATOR_NAMES else 'np.' + name} with a numpy array "
            f"of shape {value.shape} and a traced value",
            "modifiers compute one score at a time: use scalars, or index the "
            "array with traced values (a captured table)",
        )
    return value


_OPERATOR_NAMES = {"+", "-", "*", "/", "//", "%", "**", "<", "<=", ">", ">=", "==", "!=",
                   "&", "|", "^", "<<", ">>", "where"}


def _booleans(fn):
    def apply(*args):
        for arg in args:
            if not _is_boolean(arg):
                raise _unsupported(
                    "a numpy logical function on a non-boolean",
                    "np.logical_and/or/xor/not take comparisons; use &, |, ^, ~ "
                    "for integer bits",
                )
        return fn(*args)

    return apply


_UFUNCS = {
    "add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
    "divide": operator.truediv, "true_divide": operator.truediv,
    "floor_divide": operator.floordiv, "remainder": operator.mod, "power": pow,
    "negative": operator.neg, "positive": operator.pos, "absolute": abs, "fabs": abs,
    "less": operator.lt, "less_equal": operator.le, "greater": operator.gt,
    "greater_equal": operator.ge, "equal": operator.eq, "not_equal": operator.ne,
    "logical_and": _booleans(operator.and_), "logical_or": _booleans(operator.or_),
    "logical_xor": _booleans(operator.xor), "logical_not": _booleans(operator.invert),
    "bitwise_and": operator.and_, "bitwise_or": operator.or_,
    "bitwise_xor": operator.xor, "invert": operator.invert,
    "left_shift": operator.lshift, "right_shift": operator.rshift,
    "exp": exp, "exp2": exp2, "log": log, "tanh": tanh, "sqrt": sqrt, "sin": sin,
    "cos": cos, "tan": tan, "erf": erf, "floor": floor, "ceil": ceil, "trunc": trunc,
    "rint": round_, "maximum": maximum, "minimum": minimum,
    "square": lambda x: x * x, "reciprocal": lambda x: 1.0 / x,
}


def _np_where(condition, x=None, y=None):
    if x is None or y is None:
        raise _unsupported(
            "np.where(condition) with one argument on a traced value",
            "give both branches: np.where(condition, x, y)",
        )
    return where(condition, x, y)


def _np_clip(a, a_min=None, a_max=None, **kwargs):
    if kwargs:
        raise _unsupported(f"np.clip with {', '.join(kwargs)}", "clip(a, lo, hi) only")
    if a_min is not None:
        a = maximum(a, a_min)
    return a if a_max is None else minimum(a, a_max)


def _np_round(a, decimals=0, out=None):
    if decimals != 0 or out is not None:
        raise _unsupported(
            "np.round with decimals or out on a traced value",
            "write vx.round(x * 10**n) / 10**n",
        )
    return round_(a)


_ARRAY_FUNCTIONS = {"where": _np_where, "clip": _np_clip, "round": _np_round,
                    "around": _np_round}


class Table:
    """A numpy array that a modifier indexes with traced values: a relative
    position bias `bias[q - kv + S]`, ALiBi slopes `slopes[h]`, document ids
    `doc[q] == doc[kv]`.  In a kernel it becomes a read-only input buffer
    whose data the IR records (`vyre.captured`), so vx.run passes it by
    itself; the oracle indexes it with numpy.  Indices follow Python: a
    negative one counts from the end; one outside [-n, n) reads NaN from an
    f32 table and 0 (False) from an integer (boolean) one, never memory past
    the buffer.  Floating-point tables are rounded to f32, integer ones must
    fit i32.  Modifiers index plain numpy arrays they name (globals, closure
    variables) as tables without more ado; `vx.table(array)` wraps others."""

    def __init__(self, array) -> None:
        if isinstance(array, Table):
            array = array.array
        if not isinstance(array, np.ndarray) or array.ndim == 0 or array.size == 0:
            raise VyreError(
                f"a captured table must be a numpy array with at least one element "
                f"and one dimension, got {type(array).__name__}"
                + (f" of shape {array.shape}" if isinstance(array, np.ndarray) else "")
            )
        if array.size > 2**32 - 1:
            raise VyreError(f"a captured table of {array.size} elements does not fit u32")
        kind = {"f": "f32", "i": "int", "u": "int", "b": "bool"}.get(array.dtype.kind)
        if kind is None:
            raise VyreError(
                f"a captured table must hold numbers or booleans, got dtype "
                f"{array.dtype}; convert it with .astype(np.float32) or np.int32"
            )
        if kind == "int" and (array.min() < -(2**31) or array.max() > 2**31 - 1):
            raise VyreError("a captured integer table must fit i32 (the kernel's ints)")
        self.array = array
        self.kind = kind
        self.shape = tuple(int(d) for d in array.shape)
        dtype = np.float32 if kind == "f32" else np.int32
        self.values = np.ascontiguousarray(array, dtype=dtype).reshape(-1)
        self.fill = float("nan") if kind == "f32" else 0

    def __getitem__(self, index) -> Traced:
        parts = index if isinstance(index, tuple) else (index,)
        if len(parts) != len(self.shape) or not all(
            isinstance(p, Traced) or _is_int(p) for p in parts
        ):
            raise _unsupported(
                f"a captured table of shape {self.shape} indexed with "
                f"{tuple(type(p).__name__ for p in parts)}",
                f"give one integer index per dimension ({len(self.shape)}), traced "
                f"or Python ints; no slices",
            )
        anchor = next((p for p in parts if isinstance(p, Traced)), None)
        if anchor is None:  # every index known in Python: a constant
            return self.values.reshape(self.shape)[tuple(int(p) for p in parts)].item()
        backend = anchor.backend
        flat = ok = None
        for part, extent in zip(parts, self.shape, strict=True):
            i = anchor._lift(part, op="[]") if not isinstance(part, Traced) else part
            if i.kind != "int":
                raise _unsupported(f"a captured table indexed with a {i.kind} value",
                                   "index with integers")
            i = where(i < 0, i + extent, i)  # Python's negative indices
            inside = (i >= 0) & (i < extent)
            ok = inside if ok is None else ok & inside
            flat = i if flat is None else flat * extent + i
        return Traced(self.kind, backend.gather(self, flat.value, ok.value), backend)

    def __array__(self, *args, **kwargs):
        raise VyreError(
            "a captured table is indexed with traced values (table[i]); it has no "
            "value as a whole array inside a modifier"
        )

    def __repr__(self) -> str:
        return f"vx.table({self.kind}, shape {self.shape})"


def table(array) -> Table:
    """`array` (numpy) as a table a modifier indexes with traced values."""
    return Table(array)


class Modifier:
    """A `score_mod` or `mask_mod` and how it takes the query head: as its
    last positional argument, as a keyword-only `head` (`def mod(s, q, kv,
    *, head)`), or not at all.  Calling it with the base arguments and,
    where `wants_head`, the head last passes the head that way."""

    SIGNATURES = {
        "score_mod": ("(score, q_idx, kv_idx), (score, q_idx, kv_idx, head) or "
                      "(score, q_idx, kv_idx, *, head)", 3),
        "mask_mod": ("(q_idx, kv_idx), (q_idx, kv_idx, head) or "
                     "(q_idx, kv_idx, *, head)", 2),
    }

    def __init__(self, fn, role: str) -> None:
        import inspect

        if not callable(fn):
            raise VyreError(f"{role} must be a function, got {type(fn).__name__}")
        self.fn, self.role = fn, role
        self.call = _capturing(fn)
        signatures, base = self.SIGNATURES[role]
        self.wants_head, self.head_keyword = False, False
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            return  # a builtin without a signature: the base arguments
        required = [p for p in params if p.default is p.empty
                    and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        keyword_only = [p for p in params if p.kind == p.KEYWORD_ONLY]
        extra = [p.name for p in keyword_only if p.default is p.empty and p.name != "head"]
        if extra:
            raise VyreError(
                f"{role} {function_location(fn)} has the required keyword-only "
                f"argument {extra[0]!r}; it must take {signatures}"
            )
        if any(p.name == "head" for p in keyword_only):
            self.wants_head = self.head_keyword = True
            expected = (base,)
        elif any(p.kind == p.VAR_POSITIONAL for p in params):
            self.wants_head = True
            return
        else:
            expected = (base, base + 1)
        if len(required) not in expected:
            raise VyreError(
                f"{role} {function_location(fn)} takes {len(required)} arguments; "
                f"it must take {signatures}"
            )
        self.wants_head = self.wants_head or len(required) == base + 1

    def __call__(self, *args):
        if self.head_keyword:
            *args, head = args
            return self.call(*args, head=head)
        return self.call(*args)


def _capturing(fn):
    """`fn` with the numpy arrays it names (globals, closure variables) seen
    as Tables, so that `bias[q - kv]` in a modifier indexes a captured
    table; `fn` itself where it names none (or is not a plain function)."""
    import types

    code = getattr(fn, "__code__", None)
    if code is None or not isinstance(fn, types.FunctionType):
        return fn

    def captured(value):
        return Table(value) if isinstance(value, np.ndarray) and value.ndim else value

    names = [n for n in code.co_names if isinstance(fn.__globals__.get(n), np.ndarray)]
    cells = fn.__closure__ or ()
    closes = [isinstance(getattr(c, "cell_contents", None), np.ndarray) for c in cells]
    if not names and not any(closes):
        return fn
    globals_ = dict(fn.__globals__)
    for name in names:
        globals_[name] = captured(globals_[name])
    closure = tuple(
        types.CellType(captured(c.cell_contents)) if wraps else c
        for c, wraps in zip(cells, closes, strict=True)
    ) or None
    patched = types.FunctionType(code, globals_, fn.__name__, fn.__defaults__, closure)
    patched.__kwdefaults__ = fn.__kwdefaults__
    return patched


__all__ = [
    "Modifier",
    "Traced",
    "abs",
    "array",
    "as_index",
    "building",
    "ceil",
    "cos",
    "erf",
    "exp",
    "exp2",
    "floor",
    "function_location",
    "index_div",
    "index_mod",
    "log",
    "maximum",
    "minimum",
    "pow",
    "round_",
    "sin",
    "table",
    "Table",
    "sqrt",
    "tan",
    "tanh",
    "trunc",
    "user_location",
    "where",
    "wrap",
]
