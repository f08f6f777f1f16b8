"""tools/gpu_check.py's cases compile here as the H200 run compiles them
(they run only on a GPU): a harness error there costs a device lease."""

from __future__ import annotations

import pytest

from tools import gpu_check
from vyre_xdsl.compiler import is_vyre_module

LOWERED = [case for case in gpu_check.cases(False) if not is_vyre_module(case.build())]


@pytest.mark.parametrize("case", LOWERED, ids=lambda case: case.name)
def test_lowered_cases_compile_as_they_are(case):
    """The mma kernels are lowered IR: compiled without a device (it
    applies to vyre IR only, and was refused there)."""
    compiled = gpu_check.compile_case(case)
    assert compiled.spirv is not None and compiled.info.kernels


def test_there_are_lowered_cases():
    assert len(LOWERED) >= 4
