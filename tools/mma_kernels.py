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


# M x N x K with f16 inputs: the KHR shapes of the H200's driver
MATMUL_SHAPES = (
    MatmulShape(16, 16, 16, "f16", "f32"),
    MatmulShape(16, 16, 16, "f16", "f16"),
    MatmulShape(16, 8, 16, "f16", "f32"),
)


def matmul_kernel(shape: MatmulShape) -> str:
    """The lowered module of `shape`'s kernel @matmul (text)."""
    m, n, k, t, acc = shape.m, shape.n, shape.k, shape.inputs, shape.accumulator
    # flat buffers as in every lowered kernel; the shape is the buffer's
    a, b, c = f"memref<{m * k}x{t}>", f"memref<{k * n}x{t}>", f"memref<{m * n}x{acc}>"
    ma = f'!gpu.mma_matrix<{m}x{k}x{t}, "AOp">'
    mb = f'!gpu.mma_matrix<{k}x{n}x{t}, "BOp">'
    mc = f'!gpu.mma_matrix<{m}x{n}x{acc}, "COp">'

    def buffer(name: str, binding: int, access: str, rows: int, cols: int, dtype: str):
        return (f'#vyre.buffer<name = "{name}", binding = {binding}, access = {access}, '
                f"shape = [{rows}, {cols}], dtype = {dtype}>")

    buffers = ",\n          ".join((
        buffer("a", 0, "read", m, k, t),
        buffer("b", 1, "read", k, n, t),
        buffer("c", 2, "read", m, n, acc),
        buffer("out", 3, "write", m, n, acc),
    ))
    return f"""builtin.module attributes {{gpu.container_module}} {{
  "gpu.module"() <{{sym_name = "matmul"}}> ({{
    "gpu.func"() <{{function_type = ({a}, {b}, {c}, {c}) -> (), kernel}}> ({{
    ^bb0(%a: {a}, %b: {b}, %c: {c}, %out: {c}):
      %c0 = arith.constant 0 : index
      %ma = gpu.subgroup_mma_load_matrix %a[%c0] {{leadDimension = {k} : index}} : {a} -> {ma}
      %mb = gpu.subgroup_mma_load_matrix %b[%c0] {{leadDimension = {n} : index}} : {b} -> {mb}
      %mc = gpu.subgroup_mma_load_matrix %c[%c0] {{leadDimension = {n} : index}} : {c} -> {mc}
      %md = gpu.subgroup_mma_compute %ma, %mb, %mc : {ma}, {mb} -> {mc}
      gpu.subgroup_mma_store_matrix %md, %out[%c0] {{leadDimension = {n} : index}} : {mc}, {c}
      "gpu.return"() : () -> ()
    }}) {{sym_name = "matmul", gpu.kernel, vyre.launch = #vyre.launch<items = {SUBGROUP_LANES},
        workgroup = [{SUBGROUP_LANES}, 1, 1], grid = [1, 1, 1],
        buffers = [
          {buffers}]>}} : () -> ()
  }}) : () -> ()
}}
"""
