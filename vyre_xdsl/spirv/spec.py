"""The subset of the SPIR-V specification this emitter uses.

Numbers are from the SPIR-V 1.6 unified specification (section 3, "Binary
Form") and the GLSL.std.450 extended instruction set; `tests/test_spirv.py`
checks them against `spirv-dis`.

`INSTRUCTIONS` maps an opcode to its name and operand layout, which both the
builder (for sanity checks) and the disassembler use. An operand layout is a
string of kinds:

    T  result type id          R  result id
    I  an id                   L  a literal 32-bit integer
    S  a literal string        C  a literal of the result type (OpConstant)
    X  an ext-inst number (named through the imported set)
    e:NAME  a value of the enumerant table NAME
    *  (suffix) the previous kind repeats to the end of the instruction
    ?  (suffix) the previous kind is optional
"""

from __future__ import annotations

MAGIC = 0x07230203
VERSION_1_3 = 0x00010300
GENERATOR = 0  # no registered generator id: tools print "Khronos; 0"


class Op:
    Nop = 0
    Undef = 1
    Source = 3
    Name = 5
    MemberName = 6
    String = 7
    Extension = 10
    ExtInstImport = 11
    ExtInst = 12
    MemoryModel = 14
    EntryPoint = 15
    ExecutionMode = 16
    Capability = 17
    TypeVoid = 19
    TypeBool = 20
    TypeInt = 21
    TypeFloat = 22
    TypeVector = 23
    TypeArray = 28
    TypeRuntimeArray = 29
    TypeStruct = 30
    TypePointer = 32
    TypeFunction = 33
    ConstantTrue = 41
    ConstantFalse = 42
    Constant = 43
    ConstantComposite = 44
    ConstantNull = 46
    Function = 54
    FunctionParameter = 55
    FunctionEnd = 56
    Variable = 59
    Load = 61
    Store = 62
    AccessChain = 65
    Decorate = 71
    MemberDecorate = 72
    CompositeExtract = 81
    ConvertFToU = 109
    ConvertFToS = 110
    ConvertSToF = 111
    ConvertUToF = 112
    UConvert = 113
    Bitcast = 124
    SNegate = 126
    FNegate = 127
    IAdd = 128
    FAdd = 129
    ISub = 130
    FSub = 131
    IMul = 132
    FMul = 133
    UDiv = 134
    SDiv = 135
    FDiv = 136
    UMod = 137
    SRem = 138
    IsNan = 156
    IsInf = 157
    LogicalEqual = 164
    LogicalNotEqual = 165
    LogicalOr = 166
    LogicalAnd = 167
    LogicalNot = 168
    Select = 169
    IEqual = 170
    INotEqual = 171
    UGreaterThan = 172
    SGreaterThan = 173
    UGreaterThanEqual = 174
    SGreaterThanEqual = 175
    ULessThan = 176
    SLessThan = 177
    ULessThanEqual = 178
    SLessThanEqual = 179
    FOrdEqual = 180
    FUnordEqual = 181
    FOrdNotEqual = 182
    FUnordNotEqual = 183
    FOrdLessThan = 184
    FUnordLessThan = 185
    FOrdGreaterThan = 186
    FUnordGreaterThan = 187
    FOrdLessThanEqual = 188
    FUnordLessThanEqual = 189
    FOrdGreaterThanEqual = 190
    FUnordGreaterThanEqual = 191
    ShiftRightLogical = 194
    ShiftRightArithmetic = 195
    ShiftLeftLogical = 196
    BitwiseOr = 197
    BitwiseXor = 198
    BitwiseAnd = 199
    Not = 200
    ControlBarrier = 224
    MemoryBarrier = 225
    Phi = 245
    LoopMerge = 246
    SelectionMerge = 247
    Label = 248
    Branch = 249
    BranchConditional = 250
    Return = 253
    Unreachable = 255
    GroupNonUniformShuffle = 345
    GroupNonUniformShuffleXor = 346
    GroupNonUniformShuffleUp = 347
    GroupNonUniformShuffleDown = 348


