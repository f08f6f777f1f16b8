"""Programs: a module of several kernels, run in module order over one set of
buffers, passing values through a `temp` buffer (zero-filled, neither an
input nor an output). Checked on every executor: program_info, vx.run on the
interpreter and on Vulkan (lavapipe, validation on), the SPIR-V emitter."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import vyre_xdsl as vx
from requirements import SPIRV_VAL, needs_mlir_opt, needs_val, needs_vulkan
from test_mma import needs_mlir_translate
from vyre_xdsl.compiler import parse_module
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import as_program, kernel_info, program_info
from vyre_xdsl.spirv import disassemble

def _staging_kernel(name: str, workgroup_size: int, buffers: str, staged: str, body: str) -> str:
    """A kernel over 8 items whose in-range lanes stage `staged`[item]
    through `workgroup_size` floats of workgroup memory, then run `body`
    on it (%staged)."""
    return f"""
  vyre.kernel @{name} items 8 workgroup_size {workgroup_size} {{{buffers}
    %stage = vyre.scratch "stage" : memref<{workgroup_size}xf32>
    %item = vyre.item_index
    %lane = vyre.lane_index
    %n = arith.constant 8 : index
    %in_range = arith.cmpi ult, %item, %n : index
    scf.if %in_range {{
      %in = memref.load {staged}[%item] : memref<8xf32>
      memref.store %in, %stage[%lane] : memref<{workgroup_size}xf32>
      %staged = memref.load %stage[%lane] : memref<{workgroup_size}xf32>{body}
    }}
  }}"""


# @scale accumulates 2*q into tmp (so it relies on tmp starting at zero) and
# stages q through 4 floats of workgroup memory; @shift, a later dispatch
# with another workgroup size, reads tmp and writes out = tmp + q, staging
# through 8 floats of its own workgroup memory.
Q_BUFFER = '\n    %q = vyre.buffer "q" binding 0 read [8] : memref<8xf32>'
TMP_BUFFER = '\n    %tmp = vyre.buffer "tmp" binding 2 temp [2, 4] : memref<8xf32>'
PROGRAM = "builtin.module {" + _staging_kernel("scale", 4, Q_BUFFER + TMP_BUFFER, "%q", """
      %two = arith.constant 2.0 : f32
      %doubled = arith.mulf %staged, %two : f32
      %old = memref.load %tmp[%item] : memref<8xf32>
      %sum = arith.addf %old, %doubled : f32
      memref.store %sum, %tmp[%item] : memref<8xf32>""") + _staging_kernel(
    "shift", 8,
    Q_BUFFER + '\n    %out = vyre.buffer "out" binding 1 write [8] : memref<8xf32>' + TMP_BUFFER,
    "%tmp", """
      %x = memref.load %q[%item] : memref<8xf32>
      %y = arith.addf %staged, %x : f32
      memref.store %y, %out[%item] : memref<8xf32>""") + "\n}\n"

# exactly representable, so 2*q + q has one right answer on every device
Q = (np.arange(8, dtype=np.float32) - 3.5) * np.float32(0.25)
EXPECTED = 3 * Q


@pytest.fixture(scope="module")
def program():
    return parse_module(PROGRAM)


@pytest.fixture(scope="module", params=["default", "none"])
def lowered(request, program):
    return vx.lower_to_gpu(program, optimize=request.param)


# program_info -------------------------------------------------------------------

def test_program_info_reads_the_kernels_in_module_order(lowered):
    info = program_info(lowered)
    assert [k.name for k in info.kernels] == ["scale", "shift"]
    assert [k.workgroup_size for k in info.kernels] == [(4, 1, 1), (8, 1, 1)]
    assert [k.grid_size for k in info.kernels] == [(2, 1, 1), (1, 1, 1)]
    assert [b.name for b in info.buffers] == ["q", "out", "tmp"]  # by binding
    assert [b.name for b in info.inputs] == ["q"]
    assert [b.name for b in info.outputs] == ["out"]
    assert [b.name for b in info.temporaries] == ["tmp"]
    tmp = info.buffer("tmp")
    assert tmp.is_temporary and not tmp.is_input and not tmp.is_output
    assert (tmp.binding, tmp.count, tmp.shape) == (2, 8, (2, 4))
    assert "@scale" in info.label and "@shift" in info.label
    assert info.loop_iterations == max(k.loop_iterations for k in info.kernels)


def test_kernel_info_of_a_program_points_to_program_info(lowered):
    with pytest.raises(VyreError, match="2 lowered kernels.*program_info"):
        kernel_info(lowered)


def test_a_kernel_is_a_program_of_one():
    single = vx.lower_to_gpu(vx.flash_attention_2(seq_len=8, head_dim=4, tile_size=4),
                             optimize="none")
    kernel = kernel_info(single)
    program = as_program(kernel)
    assert program.kernels == (kernel,) and program.name == kernel.name
    assert program_info(single).kernels[0].name == kernel.name
    assert as_program(program) is program
    with pytest.raises(VyreError, match="KernelInfo or ProgramInfo"):
        as_program("flash_attention_2")  # type: ignore[arg-type]


# vx.run -------------------------------------------------------------------------

def _run(program, backend, monkeypatch):
    monkeypatch.setenv("VYRE_VULKAN_VALIDATION", "1")  # as tools/test.sh does
    return vx.run(program, {"q": Q}, backend=backend)


def test_run_on_the_interpreter(program, monkeypatch):
    outputs = _run(program, "interpreter", monkeypatch)
    assert list(outputs) == ["out"]
    np.testing.assert_array_equal(outputs["out"], EXPECTED)


@needs_vulkan
def test_run_on_vulkan(program, monkeypatch):
    outputs = _run(program, "vulkan", monkeypatch)
    assert list(outputs) == ["out"]
    np.testing.assert_array_equal(outputs["out"], EXPECTED)


@pytest.mark.parametrize("backend", ["interpreter", "vulkan"])
def test_run_lowered_seed_layout(program, backend, monkeypatch):
    if backend == "vulkan":
        from requirements import VULKAN_PROBLEM

        if VULKAN_PROBLEM is not None:
            pytest.skip(VULKAN_PROBLEM)
    lowered = vx.lower_to_gpu(program, optimize="none")  # scratch in workgroup memory
    np.testing.assert_array_equal(_run(lowered, backend, monkeypatch)["out"], EXPECTED)


def test_a_temporary_is_not_an_input(program):
    with pytest.raises(VyreError, match=r"unknown input 'tmp'.*temporary.*inputs are q$"):
        vx.run(program, {"q": Q, "tmp": np.zeros(8, np.float32)})


def test_the_input_is_required(program):
    with pytest.raises(VyreError, match=r"missing input 'q' for program @scale, @shift"):
        vx.run(program, {})


def test_interpreter_zeroes_a_given_temporary_and_leaves_the_result_there(lowered):
    from vyre_xdsl.interp import execute

    info = program_info(lowered)
    arrays = {"q": Q.copy(), "out": np.zeros(8, np.float32),
              "tmp": np.full(8, 100.0, np.float32)}
    execute(lowered, info, arrays)
    np.testing.assert_array_equal(arrays["tmp"], 2 * Q)
    np.testing.assert_array_equal(arrays["out"], EXPECTED)


@needs_vulkan
@pytest.mark.parametrize("staging", [False, True])
def test_vulkan_repeats_the_whole_program_from_zeroed_temporaries(lowered, staging):
    from vyre_xdsl.spirv import emit_spirv_module
    from vyre_xdsl.vulkan import execute

    info = program_info(lowered)
    arrays = {"q": Q.copy(), "out": np.zeros(8, np.float32)}  # tmp: device only
    timings: dict = {}
    execute(emit_spirv_module(lowered), info, arrays, validation=True, staging=staging,
            timings=timings, repeat=3)
    # @scale accumulates into tmp: a stale tmp would give 2*q more per run
    np.testing.assert_array_equal(arrays["out"], EXPECTED)
    assert len(timings.get("dispatch_ms_each", [0.0] * 3)) == 3


@needs_vulkan
def test_vulkan_times_each_kernel_of_a_program(lowered):
    """timings['kernel_ms']: every kernel's GPU time by name, in program
    order, adding up to the dispatches' time (lavapipe has timestamps)."""
    with vx.compile(lowered, backend="vulkan") as kernel:
        timings: dict = {}
        np.testing.assert_array_equal(kernel(q=Q.copy(), timings=timings)["out"], EXPECTED)
    kernel_ms = timings["kernel_ms"]
    assert list(kernel_ms) == ["scale", "shift"]
    assert all(ms >= 0 for ms in kernel_ms.values())
    assert sum(kernel_ms.values()) == pytest.approx(timings["dispatch_ms"], rel=1e-9)
    assert timings["dispatch_ms"] <= timings["device_ms"]


