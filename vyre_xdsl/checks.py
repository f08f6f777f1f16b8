"""The checks of public arguments, in one place.

Every function users call (the builders, `Buffer`, the fragment helpers,
`run`, `lower_to_gpu`, `compile_spirv`, `apply_pipeline`, `wrap`, ...) checks
its arguments with these helpers before anything reaches xDSL or numpy, so
a wrong type or value is a `VyreError` that names the parameter and says
what to pass instead, never a traceback from deep inside a library.
"""

from __future__ import annotations

import numbers
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from functools import reduce

import numpy as np

from vyre_xdsl.errors import VyreError

from vyre_xdsl.dialects.constants import BINDING_MAX, U32_MAX
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _shown(value: object) -> str:
    """`value` for a message: its repr, cut short, and its type."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def is_integer(value: object) -> bool:
    """Any `numbers.Integral` (numpy integers too), but not bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def check_dimensions(**dims: int) -> tuple[int, ...]:
    """Every dimension is an integer > 0 that fits u32, else a VyreError
    naming it.  Any `numbers.Integral` is accepted (numpy integers such as
    `np.int64(4)` from shape arithmetic), except bool; floats (even 4.0),
    NaN, strings and None are rejected.  Returns the values as Python ints,
    in the order given."""
    checked: list[int] = []
    for name, value in dims.items():
        if not is_integer(value):
            raise VyreError(
                f"{name} must be a positive integer, got {value!r} "
                f"({type(value).__name__})"
            )
        value = int(value)
        if value < 1:
            raise VyreError(f"{name} must be > 0, got {value}")
        if value > U32_MAX:
            raise VyreError(f"{name} = {value} does not fit in u32")
        checked.append(value)
    return tuple(checked)


def check_u32_size(what: str, **factors: int) -> None:
    """A buffer or scratch size (product of named factors) must fit u32."""
    product = reduce(operator.mul, factors.values(), 1)
    if product > U32_MAX:
        names = " * ".join(f"{k} ({v})" for k, v in factors.items())
        # The workgroup size is fixed at 64 lanes: only the others can shrink.
        adjustable = [k for k in factors if k != "workgroup_size"]
        raise VyreError(
            f"{what} = {names} = {product} elements does not fit in u32 "
            f"(max {U32_MAX}); reduce {' or '.join(adjustable)}"
        )


def check_identifier(what: str, name: object) -> str:
    """`name` if it is a string of letters, digits and '_' not starting with
    a digit (it names a kernel, a buffer or a scratch array in the IR, in
    SPIR-V and in `vx.run`'s dictionaries), else a VyreError."""
    if not isinstance(name, str) or not IDENTIFIER.fullmatch(name):
        raise VyreError(
            f"{what} {name!r} must be a string of letters, digits and '_', not "
            f"starting with a digit (e.g. 'q' or 'kv_cache')"
        )
    return name


def check_kernel_name(name: object) -> str:
    """`name` if it can name a kernel (and its SPIR-V entry point), else a
    VyreError saying what a name may hold."""
    if not isinstance(name, str) or not IDENTIFIER.fullmatch(name):
        raise VyreError(
            f"kernel name {name!r} must be a string of letters, digits and '_', "
            f"not starting with a digit (it names the kernel's entry point)"
        )
    return name


def check_binding(binding: object, buffer: str) -> int | None:
    """A buffer's binding: None (its place in the list) or an integer in
    [0, 2^31) (lowered kernels and SPIR-V record it as a 32-bit value)."""
    if binding is None:
        return None
    if not is_integer(binding):
        raise VyreError(
            f"binding of buffer {buffer!r} must be an integer in [0, {BINDING_MAX}] "
            f"or None (its place in the list), got {_shown(binding)}"
        )
    if not 0 <= int(binding) <= BINDING_MAX:
        raise VyreError(
            f"binding of buffer {buffer!r} is {int(binding)}; use an integer in "
            f"[0, {BINDING_MAX}] (bindings are 32-bit in the lowered kernel)"
        )
    return int(binding)


def check_shape(shape: object, buffer: str) -> tuple[int, ...]:
    """A buffer's logical shape: a non-empty sequence of positive integers
    whose product fits u32, as a tuple of Python ints."""
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence | np.ndarray):
        raise VyreError(
            f"shape of buffer {buffer!r} must be a tuple of positive integers "
            f"such as (seq_len, head_dim) or (n,), got {_shown(shape)}"
        )
    if len(shape) == 0:
        raise VyreError(
            f"shape of buffer {buffer!r} is empty; give at least one dimension, "
            f"e.g. (1,)"
        )
    dims = check_dimensions(**{f"{buffer}.shape[{i}]": d for i, d in enumerate(shape)})
    check_u32_size(f"buffer {buffer!r}", **{f"shape[{i}]": d for i, d in enumerate(dims)})
    return dims