_BINARY = "TRII"
_UNARY = "TRI"

# opcode -> (name, operand layout)
INSTRUCTIONS: dict[int, tuple[str, str]] = {
    Op.Nop: ("OpNop", ""),
    Op.Undef: ("OpUndef", "TR"),
    Op.Source: ("OpSource", "e:SourceLanguage L I? S?"),
    Op.Name: ("OpName", "I S"),
    Op.MemberName: ("OpMemberName", "I L S"),
    Op.String: ("OpString", "R S"),
    Op.Extension: ("OpExtension", "S"),
    Op.ExtInstImport: ("OpExtInstImport", "R S"),
    Op.ExtInst: ("OpExtInst", "T R I X I*"),
    Op.MemoryModel: ("OpMemoryModel", "e:AddressingModel e:MemoryModel"),
    Op.EntryPoint: ("OpEntryPoint", "e:ExecutionModel I S I*"),
    Op.ExecutionMode: ("OpExecutionMode", "I e:ExecutionMode L*"),
    Op.Capability: ("OpCapability", "e:Capability"),
    Op.TypeVoid: ("OpTypeVoid", "R"),
    Op.TypeBool: ("OpTypeBool", "R"),
    Op.TypeInt: ("OpTypeInt", "R L L"),
    Op.TypeFloat: ("OpTypeFloat", "R L"),
    Op.TypeVector: ("OpTypeVector", "R I L"),
    Op.TypeArray: ("OpTypeArray", "R I I"),
    Op.TypeRuntimeArray: ("OpTypeRuntimeArray", "R I"),
    Op.TypeStruct: ("OpTypeStruct", "R I*"),
    Op.TypePointer: ("OpTypePointer", "R e:StorageClass I"),
    Op.TypeFunction: ("OpTypeFunction", "R I I*"),
    Op.ConstantTrue: ("OpConstantTrue", "TR"),
    Op.ConstantFalse: ("OpConstantFalse", "TR"),
    Op.Constant: ("OpConstant", "T R C"),
    Op.ConstantComposite: ("OpConstantComposite", "T R I*"),
    Op.ConstantNull: ("OpConstantNull", "TR"),
    Op.Function: ("OpFunction", "T R e:FunctionControl I"),
    Op.FunctionParameter: ("OpFunctionParameter", "TR"),
    Op.FunctionEnd: ("OpFunctionEnd", ""),
    Op.Variable: ("OpVariable", "T R e:StorageClass I?"),
    Op.Load: ("OpLoad", "T R I e:MemoryAccess?"),
    Op.Store: ("OpStore", "I I e:MemoryAccess?"),
    Op.AccessChain: ("OpAccessChain", "T R I I*"),
    Op.Decorate: ("OpDecorate", "I e:Decoration L*"),
    Op.MemberDecorate: ("OpMemberDecorate", "I L e:Decoration L*"),
    Op.CompositeExtract: ("OpCompositeExtract", "T R I L*"),
    Op.ConvertFToU: ("OpConvertFToU", _UNARY),
    Op.ConvertFToS: ("OpConvertFToS", _UNARY),
    Op.ConvertSToF: ("OpConvertSToF", _UNARY),
    Op.ConvertUToF: ("OpConvertUToF", _UNARY),
    Op.UConvert: ("OpUConvert", _UNARY),
    Op.Bitcast: ("OpBitcast", _UNARY),
    Op.SNegate: ("OpSNegate", _UNARY),
    Op.FNegate: ("OpFNegate", _UNARY),
    Op.IAdd: ("OpIAdd", _BINARY),
    Op.FAdd: ("OpFAdd", _BINARY),
    Op.ISub: ("OpISub", _BINARY),
    Op.FSub: ("OpFSub", _BINARY),
    Op.IMul: ("OpIMul", _BINARY),
    Op.FMul: ("OpFMul", _BINARY),
    Op.UDiv: ("OpUDiv", _BINARY),
    Op.SDiv: ("OpSDiv", _BINARY),
    Op.FDiv: ("OpFDiv", _BINARY),
    Op.UMod: ("OpUMod", _BINARY),
    Op.SRem: ("OpSRem", _BINARY),
    Op.IsNan: ("OpIsNan", _UNARY),
    Op.IsInf: ("OpIsInf", _UNARY),
    Op.LogicalEqual: ("OpLogicalEqual", _BINARY),
    Op.LogicalNotEqual: ("OpLogicalNotEqual", _BINARY),
    Op.LogicalOr: ("OpLogicalOr", _BINARY),
    Op.LogicalAnd: ("OpLogicalAnd", _BINARY),
    Op.LogicalNot: ("OpLogicalNot", _UNARY),
    Op.Select: ("OpSelect", "TRIII"),
    Op.IEqual: ("OpIEqual", _BINARY),
    Op.INotEqual: ("OpINotEqual", _BINARY),
    Op.UGreaterThan: ("OpUGreaterThan", _BINARY),
    Op.SGreaterThan: ("OpSGreaterThan", _BINARY),
    Op.UGreaterThanEqual: ("OpUGreaterThanEqual", _BINARY),
    Op.SGreaterThanEqual: ("OpSGreaterThanEqual", _BINARY),
    Op.ULessThan: ("OpULessThan", _BINARY),
    Op.SLessThan: ("OpSLessThan", _BINARY),
    Op.ULessThanEqual: ("OpULessThanEqual", _BINARY),
    Op.SLessThanEqual: ("OpSLessThanEqual", _BINARY),
    Op.FOrdEqual: ("OpFOrdEqual", _BINARY),
    Op.FUnordEqual: ("OpFUnordEqual", _BINARY),
    Op.FOrdNotEqual: ("OpFOrdNotEqual", _BINARY),
    Op.FUnordNotEqual: ("OpFUnordNotEqual", _BINARY),
    Op.FOrdLessThan: ("OpFOrdLessThan", _BINARY),
    Op.FUnordLessThan: ("OpFUnordLessThan", _BINARY),
    Op.FOrdGreaterThan: ("OpFOrdGreaterThan", _BINARY),
    Op.FUnordGreaterThan: ("OpFUnordGreaterThan", _BINARY),
    Op.FOrdLessThanEqual: ("OpFOrdLessThanEqual", _BINARY),
    Op.FUnordLessThanEqual: ("OpFUnordLessThanEqual", _BINARY),
    Op.FOrdGreaterThanEqual: ("OpFOrdGreaterThanEqual", _BINARY),
    Op.FUnordGreaterThanEqual: ("OpFUnordGreaterThanEqual", _BINARY),
    Op.ShiftRightLogical: ("OpShiftRightLogical", _BINARY),
    Op.ShiftRightArithmetic: ("OpShiftRightArithmetic", _BINARY),
    Op.ShiftLeftLogical: ("OpShiftLeftLogical", _BINARY),
    Op.BitwiseOr: ("OpBitwiseOr", _BINARY),
    Op.BitwiseXor: ("OpBitwiseXor", _BINARY),
    Op.BitwiseAnd: ("OpBitwiseAnd", _BINARY),
    Op.Not: ("OpNot", _UNARY),
    Op.ControlBarrier: ("OpControlBarrier", "I I I"),
    Op.MemoryBarrier: ("OpMemoryBarrier", "I I"),
    Op.Phi: ("OpPhi", "T R I*"),
    Op.LoopMerge: ("OpLoopMerge", "I I e:LoopControl"),
    Op.SelectionMerge: ("OpSelectionMerge", "I e:SelectionControl"),
    Op.Label: ("OpLabel", "R"),
    Op.Branch: ("OpBranch", "I"),
    Op.BranchConditional: ("OpBranchConditional", "I I I L*"),
    Op.Return: ("OpReturn", ""),
    Op.Unreachable: ("OpUnreachable", ""),
    # result type, result, execution scope (an id), value, lane / mask / delta
    Op.GroupNonUniformShuffle: ("OpGroupNonUniformShuffle", "TRIII"),
    Op.GroupNonUniformShuffleXor: ("OpGroupNonUniformShuffleXor", "TRIII"),
    Op.GroupNonUniformShuffleUp: ("OpGroupNonUniformShuffleUp", "TRIII"),
    Op.GroupNonUniformShuffleDown: ("OpGroupNonUniformShuffleDown", "TRIII"),
}


