"""Markers for tests that need a system tool (a Vulkan driver, spirv-val).

On a developer's machine without the tool the test is skipped with the
Debian package to install; under CI (CI set in the environment), where
tools/setup.sh installs every tool, a missing tool fails the test instead,
so a broken setup can never pass as skipped tests.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess

import pytest

from vyre_xdsl.errors import VyreError


def _vulkan_problem() -> str | None:
    try:
        from vyre_xdsl.vulkan import runtime

        runtime._context(runtime._validation_requested(None))
    except VyreError as error:
        return str(error)
    return None


def requires(problem: str | None):
    """A marker: the test needs a tool; `problem` says what is missing, if
    anything (tests/conftest.py skips it, or fails it under CI)."""
    return pytest.mark.vyre_requires(problem)


def check_requirements(item) -> None:
    """Called for every test before it runs (tests/conftest.py)."""
    for marker in item.iter_markers("vyre_requires"):
        problem = marker.args[0]
        if problem is None:
            continue
        if os.environ.get("CI"):
            pytest.fail(f"CI installs every tool the tests need, but: {problem}")
        pytest.skip(problem)


VULKAN_PROBLEM = _vulkan_problem()
needs_vulkan = requires(None if VULKAN_PROBLEM is None else f"no Vulkan: {VULKAN_PROBLEM}")
SPIRV_VAL = shutil.which("spirv-val")
SPIRV_DIS = shutil.which("spirv-dis")
needs_val = requires(None if SPIRV_VAL else "spirv-val not installed (Debian spirv-tools)")


def assert_spirv_valid(binary: bytes, tmp_path) -> None:
    """spirv-val (Vulkan 1.1 rules) accepts `binary` (a @needs_val test)."""
    path = tmp_path / "k.spv"
    path.write_bytes(binary)
    result = subprocess.run([SPIRV_VAL, "--target-env", "vulkan1.1", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
needs_dis = requires(None if SPIRV_DIS else "spirv-dis not installed (Debian spirv-tools)")
SPIRV_AS = shutil.which("spirv-as")
needs_as = requires(None if SPIRV_AS else "spirv-as not installed (Debian spirv-tools)")
MLIR_OPT = shutil.which("mlir-opt-22")
needs_mlir_opt = requires(None if MLIR_OPT else "mlir-opt-22 not installed (Debian mlir-22-tools)")


BF16_MATRIX = re.compile(r"!gpu\.mma_matrix<\d+x\d+xbf16")


def assert_mlir_opt_accepts(module) -> str:
    """mlir-opt-22 parses and verifies `module` (lowered IR) as xDSL prints
    it, in custom and in generic form (a @needs_mlir_opt test): the custom
    form checks our custom syntax, the generic one every property (MLIR
    checks their attribute kinds there); returns MLIR's print of it."""
    from xdsl.printer import Printer

    # The vyre.* attributes (dialects/launch.py) are opaque to MLIR, which
    # then also takes unregistered ops: every op must be upstream's.
    foreign = {op.name for op in module.walk() if op.name.startswith("vyre.")}
    assert not foreign, f"vyre ops left in lowered IR: {sorted(foreign)}"
    generic = io.StringIO()
    Printer(stream=generic, print_generic_format=True).print_op(module)
    printed = {}
    for form, text in (("custom", str(module)), ("generic", generic.getvalue())):
        if BF16_MATRIX.search(text):
            # MLIR 22's gpu dialect has no bf16 matrix (docs/lowered-ir.md):
            # the rest is checked with bf16 read as f16, the other 16-bit
            # float, and the kernel's SPIR-V, bf16 matrices and all, by
            # MLIR's SPIR-V dialect (assert_mlir_verifies_spirv)
            text = text.replace("bf16", "f16")
        result = subprocess.run([MLIR_OPT, "--allow-unregistered-dialect"], input=text,
                                capture_output=True, text=True)
        assert result.returncode == 0, f"mlir-opt-22 rejects the {form} form:\n{result.stderr}"
        printed[form] = result.stdout
    return printed["custom"]
