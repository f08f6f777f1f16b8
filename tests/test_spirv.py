"""SPIR-V emission: every module passes spirv-val, our disassembler agrees
with spirv-dis, errors name the op (the opcode tables: test_spirv_grammar.py)."""

from __future__ import annotations

import re
import subprocess

import pytest

from vyre_xdsl.compiler import parse_module
from vyre_xdsl.errors import VyreError
import spirv_samples as samples
from requirements import SPIRV_DIS, assert_spirv_valid, needs_dis, needs_val
from vyre_xdsl.spirv import disassemble, emit_spirv, emit_spirv_module
from vyre_xdsl.spirv.spec import Capability



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


def _workgroup_bytes(module) -> int:
    return sum(e.workgroup_bytes for e in emit_spirv_module(module).entries)


def test_promoted_scratch_frees_shared_memory():
    # The seed's three per-lane scratch arrays take 48 KiB of shared memory;
    # optimised, they are private; a staged K/V tile (64 rows of 64 floats)
    # is shared.
    assert _workgroup_bytes(_module("fa2_64", "none")) == 64 * 192 * 4
    assert _workgroup_bytes(_module("fa2_64", "exact")) == 0
    staged = vx_lower(_builders()["fa2_64"](), "vyre-stage-kv-tiles,vyre-to-gpu{optimize=exact}")
    assert _workgroup_bytes(staged) == 64 * 64 * 4


@pytest.mark.parametrize("name", ALL)
def test_entry_metadata_agrees_with_the_binary(name):
    """What emit_spirv_module says of each entry point (the runtime's only
    source) is what the binary declares."""
    spirv = emit_spirv_module(_module(name))
    assert spirv.binary == emit_spirv(_module(name))
    text = disassemble(spirv.binary)
    declared = set(re.findall(r"OpCapability (\w+)", text))
    assert {Capability.names[c] for c in spirv.capabilities} == declared
    entry_ids = dict(re.findall(r'OpEntryPoint GLCompute %(\d+) "(\w+)"', text))
    sizes = dict(re.findall(r"OpExecutionMode %(\d+) LocalSize (\d+ \d+ \d+)", text))
    assert [e.name for e in spirv.entries] == list(entry_ids.values())
    for function, entry_name in entry_ids.items():
        entry = spirv.entry(entry_name)
        assert " ".join(map(str, entry.workgroup_size)) == sizes[function]
        assert Capability.Shader in entry.capabilities
    with pytest.raises(VyreError, match="no entry point 'nope'"):
        spirv.entry("nope")


def test_entry_capabilities_are_the_kernels_own():
    """In a program, a kernel's entry lists the capabilities its own ops
    need (subgroup shuffles), not another kernel's."""
    import vyre_xdsl as vx

    # split-KV decode: partial kernel (reductions by shuffles), then merge
    decode = vx.flash_attention_2(seq_len=1, kv_len=4096, head_dim=128, num_heads=8)
    spirv = emit_spirv_module(vx.lower_to_gpu(decode, device="h200"))
    assert "OpGroupNonUniformShuffleXor" in disassemble(spirv.binary)
    partial, merge = spirv.entries
    assert Capability.GroupNonUniformShuffle in partial.capabilities
    assert merge.capabilities == {Capability.Shader}


def test_gpu_ids_read_the_component_of_their_dimension():
    """gpu.thread_id y and gpu.block_id z read components 1 and 2 of their
    builtins (the typed #gpu<dim> attribute); gpu.block_dim z is LocalSize's."""
    body = """
      %ty = "gpu.thread_id"() <{dimension = #gpu<dim y>}> : () -> index
      %bz = "gpu.block_id"() <{dimension = #gpu<dim z>}> : () -> index
      %wz = "gpu.block_dim"() <{dimension = #gpu<dim z>}> : () -> index
      %s = arith.addi %ty, %bz : index
      %i = arith.addi %s, %wz : index
      %x = memref.load %a[%item] : memref<64xf32>
      memref.store %x, %out[%i] : memref<64xf32>
"""
    module = parse_module(samples.lowered_kernel(
        "dims", [("a", "read", 64), ("out", "write", 64)], body, item_count=64))
    text = disassemble(emit_spirv(module))
    # global_id x, thread_id x (the sample's), then thread_id y, block_id z
    assert re.findall(r"OpCompositeExtract %\d+ %\d+ (\d)", text) == ["0", "0", "1", "2"]
    assert "WorkgroupId" in text
