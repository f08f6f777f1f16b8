"""The one exception type users see."""


class VyreError(ValueError):
    """A user-facing error: names what is wrong and how to fix it."""


def op_error(op, message: str) -> VyreError:
    """A VyreError that carries `op`, so vyre-opt and vyre-run can print
    its location."""
    error = VyreError(message)
    error.op = op  # type: ignore[attr-defined]
    return error


def pass_error(op, message: str):
    """A DiagnosticException carrying the offending op, for vyre-opt to locate."""
    from xdsl.utils.exceptions import DiagnosticException

    error = DiagnosticException(message)
    error.op = op  # type: ignore[attr-defined]
    return error


def require_f32_vector_width(pass_name: str, width: int) -> None:
    """Refuse a pass's `width` option that is not a vector of f32 the SPIR-V
    emitter reads and writes whole."""
    from vyre_xdsl.dialects.constants import F32_VECTOR_WIDTHS

    if width not in F32_VECTOR_WIDTHS:
        widths = " or ".join(map(str, F32_VECTOR_WIDTHS))
        raise VyreError(f"{pass_name}: width must be {widths} (a SPIR-V vector of f32), "
                        f"got {width}")
