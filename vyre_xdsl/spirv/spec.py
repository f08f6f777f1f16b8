"""The SPIR-V tables the emitter and disassembler use, read from
grammar.json: opcodes, operand kinds and enumerants of the Khronos grammar
(SPIRV-Headers), extracted by tools/gen_spirv_tables.py, which lists what
is kept. No number is typed in here.

    Op.IAdd, Capability.Shader, GLSL.Exp, ...   numbers by name ("None" is
                                                spelled None_)
    INSTRUCTIONS[opcode]                        (OpName, operand kinds)
    ENUMS[kind]                                 the Table of an enum kind
"""

from __future__ import annotations

import json
from pathlib import Path

VERSION_1_3 = 0x00010300
GENERATOR = 0  # no registered generator id: tools print "Khronos; 0"

_GRAMMAR = json.loads(Path(__file__).with_name("grammar.json").read_text())
MAGIC: int = _GRAMMAR["magic_number"]


class Table:
    """The names of one grammar table as attributes holding their numbers.
    A number with several names (aliases) is named by the first, as the
    Khronos tools print it."""

    def __init__(self, kind: str, values: dict[str, int], *, is_mask: bool = False,
                 parameters: dict[str, str] | None = None):
        self._kind = kind
        self.is_mask = is_mask
        self.names: dict[int, str] = {}
        # value -> the operand kinds that follow it (a Decoration's literals)
        self.parameters: dict[int, list[str]] = {}
        for name, value in values.items():
            self.names.setdefault(value, name)
            attribute = "None_" if name == "None" else name
            if attribute in vars(self):  # would hide names, parameters, ...
                raise ValueError(f"SPIR-V {kind} {name} clashes with Table.{attribute}")
            setattr(self, attribute, value)
        for name, kinds in (parameters or {}).items():
            self.parameters[values[name]] = kinds.split()

    def __getattr__(self, name: str):  # only for names not set in __init__
        raise AttributeError(
            f"SPIR-V {self._kind} has no {name!r} in vyre_xdsl/spirv/grammar.json; "
            f"add it to tools/gen_spirv_tables.py and run that script"
        )


Op = Table("instruction", {name.removeprefix("Op"): entry[0]
                           for name, entry in _GRAMMAR["instructions"].items()})
INSTRUCTIONS: dict[int, tuple[str, list[str]]] = {
    opcode: (name, kinds.split())
    for name, (opcode, kinds) in _GRAMMAR["instructions"].items()
}
ENUMS: dict[str, Table] = {
    kind: Table(kind, entry["enumerants"], is_mask=entry["category"] == "BitEnum",
                parameters=entry["parameters"])
    for kind, entry in _GRAMMAR["operand_kinds"].items()
}
# names newer than Debian's spirv-headers (tools/gen_spirv_tables.py: NEWER):
# instructions, enum kinds and Kind.Enumerant
NEWER: frozenset[str] = frozenset(_GRAMMAR["newer"]["names"])
GLSL_STD_450 = "GLSL.std.450"  # the name OpExtInstImport gives the set
GLSL = Table(f"{GLSL_STD_450} instruction", _GRAMMAR["glsl_std_450"])

AddressingModel = ENUMS["AddressingModel"]
BuiltIn = ENUMS["BuiltIn"]
Capability = ENUMS["Capability"]
CooperativeMatrixLayout = ENUMS["CooperativeMatrixLayout"]
CooperativeMatrixUse = ENUMS["CooperativeMatrixUse"]
Decoration = ENUMS["Decoration"]
FPEncoding = ENUMS["FPEncoding"]
ExecutionMode = ENUMS["ExecutionMode"]
ExecutionModel = ENUMS["ExecutionModel"]
FunctionControl = ENUMS["FunctionControl"]
LoopControl = ENUMS["LoopControl"]
MemoryModel = ENUMS["MemoryModel"]
MemorySemantics = ENUMS["MemorySemantics"]
Scope = ENUMS["Scope"]
SelectionControl = ENUMS["SelectionControl"]
StorageClass = ENUMS["StorageClass"]
