"""Parsing, pass pipelines and lowering from Python."""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import get_all_dialects
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException

from vyre_xdsl.dialects import vyre
from vyre_xdsl.errors import VyreError
from vyre_xdsl.passes import ALL_PASSES


def make_context() -> Context:
    """A context that knows every xDSL dialect and the vyre dialect."""
    ctx = Context()
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    ctx.register_dialect("vyre", lambda: vyre.Vyre)
    return ctx


def parse_module(text: str, path: str = "<input>") -> ModuleOp:
    """Parse and verify MLIR text (vyre or lowered IR)."""
    try:
        module = Parser(make_context(), text, path).parse_module()
        module.verify()
    except (ParseError, VerifyException, DiagnosticException) as error:
        raise VyreError(f"{path}: {error}") from None
    return module


def is_vyre_module(module: ModuleOp) -> bool:
    return any(isinstance(op, vyre.KernelOp) for op in module.walk())


def apply_pipeline(module: ModuleOp, pipeline: str) -> ModuleOp:
    """Run a comma-separated pass pipeline (vyre and xDSL passes) in place."""
    from xdsl.transforms import get_all_passes

    available = {**get_all_passes(), **ALL_PASSES}
    try:
        passes = PassPipeline.parse_spec(available, pipeline)
    except Exception as error:  # xDSL reports unknown passes as plain exceptions
        raise VyreError(f"bad pass pipeline {pipeline!r}: {error}") from None
    try:
        passes.apply(make_context(), module)
        module.verify()
    except (VerifyException, DiagnosticException) as error:
        raise VyreError(f"pipeline {pipeline!r} failed: {error}") from None
    return module


def lower_to_gpu(module: ModuleOp) -> ModuleOp:
    """A lowered copy of a vyre module: gpu/arith/scf/math/memref IR that
    verifies in xDSL and in upstream MLIR (docs/lowered-ir.md)."""
    if not isinstance(module, ModuleOp):
        raise VyreError(f"expected an xdsl ModuleOp, got {type(module).__name__}")
    if not is_vyre_module(module):
        raise VyreError(
            "lower_to_gpu expects vyre IR (a module with a vyre.kernel); this "
            "module has none, it may already be lowered"
        )
    return apply_pipeline(module.clone(), "vyre-to-gpu")


def compile_spirv(module: ModuleOp) -> bytes:
    """A SPIR-V binary module for the kernel of `module` (vyre or lowered IR)."""
    from vyre_xdsl.run import ensure_lowered
    from vyre_xdsl.spirv import emit_spirv

    return emit_spirv(ensure_lowered(module))
