"""Subgroup shuffles end to end: `gpu.shuffle` and `gpu.subgroup_size` in
hand-written lowered kernels, run by the interpreter (subgroups of 32
consecutive lanes, or the whole workgroup) and on Vulkan (lavapipe: 8), the
SPIR-V checked by spirv-val, the emitter's width rule and the runtime's
device check.

Expectations are computed from the subgroup size each backend reports (the
kernels store `gpu.subgroup_size`), assuming, as every driver we know does
for one-dimensional workgroups, that a subgroup is a run of consecutive lanes.
"""

from __future__ import annotations

import io
import subprocess

import numpy as np
import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, f32, i32
from xdsl.printer import Printer

import vyre_xdsl as vx
from helpers import lowered_f32_kernel
from requirements import (
    SPIRV_DIS,
    assert_mlir_opt_accepts,
    assert_spirv_valid,
    needs_dis,
    needs_mlir_opt,
    needs_val,
    needs_vulkan,
)
from vyre_xdsl.dialects.gpu_shuffle import ShuffleMode, ShuffleModeAttr, ShuffleOp
from vyre_xdsl.errors import VyreError
from vyre_xdsl.interp import GpuFunctions, LaneState
from vyre_xdsl.spirv import disassemble


def lowered(body: str, *, n: int, lanes: int, outputs=("out",)) -> str:
    """A lowered kernel over `n` items in workgroups of `lanes`: input `x`,
    f32 outputs `outputs`; `body` runs for items below n with %i, %lane, %x
    (x[%i]), %w (the subgroup size as i32) and the buffers in scope."""
    return lowered_f32_kernel("shuffles", f"""      %in_range = arith.cmpi ult, %i, %n : index
      scf.if %in_range {{
        %x = memref.load %x_buf[%i] : memref<{n}xf32>
        %sg = "gpu.subgroup_size"() : () -> index
        %w = arith.index_cast %sg : index to i32
{body}
      }}""", n=n, lanes=lanes, grid=-(-n // lanes), inputs=("x",), outputs=outputs,
                              arg_suffix="_buf")


# The idiom vyre's passes emit: add a value across lanes l, l^1, l^2, l^3.
QUAD_SUM = """
        %c1 = arith.constant 1 : i32
        %r1, %ok1 = gpu.shuffle xor %x, %c1, %w : f32
        %s1 = arith.addf %x, %r1 : f32
        %c2 = arith.constant 2 : i32
        %r2, %ok2 = gpu.shuffle xor %s1, %c2, %w : f32
        %s2 = arith.addf %s1, %r2 : f32
        memref.store %s2, %out_buf[%i] : memref<{n}xf32>
        %ok = arith.andi %ok1, %ok2 : i1
        %one = arith.constant 1.0 : f32
        %zero = arith.constant 0.0 : f32
        %okf = arith.select %ok, %one, %zero : f32
        memref.store %okf, %valid_buf[%i] : memref<{n}xf32>
        %sgf = arith.uitofp %w : i32 to f32
        memref.store %sgf, %size_buf[%i] : memref<{n}xf32>
"""

# One shuffle of x in `mode` by a constant offset, and one of the lane id
# as an i32 (xor 1); where the shuffle is invalid, `out` gets -1.
ONE_SHUFFLE = """
        %c8 = arith.constant 8 : i32
        %c32 = arith.constant 32 : i32
        %lane_i32 = arith.index_cast %lane : index to i32
        %off = arith.constant {offset} : i32
        %r, %ok = gpu.shuffle {mode} %x, %off, {width} : f32
        %one = arith.constant 1.0 : f32
        %zero = arith.constant 0.0 : f32
        %minus_one = arith.constant -1.0 : f32
        %shown = arith.select %ok, %r, %minus_one : f32
        memref.store %shown, %out_buf[%i] : memref<{n}xf32>
        %okf = arith.select %ok, %one, %zero : f32
        memref.store %okf, %valid_buf[%i] : memref<{n}xf32>
        %sgf = arith.uitofp %w : i32 to f32
        memref.store %sgf, %size_buf[%i] : memref<{n}xf32>
        %c1 = arith.constant 1 : i32
        %partner, %partner_ok = gpu.shuffle xor %lane_i32, %c1, %w : i32
        %partner_f = arith.uitofp %partner : i32 to f32
        memref.store %partner_f, %partner_buf[%i] : memref<{n}xf32>
"""
OUTPUTS = ("out", "valid", "size", "partner")


def quad_sum_module(n: int = 64, lanes: int = 32):
    text = lowered(QUAD_SUM.format(n=n), n=n, lanes=lanes,
                   outputs=("out", "valid", "size"))
    return vx.parse_module(text)


def shuffle_module(mode: str, offset: int, *, n: int = 64, lanes: int = 64,
                   width: str = "%w"):
    body = ONE_SHUFFLE.format(mode=mode, offset=offset, width=width, n=n)
    return vx.parse_module(lowered(body, n=n, lanes=lanes, outputs=OUTPUTS))


def inputs(n: int):
    # distinct values whose sums of four are exact in f32
    return {"x": np.random.default_rng(7).permutation(n).astype(np.float32) + 100}


def expected_quad_sums(x: np.ndarray) -> np.ndarray:
    quads = x.reshape(-1, 4)
    # every lane of a quad adds the same pairs, and f32 + is commutative
    sums = (quads[:, 0] + quads[:, 1]) + (quads[:, 2] + quads[:, 3])
    return np.repeat(sums, 4)


def expected_shuffle(x, mode, offset, size, lanes, width=None):
    """(value where valid else -1, valid) of a shuffle in subgroups of
    `size` consecutive lanes, `width` of them taking part."""
    width = size if width is None else min(width, size)
    lane = np.arange(x.size) % lanes
    local = lane % size
    source = {"xor": local ^ offset, "up": local - offset,
              "down": local + offset, "idx": np.full_like(local, offset)}[mode]
    valid = (source >= 0) & (source < width)
    index = np.arange(x.size) - local + np.clip(source, 0, size - 1)
    return np.where(valid, x[index], np.float32(-1)), valid


def vulkan_run(module, arrays, monkeypatch):
    monkeypatch.setenv("VYRE_VULKAN_VALIDATION", "1")
    return vx.run(module, arrays, backend="vulkan")


# the idiom ---------------------------------------------------------------------

@pytest.mark.parametrize("lanes", [32, 64, 16])
def test_quad_sums_in_the_interpreter(lanes):
    n = 64
    x = inputs(n)
    got = vx.run(quad_sum_module(n, lanes), x)
    assert (got["size"] == min(32, lanes)).all()
    np.testing.assert_array_equal(got["out"], expected_quad_sums(x["x"]))
    assert (got["valid"] == 1).all()


@needs_vulkan
def test_quad_sums_on_vulkan(monkeypatch):
    from vyre_xdsl.vulkan import runtime

    n = 256
    x = inputs(n)
    got = vulkan_run(quad_sum_module(n, 64), x, monkeypatch)
    device_size = runtime._context(True).subgroup.size
    assert (got["size"] == device_size).all()
    np.testing.assert_array_equal(got["out"], expected_quad_sums(x["x"]))
    assert (got["valid"] == 1).all()
    # the interpreter agrees bit for bit, with its own subgroup size
    np.testing.assert_array_equal(vx.run(quad_sum_module(n, 64), x)["out"], got["out"])


# every mode -------------------------------------------------------------------

MODES = [("xor", 1), ("xor", 6), ("up", 3), ("down", 5), ("idx", 7), ("idx", 40)]


@pytest.mark.parametrize("mode,offset", MODES)
@pytest.mark.parametrize("lanes", [64, 24])
def test_modes_in_the_interpreter(mode, offset, lanes):
    """Subgroups of 32 (two per 64-lane workgroup) or the whole workgroup
    (24 lanes); sources beyond the subgroup are invalid."""
    n = 96
    x = inputs(n)
    got = vx.run(shuffle_module(mode, offset, n=n, lanes=lanes), x)
    size = min(32, lanes)
    assert (got["size"] == size).all()
    want, valid = expected_shuffle(x["x"], mode, offset, size, lanes)
    np.testing.assert_array_equal(got["valid"], valid.astype(np.float32))
    np.testing.assert_array_equal(got["out"], want)
    lane = np.arange(n) % lanes
    np.testing.assert_array_equal(got["partner"], lane ^ 1)


@needs_vulkan
@pytest.mark.parametrize("mode,offset", MODES)
def test_modes_on_vulkan(mode, offset, monkeypatch):
    n, lanes = 128, 64
    x = inputs(n)
    got = vulkan_run(shuffle_module(mode, offset, n=n, lanes=lanes), x, monkeypatch)
    size = int(got["size"][0])
    assert (got["size"] == size).all() and size >= 2
    want, valid = expected_shuffle(x["x"], mode, offset, size, lanes)
    np.testing.assert_array_equal(got["valid"], valid.astype(np.float32))
    np.testing.assert_array_equal(got["out"], want)
    np.testing.assert_array_equal(got["partner"], (np.arange(n) % lanes) ^ 1)


def test_width_below_the_subgroup_in_the_interpreter():
    """Lanes at or beyond `width` are invalid sources (interpreter only: the
    SPIR-V emitter takes no width but the subgroup size)."""
    n = 64
    x = inputs(n)
    for mode, offset in [("xor", 8), ("xor", 3), ("down", 2), ("idx", 9)]:
        got = vx.run(shuffle_module(mode, offset, n=n, width="%c8"), x)
        want, valid = expected_shuffle(x["x"], mode, offset, 32, 64, width=8)
        np.testing.assert_array_equal(got["valid"], valid.astype(np.float32), err_msg=mode)
        np.testing.assert_array_equal(got["out"], want, err_msg=mode)


def test_inactive_source_lanes_are_invalid():
    """Inside a branch only even lanes take, a lane reading an odd lane gets
    valid = false and keeps its own value."""
    n = 32
    body = """
        %c2 = arith.constant 2 : index
        %parity = arith.remui %lane, %c2 : index
        %c0 = arith.constant 0 : index
        %even = arith.cmpi eq, %parity, %c0 : index
        scf.if %even {{
          %c1 = arith.constant 1 : i32
          %r1, %ok1 = gpu.shuffle xor %x, %c1, %w : f32
          memref.store %r1, %out_buf[%i] : memref<{n}xf32>
          %c2_i32 = arith.constant 2 : i32
          %r2, %ok2 = gpu.shuffle xor %x, %c2_i32, %w : f32
          memref.store %r2, %partner_buf[%i] : memref<{n}xf32>
          %one = arith.constant 1.0 : f32
          %zero = arith.constant 0.0 : f32
          %ok1f = arith.select %ok1, %one, %zero : f32
          memref.store %ok1f, %valid_buf[%i] : memref<{n}xf32>
          %ok2f = arith.select %ok2, %one, %zero : f32
          memref.store %ok2f, %size_buf[%i] : memref<{n}xf32>
        }}
""".format(n=n)
    x = inputs(n)
    got = vx.run(vx.parse_module(lowered(body, n=n, lanes=n, outputs=OUTPUTS)), x)
    even = np.arange(n) % 2 == 0
    np.testing.assert_array_equal(got["out"][even], x["x"][even])  # own value
    np.testing.assert_array_equal(got["valid"][even], 0)
    partners = np.arange(n) ^ 2  # even lanes reading even lanes: valid
    np.testing.assert_array_equal(got["partner"][even], x["x"][partners][even])
    np.testing.assert_array_equal(got["size"][even], 1)
    np.testing.assert_array_equal(got["out"][~even], 0)  # odd lanes store nothing


def _shuffle_op(mode: ShuffleMode) -> ShuffleOp:
    """A detached gpu.shuffle of an f32 (its operands' values are passed in)."""
    offset = arith.ConstantOp(IntegerAttr(0, i32)).result
    value = arith.ConstantOp(FloatAttr(0.0, f32)).result
    return ShuffleOp(value, offset, offset, mode)


def test_uniform_values_stay_uniform():
    """A uniform value shuffles to itself; `valid` is one scalar when every
    lane agrees, a vector otherwise."""
    functions = GpuFunctions(LaneState((64, 1, 1), (1, 1, 1)))

    def shuffle(mode, value, offset):
        args = (value, np.uint32(offset), np.uint32(32))
        return functions.run_shuffle(None, _shuffle_op(mode), args).values

    value = np.float32(2.5)
    result, valid = shuffle(ShuffleMode.IDX, value, 3)
    assert np.ndim(result) == 0 and result == value
    assert np.ndim(valid) == 0 and bool(valid)
    result, valid = shuffle(ShuffleMode.UP, value, 3)
    assert np.ndim(result) == 0 and result == value
    np.testing.assert_array_equal(valid, np.arange(64) % 32 >= 3)
    result, valid = shuffle(ShuffleMode.IDX, np.arange(64, dtype=np.float32), 3)
    np.testing.assert_array_equal(result, np.where(np.arange(64) < 32, 3, 35))
    assert np.ndim(valid) == 0 and bool(valid)


# MLIR's form ---------------------------------------------------------------------

def _generic(module) -> str:
    text = io.StringIO()
    Printer(stream=text, print_generic_format=True).print_op(module)
    return text.getvalue()


@pytest.mark.parametrize("mode", list(ShuffleMode))
def test_mode_is_mlirs_enum_attribute(mode):
    """The mode prints as MLIR 22's `#gpu<shuffle_mode ...>` in generic form
    and either form parses back to the same IR."""
    module = shuffle_module(mode, 1)
    op = next(op for op in module.walk() if isinstance(op, ShuffleOp))
    assert op.mode == ShuffleModeAttr(mode)
    text = _generic(module)
    assert f'"gpu.shuffle"(%x, %off, %w) <{{mode = #gpu<shuffle_mode {mode}>}}>' in text
    assert f"gpu.shuffle {mode} %x, %off, %w : f32" in str(module)
    assert str(vx.parse_module(text)) == str(module)
    assert _generic(vx.parse_module(str(module))) == text


def test_mode_must_be_a_shuffle_mode():
    with pytest.raises(ValueError, match="sideways"):
        _shuffle_op("sideways")


@needs_mlir_opt
@pytest.mark.parametrize("mode", list(ShuffleMode))
def test_upstream_mlir_accepts_every_mode(mode):
    printed = assert_mlir_opt_accepts(shuffle_module(mode, 1))
    assert f"gpu.shuffle  {mode} " in printed


# SPIR-V --------------------------------------------------------------------------

@needs_val
def test_quad_sum_spirv_validates(tmp_path):
    binary = vx.compile_spirv(quad_sum_module())
    assert_spirv_valid(binary, tmp_path)
    assert binary[4:8] == bytes.fromhex("00030100")  # SPIR-V 1.3
    text = disassemble(binary)
    assert text.count("OpGroupNonUniformShuffleXor") == 2
    assert "OpCapability GroupNonUniformShuffle\n" in text
    assert "GroupNonUniformShuffleRelative" not in text
    assert "BuiltIn SubgroupSize" in text
    assert "BuiltIn SubgroupLocalInvocationId" in text  # `valid` is used
    entry = next(line for line in text.splitlines() if "OpEntryPoint" in line)
    size_var = next(line.split()[1] for line in text.splitlines()
                    if "BuiltIn SubgroupSize" in line)
    assert size_var in entry.split()


@needs_val
@pytest.mark.parametrize("mode,offset", MODES)
def test_every_mode_validates(mode, offset, tmp_path):
    binary = vx.compile_spirv(shuffle_module(mode, offset))
    assert_spirv_valid(binary, tmp_path)
    text = disassemble(binary)
    opcode = {"xor": "OpGroupNonUniformShuffleXor", "up": "OpGroupNonUniformShuffleUp",
              "down": "OpGroupNonUniformShuffleDown", "idx": "OpGroupNonUniformShuffle "}
    assert opcode[mode] in text
    assert ("GroupNonUniformShuffleRelative" in text) == (mode in ("up", "down"))


@needs_val
def test_unused_valid_reads_no_lane_id(tmp_path):
    text = QUAD_SUM.split("        %ok = arith.andi")[0].format(n=64)
    module = vx.parse_module(lowered(text, n=64, lanes=32, outputs=("out",)))
    binary = vx.compile_spirv(module)
    assert_spirv_valid(binary, tmp_path)
    disassembly = disassemble(binary)
    assert "SubgroupLocalInvocationId" not in disassembly
    assert "BuiltIn SubgroupSize" in disassembly


@needs_dis
def test_disassembler_matches_spirv_dis(tmp_path):
    binary = vx.compile_spirv(shuffle_module("down", 5))
    path = tmp_path / "k.spv"
    path.write_bytes(binary)
    theirs = subprocess.run([SPIRV_DIS, "--raw-id", "--no-color", str(path)],
                            capture_output=True, text=True, check=True).stdout

    def plain(text):
        return [" ".join(line.split()) for line in text.splitlines()
                if line.strip() and not line.startswith(";") and "OpConstant " not in line]

    assert plain(disassemble(binary)) == plain(theirs)


@pytest.mark.parametrize("width", ["%c32", "%lane_i32"])
def test_width_must_be_the_subgroup_size(width):
    module = shuffle_module("xor", 1, width=width)
    with pytest.raises(VyreError, match=r"'gpu\.shuffle' xor: .*gpu\.subgroup_size.* as the width"):
        vx.compile_spirv(module)


# the Vulkan runtime's device check --------------------------------------------

@needs_vulkan
def test_device_supports_shuffles():
    from vyre_xdsl.vulkan import device_report, runtime

    support = runtime._context(runtime._validation_requested(None)).subgroup
    assert support.compute and support.size >= 2
    assert {"BASIC", "SHUFFLE", "SHUFFLE_RELATIVE"} <= support.operations
    assert f"subgroupSize = {support.size}" in device_report()


@needs_vulkan
@pytest.mark.parametrize("lacking,message", [
    ({"size": 1}, "subgroups of more than one lane"),
    ({"operations": frozenset({"BASIC"})}, "VK_SUBGROUP_FEATURE_SHUFFLE_BIT"),
    ({"compute": False}, "subgroup operations in compute shaders"),
])
def test_device_without_shuffles_is_refused(lacking, message, monkeypatch):
    from vyre_xdsl.vulkan import runtime

    monkeypatch.setenv("VYRE_VULKAN_VALIDATION", "1")
    ctx = runtime._context(True)
    fake = runtime.SubgroupSupport(
        **{"size": 8, "compute": True,
           "operations": frozenset({"BASIC", "SHUFFLE", "SHUFFLE_RELATIVE"}), **lacking})
    monkeypatch.setattr(ctx, "subgroup", fake)
    with pytest.raises(VyreError, match="uses subgroup shuffles") as error:
        vx.run(quad_sum_module(), inputs(64), backend="vulkan")
    assert message in str(error.value)
    assert "optimize='exact'" in str(error.value)
    # up/down need SHUFFLE_RELATIVE as well
    if "operations" in lacking:
        monkeypatch.setattr(ctx, "subgroup", runtime.SubgroupSupport(
            8, True, frozenset({"BASIC", "SHUFFLE"})))
        with pytest.raises(VyreError, match="VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT"):
            vx.run(shuffle_module("up", 1), inputs(64), backend="vulkan")
        vx.run(quad_sum_module(), inputs(64), backend="vulkan")  # xor still runs
