"""vyre-opt: xdsl-opt with the vyre dialect, passes and SPIR-V targets.

A thin subclass of xDSL's `xDSLOptMain`: every xDSL pass and flag keeps
working.  What it adds: the vyre dialect and passes, `-t spirv` (binary) and
`-t spirv-asm`, `--plugin` to load passes written in Python, and errors as
located `error:` diagnostics with a non-zero exit instead of tracebacks.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import parse_spec
from xdsl.utils.exceptions import (
    ArgSpecParseError,
    DiagnosticException,
    ParseError,
    VerifyException,
)
from xdsl.xdsl_opt_main import xDSLOptMain

from vyre_xdsl.diagnostics import (
    LocatingParser,
    describe,
    first_invalid_op,
    is_blank,
    located,
    source_text,
)
from vyre_xdsl.errors import VyreError
from vyre_xdsl.passes import ALL_PASSES

BINARY_TARGETS = ("spirv",)
EXIT_ERROR = 1  # invalid IR or a failing pass
EXIT_USAGE = 2  # bad command line, unreadable input


class VyreOptMain(xDSLOptMain):
    version_format = "vyre-opt (vyre-xdsl) built on xdsl version {xdsl_version}"

    def __init__(self, args: Sequence[str] | None = None):
        super().__init__(description="vyre modular optimizer driver", args=args)

    # -- registration --------------------------------------------------------

    def register_all_dialects(self):
        super().register_all_dialects()
        if "vyre" not in self.ctx.registered_dialect_names:
            from vyre_xdsl.dialects.vyre import Vyre

            self.ctx.register_dialect("vyre", lambda: Vyre)
        from vyre_xdsl.dialects import gpu_mma, gpu_shuffle, vector_from_elements

        gpu_shuffle.load_into(self.ctx)
        gpu_mma.load_into(self.ctx)
        vector_from_elements.load_into(self.ctx)

    def register_all_passes(self):
        super().register_all_passes()
        for name, factory in ALL_PASSES.items():
            self.register_pass(name, factory)
        for plugin in _plugins_from_argv(sys.argv[1:] if self._argv is None else self._argv):
            for pass_class in load_plugin(plugin):
                self.register_pass(pass_class.name, lambda cls=pass_class: cls)

    def register_all_targets(self):
        super().register_all_targets()
        self.available_targets["spirv"] = lambda: None  # handled in emit()
        self.available_targets["spirv-asm"] = lambda: None

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser):
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--plugin",
            action="append",
            default=[],
            metavar="PATH.py|MODULE",
            help="import a Python file or module and register every ModulePass "
            "subclass it defines by its name (repeatable)",
        )

    def register_all_frontends(self):
        def parse_mlir(io) -> ModuleOp:
            text = source_text(io.read(), self.get_input_name())
            if is_blank(text):
                return ModuleOp([])  # as mlir-opt: an empty input is an empty module
            parser = LocatingParser(self.ctx, text, self.get_input_name())
            parser.line_offset = self._chunk_offset
            return parser.parse_module(not self.args.no_implicit_module)

        self.available_frontends["mlir"] = parse_mlir

    # -- running -------------------------------------------------------------

    _argv: Sequence[str] | None = None
    _chunk_offset = 0

    def get_input_stream(self):
        """xDSL's, but `-` is standard input and a file whose extension names
        no frontend is MLIR, as mlir-opt reads it (`vyre-opt /dev/null`)."""
        if self.args.input_file == "-":
            return sys.stdin.buffer, "mlir"
        stream, extension = super().get_input_stream()
        return stream, extension if extension in self.available_frontends else "mlir"

    def parse_chunk(self, chunk, file_extension, start_offset=0):
        self._chunk_offset = start_offset
        return super().parse_chunk(chunk, file_extension, start_offset)

    def setup_pipeline(self):
        """xDSL's, once the options' types are checked (its own message
        names neither the pass nor the option)."""
        from vyre_xdsl.compiler import check_pass_options

        check_pass_options(self.available_passes, self.args.passes)
        super().setup_pipeline()

    def apply_passes(self, prog: ModuleOp) -> None:
        """Apply the pipeline; a plugin or xDSL pass that raises is reported
        naming the pass (vyre_xdsl.compiler.run_passes)."""
        from vyre_xdsl.compiler import run_passes

        run_passes(self.pipeline, self.ctx, prog)

    def emit(self, module: ModuleOp) -> str | bytes:
        target = parse_spec(self.args.target).name
        if target in ("spirv", "spirv-asm"):
            from vyre_xdsl import compile_spirv
            from vyre_xdsl.spirv import disassemble

            binary = compile_spirv(module)
            return binary if target == "spirv" else disassemble(binary)
        if target == "mlir":
            return self.output_resulting_program(module)
        try:  # xDSL's other targets (wgsl, riscv-asm, ...) know few of our ops
            return self.output_resulting_program(module)
        except Exception as error:
            if os.environ.get("VYRE_DEBUG"):
                raise
            reason = (str(error).strip().split("\n")[0][:160] or "no message").rstrip("(")
            raise VyreError(
                f"xDSL's target '{target}' cannot print this module ({type(error).__name__}: "
                f"{reason}); vyre-opt's own targets are mlir, spirv and spirv-asm"
            ) from None

    def run(self) -> int:
        """Parse, transform and emit each chunk; report errors as located
        diagnostics.  Returns the process exit code."""
        try:
            chunks, extension = self.prepare_input()
        except (OSError, ValueError) as error:
            print(f"error: {_os_message(error, self.get_input_name())}", file=sys.stderr)
            return EXIT_USAGE
        binary = parse_spec(self.args.target).name in BINARY_TARGETS
        pieces: list[str | bytes] = []
        status = 0
        for index, (chunk, offset) in enumerate(chunks):
            if index > 0:
                pieces.append("// -----\n")
            module = None
            try:
                module = self.parse_chunk(chunk, extension, offset)
                if module is None:
                    continue
                self.apply_passes(module)
                pieces.append(self.emit(module))
            except (ParseError, VerifyException, DiagnosticException, VyreError) as error:
                if isinstance(error, ParseError):
                    error.span = dataclasses.replace(error.span, line_offset=offset)
                diagnostic = describe(error, module, self.get_input_name())
                if self.args.verify_diagnostics:
                    pieces.append(diagnostic + "\n")
                else:
                    print(diagnostic, file=sys.stderr)
                    status = EXIT_ERROR
                    break
            except Exception as error:  # a bug of ours: still no traceback
                if os.environ.get("VYRE_DEBUG"):
                    raise
                # Invalid IR that crashed a pass or an xDSL verifier which
                # raises a plain Exception: report the invalid op, located.
                failing = first_invalid_op(module) if module is not None else None
                if failing is not None:
                    op, message = failing
                    diagnostic = located(op, f"'{op.name}' op {message}")
                    if self.args.verify_diagnostics:
                        pieces.append(diagnostic + "\n")
                        continue
                    print(diagnostic, file=sys.stderr)
                    status = EXIT_ERROR
                    break
                print(
                    f"{self.get_input_name()}: error: internal compiler error "
                    f"({type(error).__name__}: {error}); rerun with VYRE_DEBUG=1 "
                    f"for the traceback and report it",
                    file=sys.stderr,
                )
                status = EXIT_ERROR
                break
            finally:
                chunk.close()
        return status if status else self._write(pieces, binary)

    def _write(self, pieces: list[str | bytes], binary: bool) -> int:
        try:
            if binary:
                data = b"".join(p if isinstance(p, bytes) else p.encode() for p in pieces)
                if self.args.output_file:
                    Path(self.args.output_file).write_bytes(data)
                elif sys.stdout.isatty():
                    print("error: refusing to write binary SPIR-V to a terminal; "
                          "use -o FILE.spv or -t spirv-asm", file=sys.stderr)
                    return EXIT_USAGE
                else:
                    sys.stdout.buffer.write(data)
            else:
                text = "".join(p if isinstance(p, str) else p.decode() for p in pieces)
                if self.args.output_file:
                    Path(self.args.output_file).write_text(text)
                else:
                    sys.stdout.write(text)
        except OSError as error:
            print(f"error: {_os_message(error, self.args.output_file)}", file=sys.stderr)
            return EXIT_USAGE
        return 0


def _os_message(error: Exception, name: str | None) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"cannot open '{error.filename or name}': {error.strerror}"
    return str(error)


def _plugins_from_argv(argv: Sequence[str]) -> list[str]:
    """--plugin values, read before argparse runs (passes must be registered
    before the pipeline is parsed)."""
    plugins: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--plugin" and i + 1 < len(argv):
            plugins.append(argv[i + 1])
        elif arg.startswith("--plugin="):
            plugins.append(arg.split("=", 1)[1])
    return plugins


def load_plugin(spec: str) -> list[type[ModulePass]]:
    """Import a plugin (a .py path or a module name) and return the
    ModulePass subclasses it defines."""
    if spec.endswith(".py") or "/" in spec:
        path = Path(spec)
        if not path.is_file():
            raise VyreError(f"plugin file '{spec}' does not exist")
        # read as Python whatever its suffix (spec_from_file_location
        # knows only .py and the like)
        loader = importlib.machinery.SourceFileLoader(f"vyre_plugin_{path.stem}", str(path))
        module_spec = importlib.util.spec_from_loader(loader.name, loader)
        assert module_spec is not None
        module = importlib.util.module_from_spec(module_spec)
        try:
            loader.exec_module(module)
        except SyntaxError as error:
            raise VyreError(f"plugin file '{spec}' is not valid Python: {error.msg} "
                            f"(line {error.lineno})") from None
    else:
        try:
            module = importlib.import_module(spec)
        except ImportError as error:
            raise VyreError(f"cannot import plugin module '{spec}': {error}") from None
    passes = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, ModulePass)
        and value is not ModulePass
        and value.__module__ == module.__name__
        and isinstance(getattr(value, "name", None), str)
    ]
    if not passes:
        raise VyreError(f"plugin '{spec}' defines no ModulePass subclass with a name")
    return passes


def main(argv: Sequence[str] | None = None) -> None:
    VyreOptMain._argv = argv
    try:
        tool = VyreOptMain(args=argv)
    except VyreError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except (Exception, ArgSpecParseError) as error:
        # xDSL reports unknown passes as ValueError, and a malformed pipeline
        # as an ArgSpecParseError (a BaseException)
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    sys.exit(tool.run())


__all__ = ["VyreOptMain", "main", "load_plugin"]
