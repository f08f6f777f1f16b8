"""Generate vyre_xdsl/spirv/grammar.json, the SPIR-V tables the emitter and
disassembler use, from the Khronos machine-readable grammars
(SPIRV-Headers: `spirv.core.grammar.json`, `extinst.glsl.std.450.grammar.json`;
Debian's `spirv-headers` installs them under /usr/include/spirv/unified1).

    python tools/gen_spirv_tables.py            # rewrite the vendored file
    python tools/gen_spirv_tables.py --check    # exit 1 if it is out of date

The vendored file keeps the instructions listed in INSTRUCTIONS (opcode and
operand kinds), every enumerant of the operand kinds in ENUM_KINDS, and all
of GLSL.std.450, so nothing else needs spirv-headers. To emit a new
instruction or use a new enum kind, add it below and run the script.

What Debian 12's spirv-headers (1.3.239) predates, SPV_KHR_cooperative_matrix
and SPV_KHR_bfloat16 (OpTypeFloat's encoding operand and its capabilities),
comes from NEWER, an excerpt of a newer Khronos grammar (the NEWER_* names
below); the vendored file lists those names under "newer" (spirv-as 2023.1
does not know them: tests check them through MLIR's SPIR-V deserializer).
To refresh the excerpt from SPIRV-Headers' spirv.core.grammar.json:

    python tools/gen_spirv_tables.py --newer-from PATH/spirv.core.grammar.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

GRAMMAR_DIR = Path("/usr/include/spirv/unified1")
CORE = "spirv.core.grammar.json"
GLSL = "extinst.glsl.std.450.grammar.json"
OUTPUT = Path(__file__).resolve().parent.parent / "vyre_xdsl" / "spirv" / "grammar.json"

# what the emitter writes and the disassembler names
INSTRUCTIONS = (
    "OpNop", "OpUndef", "OpSource", "OpName", "OpMemberName", "OpString",
    "OpExtension", "OpExtInstImport", "OpExtInst", "OpMemoryModel",
    "OpEntryPoint", "OpExecutionMode", "OpCapability",
    "OpTypeVoid", "OpTypeBool", "OpTypeInt", "OpTypeFloat", "OpTypeVector",
    "OpTypeArray", "OpTypeRuntimeArray", "OpTypeStruct", "OpTypePointer",
    "OpTypeFunction",
    "OpConstantTrue", "OpConstantFalse", "OpConstant", "OpConstantComposite",
    "OpConstantNull",
    "OpFunction", "OpFunctionParameter", "OpFunctionEnd",
    "OpVariable", "OpLoad", "OpStore", "OpAccessChain",
    "OpDecorate", "OpMemberDecorate", "OpCompositeExtract", "OpCompositeInsert", "OpFConvert",
    "OpConvertFToU", "OpConvertFToS", "OpConvertSToF", "OpConvertUToF",
    "OpUConvert", "OpBitcast",
    "OpSNegate", "OpFNegate", "OpIAdd", "OpFAdd", "OpISub", "OpFSub",
    "OpIMul", "OpFMul", "OpUDiv", "OpSDiv", "OpFDiv", "OpUMod", "OpSRem",
    "OpIsNan", "OpIsInf",
    "OpLogicalEqual", "OpLogicalNotEqual", "OpLogicalOr", "OpLogicalAnd",
    "OpLogicalNot", "OpSelect",
    "OpIEqual", "OpINotEqual", "OpUGreaterThan", "OpSGreaterThan",
    "OpUGreaterThanEqual", "OpSGreaterThanEqual", "OpULessThan", "OpSLessThan",
    "OpULessThanEqual", "OpSLessThanEqual",
    "OpFOrdEqual", "OpFUnordEqual", "OpFOrdNotEqual", "OpFUnordNotEqual",
    "OpFOrdLessThan", "OpFUnordLessThan", "OpFOrdGreaterThan",
    "OpFUnordGreaterThan", "OpFOrdLessThanEqual", "OpFUnordLessThanEqual",
    "OpFOrdGreaterThanEqual", "OpFUnordGreaterThanEqual",
    "OpShiftRightLogical", "OpShiftRightArithmetic", "OpShiftLeftLogical",
    "OpBitwiseOr", "OpBitwiseXor", "OpBitwiseAnd", "OpNot",
    "OpControlBarrier", "OpMemoryBarrier",
    "OpPhi", "OpLoopMerge", "OpSelectionMerge", "OpLabel", "OpBranch",
    "OpBranchConditional", "OpReturn", "OpUnreachable",
    "OpGroupNonUniformShuffle", "OpGroupNonUniformShuffleXor",
    "OpGroupNonUniformShuffleUp", "OpGroupNonUniformShuffleDown",
    "OpCompositeConstruct", "OpMatrixTimesScalar",
    "OpTypeCooperativeMatrixKHR", "OpCooperativeMatrixLoadKHR",
    "OpCooperativeMatrixStoreKHR", "OpCooperativeMatrixMulAddKHR",
)

# enum operand kinds kept whole (Scope and MemorySemantics are passed as
# constant ids, the others are operands of INSTRUCTIONS)
ENUM_KINDS = (
    "SourceLanguage", "AddressingModel", "MemoryModel", "ExecutionModel",
    "ExecutionMode", "Capability", "StorageClass", "Decoration", "BuiltIn",
    "Scope", "MemorySemantics", "FunctionControl", "MemoryAccess",
    "LoopControl", "SelectionControl",
    "CooperativeMatrixUse", "CooperativeMatrixLayout", "CooperativeMatrixOperands",
    "FPEncoding",
)

# taken from NEWER where the installed grammar lacks them
NEWER = Path(__file__).resolve().parent / "spirv_newer.grammar.json"
NEWER_INSTRUCTIONS = (
    "OpTypeCooperativeMatrixKHR", "OpCooperativeMatrixLoadKHR",
    "OpCooperativeMatrixStoreKHR", "OpCooperativeMatrixMulAddKHR",
)
NEWER_ENUM_KINDS = (
    "CooperativeMatrixUse", "CooperativeMatrixLayout", "CooperativeMatrixOperands",
)
# SPV_KHR_bfloat16: OpTypeFloat's encoding operand, and what declares it
NEWER_OPERANDS = ("OpTypeFloat",)  # instructions whose newer form has more operands
NEWER_ENUMERANTS = {
    "Capability": ("CooperativeMatrixKHR", "BFloat16TypeKHR", "BFloat16CooperativeMatrixKHR"),
    "FPEncoding": ("BFloat16KHR",),
}


def _operands(operands: list[dict]) -> str:
    """Operand kinds as one string: `IdResultType IdResult IdRef MemoryAccess?`."""
    return " ".join(o["kind"] + o.get("quantifier", "") for o in operands)


def _value(value) -> int:
    return int(value, 16) if isinstance(value, str) else int(value)


def _headers_version() -> str | None:
    """The Debian spirv-headers version (its upstream SDK tag), if installed."""
    try:
        result = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "spirv-headers"],
                                capture_output=True, text=True)
    except OSError:
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None


def newer_excerpt(core: dict) -> dict:
    """The NEWER_* entries of a (newer) core grammar, as they are there."""
    kinds = {k["kind"]: k for k in core["operand_kinds"]}
    return {
        "comment": "excerpt of a Khronos spirv.core.grammar.json made by "
                   "tools/gen_spirv_tables.py --newer-from; do not edit",
        "version": f"{core['major_version']}.{core['minor_version']} "
                   f"revision {core['revision']}",
        "instructions": [i for i in core["instructions"]
                         if i["opname"] in NEWER_INSTRUCTIONS + NEWER_OPERANDS],
        "operand_kinds": [kinds[kind] for kind in NEWER_ENUM_KINDS] + [
            {**kinds[kind], "enumerants": [e for e in kinds[kind]["enumerants"]
                                           if e["enumerant"] in names]}
            for kind, names in NEWER_ENUMERANTS.items()
        ],
    }


def tables(grammar_dir: Path = GRAMMAR_DIR, newer_path: Path = NEWER) -> dict:
    """The vendored tables, from the grammars in `grammar_dir` and, for what
    they lack, the excerpt `newer_path`."""
    core = json.loads((grammar_dir / CORE).read_text())
    glsl = json.loads((grammar_dir / GLSL).read_text())
    newer = json.loads(newer_path.read_text())
    known = {i["opname"]: i for i in core["instructions"]}
    taken: list[str] = []
    for instruction in newer["instructions"]:
        name = instruction["opname"]
        if name not in known:
            known[name] = instruction
            taken.append(name)
        elif len(instruction["operands"]) > (old := len(known[name].get("operands", []))):
            # the newer operands are optional: spirv-as still takes the old form
            known[name] = instruction
            taken.extend(f"{name}.{operand['kind']}" for operand in instruction["operands"][old:])
    missing = [name for name in INSTRUCTIONS if name not in known]
    if missing:
        raise SystemExit(f"not in {CORE} nor {NEWER.name}: {', '.join(missing)}")
    kinds = {k["kind"]: k for k in core["operand_kinds"]}
    for kind in newer["operand_kinds"]:
        if kind["kind"] not in kinds:
            kinds[kind["kind"]] = kind
            taken.append(kind["kind"])
            continue
        present = {e["enumerant"] for e in kinds[kind["kind"]]["enumerants"]}
        extra = [e for e in kind["enumerants"] if e["enumerant"] not in present]
        if extra:
            kinds[kind["kind"]] = {**kinds[kind["kind"]],
                                   "enumerants": kinds[kind["kind"]]["enumerants"] + extra}
            taken.extend(f"{kind['kind']}.{e['enumerant']}" for e in extra)
    enums = {}
    for kind in ENUM_KINDS:
        enumerants, parameters = {}, {}
        for e in kinds[kind]["enumerants"]:
            # the first name of a value is the one tools print; aliases follow
            enumerants[e["enumerant"]] = _value(e["value"])
            if e.get("parameters"):
                parameters[e["enumerant"]] = _operands(e["parameters"])
        enums[kind] = {"category": kinds[kind]["category"],
                       "enumerants": enumerants, "parameters": parameters}
    return {
        "comment": "generated by tools/gen_spirv_tables.py; do not edit",
        "spirv_headers": {
            "core": f"{core['major_version']}.{core['minor_version']} "
                    f"revision {core['revision']}",
            "glsl_std_450": f"{glsl['version']} revision {glsl['revision']}",
        },
        # names from the excerpt (instructions, enum kinds, Kind.Enumerant)
        "newer": {"grammar": newer["version"], "names": taken},
        "magic_number": _value(core["magic_number"]),
        "instructions": {
            name: [known[name]["opcode"], _operands(known[name].get("operands", []))]
            for name in INSTRUCTIONS
        },
        "operand_kinds": enums,
        "glsl_std_450": {i["opname"]: i["opcode"] for i in glsl["instructions"]},
    }


def render(data: dict) -> str:
    """JSON with one instruction, enum kind or ext-inst table per line."""
    lines = ["{"]
    items = list(data.items())
    for position, (key, value) in enumerate(items):
        comma = "," if position < len(items) - 1 else ""
        if key in ("instructions", "operand_kinds"):
            lines.append(f" {json.dumps(key)}: {{")
            entries = list(value.items())
            for index, (name, entry) in enumerate(entries):
                tail = "," if index < len(entries) - 1 else ""
                lines.append(f"  {json.dumps(name)}: {json.dumps(entry)}{tail}")
            lines.append(f" }}{comma}")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grammar-dir", type=Path, default=GRAMMAR_DIR,
                        help=f"where the grammar files are (default {GRAMMAR_DIR})")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true",
                        help="compare with the output file instead of writing it")
    parser.add_argument("--newer-from", type=Path, metavar="GRAMMAR.json",
                        help=f"first rewrite {NEWER.name} from this (newer) "
                             f"spirv.core.grammar.json of SPIRV-Headers")
    args = parser.parse_args()
    if args.newer_from is not None:
        excerpt = newer_excerpt(json.loads(args.newer_from.read_text()))
        NEWER.write_text(json.dumps(excerpt, indent=1) + "\n")
    if not (args.grammar_dir / CORE).exists():
        print(f"error: no {CORE} in {args.grammar_dir}; install spirv-headers "
              f"(apt-get install spirv-headers) or pass --grammar-dir", file=sys.stderr)
        return 2
    data = tables(args.grammar_dir)
    version = _headers_version()
    if version is not None:
        data["spirv_headers"]["package"] = f"spirv-headers {version}"
    text = render(data)
    if args.check:
        current = json.loads(args.output.read_text())
        current["spirv_headers"].pop("package", None)
        data["spirv_headers"].pop("package", None)
        if current != data:
            print(f"{args.output} is out of date; run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