class Capability:
    Shader = 1
    Float16 = 9
    Int64 = 11
    GroupNonUniform = 61
    GroupNonUniformShuffle = 65
    GroupNonUniformShuffleRelative = 66
    StorageBuffer16BitAccess = 4433
    SignedZeroInfNanPreserve = 4466


class AddressingModel:
    Logical = 0


class MemoryModel:
    GLSL450 = 1


class ExecutionModel:
    GLCompute = 5


class ExecutionMode:
    LocalSize = 17
    SignedZeroInfNanPreserve = 4461


class StorageClass:
    UniformConstant = 0
    Input = 1
    Uniform = 2
    Output = 3
    Workgroup = 4
    CrossWorkgroup = 5
    Private = 6
    Function = 7
    PushConstant = 9
    StorageBuffer = 12


class Decoration:
    Block = 2
    ArrayStride = 6
    BuiltIn = 11
    NonWritable = 24
    NonReadable = 25
    Binding = 33
    DescriptorSet = 34
    Offset = 35


class BuiltIn:
    NumWorkgroups = 24
    WorkgroupSize = 25
    WorkgroupId = 26
    LocalInvocationId = 27
    GlobalInvocationId = 28
    LocalInvocationIndex = 29
    SubgroupSize = 36
    SubgroupLocalInvocationId = 41


