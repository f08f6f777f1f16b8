"""What a modifier captures: numpy arrays it indexes with traced values
(`Table`, becoming read-only input buffers in a kernel) and how it takes the
query head (`Modifier`)."""

from __future__ import annotations

import numpy as np

from vyre_xdsl.dialects.constants import I32_MAX, I32_MIN, U32_MAX
from vyre_xdsl.errors import VyreError
from vyre_xdsl.trace_backends import _unsupported, function_location
from vyre_xdsl.traced import Traced, _is_int, where

class Table:
    """A numpy array that a modifier indexes with traced values: a relative
    position bias `bias[q - kv + S]`, ALiBi slopes `slopes[h]`, document ids
    `doc[q] == doc[kv]`.  In a kernel it becomes a read-only input buffer
    whose data the IR records (`vyre.captured`), so vx.run passes it by
    itself; the oracle indexes it with numpy.  Indices follow Python: a
    negative one counts from the end; one outside [-n, n) reads NaN from an
    f32 table and 0 (False) from an integer (boolean) one, never memory past
    the buffer.  Floating-point tables are rounded to f32 (a finite value
    beyond its range is refused), integer ones must fit i32; a masked array
    is refused (the kernel would not see its mask).  Modifiers index plain
    numpy arrays they name (globals, closure variables) as tables without
    more ado; `vx.table(array)` wraps others."""

    def __init__(self, array) -> None:
        if isinstance(array, Table):
            array = array.array
        if not isinstance(array, np.ndarray) or array.ndim == 0 or array.size == 0:
            raise VyreError(
                f"a captured table must be a numpy array with at least one element "
                f"and one dimension, got {type(array).__name__}"
                + (f" of shape {array.shape}" if isinstance(array, np.ndarray) else "")
            )
        if isinstance(array, np.ma.MaskedArray):
            raise VyreError(
                "a captured table is a numpy masked array, whose mask the kernel "
                "would lose; pass array.filled(value) (the value a masked entry "
                "should read)"
            )
        if array.size > U32_MAX:
            raise VyreError(f"a captured table of {array.size} elements does not fit u32")
        kind = {"f": "f32", "i": "int", "u": "int", "b": "bool"}.get(array.dtype.kind)
        if kind is None:
            raise VyreError(
                f"a captured table must hold numbers or booleans, got dtype "
                f"{array.dtype}; convert it with .astype(np.float32) or np.int32"
            )
        if kind == "int" and (array.min() < I32_MIN or array.max() > I32_MAX):
            raise VyreError("a captured integer table must fit i32 (the kernel's ints)")
        self.array = array
        self.kind = kind
        self.shape = tuple(int(d) for d in array.shape)
        dtype = np.float32 if kind == "f32" else np.int32
        with np.errstate(over="ignore"):
            self.values = np.ascontiguousarray(array, dtype=dtype).reshape(-1)
        if kind == "f32":
            overflowed = np.isinf(self.values) & np.isfinite(array.reshape(-1))
            if overflowed.any():
                at = int(np.flatnonzero(overflowed)[0])
                raise VyreError(
                    f"a captured table holds {float(array.reshape(-1)[at]):g} (element {at} "
                    f"of the flattened table), beyond f32's largest "
                    f"({np.finfo(np.float32).max:.7g}): the kernel reads its tables "
                    f"as f32; scale or clip the table"
                )
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
        if anchor is None:  # every index known in Python: a constant, by the same rule
            at = []
            for part, extent in zip(parts, self.shape, strict=True):
                i = int(part) + extent if int(part) < 0 else int(part)
                if not 0 <= i < extent:
                    return self.fill
                at.append(i)
            return self.values.reshape(self.shape)[tuple(at)].item()
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
