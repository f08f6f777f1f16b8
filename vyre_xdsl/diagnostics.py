"""MLIR-style located diagnostics (`file:line:col: error: message`)."""

from __future__ import annotations

from xdsl.dialects.builtin import FileLineColLoc, IntAttr, StringAttr
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException


class LocatingParser(Parser):
    """A parser that records where each operation starts, so a verifier or
    pass error can point at the user's line (xDSL leaves locations unknown)."""

    line_offset = 0

    def parse_module(self, allow_implicit_module: bool = True):
        """The module, with SSA dominance checked (xDSL's parser resolves
        forward references and no xDSL verifier checks the order; upstream
        MLIR rejects a use before its definition)."""
        from vyre_xdsl.dialects.structure import check_dominance

        module = super().parse_module(allow_implicit_module)
        check_dominance(module)
        return module

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        try:
            op = super().parse_operation()
        except VerifyException as error:
            # Raised while building the op (a type constraint): point at it.
            raise ParseError(start, _first_line(error)) from None
        except (MemoryError, OverflowError, RecursionError):
            # e.g. `i644294967295`: xDSL computes 1 << width and runs out of memory
            raise ParseError(
                start,
                "this operation holds a type or value too large to represent "
                "(e.g. an integer type of absurd width)",
            ) from None
        except ValueError as error:
            # A custom parser building an attribute from a bad literal (e.g. a
            # shape entry beyond i64): still the user's input, so locate it.
            raise ParseError(start, _first_line(error)) from None
        if not isinstance(op.location, FileLineColLoc):
            where = start.get_location()
            op.location = FileLineColLoc(
                StringAttr(str(where.file)),
                IntAttr(where.line + self.line_offset),
                IntAttr(where.col),
            )
        return op


def location_of(op: Operation | None) -> str | None:
    while op is not None:
        loc = op.location
        if isinstance(loc, FileLineColLoc):
            return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
        op = op.parent_op()  # fall back to the nearest located ancestor
    return None


def located(op: Operation | None, message: str) -> str:
    where = location_of(op)
    return f"{where}: error: {message}" if where else f"error: {message}"


def first_invalid_op(root: Operation) -> tuple[Operation, str] | None:
    """The innermost-first op that fails its own verifier, with the message.

    Some xDSL verifiers raise a plain Exception or ValueError instead of a
    VerifyException (e.g. memref.load with too few indices); those count too."""
    for op in root.walk(reverse=False):
        if op is root:
            continue
        try:
            op.verify(verify_nested_ops=False)
        except Exception as error:  # noqa: BLE001 - any verifier failure
            # a structural check of a kernel names the op at fault (`op`)
            return getattr(error, "op", op), _first_line(error)
    return None


def _first_line(error: Exception) -> str:
    message = str(error.args[0]) if error.args else str(error)
    return message.removeprefix("Operation does not verify: ").strip()


def describe(error: Exception, module: Operation | None, input_name: str) -> str:
    """One located `error:` line (plus context for parse errors)."""
    if isinstance(error, ParseError):
        where = error.span.get_location()
        context = error.span.print_with_context().split("\n", 1)[-1].rstrip()
        return f"{where.file}:{where.line}:{where.col}: error: {error.msg}\n{context}"
    if isinstance(error, VerifyException | DiagnosticException) and module is not None:
        failing = first_invalid_op(module)
        if failing is not None:
            op, message = failing
            return located(op, f"'{op.name}' op {message}")
        op = getattr(error, "op", None)
        return located(op, _op_message(op, error))
    op = getattr(error, "op", None)
    if op is not None and location_of(op) is not None:
        return located(op, _op_message(op, error))
    return f"{input_name}: error: {_first_line(error)}"


def _op_message(op: Operation | None, error: Exception) -> str:
    """A verifier's message about `op`, as MLIR words it ('name' op ...)."""
    if op is None or not isinstance(error, VerifyException):
        return _first_line(error)
    return f"'{op.name}' op {_first_line(error)}"
