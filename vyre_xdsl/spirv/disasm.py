"""A SPIR-V disassembler producing text in the style of `spirv-dis --raw-id`
(used by `vyre-opt -t spirv-asm`), reading each instruction's operands by
the kinds the grammar gives them (spec.py). Instructions not in the tables
print as `OpUnknown<N>` with raw operand words."""

from __future__ import annotations

import struct
from collections import deque

import numpy as np

from vyre_xdsl.errors import VyreError
from vyre_xdsl.spirv.spec import ENUMS, GLSL, GLSL_STD_450, INSTRUCTIONS, MAGIC, Op

_IDS = {"IdRef", "IdScope", "IdMemorySemantics"}
# composite kinds: the kinds of their words
_PAIRS = {"PairIdRefIdRef": ("IdRef", "IdRef"),
          "PairIdRefLiteralInteger": ("IdRef", "LiteralInteger"),
          "PairLiteralIntegerIdRef": ("LiteralInteger", "IdRef")}


def _string(words: list[int], pos: int) -> tuple[str, int]:
    data = bytearray()
    while pos < len(words):
        chunk = struct.pack("<I", words[pos])
        pos += 1
        if b"\0" in chunk:
            data += chunk[: chunk.index(b"\0")]
            break
        data += chunk
    return data.decode("utf-8", errors="replace"), pos


def _enum(kind: str, value: int) -> tuple[str, list[str]]:
    """The name of `value` of enum `kind` and the kinds of the operands its
    enumerants take (a mask's set bits in ascending order)."""
    table = ENUMS.get(kind)
    if table is None:
        return str(value), []
    if value in table.names:
        return table.names[value], table.parameters.get(value, [])
    if table.is_mask:
        bits = [bit for bit in sorted(table.names) if bit and value & bit]
        if bits and sum(bits) == value:
            return ("|".join(table.names[bit] for bit in bits),
                    [k for bit in bits for k in table.parameters.get(bit, [])])
    return str(value), []


def _float(bits: int) -> str:
    value = np.frombuffer(struct.pack("<I", bits), dtype=np.float32)[0]
    if np.isnan(value):
        return f"0x1.{bits & 0x7FFFFF:06x}p+128" if bits >> 31 == 0 else f"-0x1.{bits & 0x7FFFFF:06x}p+128"
    if np.isinf(value):
        return "0x1p+128" if value > 0 else "-0x1p+128"
    text = np.format_float_positional(value, unique=True, trim="-") \
        if 1e-4 <= abs(value) < 1e16 or value == 0 else \
        np.format_float_scientific(value, unique=True, trim="-")
    return text


def disassemble(binary: bytes) -> str:
    """Text form of a SPIR-V binary module, one instruction per line."""
    if len(binary) % 4 or len(binary) < 20:
        raise VyreError("not a SPIR-V binary: its length is not a whole number "
                        "of words, or it is shorter than the 5-word header")
    words = list(struct.unpack(f"<{len(binary) // 4}I", binary))
    if words[0] != MAGIC:
        raise VyreError(f"not a SPIR-V binary: magic number {words[0]:#010x}")
    version = words[1]
    lines = [
        "; SPIR-V",
        f"; Version: {(version >> 16) & 0xFF}.{(version >> 8) & 0xFF}",
        f"; Generator: Khronos; {words[2] & 0xFFFF}",
        f"; Bound: {words[3]}",
        f"; Schema: {words[4]}",
    ]
    float_types: set[int] = set()
    imports: dict[int, str] = {}
    pos = 5
    while pos < len(words):
        count, opcode = words[pos] >> 16, words[pos] & 0xFFFF
        if count == 0:
            raise VyreError(f"malformed SPIR-V: zero word count at word {pos}")
        operands = words[pos + 1: pos + count]
        pos += count
        name, layout = INSTRUCTIONS.get(opcode, (f"OpUnknown{opcode}", ["LiteralInteger*"]))
        result = result_type = None
        text: list[str] = []
        kinds = deque(layout)
        i = 0
        while kinds and i < len(operands):
            kind = kinds.popleft()
            if kind.endswith("*"):  # again after this one, while words remain
                kinds.appendleft(kind)
            kind = kind.rstrip("*?")
            word = operands[i]
            i += 1
            if kind in _PAIRS:
                kinds.extendleft(reversed(_PAIRS[kind]))
                i -= 1
            elif kind == "IdResultType":
                result_type = word
                text.append(f"%{word}")
            elif kind == "IdResult":
                result = word
            elif kind in _IDS:
                text.append(f"%{word}")
            elif kind == "LiteralString":
                value, i = _string(operands, i - 1)
                text.append('"' + value.replace('"', '\\"') + '"')
                if opcode == Op.ExtInstImport and result is not None:
                    imports[result] = value
            elif kind == "LiteralContextDependentNumber":
                text.append(_float(word) if result_type in float_types else str(word))
            elif kind == "LiteralExtInstInteger":
                glsl = imports.get(operands[i - 2]) == GLSL_STD_450
                text.append(GLSL.names.get(word, str(word)) if glsl else str(word))
            elif kind in ENUMS:
                enumerant, parameters = _enum(kind, word)
                text.append(enumerant)
                kinds.extendleft(reversed(parameters))
            else:  # a literal integer, or an enum kind the tables leave out
                text.append(str(word))
        if opcode == Op.TypeFloat and result is not None:
            float_types.add(result)
        body = " ".join([name, *text])
        if result is not None:
            lhs = f"%{result}"
            lines.append(f"{lhs:>12} = {body}")
        else:
            lines.append(" " * 15 + body)
    return "\n".join(lines) + "\n"
