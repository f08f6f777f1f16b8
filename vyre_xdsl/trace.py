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

Rules: int op int stays int for `+ - * // %`; `/` is true division (f32);
an int meets an f32 or a Python float -> converted to f32 (sitofp); Python
int/float/bool constants take the type of the other operand.  Comparisons
on f32 are ordered (false on NaN) except `!=` (true on NaN), as in Python.
`&`, `|`, `~` work on booleans.  There is no `bool()` of a handle: Python's
`if`, `and`, `or`, `not` on a traced value raise a VyreError that names the
user's line; write `vx.where(c, a, b)`, `&`, `|`, `~` instead.
"""

from __future__ import annotations

import contextlib
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
            cls = {"+": arith.AddfOp, "-": arith.SubfOp, "*": arith.MulfOp,
                   "/": arith.DivfOp}[op]
        elif kind == "int":
            cls = {"+": arith.AddiOp, "-": arith.SubiOp, "*": arith.MuliOp,
                   "//": arith.DivSIOp, "%": arith.RemSIOp}[op]
        else:
            cls = {"&": arith.AndIOp, "|": arith.OrIOp, "^": arith.XOrIOp}[op]
        return self._emit(cls(a, b))

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
               "tanh": math.TanhOp, "abs": math.AbsFOp}[fn]
        return self._emit(cls(a))

    def minmax(self, fn: str, kind: str, a, b):
        if kind == "f32":
            cls = arith.MaximumfOp if fn == "maximum" else arith.MinimumfOp
            return self._emit(cls(a, b))
        cls = arith.MaxSIOp if fn == "maximum" else arith.MinSIOp
        return self._emit(cls(a, b))

    def select(self, c, a, b):
        return self._emit(arith.SelectOp(c, a, b))


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
            elif op in ("//", "%"):
                # arith.divsi/remsi: truncating division
                q = np.trunc(a.astype(np.float64) / b.astype(np.float64)).astype(np.int64)
                r = q if op == "//" else a.astype(np.int64) - q * b
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

    def to_f32(self, a):
        return np.asarray(a).astype(np.float32)

    def negf(self, a):
        return np.negative(a).astype(np.float32, copy=False)

    def unary(self, fn: str, a):
        with np.errstate(all="ignore"):
            x = np.ascontiguousarray(a, dtype=np.float32)
            if fn == "exp":
                return _np_exp(x)
            return {"exp2": np.exp2, "log": np.log, "tanh": np.tanh,
                    "abs": np.abs}[fn](x).astype(np.float32, copy=False)

    def minmax(self, fn: str, kind: str, a, b):
        r = (np.maximum if fn == "maximum" else np.minimum)(a, b)
        return np.asarray(r).astype(self.DTYPES[kind], copy=False)

    def select(self, c, a, b):
        return np.where(c, a, b).astype(a.dtype, copy=False)


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
        if isinstance(other, float | np.floating):
            return Traced("f32", self.backend.const("f32", float(other)), self.backend)
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
        if op in ("//", "%") and kind != "int":
            raise _unsupported(f"'{op}' on f32 values", "use it on integer indices only")
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
        b = self._lift(other, op=op)
        if self.kind != "bool" or b.kind != "bool":
            raise _unsupported(
                f"'{op}' on a {self.kind if self.kind != 'bool' else b.kind} value",
                "&, | and ~ combine booleans (comparisons); bitwise integer "
                "operations are not supported",
            )
        a = self
        if reflected:
            a, b = b, a
        return Traced("bool", self.backend.binary(op, "bool", a.value, b.value), self.backend)

    def __and__(self, o): return self._logic("&", o)
    def __rand__(self, o): return self._logic("&", o, True)
    def __or__(self, o): return self._logic("|", o)
    def __ror__(self, o): return self._logic("|", o, True)
    def __xor__(self, o): return self._logic("^", o)
    def __rxor__(self, o): return self._logic("^", o, True)

    def __invert__(self) -> Traced:
        return self._logic("^", True)

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
            "a traced value was converted with float()",
            "keep it traced: arithmetic on it builds the kernel",
        )

    def __pow__(self, other):
        raise _unsupported(
            "'**' on a traced value", "use vx.exp(n * vx.log(x)) or multiply"
        )

    __rpow__ = __pow__

    def __iter__(self):
        raise _unsupported("iteration over a traced value", "a traced value is a scalar")

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


def where(cond, a, b) -> Traced:
    """`a` where `cond` else `b` (arith.select; never looks at the other)."""
    anchor = _first_traced(cond, a, b)
    c = anchor._lift(cond, op="where") if not isinstance(cond, Traced) else cond
    if c.kind != "bool":
        raise _unsupported(
            f"vx.where's condition is {c.kind}", "pass a comparison (a boolean)"
        )
    if not isinstance(a, Traced) and not isinstance(b, Traced):
        kind = "f32" if isinstance(a, float) or isinstance(b, float) else (
            "bool" if isinstance(a, bool) and isinstance(b, bool) else "int")
        a = Traced(kind, c.backend.const(kind, a), c.backend)
    if isinstance(a, Traced):
        if a.kind == "bool":
            bb = a._lift(b, op="where")
            if bb.kind != "bool":
                raise _unsupported("vx.where mixes a boolean and a number", "")
            return Traced("bool", a.backend.select(c.value, a.value, bb.value), a.backend)
        x, y, kind = a._numeric_pair(b, "where")
    else:
        y, x, kind = b._numeric_pair(a, "where")
    return Traced(kind, c.backend.select(c.value, x.value, y.value), c.backend)


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


__all__ = [
    "Traced",
    "abs",
    "array",
    "as_index",
    "building",
    "exp",
    "exp2",
    "function_location",
    "log",
    "maximum",
    "minimum",
    "tanh",
    "user_location",
    "where",
    "wrap",
]
