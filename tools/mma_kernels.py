"""Self-contained lowered kernels (docs/lowered-ir.md) that multiply one
tile on a subgroup's matrix unit, out = a * b + c, through MLIR's
gpu.subgroup_mma_* ops: the executors' smallest tensor-core check
(tests/test_mma.py on the interpreter, `tools/gpu_check.sh --match mma` on
a Vulkan device with VK_KHR_cooperative_matrix).

One workgroup of one 32-lane subgroup; a is MxK, b KxN, c and out MxN, all
row-major in flat buffers.  The shapes are those the device profiles list (16x16x16,
16x8x16); bf16 is absent because MLIR 22's !gpu.mma_matrix has no bf16.
"""

from __future__ import annotations

from dataclasses import dataclass

SUBGROUP_LANES = 32  # one NVIDIA warp: the H200's subgroup size


@dataclass(frozen=True)
class MatmulShape:
    m: int
    n: int
    k: int
    inputs: str = "f16"  # a and b
    accumulator: str = "f32"  # c and out

    @property
    def name(self) -> str:
        return f"mma_{self.m}x{self.n}x{self.k}_{self.inputs}_{self.accumulator}"


# M x N x K with f16 (and bf16) inputs: the KHR shapes of the H200's driver
MATMUL_SHAPES = (
    MatmulShape(16, 16, 16, "f16", "f32"),
    MatmulShape(16, 16, 16, "bf16", "f32"),
    MatmulShape(16, 16, 16, "f16", "f16"),
    MatmulShape(16, 8, 16, "f16", "f32"),
)


@dataclass(frozen=True)
class TileBuffer:
    """A kernel argument: a flat memref of `shape`'s elements, as in every
    lowered kernel (the shape is the buffer's)."""

    name: str
    access: str  # "read" or "write"
    shape: tuple[int, int]
    dtype: str  # "f16" or "f32"

    @property
    def memref(self) -> str:
        return f"memref<{self.shape[0] * self.shape[1]}x{self.dtype}>"


def lowered_kernel(name: str, buffers: tuple[TileBuffer, ...], body: str,
                   lanes: int = SUBGROUP_LANES) -> str:
    """The lowered module of kernel @name (text): one workgroup of `lanes`,
    `body` (ops on %NAME of each buffer) then gpu.return."""
    body = body.strip("\n")
    types = ", ".join(b.memref for b in buffers)
    args = ", ".join(f"%{b.name}: {b.memref}" for b in buffers)
    entries = ",\n          ".join(
        f'#vyre.buffer<name = "{b.name}", binding = {i}, access = {b.access}, '
        f"shape = [{b.shape[0]}, {b.shape[1]}], dtype = {b.dtype}>"
        for i, b in enumerate(buffers))
    return f"""builtin.module attributes {{gpu.container_module}} {{
  "gpu.module"() <{{sym_name = "{name}"}}> ({{
    "gpu.func"() <{{function_type = ({types}) -> (), kernel}}> ({{
    ^bb0({args}):
{body}
      "gpu.return"() : () -> ()
    }}) {{sym_name = "{name}", gpu.kernel, vyre.launch = #vyre.launch<items = {lanes},
        workgroup = [{lanes}, 1, 1], grid = [1, 1, 1],
        buffers = [
          {entries}]>}} : () -> ()
  }}) : () -> ()
}}
"""


def matmul_kernel(shape: MatmulShape) -> str:
    """The lowered module of `shape`'s kernel @matmul (text)."""
    m, n, k, t, acc = shape.m, shape.n, shape.k, shape.inputs, shape.accumulator
    buffers = (TileBuffer("a", "read", (m, k), t), TileBuffer("b", "read", (k, n), t),
               TileBuffer("c", "read", (m, n), acc), TileBuffer("out", "write", (m, n), acc))
    a, b, c, _ = (buffer.memref for buffer in buffers)
    ma = f'!gpu.mma_matrix<{m}x{k}x{t}, "AOp">'
    mb = f'!gpu.mma_matrix<{k}x{n}x{t}, "BOp">'
    mc = f'!gpu.mma_matrix<{m}x{n}x{acc}, "COp">'
    return lowered_kernel("matmul", buffers, f"""
      %c0 = arith.constant 0 : index
      %ma = gpu.subgroup_mma_load_matrix %a[%c0] {{leadDimension = {k} : index}} : {a} -> {ma}
      %mb = gpu.subgroup_mma_load_matrix %b[%c0] {{leadDimension = {n} : index}} : {b} -> {mb}
      %mc = gpu.subgroup_mma_load_matrix %c[%c0] {{leadDimension = {n} : index}} : {c} -> {mc}
      %md = gpu.subgroup_mma_compute %ma, %mb, %mc : {ma}, {mb} -> {mc}
      gpu.subgroup_mma_store_matrix %md, %out[%c0] {{leadDimension = {n} : index}} : {mc}, {c}
""")


def accumulator_layout_kernel(element: str, shape: tuple[int, int] = (16, 16),
                              operand: str = "COp") -> str:
    """The lowered module of @layout (text): each lane writes element i of
    its share of a `shape` accumulator (or `operand`) matrix loaded from c
    to out[lane, i]; with c[r, col] = r * cols + col, out says which
    element of the matrix each lane holds (vyre_xdsl.mma_layout)."""
    rows, cols = shape
    share = rows * cols // SUBGROUP_LANES
    buffers = (TileBuffer("c", "read", shape, element),
               TileBuffer("out", "write", (SUBGROUP_LANES, share), element))
    c, out = (buffer.memref for buffer in buffers)
    matrix = f'!gpu.mma_matrix<{rows}x{cols}x{element}, "{operand}">'
    stores = "\n".join(f"""      %i{i} = arith.constant {i} : index
      %v{i} = gpu.subgroup_mma_extract_thread_local %m[%i{i}] : {matrix} -> {element}
      %at{i} = arith.addi %first, %i{i} : index
      memref.store %v{i}, %out[%at{i}] : {out}""" for i in range(share))
    return lowered_kernel("layout", buffers, f"""
      %c0 = arith.constant 0 : index
      %share = arith.constant {share} : index
      %lane = "gpu.thread_id"() <{{dimension = #gpu<dim x>}}> : () -> index
      %first = arith.muli %lane, %share : index
      %m = gpu.subgroup_mma_load_matrix %c[%c0] {{leadDimension = {cols} : index}} : {c} -> {matrix}
{stores}
""")
