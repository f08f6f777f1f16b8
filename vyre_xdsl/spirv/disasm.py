"""A SPIR-V disassembler producing text in the style of `spirv-dis --raw-id`
(used by `vyre-opt -t spirv-asm`). It knows the instructions in spec.py;
others print as `OpUnknown<N>` with raw operand words."""

from __future__ import annotations

import re
import struct

import numpy as np

from vyre_xdsl.errors import VyreError
from vyre_xdsl.spirv.spec import ENUMS, GLSL_NAMES, INSTRUCTIONS, MAGIC, MASK_ENUMS, Op

_TOKEN = re.compile(r"e:\w+[*?]?|[TRILSCX][*?]?")


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


def _enum(kind: str, value: int) -> str:
    table = ENUMS.get(kind, {})
    if value in table:
        return table[value]
    if kind in MASK_ENUMS:
        names = [table[bit] for bit in sorted(table) if bit and value & bit]
        if names and sum(bit for bit in table if value & bit) == value:
            return "|".join(names)
    return str(value)


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
    types: dict[int, int] = {}  # value id -> type id
    pos = 5
    while pos < len(words):
        count, opcode = words[pos] >> 16, words[pos] & 0xFFFF
        if count == 0:
            raise VyreError(f"malformed SPIR-V: zero word count at word {pos}")
        operands = words[pos + 1: pos + count]
        pos += count
        name, layout = INSTRUCTIONS.get(opcode, (f"OpUnknown{opcode}", "L*"))
        result = None
        text: list[str] = []
        i = 0
        result_type = None
        kinds = _TOKEN.findall(layout)
        k = 0
        while k < len(kinds) and i < len(operands):
            kind = kinds[k]
            repeat = kind.endswith("*")
            base = kind.rstrip("*?")
            if base == "T":
                result_type = operands[i]
                text.append(f"%{operands[i]}")
                i += 1
            elif base == "R":
                result = operands[i]
                i += 1
            elif base == "I":
                text.append(f"%{operands[i]}")
                i += 1
            elif base == "S":
                value, i = _string(operands, i)
                text.append('"' + value.replace('"', '\\"') + '"')
                if opcode == Op.ExtInstImport and result is not None:
                    imports[result] = value
            elif base == "C":
                if result_type in float_types:
                    text.append(_float(operands[i]))
                else:
                    text.append(str(operands[i]))
                i += 1
            elif base == "X":
                set_id = operands[i - 1]
                number = operands[i]
                if imports.get(set_id) == "GLSL.std.450" and number in GLSL_NAMES:
                    text.append(GLSL_NAMES[number])
                else:
                    text.append(str(number))
                i += 1
            elif base.startswith("e:"):
                enum = base[2:]
                text.append(_enum(enum, operands[i]))
                if opcode == Op.Decorate and enum == "Decoration" and operands[i] == 11:
                    text.append(_enum("BuiltIn", operands[i + 1]))
                    i += 1
                i += 1
            else:  # L
                text.append(str(operands[i]))
                i += 1
            if not repeat:
                k += 1
        if opcode == Op.TypeFloat and result is not None:
            float_types.add(result)
        if result is not None and result_type is not None:
            types[result] = result_type
        body = " ".join([name, *text])
        if result is not None:
            lhs = f"%{result}"
            lines.append(f"{lhs:>12} = {body}")
        else:
            lines.append(" " * 15 + body)
    return "\n".join(lines) + "\n"
