"""The one exception type users see."""


class VyreError(ValueError):
    """A user-facing error: names what is wrong and how to fix it."""


def pass_error(op, message: str):
    """A DiagnosticException carrying the offending op, for vyre-opt to locate."""
    from xdsl.utils.exceptions import DiagnosticException

    error = DiagnosticException(message)
    error.op = op  # type: ignore[attr-defined]
    return error
