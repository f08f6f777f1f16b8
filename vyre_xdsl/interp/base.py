"""The base of this project's InterpreterFunctions: access to the lock-step
lane state and a per-op cache of decoded attributes."""

from __future__ import annotations

from typing import Any

from xdsl.interpreter import InterpreterFunctions

from vyre_xdsl.interp.lanes import LaneState


class LaneFunctions(InterpreterFunctions):
    """InterpreterFunctions that execute one workgroup's lanes in lock-step."""

    def __init__(self, state: LaneState) -> None:
        self.state = state
        # op (or (op, key)) -> decoded attribute data, so attributes are read
        # once per op, not once per execution
        self.cache: dict[Any, Any] = {}


def pointwise(fn):
    """The impl of an op whose one result is `fn` of its operands (lane
    vectors or uniform scalars alike)."""

    def run(self, interpreter, op, args):
        return (fn(*args),)

    return run