class Scope:
    CrossDevice = 0
    Device = 1
    Workgroup = 2
    Subgroup = 3
    Invocation = 4


class MemorySemantics:
    None_ = 0
    Acquire = 0x2
    Release = 0x4
    AcquireRelease = 0x8
    SequentiallyConsistent = 0x10
    UniformMemory = 0x40
    WorkgroupMemory = 0x100


class FunctionControl:
    None_ = 0


class GLSL:
    """GLSL.std.450 extended instruction numbers."""

    RoundEven = 2
    Trunc = 3
    FAbs = 4
    Floor = 8
    Ceil = 9
    Sin = 13
    Cos = 14
    Tan = 15
    Tanh = 21
    Pow = 26
    Exp = 27
    Log = 28
    Exp2 = 29
    Log2 = 30
    Sqrt = 31
    InverseSqrt = 32
    FMin = 37
    UMin = 38
    SMin = 39
    FMax = 40
    UMax = 41
    SMax = 42
    Fma = 50
    NMin = 79
    NMax = 80


def _names(cls) -> dict[int, str]:
    return {
        value: name.rstrip("_")
        for name, value in vars(cls).items()
        if not name.startswith("__") and isinstance(value, int)
    }


# enumerant tables by operand kind, for the disassembler
ENUMS: dict[str, dict[int, str]] = {
    "Capability": _names(Capability),
    "AddressingModel": _names(AddressingModel),
    "MemoryModel": _names(MemoryModel),
    "ExecutionModel": _names(ExecutionModel),
    "ExecutionMode": _names(ExecutionMode),
    "StorageClass": _names(StorageClass),
    "Decoration": _names(Decoration),
    "BuiltIn": _names(BuiltIn),
    "SourceLanguage": {0: "Unknown", 2: "GLSL"},
    # bit masks: 0 prints as None
    "FunctionControl": {0: "None", 1: "Inline", 2: "DontInline", 4: "Pure", 8: "Const"},
    "MemoryAccess": {0: "None", 1: "Volatile", 2: "Aligned", 4: "Nontemporal"},
    "LoopControl": {0: "None", 1: "Unroll", 2: "DontUnroll"},
    "SelectionControl": {0: "None", 1: "Flatten", 2: "DontFlatten"},
}
MASK_ENUMS = {"FunctionControl", "MemoryAccess", "LoopControl", "SelectionControl"}
GLSL_NAMES: dict[int, str] = _names(GLSL)
