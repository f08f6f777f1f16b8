"""Checks that several test modules share."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl.errors import VyreError


def assert_bad_paged_inputs_refused(module, inputs: dict[str, np.ndarray]) -> None:
    """vx.run refuses a paged kernel's kv_lens and block_table of the wrong
    dtype or size, or a missing kv_lens, naming the input."""
    for name, bad, match in [
        ("kv_lens", inputs["kv_lens"].astype(np.float32), r"'kv_lens' has dtype float32"),
        ("kv_lens", inputs["kv_lens"].astype(np.int64), r"'kv_lens' has dtype int64"),
        ("kv_lens", np.zeros(4, np.int32), r"'kv_lens' has 4 elements"),
        ("block_table", inputs["block_table"][:, :2].copy(), r"'block_table' has 6 elements"),
        ("block_table", inputs["block_table"].astype(np.float32), r"'block_table' has dtype"),
    ]:
        with pytest.raises(VyreError, match=match):
            vx.run(module, dict(inputs, **{name: bad}))
    with pytest.raises(VyreError, match="missing input 'kv_lens'"):
        vx.run(module, {n: a for n, a in inputs.items() if n != "kv_lens"})


def lowered_f32_kernel(name: str, body: str, *, n: int, lanes: int, grid: int, inputs,
                       outputs, attrs: str = "", arg_suffix: str = "") -> str:
    """A hand-written lowered kernel `name` over `n` items in workgroups
    of `lanes`, with read buffers `inputs` and write buffers `outputs` of
    n f32 (arguments %<name><arg_suffix>); `body` runs for every lane with
    %i (global id), %lane, %n and the arguments in scope.  `attrs`: more
    attributes of the gpu.func."""
    ty = f"memref<{n}xf32>"
    names = [*inputs, *outputs]
    buffers = ", ".join(
        f'#vyre.buffer<name = "{buffer}", binding = {b}, access = '
        f'{"write" if buffer in outputs else "read"}, shape = [{n}], dtype = f32>'
        for b, buffer in enumerate(names)
    )
    return f"""
builtin.module attributes {{gpu.container_module}} {{
  "gpu.module"() <{{sym_name = "{name}"}}> ({{
    "gpu.func"() <{{function_type = ({", ".join([ty] * len(names))}) -> (), kernel}}> ({{
    ^bb0({", ".join(f"%{buffer}{arg_suffix}: {ty}" for buffer in names)}):
      %i = "gpu.global_id"() <{{dimension = #gpu<dim x>}}> : () -> index
      %lane = "gpu.thread_id"() <{{dimension = #gpu<dim x>}}> : () -> index
      %n = arith.constant {n} : index
{body}
      "gpu.return"() : () -> ()
    }}) {{sym_name = "{name}", gpu.kernel, vyre.launch = #vyre.launch<items = {n},
        workgroup = [{lanes}, 1, 1], grid = [{grid}, 1, 1],
        buffers = [{buffers}]> {attrs}}} : () -> ()
  }}) : () -> ()
}}
"""


def merge_teams_of(module) -> int:
    """The teams of the module's merge kernel (vyre.merge_splits `teams`),
    1 without one: the oracle's `merge_teams` for its order."""
    from vyre_xdsl.dialects import vyre

    merges = [op for op in module.walk() if isinstance(op, vyre.MergeSplitsOp)]
    assert len(merges) <= 1, "one merge kernel expected"
    return merges[0].team_count if merges else 1


def dont_unroll_loops(binary: bytes) -> int:
    """How many of a SPIR-V binary's loops say LoopControl DontUnroll."""
    from vyre_xdsl.spirv import disassemble

    return [line.split()[-1] for line in disassemble(binary).splitlines()
            if "OpLoopMerge" in line].count("DontUnroll")