def check_sequence(what: str, value: object, item_type: type, example: str) -> list:
    """`value` as a list if it is a list or tuple of `item_type`."""
    if not isinstance(value, list | tuple):
        raise VyreError(f"{what} must be a list of {example}, got {_shown(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, item_type):
            raise VyreError(
                f"{what}[{index}] must be {example}, got {_shown(item)}"
            )
    return list(value)


def check_mapping(what: str, value: object, example: str) -> Mapping:
    """`value` if it is a dict (any Mapping)."""
    if not isinstance(value, Mapping):
        raise VyreError(f"{what} must be a dict, e.g. {example}, got {_shown(value)}")
    return value


def check_callable(role: str, fn: object, *, optional: bool = False,
                   arguments: tuple[str, ...] = ()) -> None:
    """`fn` must be a function (or None where `optional`) that takes the
    positional `arguments` (their names, for the message) where given."""
    if fn is None and optional:
        return
    if not callable(fn):
        raise VyreError(
            f"{role} must be a function (a fragment callback), got {type(fn).__name__}"
        )
    if not arguments:
        return
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without one: its call will tell
        return
    try:
        signature.bind(*arguments)
    except TypeError:
        raise VyreError(
            f"{role} must take {len(arguments)} positional argument"
            f"{'s' if len(arguments) > 1 else ''} ({', '.join(arguments)}), but its "
            f"signature is {role}{signature}"
        ) from None


def check_choice(what: str, value: object, choices: Sequence[str]) -> str:
    """`value` if it is one of the strings `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise VyreError(
            f"unknown {what} {value!r}; choose one of {', '.join(choices)}"
        )
    return value


def check_text(what: str, value: object, example: str) -> str:
    """`value` if it is a string."""
    if not isinstance(value, str):
        raise VyreError(f"{what} must be a string, e.g. {example}, got {_shown(value)}")
    return value


def check_module(module: object, caller: str):
    """`module` if it is an xDSL ModuleOp, else a VyreError saying where a
    module comes from."""
    from xdsl.dialects.builtin import ModuleOp

    if not isinstance(module, ModuleOp):
        raise VyreError(
            f"{caller} expected an xdsl ModuleOp (from vx.flash_attention_2, "
            f"vx.mla_decode or vx.parse_module), got {type(module).__name__}"
        )
    return module


def check_pipeline(pipeline: object) -> str:
    """A pass pipeline: a non-empty string of comma-separated passes."""
    if not isinstance(pipeline, str) or not pipeline.strip():
        raise VyreError(
            f"pipeline must be a string of comma-separated passes, e.g. "
            f"'vyre-to-gpu' or 'vyre-inline-fragments,cse', got {_shown(pipeline)}"
        )
    return pipeline


def checked_call(fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)`, which calls back into user code that builds
    IR: an exception that xDSL raises because a helper got a wrong value
    becomes a VyreError at the user's line.  Exceptions raised by the user's
    own code propagate unchanged."""
    try:
        return fn(*args, **kwargs)
    except VyreError:
        raise
    except Exception as error:  # noqa: BLE001 - filtered by where it was raised
        where = _library_failure(error)
        if where is None:
            raise
        raise VyreError(
            f"a wrong value reached the IR builder at {where}: "
            f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            f"; fragment helpers take SSA values from the fragment (f.item, "
            f"f.buffer(name), results of f.load/f.addf/...), traced values or "
            f"Python ints for indices"
        ) from None


def _library_failure(error: BaseException) -> str | None:
    """The user's innermost frame if `error` was raised inside xDSL (the
    user called a helper with a value of the wrong kind), else None."""
    import os

    import xdsl

    xdsl_dir = os.path.dirname(os.path.abspath(xdsl.__file__)) + os.sep
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    if not frames or not os.path.abspath(frames[-1].f_code.co_filename).startswith(
        xdsl_dir
    ):
        return None
    for frame in reversed(frames):
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith((xdsl_dir, package)):
            return f"{frame.f_code.co_filename}:{frame.f_lineno} (in {frame.f_code.co_name})"
    return "<unknown>"
