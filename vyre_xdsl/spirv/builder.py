"""A small SPIR-V module builder: id allocation, deduplicated types and
constants, the logical module layout of the spec (section 2.4) and the binary
encoding (section 3)."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from vyre_xdsl.spirv.spec import (
    GENERATOR,
    MAGIC,
    VERSION_1_3,
    AddressingModel,
    Decoration,
    FunctionControl,
    MemoryModel,
    Op,
    StorageClass,
)


def string_words(text: str) -> list[int]:
    """A literal string: UTF-8, NUL-terminated, zero-padded to whole words."""
    data = text.encode("utf-8") + b"\0"
    data += b"\0" * (-len(data) % 4)
    return list(struct.unpack(f"<{len(data) // 4}I", data))


def f32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


class Instruction(list):
    """[opcode, operand words...]; mutable so a phi can be completed later."""

    @property
    def opcode(self) -> int:
        return self[0]

    def encode(self) -> list[int]:
        count = len(self)
        if count > 0xFFFF:
            raise ValueError("SPIR-V instruction too long")
        return [(count << 16) | self[0], *self[1:]]


class FunctionBuilder:
    """The body of one function: blocks of instructions, with Function-storage
    variables hoisted into the entry block as SPIR-V requires."""

    def __init__(self, module: ModuleBuilder, result_type: int, fn_type: int):
        self.module = module
        self.id = module.new_id()
        self.header = [Instruction([Op.Function, result_type, self.id,
                                    FunctionControl.None_, fn_type])]
        self.entry_label: int | None = None
        self.variables: list[Instruction] = []
        self.body: list[Instruction] = []
        self.current_label: int | None = None

    def emit(self, opcode: int, *operands: int) -> Instruction:
        inst = Instruction([opcode, *operands])
        self.body.append(inst)
        return inst

    def op(self, opcode: int, result_type: int, *operands: int) -> int:
        """Emit a value instruction; return its result id."""
        result = self.module.new_id()
        self.emit(opcode, result_type, result, *operands)
        return result

    def label(self, label: int | None = None) -> int:
        label = self.module.new_id() if label is None else label
        self.emit(Op.Label, label)
        if self.entry_label is None:
            self.entry_label = label
        self.current_label = label
        return label

    def local_variable(self, pointer_type: int) -> int:
        result = self.module.new_id()
        self.variables.append(
            Instruction([Op.Variable, pointer_type, result, StorageClass.Function])
        )
        return result

    def instructions(self) -> list[Instruction]:
        body = self.body
        # the entry block's OpLabel is body[0]; variables follow it directly
        return [*self.header, body[0], *self.variables, *body[1:],
                Instruction([Op.FunctionEnd])]


class ModuleBuilder:
    def __init__(self, version: int = VERSION_1_3):
        self.version = version
        self._next_id = 1
        self.capabilities: list[Instruction] = []
        self.extensions: list[Instruction] = []
        self.ext_imports: list[Instruction] = []
        self.memory_model = Instruction(
            [Op.MemoryModel, AddressingModel.Logical, MemoryModel.GLSL450]
        )
        self.entry_points: list[Instruction] = []
        self.execution_modes: list[Instruction] = []
        self.debug: list[Instruction] = []
        self.annotations: list[Instruction] = []
        self.globals: list[Instruction] = []  # types, constants, global variables
        self.functions: list[FunctionBuilder] = []
        self._types: dict[tuple, int] = {}
        self._constants: dict[tuple, int] = {}
        self._imports: dict[str, int] = {}
        self._caps: set[int] = set()
        self._exts: set[str] = set()

    # ids and sections ----------------------------------------------------
    def new_id(self) -> int:
        result = self._next_id
        self._next_id += 1
        return result

    @property
    def bound(self) -> int:
        return self._next_id

    def set_memory_model(self, model: int) -> None:
        self.memory_model = Instruction([Op.MemoryModel, AddressingModel.Logical, model])

    def capability(self, cap: int) -> None:
        if cap not in self._caps:
            self._caps.add(cap)
            self.capabilities.append(Instruction([Op.Capability, cap]))

    def extension(self, name: str) -> None:
        if name not in self._exts:
            self._exts.add(name)
            self.extensions.append(Instruction([Op.Extension, *string_words(name)]))

    def ext_inst_import(self, name: str) -> int:
        if name not in self._imports:
            result = self.new_id()
            self._imports[name] = result
            self.ext_imports.append(
                Instruction([Op.ExtInstImport, result, *string_words(name)])
            )
        return self._imports[name]

    def entry_point(self, model: int, function: int, name: str,
                    interface: Iterable[int]) -> None:
        self.entry_points.append(
            Instruction([Op.EntryPoint, model, function, *string_words(name),
                         *interface])
        )

    def execution_mode(self, function: int, mode: int, *literals: int) -> None:
        self.execution_modes.append(
            Instruction([Op.ExecutionMode, function, mode, *literals])
        )

    def name(self, target: int, text: str) -> None:
        self.debug.append(Instruction([Op.Name, target, *string_words(text)]))

    def decorate(self, target: int, decoration: int, *literals: int) -> None:
        self.annotations.append(
            Instruction([Op.Decorate, target, decoration, *literals])
        )

    def member_decorate(self, target: int, member: int, decoration: int,
                        *literals: int) -> None:
        self.annotations.append(
            Instruction([Op.MemberDecorate, target, member, decoration, *literals])
        )

    # types -------------------------------------------------------------------
    def _type(self, key: tuple, opcode: int, *operands: int) -> int:
        if key not in self._types:
            result = self.new_id()
            self.globals.append(Instruction([opcode, result, *operands]))
            self._types[key] = result
        return self._types[key]

    def type_void(self) -> int:
        return self._type(("void",), Op.TypeVoid)

    def type_bool(self) -> int:
        return self._type(("bool",), Op.TypeBool)

    def type_int(self, width: int = 32, signed: bool = False) -> int:
        return self._type(("int", width, signed), Op.TypeInt, width, int(signed))

    def type_float(self, width: int = 32, encoding: int | None = None) -> int:
        """OpTypeFloat of `width` bits, IEEE unless an FPEncoding is given."""
        if encoding is None:
            return self._type(("float", width), Op.TypeFloat, width)
        return self._type(("float", width, encoding), Op.TypeFloat, width, encoding)

    def type_vector(self, element: int, count: int) -> int:
        return self._type(("vector", element, count), Op.TypeVector, element, count)

    def type_array(self, element: int, length: int, stride: int | None = None) -> int:
        """A sized array; `stride` (explicit layout) makes a distinct type,
        since Workgroup/Function arrays must not carry ArrayStride."""
        length_id = self.constant_uint(length)
        key = ("array", element, length, stride)
        known = key in self._types
        result = self._type(key, Op.TypeArray, element, length_id)
        if stride is not None and not known:
            self.decorate(result, Decoration.ArrayStride, stride)
        return result

    def type_runtime_array(self, element: int, stride: int) -> int:
        key = ("runtime_array", element, stride)
        known = key in self._types
        result = self._type(key, Op.TypeRuntimeArray, element)
        if not known:
            self.decorate(result, Decoration.ArrayStride, stride)
        return result

    def type_block(self, member: int) -> int:
        """A Block-decorated struct holding `member` at offset 0 (the shape
        of a storage buffer)."""
        key = ("block", member)
        known = key in self._types
        result = self._type(key, Op.TypeStruct, member)
        if not known:
            self.decorate(result, Decoration.Block)
            self.member_decorate(result, 0, Decoration.Offset, 0)
        return result

    def type_pointer(self, storage_class: int, pointee: int) -> int:
        return self._type(("pointer", storage_class, pointee), Op.TypePointer,
                          storage_class, pointee)

    def type_cooperative_matrix(self, component: int, scope: int, rows: int,
                                cols: int, use: int) -> int:
        """SPV_KHR_cooperative_matrix's matrix type (scope and use: enumerant
        numbers, held by constants as the instruction wants)."""
        return self._type(("cooperative_matrix", component, scope, rows, cols, use),
                          Op.TypeCooperativeMatrixKHR, component,
                          *(self.constant_uint(v) for v in (scope, rows, cols, use)))

    def type_function(self, result: int, *params: int) -> int:
        return self._type(("function", result, params), Op.TypeFunction,
                          result, *params)

    # constants -----------------------------------------------------------
    def constant(self, type_id: int, *words: int) -> int:
        key = ("const", type_id, words)
        if key not in self._constants:
            result = self.new_id()
            self.globals.append(Instruction([Op.Constant, type_id, result, *words]))
            self._constants[key] = result
        return self._constants[key]

    def constant_uint(self, value: int) -> int:
        return self.constant(self.type_int(32, False), value & 0xFFFFFFFF)

    def constant_f32(self, value: float) -> int:
        return self.constant(self.type_float(32), f32_bits(value))

    def constant_f32_bits(self, bits: int) -> int:
        return self.constant(self.type_float(32), bits & 0xFFFFFFFF)

    def constant_bool(self, value: bool) -> int:
        key = ("bool", bool(value))
        if key not in self._constants:
            result = self.new_id()
            opcode = Op.ConstantTrue if value else Op.ConstantFalse
            self.globals.append(Instruction([opcode, self.type_bool(), result]))
            self._constants[key] = result
        return self._constants[key]

    def constant_composite(self, type_id: int, *parts: int) -> int:
        key = ("composite", type_id, parts)
        if key not in self._constants:
            result = self.new_id()
            self.globals.append(
                Instruction([Op.ConstantComposite, type_id, result, *parts])
            )
            self._constants[key] = result
        return self._constants[key]

    # globals and functions -----------------------------------------------
    def global_variable(self, pointer_type: int, storage_class: int) -> int:
        result = self.new_id()
        self.globals.append(Instruction([Op.Variable, pointer_type, result,
                                         storage_class]))
        return result

    def function(self, result_type: int, fn_type: int) -> FunctionBuilder:
        fn = FunctionBuilder(self, result_type, fn_type)
        self.functions.append(fn)
        return fn

    # encoding --------------------------------------------------------------
    def instructions(self) -> list[Instruction]:
        out: list[Instruction] = [*self.capabilities, *self.extensions,
                                  *self.ext_imports, self.memory_model,
                                  *self.entry_points, *self.execution_modes,
                                  *self.debug, *self.annotations, *self.globals]
        for fn in self.functions:
            out.extend(fn.instructions())
        return out

    def encode(self) -> bytes:
        words = [MAGIC, self.version, GENERATOR, self.bound, 0]
        for inst in self.instructions():
            words.extend(inst.encode())
        return struct.pack(f"<{len(words)}I", *words)
