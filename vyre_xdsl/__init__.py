"""vyre-xdsl: a compiler for fused tiled online-softmax attention kernels.

    import vyre_xdsl as vx
    m = vx.flash_attention_2(seq_len=512, head_dim=64)     # vyre IR
    g = vx.lower_to_gpu(m)                                 # gpu/arith/scf/math/memref
    spv = vx.compile_spirv(m)                              # SPIR-V binary
    out = vx.run(m, {"q": q, "k": k, "v": v})["out"]       # interpreter or vulkan
    kernel = vx.compile(m, backend="vulkan")               # once; then kernel(q=q, k=k, v=v)
"""

from vyre_xdsl.errors import VyreError
from vyre_xdsl.compiler import (
    apply_pipeline,
    compile_spirv,
    lower_to_gpu,
    make_context,
    parse_module,
)
from vyre_xdsl.decoders import (
    flash_attention_2,
    mla_decode,
    mla_decode_absorbed,
    mla_decode_program,
)
from vyre_xdsl.kernel import DeviceArray, Kernel, compile
from vyre_xdsl.run import run
from vyre_xdsl.skeleton import (
    Buffer,
    Fragment,
    classify_tiles,
    tile_class_counts,
    tiled_online_softmax,
)
from vyre_xdsl.trace import (
    Traced,
    abs,
    ceil,
    cos,
    erf,
    exp,
    exp2,
    floor,
    log,
    maximum,
    minimum,
    pow,
    round_ as round,
    sin,
    sqrt,
    table,
    tan,
    tanh,
    trunc,
    where,
    wrap,
)


def __getattr__(name: str):
    # The oracle imports lazily so that building kernels never pays for it.
    if name == "reference":
        import importlib

        return importlib.import_module("vyre_xdsl.reference")
    raise AttributeError(f"module 'vyre_xdsl' has no attribute {name!r}")


__all__ = [
    "VyreError",
    "Buffer",
    "DeviceArray",
    "Kernel",
    "Fragment",
    "Traced",
    "abs",
    "classify_tiles",
    "compile",
    "ceil",
    "cos",
    "erf",
    "exp",
    "exp2",
    "floor",
    "log",
    "maximum",
    "minimum",
    "pow",
    "round",
    "sin",
    "sqrt",
    "table",
    "tan",
    "tanh",
    "trunc",
    "tile_class_counts",
    "where",
    "wrap",
    "apply_pipeline",
    "compile_spirv",
    "flash_attention_2",
    "lower_to_gpu",
    "make_context",
    "mla_decode",
    "mla_decode_absorbed",
    "mla_decode_program",
    "parse_module",
    "reference",
    "run",
    "tiled_online_softmax",
]
