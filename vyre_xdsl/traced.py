"""The traced value (`Traced`): Python operators, the vx functions
modifiers call (vx.where, vx.exp, ...) and numpy's ufuncs and functions on
it, each computed by its backend (IR or numpy) with the rules of
vyre_xdsl.trace."""

from __future__ import annotations

import math
import numbers
import operator
import reprlib

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, IntegerType, f32, i32
from xdsl.ir import Operation, SSAValue

from vyre_xdsl.errors import VyreError
from vyre_xdsl.trace_backends import _NP, IR, NUMPY, _unsupported, user_location

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
            return _constant(kind, other, self.backend, op)
        if isinstance(other, np.ndarray) and other.ndim == 0:
            return self._lift(other.item(), op=op)
        if isinstance(other, float | np.floating):
            return _constant("f32", other, self.backend, op)
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
        x = b if reflected else a  # this operand, as the operation's kind
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
        special = _special_arith(op, x, other, reflected) if kind == "f32" else None
        if special is not None:
            return special
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

    def __hash__(self):
        raise _unsupported(
            "a traced value was hashed (a set or dict lookup such as `kv in "
            "{0, 3}` or `table.get(kv)`, or a cached function such as "
            "functools.lru_cache)",
            "the value is only known on the GPU: compare it, as in (kv == 0) | "
            "(kv == 3), or index a numpy array captured as a table (bias[kv])",
        )

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

    def __len__(self):
        raise _unsupported("len() of a traced value", "a traced value is a scalar")

    def __format__(self, spec: str) -> str:
        # an f-string or str.format would put "Traced(...)" in a Python string
        raise _unsupported(
            "a traced value was formatted into a Python string (f-string, format())",
            "its value is only known on the GPU: keep it traced (the repr, "
            "Traced(kind, backend), is for debugging)",
        )

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


I32_RANGE = (-(2**31), 2**31 - 1)
INF, NAN = math.inf, math.nan
F32_MAX = float(np.finfo(np.float32).max)


def _special_arith(op: str, x: Traced, other, reflected: bool) -> Traced | None:
    """`x op c` (`c op x` if `reflected`) for a Python number c that is 0,
    inf or NaN, by IEEE's cases as comparisons and selects: a driver that
    does not preserve inf and NaN may fold the operation itself (Mesa makes
    `x * 0.0` 0 and `x / 0.0` finite), but not a select.  The oracle runs
    the same cases.  None for any other c, and for c + 0 or c - 0, which
    every driver keeps (a zero's sign aside, which the contract ignores)."""
    if not isinstance(other, numbers.Real) or isinstance(other, bool | np.bool_):
        return None
    c = float(other)
    if c == c and c != 0 and c not in (INF, -INF):
        return None
    if c != c:  # NaN op anything is NaN
        return where(x == x, NAN, x)
    # the two operands' signs differ (a zero x counts as +0: the contract
    # does not tell +0 from -0)
    opposite = x >= 0 if math.copysign(1.0, c) < 0 else x < 0
    signed_inf = where(opposite, -INF, INF)
    nan_or_zero, finite = (x == 0) | (x != x), abs(x) < INF
    if c == 0:
        if op == "*":
            return where(finite, 0.0, NAN)
        if op == "/":  # x / 0, 0 / x
            return where(nan_or_zero, NAN, 0.0 if reflected else signed_inf)
        return None
    if op == "*":
        return where(nan_or_zero, NAN, signed_inf)
    if op == "/":  # inf / x, x / inf
        return where(finite, signed_inf, NAN) if reflected else where(finite, 0.0, NAN)
    # x + c, x - c, c - x: NaN where x is NaN or the infinity that cancels c
    cancels, result = (-c, c) if op == "+" else (c, c if reflected else -c)
    return where((x == cancels) | (x != x), NAN, result)


def _constant(kind: str, value, backend, op: str) -> Traced:
    """A Python number as a traced constant of `kind`, refused where the
    kernel's i32 or f32 cannot hold it (not wrapped, nor rounded to inf)."""
    if isinstance(value, np.generic):
        value = value.item()
    if kind == "int" and not I32_RANGE[0] <= value <= I32_RANGE[1]:
        raise _unsupported(
            f"'{op}' with the integer {reprlib.repr(value)}, outside i32 [{I32_RANGE[0]}, "
            f"{I32_RANGE[1]}]", "integer modifier values are i32 (as PyTorch's int32 "
            "tensors); use one in range (a bit pattern from 2**31 minus 2**32), or a float")
    if kind == "f32":
        number = f32_number(value)
        if number is None:
            raise _unsupported(
                f"'{op}' with the number {reprlib.repr(value)}, beyond f32's largest {F32_MAX:.6g}",
                "modifier numbers are f32; use float('inf') for an infinity")
        value = number
    return Traced(kind, backend.const(kind, value), backend)


def f32_number(value) -> float | None:
    """A Python or numpy real as the float of an f32 constant; None where it
    is finite but beyond f32's range (f32 would make it an infinity)."""
    if isinstance(value, np.generic):
        value = value.item()
    try:
        number = float(value)
    except OverflowError:  # an int beyond every float
        return None
    if np.isfinite(number) and not -F32_MAX <= number <= F32_MAX:
        return None
    return number


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
        a = _constant(kind, a, backend, "where")
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
