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

from vyre_xdsl.captured import Modifier, Table, table
from vyre_xdsl.trace_backends import (
    F64_ROUNDED,
    IR,
    KINDS,
    NUMPY,
    _builder,
    building,
    f64_rounded,
    function_location,
    user_location,
)
from vyre_xdsl.traced import (
    Traced,
    abs,
    array,
    as_index,
    ceil,
    cos,
    erf,
    exp,
    exp2,
    floor,
    index_div,
    index_mod,
    log,
    maximum,
    minimum,
    pow,
    round_,
    sin,
    sqrt,
    tan,
    tanh,
    trunc,
    where,
    wrap,
)

__all__ = [
    "F64_ROUNDED",
    "IR",
    "KINDS",
    "NUMPY",
    "_builder",
    "f64_rounded",
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

