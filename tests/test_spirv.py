"""SPIR-V emission: every module passes spirv-val, our disassembler agrees
with spirv-dis, opcode numbers match the Khronos tools, errors name the op."""

from __future__ import annotations

import re
import subprocess

import pytest

from vyre_xdsl.compiler import parse_module
from vyre_xdsl.errors import VyreError
import spirv_samples as samples
from requirements import SPIRV_AS, SPIRV_DIS, assert_spirv_valid, needs_as, needs_dis, needs_val
from vyre_xdsl.spirv import disassemble, emit_spirv
from vyre_xdsl.spirv.spec import INSTRUCTIONS



SAMPLES = ["BARRIER_EXCHANGE", "CMPF", "MISC", "NESTED_LOOPS"]


def _builders():
    import vyre_xdsl as vx

    return {
        "fa2_small": lambda: vx.flash_attention_2(seq_len=8, head_dim=4, tile_size=4),
        "fa2_ragged": lambda: vx.flash_attention_2(seq_len=37, head_dim=5, tile_size=8),
        "fa2_64": lambda: vx.flash_attention_2(seq_len=512, head_dim=64),
        "mla": lambda: vx.mla_decode(seq_len=1000, num_heads=8, head_dim=64,
                                     kv_lora_rank=32, qk_rope_head_dim=16),
    }


def _module(name, optimize="default"):
    if name in SAMPLES:
        return parse_module(getattr(samples, name))
    import vyre_xdsl as vx

    return vx.lower_to_gpu(_builders()[name](), optimize=optimize)


ALL = SAMPLES + ["fa2_small", "fa2_ragged", "fa2_64", "mla"]


@needs_val
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("optimize", ["default", "none"])
def test_spirv_val(name, optimize, tmp_path):
    assert_spirv_valid(emit_spirv(_module(name, optimize)), tmp_path)


@needs_val
def test_spirv_val_float_controls(tmp_path):
    binary = emit_spirv(_module("fa2_small"), preserve_nan_inf=True)
    assert_spirv_valid(binary, tmp_path)
    assert "SignedZeroInfNanPreserve" in disassemble(binary)


def _opcode_names(text: str) -> list[str]:
    names = []
    for line in text.splitlines():
        if line.startswith(";") or not line.strip():
            continue
        names.append(re.search(r"\bOp\w+", line).group(0))
    return names


@needs_dis
@pytest.mark.parametrize("name", ALL)
def test_disassembler_matches_spirv_dis(name, tmp_path):
    binary = emit_spirv(_module(name))
    path = tmp_path / "k.spv"
    path.write_bytes(binary)
    theirs = subprocess.run([SPIRV_DIS, "--raw-id", "--no-color", str(path)],
                            capture_output=True, text=True, check=True).stdout
    ours = disassemble(binary)
    assert _opcode_names(ours) == _opcode_names(theirs)
    # whole lines agree for instructions without float literals
    def plain(text):
        return [" ".join(l.split()) for l in text.splitlines()
                if l.strip() and not l.startswith(";") and "OpConstant " not in l]
    assert plain(ours) == plain(theirs)


@needs_dis
@needs_as
def test_every_known_opcode_number_matches_spirv_as(tmp_path):
    """Assemble each instruction name we know with spirv-as and check the
    opcode number it gets (spirv-as does not validate operands)."""
    for opcode, (name, _) in INSTRUCTIONS.items():
        source = tmp_path / "one.spvasm"
        source.write_text(f"{_dummy(name)}\n")
        out = tmp_path / "one.spv"
        result = subprocess.run([SPIRV_AS, "--target-env", "spv1.3", str(source),
                                 "-o", str(out)], capture_output=True, text=True)
        assert result.returncode == 0, (name, result.stderr)
        data = out.read_bytes()
        pos, last = 20, None
        while pos < len(data):  # the dummy's own instruction comes last
            word = int.from_bytes(data[pos:pos + 4], "little")
            last = word & 0xFFFF
            pos += 4 * (word >> 16)
        assert last == opcode, name


