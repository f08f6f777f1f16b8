"""Parsing, pass pipelines and lowering from Python."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from xdsl.context import Context
from xdsl.dialects import get_all_dialects
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import PassPipeline, parse_pipeline
from xdsl.utils.exceptions import (
    ArgSpecParseError,
    DiagnosticException,
    ParseError,
    VerifyException,
)

from vyre_xdsl.checks import check_module, check_pipeline, check_text
from vyre_xdsl.dialects import gpu_mma, gpu_shuffle, vector_from_elements, vyre
from vyre_xdsl.errors import VyreError
from vyre_xdsl.passes import ALL_PASSES

if TYPE_CHECKING:
    from vyre_xdsl.kernel_info import ProgramInfo
    from vyre_xdsl.spirv import SpirvModule


def make_context() -> Context:
    """A context that knows every xDSL dialect, the vyre dialect,
    gpu.shuffle, the subgroup matrix ops (gpu_mma) and vector.from_elements."""
    ctx = Context()
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    ctx.register_dialect("vyre", lambda: vyre.Vyre)
    gpu_shuffle.load_into(ctx)
    gpu_mma.load_into(ctx)
    vector_from_elements.load_into(ctx)
    return ctx


def parse_module(text: str, path: str = "<input>") -> ModuleOp:
    """Parse and verify MLIR text (vyre or lowered IR)."""
    from vyre_xdsl.diagnostics import (
        LocatingParser,
        _first_line,
        describe,
        first_invalid_op,
        is_blank,
        located,
        source_text,
    )

    if not isinstance(text, str | bytes | bytearray):
        raise VyreError(
            f"parse_module expects MLIR text (str), got {type(text).__name__}"
        )
    check_text("parse_module's path", path, "'kernel.mlir' (it names the input in messages)")
    try:
        text = source_text(text, path)
        if is_blank(text):
            return ModuleOp([])  # as mlir-opt: an empty input is an empty module
        module = LocatingParser(make_context(), text, path).parse_module()
    except ParseError as error:
        raise VyreError(describe(error, None, path)) from None
    except (VerifyException, DiagnosticException) as error:
        op = getattr(error, "op", None)  # a structural check names the op
        if op is not None:
            raise VyreError(located(op, f"'{op.name}' op {_first_line(error)}")) from None
        raise VyreError(f"{path}: {error}") from None
    try:
        module.verify()
    except Exception as error:  # noqa: BLE001 - some xDSL verifiers raise plain Exception
        failing = first_invalid_op(module)
        if failing is not None:
            op, message = failing
            raise VyreError(located(op, f"'{op.name}' op {message}")) from None
        raise VyreError(f"{path}: {error}") from None
    return module


def is_vyre_module(module: ModuleOp) -> bool:
    return any(isinstance(op, vyre.KernelOp) for op in module.walk())


def _pass_names(pipeline: str) -> list[str]:
    """The pass names of a pipeline string ([] if it does not parse: running
    it then reports why)."""
    try:
        return [spec.name for spec in parse_pipeline(pipeline)]
    except ArgSpecParseError:  # apply_pipeline words it
        return []


# an option's type and a value of it (xDSL's own message names neither the
# pass nor the option); True is an int in Python, so ints exclude bools
_OPTION_KINDS = {
    int: ("an integer", "4", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    bool: ("true or false", "true", lambda v: isinstance(v, bool)),
    str: ("a name", "h200", lambda v: isinstance(v, str)),
    float: ("a number", "0.5", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
}


def check_pass_options(available: dict, pipeline: str) -> None:
    """A VyreError naming the pass and the option of `pipeline` whose value
    does not exist (`fctor=4`) or does not have the option's type
    (`factor=abc`, `factor=true`, `device=3`) or, for an integer option of
    ours (a count or a size, 0 where the pass chooses), is negative; options
    of other types, unknown passes and bad syntax are left to xDSL's
    parser."""
    try:
        specs = list(parse_pipeline(pipeline))  # a generator: it raises as it goes
    except ArgSpecParseError:
        return
    for spec in specs:
        if spec.name not in available:
            continue
        pass_type = available[spec.name]()
        if not dataclasses.is_dataclass(pass_type):
            continue
        hints = typing.get_type_hints(pass_type)
        ours = pass_type.__module__.startswith("vyre_xdsl.")
        defaults = {f.name: f.default for f in dataclasses.fields(pass_type)}
        unknown = [option for option in spec.parameters if option not in defaults]
        if unknown:
            raise VyreError(
                f"pass '{spec.name}' has no option {unknown[0]}; its options are "
                f"{', '.join(defaults) or 'none'}")
        for option, values in spec.parameters.items():
            kind = _OPTION_KINDS.get(hints.get(option))
            if kind is None:
                continue
            words, example, fits = kind
            if fits(default := defaults.get(option)):  # the pass's own default, as written
                example = str(default).lower() if isinstance(default, bool) else default
            negative = (ours and hints.get(option) is int and len(values) == 1
                        and fits(values[0]) and values[0] < 0)
            if negative:
                words = "an integer of at least 0"
            if len(values) != 1 or not fits(values[0]) or negative:
                given = ",".join(str(v).lower() if isinstance(v, bool) else str(v)
                                 for v in values) or "nothing"
                raise VyreError(
                    f"pass '{spec.name}': option {option} takes {words} "
                    f"(e.g. {spec.name}{{{option}={example}}}), got {given}")


def run_passes(passes: PassPipeline, ctx: Context, module: ModuleOp) -> None:
    """Apply `passes` in order.  A pass that is not ours (an xDSL pass, a
    plugin) and raises a plain exception on valid IR (e.g. an xDSL pass
    that does not handle an op of the lowered form) is reported as a
    VyreError naming it; our own passes' unexpected exceptions propagate
    (bugs of ours, reported as such by the tools)."""
    from vyre_xdsl.diagnostics import first_invalid_op

    if not passes.passes and passes.callback is not None:
        passes.callback(None, module, None)  # as PassPipeline.apply (verifies)
    for index, one in enumerate(passes.passes):
        if passes.callback is not None and index == 0:
            passes.callback(None, module, one)
        try:
            one.apply(ctx, module)
        except (VerifyException, DiagnosticException, VyreError):
            raise
        except Exception as error:
            if first_invalid_op(module) is not None or type(one).__module__.startswith(
                "vyre_xdsl."
            ):
                raise  # invalid IR (the caller locates it), or a bug of ours
            raise VyreError(
                f"pass '{one.name}' failed on this module ({type(error).__name__}: "
                f"{str(error).strip() or 'no message'}); it does not handle every op "
                f"here (see docs/lowered-ir.md for the ops of the lowered form): "
                f"leave it out of the pipeline or run it on other IR"
            ) from error
        if passes.callback is not None:  # e.g. vyre-opt --print-between-passes
            following = passes.passes[index + 1] if index + 1 < len(passes.passes) else None
            passes.callback(one, module, following)


def apply_pipeline(module: ModuleOp, pipeline: str) -> ModuleOp:
    """Run a comma-separated pass pipeline (vyre and xDSL passes) in place.
    A pipeline that fails (a VyreError) leaves `module` as it was: a pass
    that stopped half way would leave IR that no one asked for."""
    check_module(module, "apply_pipeline")
    before = module.clone()
    try:
        return _run_pipeline(module, pipeline)
    except BaseException:
        _restore(module, before)
        raise


def _restore(module: ModuleOp, before: ModuleOp) -> None:
    """Give `module` the ops, attributes and properties of `before`."""
    block = module.body.block
    for op in reversed(list(block.ops)):  # users before what they use
        block.erase_op(op, safe_erase=False)
    for op in list(before.body.block.ops):
        op.detach()
        block.add_op(op)
    module.attributes = dict(before.attributes)
    module.properties = dict(before.properties)


def _run_pipeline(module: ModuleOp, pipeline: str) -> ModuleOp:
    """apply_pipeline's work on a checked module, without keeping a copy to
    restore."""
    from xdsl.transforms import get_all_passes

    check_pipeline(pipeline)
    available = {**get_all_passes(), **ALL_PASSES}
    check_pass_options(available, pipeline)
    try:
        passes = PassPipeline.parse_spec(available, pipeline)
    except (Exception, ArgSpecParseError) as error:
        # xDSL reports unknown passes as plain exceptions, and bad syntax as
        # an ArgSpecParseError (a BaseException)
        raise VyreError(f"bad pass pipeline {pipeline!r}: {error}") from None
    # verified before the first pass and after each, as vyre-opt does: a
    # pass may leave IR that a later pass would turn into a kernel no
    # verifier sees wrong (a barrier in a fragment whose last workgroup has
    # lanes without an item); the last pass's check is the result's
    passes = PassPipeline(passes.passes, lambda _done, module, _next: module.verify())
    try:
        run_passes(passes, make_context(), module)
    except (VerifyException, DiagnosticException) as error:
        raise VyreError(f"pipeline {pipeline!r} failed: {error}") from None
    except VyreError as error:
        raise VyreError(f"pipeline {pipeline!r} failed: {error}") from None
    except Exception as error:
        # Invalid IR reaching a pass, or an xDSL verifier that raises a plain
        # Exception: name the invalid op; anything else is a bug of ours.
        from vyre_xdsl.diagnostics import first_invalid_op, located

        failing = first_invalid_op(module)
        if failing is None:
            raise
        op, message = failing
        raise VyreError(
            f"pipeline {pipeline!r} failed: {located(op, f'{op.name!r} op {message}')}"
        ) from error
    return module


def lower_to_gpu(
    module: ModuleOp, optimize: str = "default", device: str | None = None,
    f32_parts: int = 0,
) -> ModuleOp:
    """A lowered copy of a vyre module: gpu/arith/scf/math/memref IR that
    verifies in xDSL and in upstream MLIR (docs/lowered-ir.md).

    `optimize` is "default" (the fastest correct choice; it may reorder
    floating-point sums, within the tolerance in docs/performance.md),
    "exact" (private per-lane scratch, unrolled and jammed loops, vectorised
    loads; results bit-identical to "none"), "none" (the seed's layout as it
    is), or a pass pipeline to run after the plain lowering, e.g.
    "vyre-promote-scratch,vyre-unroll-jam{factor=8},cse" (a pipeline that
    names `vyre-to-gpu` itself is run as it is, so vyre-level passes can go
    first: "vyre-stage-kv-tiles,vyre-to-gpu{optimize=none},cse").

    `device` names the profile whose limits "default" fits (vyre_xdsl.device:
    "generic", the default, runs on any Vulkan 1.1 device; "h200",
    "lavapipe", or "vulkan" for the device vx.run(backend="vulkan") uses).

    `f32_parts` (2 or 3; "default" only) lets the plan run an f32
    FlashAttention-2 on the device's bf16 matrix units where that was
    faster, each f32 operand split into that many bf16 parts: not
    bit-exact, within 1e-5 of the oracle with three parts and 3e-4 with two
    (docs/performance.md); 0 keeps f32 on the lanes."""
    from vyre_xdsl.device import DEVICE_NAMES, GENERIC, device_profile
    from vyre_xdsl.passes.vyre_to_gpu import OPTIMISATION_LEVELS

    if not isinstance(optimize, str):
        raise VyreError(
            f"optimize must be a level ({', '.join(OPTIMISATION_LEVELS)}) or a pass "
            f"pipeline string, got {type(optimize).__name__}"
        )
    if not optimize.strip():  # not the plain lowering silently: say which
        raise VyreError(
            f"optimize is empty; give a level ({', '.join(OPTIMISATION_LEVELS)}: 'none' "
            f"is the plain lowering) or a pass pipeline"
        )
    if device is not None:
        if not isinstance(device, str) or device not in DEVICE_NAMES:
            device_profile(device)  # words the error
        if optimize not in OPTIMISATION_LEVELS:
            raise VyreError(
                f"device={device!r} applies to an optimisation level; with a pass "
                f"pipeline name it in the pipeline: 'vyre-to-gpu{{device={device}}}'"
            )
    _check_f32_parts(f32_parts, optimize)
    if optimize in OPTIMISATION_LEVELS:
        chosen = device or GENERIC.name
        split = f" f32_parts={f32_parts}" if f32_parts else ""
        pipeline = f"vyre-to-gpu{{optimize={optimize} device={chosen}{split}}}"
    elif "vyre-to-gpu" in _pass_names(optimize):
        pipeline = optimize  # the whole pipeline, vyre-level passes first
    else:
        pipeline = f"vyre-to-gpu{{optimize=none}},{optimize}"
    check_module(module, "lower_to_gpu")
    if not is_vyre_module(module):
        raise VyreError(
            "lower_to_gpu expects vyre IR (a module with a vyre.kernel); this "
            "module has none, it may already be lowered"
        )
    try:
        return _run_pipeline(module.clone(), pipeline)
    except VyreError as error:
        if optimize in OPTIMISATION_LEVELS:
            raise
        raise VyreError(
            f"optimize={optimize!r} is neither a level ({', '.join(OPTIMISATION_LEVELS)}) "
            f"nor a pass pipeline that runs: {error}"
        ) from None


def _check_f32_parts(parts: object, optimize: str) -> None:
    """A VyreError unless `parts` is a choice of f32_parts for `optimize`."""
    from vyre_xdsl.tuning import f32_parts_problem

    if not isinstance(parts, int | np.integer) or isinstance(parts, bool):
        raise VyreError(f"f32_parts must be an int (0, 2 or 3), got {type(parts).__name__}")
    if reason := f32_parts_problem(parts):
        raise VyreError(reason)
    if parts and optimize != "default":
        raise VyreError(
            f"f32_parts={parts} applies to optimize='default' (the plan decides where to "
            f"split); with a pass pipeline name it there: 'vyre-to-gpu{{f32_parts={parts}}}'"
        )


@dataclass(frozen=True)
class Compiled:
    """A module compiled once: its lowered IR, the host-side description of
    its kernels read from it (kernel_info.ProgramInfo), and the SPIR-V
    module of them when compiled for Vulkan.  `vx.compile`, `vx.run`,
    `vx.compile_spirv` and vyre-run take it from `compile_module`, so
    nothing is lowered or read twice; they also take one in place of a
    module."""

    lowered: ModuleOp
    info: ProgramInfo
    spirv: SpirvModule | None = None


def compile_module(
    module: ModuleOp | Compiled, device: str | None = None, optimize: str = "default",
    *, spirv: bool = False, f32_parts: int = 0,
) -> Compiled:
    """`module` lowered for `device` at `optimize` with `f32_parts`
    (vx.lower_to_gpu; lowered IR is taken as it is) and its kernels read;
    with `spirv`, their SPIR-V emitted too.  A `Compiled` is completed, not
    compiled again."""
    from vyre_xdsl.kernel_info import program_info
    from vyre_xdsl.run import ensure_lowered

    if isinstance(module, Compiled):
        ensure_lowered(module.lowered, device, optimize, f32_parts)  # refuses options
        compiled = module
    else:
        lowered = ensure_lowered(module, device, optimize, f32_parts)
        compiled = Compiled(lowered, program_info(lowered))
    if spirv and compiled.spirv is None:
        from vyre_xdsl.spirv import emit_spirv_module

        compiled = replace(
            compiled, spirv=emit_spirv_module(compiled.lowered, compiled.info)
        )
    return compiled


def compile_spirv(module: ModuleOp | Compiled, device: str | None = None) -> bytes:
    """A SPIR-V binary module for the kernel of `module` (vyre IR, lowered
    for `device` as in lower_to_gpu, or lowered IR)."""
    return compile_module(module, device, spirv=True).spirv.binary
