"""Element types of storage buffers: "f32", "f16", "bf16" and "i32".

A kernel's inputs and outputs may be half precision; everything the
recurrence keeps (scores, the softmax state m and l, scratch arrays, the
accumulator) stays f32.  A load of a half buffer is followed by an exact
widening (`arith.extf`), the store of the output by one rounding to nearest
even (`arith.truncf`).  On the host an f16 buffer is a `np.float16` array,
a bf16 buffer an `ml_dtypes.bfloat16` array.

An "i32" buffer (`np.int32` on the host) holds integers a decoder reads,
never writes: sequence lengths (`kv_lens`), page tables (`block_table`).
Fragments load its elements as i32 and convert them to `index` with
`arith.index_cast`; it is not a dtype of the builders' `dtype=` (which is
the element type of q, k, v and out), only of a `Buffer(..., dtype="i32")`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from xdsl.ir import Attribute

from vyre_xdsl.dialects.vyre import BUFFER_ELEMENT_TYPES
from vyre_xdsl.errors import VyreError

INT_DTYPES = ("i32",)
# the float element types: what `dtype=` of a builder may be
DTYPES = tuple(d for d in BUFFER_ELEMENT_TYPES if d not in INT_DTYPES)
HALF_DTYPES = ("f16", "bf16")


def check_dtype(dtype: object, what: str = "dtype", allow_int: bool = False) -> str:
    """`dtype` if it names a float buffer element type (or, with
    `allow_int`, "i32" too), else a VyreError that lists the choices."""
    allowed = DTYPES + (INT_DTYPES if allow_int else ())
    if not isinstance(dtype, str) or dtype not in allowed:
        choices = ", ".join(repr(d) for d in allowed)
        raise VyreError(f"{what} must be one of {choices}, got {dtype!r}")
    return dtype


def is_int(dtype: str) -> bool:
    """Whether buffers of `dtype` hold integers (i32)."""
    return dtype in INT_DTYPES


def element_type(dtype: str) -> Attribute:
    """The MLIR element type of buffers of `dtype` (f32, f16, bf16, i32)."""
    return BUFFER_ELEMENT_TYPES[check_dtype(dtype, allow_int=True)]


def dtype_name(element: Attribute) -> str | None:
    """The dtype name of a buffer element type, or None for another type."""
    for name, attr in BUFFER_ELEMENT_TYPES.items():
        if element == attr:
            return name
    return None


def is_half(element: Attribute) -> bool:
    """Whether `element` is f16 or bf16 (values widened on load)."""
    return dtype_name(element) in HALF_DTYPES


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of host arrays of `dtype` buffers."""
    check_dtype(dtype, allow_int=True)
    if dtype == "i32":
        return np.dtype(np.int32)
    if dtype == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(np.float16 if dtype == "f16" else np.float32)


def numpy_name(dtype: str) -> str:
    """How a user spells the numpy dtype of `dtype`, for messages."""
    return {"f32": "np.float32", "f16": "np.float16", "bf16": "ml_dtypes.bfloat16",
            "i32": "np.int32"}[check_dtype(dtype, allow_int=True)]


def check_array(value, name: str, subject: str, dtype: str, reason: str, what: str = ""):
    """`value` if it is a numpy array of `dtype`'s numpy type, else a
    VyreError about `subject` (how the message names input `name`) that
    says how to make it one; `reason` says who reads `dtype`, `what`
    the shape it should have."""
    wanted = numpy_name(dtype)
    if not isinstance(value, np.ndarray):
        raise VyreError(
            f"{subject} must be a numpy array{' ' + what if what else ''}, got "
            f"{type(value).__name__}; wrap it with np.asarray(..., dtype={wanted})"
        )
    if isinstance(value, np.ma.MaskedArray):
        raise VyreError(
            f"{subject} is a masked array; every element is read (its mask would be "
            f"lost), so fill the masked ones first ({name}.filled(...))"
        )
    if value.dtype != numpy_dtype(dtype):
        raise VyreError(
            f"{subject} has dtype {value.dtype}, {reason}; convert it with "
            f"{name}.astype({wanted})"
        )
    return value


def itemsize(dtype: str) -> int:
    """Bytes per element on the device."""
    return 2 if check_dtype(dtype, allow_int=True) in HALF_DTYPES else 4


def round_to(values, dtype: str) -> np.ndarray:
    """f32 `values` rounded once to nearest even in `dtype` (the kernel's
    store of its output); f32 values are returned as they are."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "f32":
        return values
    with np.errstate(all="ignore"):
        return values.astype(numpy_dtype(dtype))


def ulp(values, dtype: str) -> np.ndarray:
    """The spacing of `dtype` at each of the (f32) `values`: the gap from
    |v| rounded to `dtype` to the next representable number of `dtype`; at
    the largest finite one, and where |v| rounds to inf, the gap below it
    (the spacing at the top of the range; the spacing of the smallest
    subnormals at 0, NaN at NaN)."""
    target = numpy_dtype(dtype)
    uint = np.uint16 if target.itemsize == 2 else np.uint32
    top = np.float32(ml_dtypes.finfo(target).max)
    with np.errstate(all="ignore"):
        magnitude = np.minimum(np.abs(np.asarray(values, np.float32)).astype(target)
                               .astype(np.float32), top).astype(target)
        bits = magnitude.view(uint)
        wide = magnitude.astype(np.float32)
        above = (bits + uint(1)).view(target).astype(np.float32) - wide
        below = wide - (bits - uint(1)).view(target).astype(np.float32)
        return np.where(wide == top, below, above)


def distance(out: np.ndarray, oracle_f32, dtype: str) -> np.ndarray:
    """|out - oracle| in f32 for `out` of `dtype`, 0 where `out` is the
    oracle rounded to `dtype` (infinities and NaN included: an overflow to
    inf is the right answer, not an infinite error)."""
    oracle_f32 = np.asarray(oracle_f32, np.float32)
    wide = np.asarray(out).astype(np.float32)
    with np.errstate(all="ignore"):
        rounded = oracle_f32.astype(numpy_dtype(dtype)).astype(np.float32)
        same = (wide == rounded) | (np.isnan(wide) & np.isnan(rounded))
        return np.where(same, np.float32(0), np.abs(wide - oracle_f32))
