"""Scripts of benchmarks/ imported as CI runs their tests: without torch."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str, patch: pytest.MonkeyPatch):
    """benchmarks/<name>.py as a module; `import torch` raises while it loads
    (the scripts import torch only where they run it). `patch` undoes the
    sys.path entry for its shared helpers (_common.py) and the module's
    registration (dataclasses look it up) when the caller is done."""
    patch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    patch.setitem(sys.modules, spec.name, module)
    with pytest.MonkeyPatch.context() as no_torch:
        no_torch.setitem(sys.modules, "torch", None)
        spec.loader.exec_module(module)
    return module


def benchmark_fixture(name: str):
    """A module-scoped fixture giving load_benchmark(name)."""

    @pytest.fixture(scope="module")
    def fixture():
        with pytest.MonkeyPatch.context() as patch:
            yield load_benchmark(name, patch)

    return fixture
