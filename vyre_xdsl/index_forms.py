"""What is known statically about an `index` value: its linear form and a
number it is a multiple of.

`vyre-vectorize-loads` groups loads whose indices differ by constants, and
both it and the SPIR-V emitter need proof that a vector load starts at a
multiple of its width (a vec4 view of a buffer can only address those).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from xdsl.dialects import arith
from xdsl.ir import BlockArgument, SSAValue

from vyre_xdsl.loop_bounds import constant_index, loop_of


@dataclass(frozen=True)
class LinearIndex:
    """`sum(coefficient * value for value, coefficient in terms) + constant`;
    `terms` in the order the index computation meets them."""

    terms: tuple[tuple[SSAValue, int], ...]
    constant: int


def linear_index(value: SSAValue) -> LinearIndex:
    """`value` as a sum of opaque values times constants plus a constant,
    seen through arith.constant, addi, subi and muli by a constant."""
    terms: dict[SSAValue, int] = {}
    constant = _collect(value, 1, terms)
    return LinearIndex(tuple((v, c) for v, c in terms.items() if c), constant)


def _collect(value: SSAValue, scale: int, terms: dict[SSAValue, int]) -> int:
    """Add `scale * value` into `terms`; return its constant part."""
    if (known := constant_index(value)) is not None:
        return scale * known
    op = value.owner
    if isinstance(op, arith.AddiOp):
        return _collect(op.lhs, scale, terms) + _collect(op.rhs, scale, terms)
    if isinstance(op, arith.SubiOp) and (right := constant_index(op.rhs)) is not None:
        return _collect(op.lhs, scale, terms) - scale * right
    if isinstance(op, arith.MuliOp):
        for factor, other in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            if (known := constant_index(factor)) is not None:
                return _collect(other, scale * known, terms)
    terms[value] = terms.get(value, 0) + scale
    return 0


def known_multiple(value: SSAValue) -> int:
    """A positive m with `value % m == 0` for every value it takes
    (0: the value is always 0)."""
    if (known := constant_index(value)) is not None:
        return abs(known)
    if isinstance(value, BlockArgument):
        loop = loop_of(value)
        if loop is None:
            return 1
        return gcd(known_multiple(loop.lb), known_multiple(loop.step)) or 1
    op = value.owner
    if isinstance(op, arith.AddiOp | arith.SubiOp):
        return gcd(known_multiple(op.lhs), known_multiple(op.rhs)) or 0
    if isinstance(op, arith.MuliOp):
        return known_multiple(op.lhs) * known_multiple(op.rhs)
    return 1


def is_multiple_of(value: SSAValue, width: int) -> bool:
    """Whether `value` is provably a multiple of `width`."""
    return known_multiple(value) % width == 0


def is_multiple_of_term(value: SSAValue, coefficient: int, width: int) -> bool:
    """Whether `coefficient * value` is provably a multiple of `width`."""
    return is_multiple_of(value, width // gcd(coefficient, width))
