"""The vendored SPIR-V tables (vyre_xdsl/spirv/grammar.json): what
tools/gen_spirv_tables.py makes of the installed Khronos grammar, and, with
or without it, every opcode and enumerant name numbered as spirv-as numbers
it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from requirements import SPIRV_AS, needs_as
from vyre_xdsl.spirv import spec
from vyre_xdsl.tools import gen_spirv_tables as gen

HEADERS = gen.GRAMMAR_DIR / gen.CORE


@pytest.mark.skipif(not HEADERS.exists(),
                    reason="spirv-headers not installed (spirv-as checks the numbers)")
def test_vendored_tables_are_what_the_script_generates():
    vendored = json.loads(gen.OUTPUT.read_text())
    vendored["spirv_headers"].pop("package", None)
    assert vendored == gen.tables()


def test_tables_are_loaded_by_name():
    assert spec.INSTRUCTIONS[spec.Op.IAdd][0] == "OpIAdd"
    name, kinds = spec.INSTRUCTIONS[spec.Op.Load]
    assert (name, kinds) == ("OpLoad", ["IdResultType", "IdResult", "IdRef", "MemoryAccess?"])
    assert spec.MemorySemantics.None_ == 0
    assert spec.Capability.names[spec.Capability.StorageBuffer16BitAccess] == \
        "StorageBuffer16BitAccess"  # the first of its aliases
    with pytest.raises(AttributeError, match="gen_spirv_tables"):
        spec.Op.ImageSampleImplicitLod


def _assemble(lines: list[str], tmp_path: Path) -> list[list[int]]:
    """spirv-as of `lines` (one instruction each): their words, in order."""
    source, out = tmp_path / "all.spvasm", tmp_path / "all.spv"
    source.write_text("\n".join(lines) + "\n")
    result = subprocess.run([SPIRV_AS, "--target-env", "spv1.6", str(source),
                             "-o", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    words = [int.from_bytes(data[p:p + 4], "little") for p in range(20, len(data), 4)]
    instructions, pos = [], 0
    while pos < len(words):
        instructions.append(words[pos:pos + (words[pos] >> 16)])
        pos += words[pos] >> 16
    assert len(instructions) == len(lines)
    return instructions


def _unique(text: str, n: int) -> str:
    """`text` with ids of its own (spirv-as refuses a type id made twice)."""
    return re.sub(r"%(\w+)", rf"%\1_{n}", text)


def _plain(kind: str) -> str:
    """An enumerant of `kind` that takes no operands."""
    table = spec.ENUMS[kind]
    return next(name for value, name in table.names.items()
                if value not in table.parameters)


_OPERAND = {"IdResultType": "%t", "IdRef": "%x", "IdScope": "%x",
            "IdMemorySemantics": "%x", "LiteralInteger": "1", "LiteralString": '"x"'}
_PRELUDE = {
    "LiteralContextDependentNumber": ("%t = OpTypeInt 32 0", "1"),
    "LiteralExtInstInteger": ('%s = OpExtInstImport "GLSL.std.450"', "Exp"),
}


def _dummy(name: str, kinds: list[str]) -> list[str]:
    """Lines that end in one instruction `name` with its required operands."""
    prefix, operands, prelude = "", [], []
    for kind in kinds:
        if kind.endswith(("*", "?")):
            continue
        if kind == "IdResult":
            prefix = "%r = "
        elif kind in _PRELUDE:
            line, operand = _PRELUDE[kind]
            prelude.append(line)
            operands.append(operand)
        elif kind in spec.ENUMS:
            operands.append(_plain(kind))
        else:
            operands.append(_OPERAND[kind])
    if "LiteralExtInstInteger" in kinds:  # the set is the import; Exp takes x
        operands[operands.index("Exp") - 1] = "%s"
        operands.append("%x")
    if name == "OpExtInstImport":  # spirv-as knows the set by its name
        operands = ['"GLSL.std.450"']
    return [*prelude, prefix + " ".join([name, *operands])]


@needs_as
def test_every_opcode_matches_spirv_as(tmp_path):
    lines, ours = [], []
    for n, (opcode, (name, kinds)) in enumerate(spec.INSTRUCTIONS.items()):
        if name in spec.NEWER:  # spirv-as 2023.1 predates it (test_mma.py)
            continue
        dummy = [_unique(line, n) for line in _dummy(name, kinds)]
        lines.extend(dummy)
        ours.extend([None] * (len(dummy) - 1) + [(name, opcode)])
    assert len(ours) > 100
    for words, expected in zip(_assemble(lines, tmp_path), ours):
        if expected is not None:
            assert (expected[0], words[0] & 0xFFFF) == expected


# enum kind -> an instruction whose operand `{}` is an enumerant of it, and
# the index of that operand's word
_CARRIERS = {
    "Capability": ("OpCapability {}", 1),
    "SourceLanguage": ("OpSource {} 1", 1),
    "AddressingModel": ("OpMemoryModel {} GLSL450", 1),
    "MemoryModel": ("OpMemoryModel Logical {}", 2),
    "ExecutionModel": ('OpEntryPoint {} %f "m"', 1),
    "ExecutionMode": ("OpExecutionMode %f {}", 2),
    "StorageClass": ("%r = OpVariable %t {}", 3),
    "Decoration": ("OpDecorate %x {}", 2),
    "BuiltIn": ("OpDecorate %x BuiltIn {}", 3),
    "FunctionControl": ("%r = OpFunction %t {} %x", 3),
    "MemoryAccess": ("%r = OpLoad %t %x {}", 4),
    "LoopControl": ("OpLoopMerge %x %y {}", 3),
    "SelectionControl": ("OpSelectionMerge %x {}", 2),
}
# Scope and MemorySemantics are id operands (no names in the assembly)
_NOT_NAMED = {"Scope", "MemorySemantics"}


def _with_parameters(kind: str, value: int) -> str | None:
    """The enumerant's name with dummy operands, None if one of them is of
    a kind the tables leave out (spirv-as would need a name of it)."""
    table = spec.ENUMS[kind]
    text = [table.names[value]]
    for parameter in table.parameters.get(value, []):
        if parameter in spec.ENUMS:
            text.append(_plain(parameter))
        elif parameter in _OPERAND:
            text.append(_OPERAND[parameter])
        else:
            return None
    return " ".join(text)


@needs_as
def test_every_enumerant_matches_spirv_as(tmp_path):
    assert set(_CARRIERS) | _NOT_NAMED == set(spec.ENUMS) - spec.NEWER
    lines, ours = [], []
    for kind, (carrier, index) in _CARRIERS.items():
        table = spec.ENUMS[kind]
        for value, name in table.names.items():
            if f"{kind}.{name}" in spec.NEWER:
                continue
            operand = _with_parameters(kind, value)
            if operand is None:
                continue
            lines.append(_unique(carrier.format(operand), len(lines)))
            ours.append((kind, name, value, index))
    assert len(ours) > 500
    for words, (kind, name, value, index) in zip(_assemble(lines, tmp_path), ours):
        assert (kind, name, words[index]) == (kind, name, value)