_DUMMY = {
    "OpSource": "OpSource GLSL 450",
    "OpName": 'OpName %a "x"',
    "OpMemberName": 'OpMemberName %a 0 "x"',
    "OpString": '%a = OpString "x"',
    "OpExtension": 'OpExtension "x"',
    "OpExtInstImport": '%a = OpExtInstImport "GLSL.std.450"',
    "OpExtInst": '%1 = OpExtInstImport "GLSL.std.450"\n%a = OpExtInst %b %1 Exp %c',
    "OpMemoryModel": "OpMemoryModel Logical GLSL450",
    "OpEntryPoint": 'OpEntryPoint GLCompute %a "main"',
    "OpExecutionMode": "OpExecutionMode %a LocalSize 1 1 1",
    "OpCapability": "OpCapability Shader",
    "OpTypeInt": "%a = OpTypeInt 32 0",
    "OpTypeFloat": "%a = OpTypeFloat 32",
    "OpTypeVector": "%a = OpTypeVector %b 3",
    "OpTypePointer": "%a = OpTypePointer Function %b",
    "OpConstant": "%t = OpTypeInt 32 0\n%a = OpConstant %t 1",
    "OpFunction": "%a = OpFunction %b None %c",
    "OpVariable": "%a = OpVariable %b Function",
    "OpDecorate": "OpDecorate %a Block",
    "OpMemberDecorate": "OpMemberDecorate %a 0 Offset 0",
    "OpCompositeExtract": "%a = OpCompositeExtract %b %c 0",
    "OpLoopMerge": "OpLoopMerge %a %b None",
    "OpSelectionMerge": "OpSelectionMerge %a None",
    "OpLabel": "%a = OpLabel",
}


def _dummy(name: str) -> str:
    if name in _DUMMY:
        return _DUMMY[name]
    layout = dict(INSTRUCTIONS.values())[name]
    prefix, operands = "", []
    for kind in re.findall(r"e:\w+[*?]?|[TRILSCX][*?]?", layout):
        if kind.endswith(("*", "?")):
            continue
        if kind == "R":
            prefix = "%a = "
        else:
            assert kind in "TIL", (name, kind)
            operands.append({"T": "%t", "I": "%x", "L": "1"}[kind])
    return prefix + " ".join([name, *operands])


def test_unsupported_op_is_named():
    with pytest.raises(VyreError, match="math.atan"):
        emit_spirv(parse_module(samples.UNSUPPORTED))


def test_not_a_module():
    with pytest.raises(VyreError):
        emit_spirv("nope")  # type: ignore[arg-type]


def test_header_and_layout():
    binary = emit_spirv(_module("BARRIER_EXCHANGE"))
    assert binary[:4] == bytes.fromhex("03022307")
    text = disassemble(binary)
    assert "OpCapability Shader" in text
    assert "OpMemoryModel Logical GLSL450" in text
    assert "OpExecutionMode %" in text and "LocalSize 64 1 1" in text
    assert "OpControlBarrier" in text
    assert "Workgroup" in text  # the exchange array stays shared (barrier)
    assert "RelaxedPrecision" not in text


def vx_lower(module, optimize):
    import vyre_xdsl as vx

    return vx.lower_to_gpu(module, optimize=optimize)


def test_promoted_scratch_frees_shared_memory():
    from vyre_xdsl.vulkan.runtime import workgroup_memory_bytes

    # The seed's three per-lane scratch arrays take 48 KiB of shared memory;
    # optimised, they are private; a staged K/V tile (64 rows of 64 floats)
    # is shared.
    assert workgroup_memory_bytes(emit_spirv(_module("fa2_64", "none"))) == 64 * 192 * 4
    assert workgroup_memory_bytes(emit_spirv(_module("fa2_64", "exact"))) == 0
    staged = vx_lower(_builders()["fa2_64"](), "vyre-stage-kv-tiles,vyre-to-gpu{optimize=exact}")
    assert workgroup_memory_bytes(emit_spirv(staged)) == 64 * 64 * 4
