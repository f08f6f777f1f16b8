"""MLIR-style located diagnostics (`file:line:col: error: message`)."""

from __future__ import annotations

import bisect
import re
import unicodedata

from xdsl.dialects.builtin import FileLineColLoc, IntAttr, StringAttr
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Input, Span

# Characters an ASCII MLIR file may hold outside comments and strings.
_PLAIN = re.compile(r"[^\t\n\r\x20-\x7e]")


def source_text(raw: bytes | str, name: str) -> str:
    """The text of an input file, or a located ParseError for what the
    lexer would reject without saying what: bytes that are not UTF-8, a
    byte-order mark, invisible or non-ASCII characters outside strings and
    comments (MLIR's names and keywords are ASCII)."""
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            offset = len(raw[: error.start].decode("utf-8", errors="replace"))
            shown = raw.decode("utf-8", errors="replace")
            raise ParseError(
                Span(offset, offset + 1, Input(shown, name)),
                f"byte 0x{raw[error.start]:02x} is not UTF-8 text ({error.reason}); "
                f"save the file as UTF-8",
            ) from None
    else:
        text = raw
    check_characters(text, name)
    return text


def check_characters(text: str, name: str) -> None:
    """A located ParseError for a byte-order mark, or an invisible or
    non-ASCII character outside comments (and, invisible, in a string)."""
    if text.startswith("\ufeff"):
        raise ParseError(
            Span(0, 1, Input(text, name)),
            "the input starts with a byte-order mark (U+FEFF); save it as UTF-8 "
            "without a BOM",
        )
    if _PLAIN.search(text) is None:
        return  # plain ASCII: nothing to scan for
    in_string = in_comment = escaped = False
    for offset, char in enumerate(text):
        if in_comment:
            in_comment = char != "\n"
            continue
        invisible = _is_invisible(char)
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char in "\"\n":
                in_string = False
            if not invisible:
                continue
        elif char == '"':
            in_string = True
            continue
        elif char == "/" and text.startswith("//", offset):
            in_comment = True
            continue
        elif not invisible and char.isascii():
            continue
        label = "a control character" if unicodedata.category(char) == "Cc" else "unnamed"
        code = f"U+{ord(char):04X} ({unicodedata.name(char, label)})"
        if invisible:
            where = "in a string literal" if in_string else "here"
            message = f"invisible character {code} {where}; delete it"
        else:
            message = (
                f"non-ASCII character {char!r} {code} outside a string literal: "
                f"MLIR names and keywords are ASCII; rename it"
            )
        raise ParseError(Span(offset, offset + 1, Input(text, name)), message)


def _is_invisible(char: str) -> bool:
    if char in "\t\n\r ":
        return False
    return unicodedata.category(char) in ("Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Cn")


def is_blank(text: str) -> bool:
    """Only whitespace and `//` comments: what mlir-opt reads as an empty
    module."""
    return all(not line.strip() or line.lstrip().startswith("//")
               for line in text.splitlines())


# xDSL's string-literal regex nests a `+` in a `*`: on an unterminated
# string it backtracks exponentially in the length of the line (a 40-character
# line never finished).  One character an iteration matches the same strings
# without ambiguity, so in linear time.
_STRING_LITERAL = re.compile(r'"(?:[^"\\\n\v\f]|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*"')


class LocatingParser(Parser):
    """A parser that records where each operation starts, so a verifier or
    pass error can point at the user's line (xDSL leaves locations unknown)."""

    line_offset = 0

    def __init__(self, ctx, input: str | bytes, name: str = "<unknown>") -> None:
        super().__init__(ctx, input, name)
        self.lexer._unescaped_characters_regex = _STRING_LITERAL

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
        except RecursionError:
            raise ParseError(
                start,
                "operations, regions or types nest too deeply here (beyond Python's "
                "recursion limit); flatten the input",
            ) from None
        except (MemoryError, OverflowError):
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
            line, col = self._line_and_column(start.start)
            op.location = FileLineColLoc(
                StringAttr(str(self.lexer.input.name)),
                IntAttr(line + self.line_offset),
                IntAttr(col),
            )
        return op

    def _line_and_column(self, offset: int) -> tuple[int, int]:
        """1-based line and column of `offset`, from a table of line starts
        built once: Span.get_location counts the newlines before it each
        time, which made parsing quadratic (a module of 100k constants took
        minutes)."""
        starts = self.__dict__.get("_line_starts")
        if starts is None:
            content = self.lexer.input.content
            starts = [0] + [m.end() for m in re.finditer("\n", content)]
            self._line_starts = starts
        line = bisect.bisect_right(starts, offset)
        return line, offset - starts[line - 1] + 1


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
    try:
        root.verify(verify_nested_ops=False)
    except Exception as error:  # noqa: BLE001 - e.g. the module's symbol table
        return _redefinition(root, str(error)) or root, _first_line(error)
    return None


def _redefinition(root: Operation, message: str) -> Operation | None:
    """The second definition of the symbol a SymbolTable error names."""
    found = re.search(r'Redefinition of symbol "([^"]*)"', message)
    if not found:
        return None
    seen = False
    for region in root.regions:
        for block in region.blocks:
            for op in block.ops:
                name = op.properties.get("sym_name") or op.attributes.get("sym_name")
                if isinstance(name, StringAttr) and name.data == found.group(1):
                    if seen:
                        return op
                    seen = True
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
    if module is not None and location_of(module) is not None:
        # about no op of it (a pass's options): the module it ran on, as
        # MLIR locates a pass failure
        return located(module, _first_line(error))
    return f"{input_name}: error: {_first_line(error)}"


def _op_message(op: Operation | None, error: Exception) -> str:
    """A verifier's message about `op`, as MLIR words it ('name' op ...)."""
    if op is None or not isinstance(error, VerifyException):
        return _first_line(error)
    return f"'{op.name}' op {_first_line(error)}"