# SPIR-V -------------------------------------------------------------------------

def _entry_points(binary: bytes) -> list[str]:
    return [line for line in disassemble(binary).splitlines() if "OpEntryPoint" in line]


@needs_val
def test_one_spirv_module_with_an_entry_point_per_kernel(program, tmp_path):
    binary = vx.compile_spirv(program)
    path = tmp_path / "program.spv"
    path.write_bytes(binary)
    result = subprocess.run([SPIRV_VAL, "--target-env", "vulkan1.1", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    entries = _entry_points(binary)
    assert len(entries) == 2
    assert '"scale"' in entries[0] and '"shift"' in entries[1]
    text = disassemble(binary)
    assert "LocalSize 4 1 1" in text and "LocalSize 8 1 1" in text
    # one variable per binding, shared by both entry points
    for binding in (0, 1, 2):
        assert text.count(f"Binding {binding}\n") == 1, binding
    assert text.count("NonWritable") == 1  # q only: tmp is written


def test_workgroup_memory_is_counted_per_entry_point(program):
    from vyre_xdsl.spirv import emit_spirv_module

    spirv = emit_spirv_module(vx.lower_to_gpu(program, optimize="none"))
    assert spirv.entry("scale").workgroup_bytes == 4 * 4
    assert spirv.entry("shift").workgroup_bytes == 4 * 8
    with pytest.raises(VyreError, match="no entry point 'merge'.*scale, shift"):
        spirv.entry("merge")


# consistency of a hand-written lowered program ------------------------------------

def _lowered_text(*kernels) -> str:
    """A lowered module: per kernel (module name, func name, buffers), each
    buffer (name, binding, access, element count); the bodies only return."""
    modules = []
    for module_name, func_name, buffers in kernels:
        types = ", ".join(f"memref<{n}xf32>" for *_, n in buffers)
        args = ", ".join(f"%{name}: memref<{n}xf32>" for name, _, _, n in buffers)
        entries = ", ".join(
            f'#vyre.buffer<name = "{name}", binding = {binding}, access = {access}, '
            f"shape = [{n}], dtype = f32>"
            for name, binding, access, n in buffers
        )
        modules.append(
            f'  "gpu.module"() <{{sym_name = "{module_name}"}}> ({{\n'
            f'    "gpu.func"() <{{function_type = ({types}) -> (), kernel}}> ({{\n'
            f"    ^bb0({args}):\n"
            f'      "gpu.return"() : () -> ()\n'
            f'    }}) {{sym_name = "{func_name}", gpu.kernel, vyre.launch = #vyre.launch<'
            f"items = 4, workgroup = [4, 1, 1], grid = [1, 1, 1], buffers = [{entries}]>}} "
            f": () -> ()\n"
            f"  }}) : () -> ()"
        )
    body = "\n".join(modules)
    return f"builtin.module attributes {{gpu.container_module}} {{\n{body}\n}}"


def test_hand_written_program_runs(monkeypatch):
    text = _lowered_text(
        ("a", "a", [("x", 0, "read", 4), ("t", 1, "temp", 4)]),
        ("b", "b", [("x", 0, "read", 4), ("t", 1, "temp", 4), ("y", 2, "write", 4)]),
    )
    info = program_info(parse_module(text))
    assert [b.name for b in info.buffers] == ["x", "t", "y"]
    outputs = vx.run(parse_module(text), {"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(outputs["y"], np.zeros(4, np.float32))  # zeroed


@pytest.mark.parametrize("second, message", [
    ([("x", 3, "read", 4)],
     r"buffer 'x' is binding 0 read \[4\] f32 in kernel @a but binding 3 read \[4\] f32 in "
     r"kernel @b;.*declare it the same way in each"),
    ([("x", 0, "temp", 4)],
     r"buffer 'x' is binding 0 read \[4\] f32 in kernel @a but binding 0 temp \[4\]"),
    ([("x", 0, "read", 8)],
     r"buffer 'x' is binding 0 read \[4\] f32 in kernel @a but binding 0 read \[8\]"),
    ([("z", 1, "write", 4)],
     r"binding 1 is buffer 'y' in kernel @a but buffer 'z' in kernel @b;.*give each "
     r"name its own binding"),
])
def test_kernels_that_disagree_on_a_buffer_are_refused(second, message):
    module = parse_module(_lowered_text(
        ("a", "a", [("x", 0, "read", 4), ("y", 1, "write", 4)]),
        ("b", "b", second),
    ))
    with pytest.raises(VyreError, match=message) as raised:
        program_info(module)
    assert raised.value.op.sym_name.data == "b"  # located at the later kernel


def test_two_kernels_of_one_name_are_refused():
    module = parse_module(_lowered_text(
        ("a", "k", [("x", 0, "read", 4)]),
        ("b", "k", [("x", 0, "read", 4)]),
    ))
    with pytest.raises(VyreError, match="two kernels of the module are named @k"):
        program_info(module)


# vyre-run -------------------------------------------------------------------------

def test_vyre_run_runs_a_program(tmp_path, capsys):
    from vyre_xdsl.tools.vyre_run import main

    source = tmp_path / "program.mlir"
    source.write_text(PROGRAM)
    q = tmp_path / "q.npy"
    np.save(q, Q)
    out = tmp_path / "out.npy"
    assert main([str(source), "--input", f"q={q}", "--output", f"out={out}"]) == 0
    np.testing.assert_array_equal(np.load(out), EXPECTED)
    assert main([str(source), "--random", "--output", f"tmp={out}"]) == 1
    assert "program @scale, @shift has no output 'tmp'; its outputs are out" in (
        capsys.readouterr().err)


@needs_mlir_translate
@needs_mlir_opt
def test_each_kernel_of_a_program_has_a_module_of_its_own(tmp_path):
    """The Vulkan runtime builds each pipeline from its kernel's own module
    (SpirvModule.alone): SPIR-V 1.3's entry points do not list their
    Workgroup variables, so a driver may count a module's all for each. A
    program whose three kernels use workgroup memory: each module declares
    one entry point and only its kernel's Workgroup variables, named after
    it in the whole module.  MLIR's deserialiser verifies each module and
    the whole (Debian's spirv-val predates cooperative matrices)."""
    from test_mma import _mlir_verifies_spirv

    from vyre_xdsl.spirv import emit_spirv_module

    module = vx.mla_decode(seq_len=64, num_heads=4, head_dim=16, kv_lora_rank=64,
                           qk_rope_head_dim=16, batch=2, dtype="bf16")
    lowered = vx.lower_to_gpu(module, optimize="vyre-absorb-mla{kernels=3},"
                              "vyre-projection-tensor-cores{device=h200 force=true},"
                              "vyre-to-gpu{optimize=none}")
    spirv = emit_spirv_module(lowered)
    names = [e.name for e in spirv.entries]
    assert len(names) == 3 and len(spirv.alone) == 3 == len(spirv.binaries())
    whole = disassemble(spirv.binary)
    for name in ("mla_decode_absorb_query", "mla_decode_project"):
        assert f'"{name}.hp_source"' in whole
    for name, binary in zip(names, spirv.alone, strict=True):
        text = disassemble(binary)
        assert text.count("OpEntryPoint") == 1 and f'"{name}"' in text
        workgroup = {line.split('"')[1].split(".")[0] for line in text.splitlines()
                     if "OpName" in line and "." in line.split('"')[1]}
        assert workgroup <= {name}
        _mlir_verifies_spirv(binary, tmp_path)
    _mlir_verifies_spirv(spirv.binary, tmp_path)
    single = emit_spirv_module(vx.lower_to_gpu(vx.flash_attention_2(seq_len=16, head_dim=4),
                                               optimize="none"))
    assert single.alone == () and single.binaries() == (single.binary,)
