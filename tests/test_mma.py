"""The subgroup matrix ops (dialects/gpu_mma.py) in every executor: the
interpreter against numpy, the SPIR-V emitter's cooperative matrices
deserialised and verified by MLIR 22 (Debian's spirv-val predates
SPV_KHR_cooperative_matrix), and the Vulkan runtime's refusal of a device
without VK_KHR_cooperative_matrix (lavapipe)."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import vyre_xdsl as vx
from requirements import (
    MLIR_OPT,
    assert_mlir_opt_accepts,
    needs_mlir_opt,
    needs_vulkan,
    requires,
)
from vyre_xdsl.dtypes import numpy_dtype
from vyre_xdsl.errors import VyreError
from vyre_xdsl.spirv import emit_spirv_module
from vyre_xdsl.spirv.spec import Capability
from vyre_xdsl.tools.mma_kernels import (
    MATMUL_SHAPES,
    MatmulShape,
    TileBuffer,
    lowered_kernel,
    matmul_kernel,
)

MLIR_TRANSLATE = shutil.which("mlir-translate-22")
needs_mlir_translate = requires(
    None if MLIR_TRANSLATE else "mlir-translate-22 not installed (Debian mlir-22-tools)")

# Unit roundoff of the accumulator: a device may add the K products and C
# in any order, rounding each partial sum (an f16 accumulator too), so an
# element of out may be off by (K + 1) * u * (|a| |b| + |c|) from the exact
# value; the interpreter's own error is within it.
UNIT_ROUNDOFF = {"f16": 2.0**-11, "f32": 2.0**-24}


def matmul_inputs(shape: MatmulShape, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    t, acc = numpy_dtype(shape.inputs), numpy_dtype(shape.accumulator)
    return {
        "a": rng.standard_normal(shape.m * shape.k).astype(t),
        "b": rng.standard_normal(shape.k * shape.n).astype(t),
        "c": rng.standard_normal(shape.m * shape.n).astype(acc),
    }


def assert_matmul_close(shape: MatmulShape, ins, out: np.ndarray) -> None:
    """out = a b + c within the declared tolerance (float64 reference)."""
    a = ins["a"].astype(np.float64).reshape(shape.m, shape.k)
    b = ins["b"].astype(np.float64).reshape(shape.k, shape.n)
    c = ins["c"].astype(np.float64).reshape(shape.m, shape.n)
    bound = (shape.k + 1) * UNIT_ROUNDOFF[shape.accumulator] * (np.abs(a) @ np.abs(b)
                                                                 + np.abs(c))
    error = np.abs(out.astype(np.float64).reshape(shape.m, shape.n) - (a @ b + c))
    assert out.dtype == numpy_dtype(shape.accumulator)
    assert (error <= bound).all(), f"worst error {error.max()}, bound {bound.min()}"


@pytest.mark.parametrize("shape", MATMUL_SHAPES, ids=lambda s: s.name)
def test_interpreter_matmul_matches_numpy(shape):
    ins = matmul_inputs(shape)
    out = vx.run(vx.parse_module(matmul_kernel(shape)), ins)["out"]
    assert_matmul_close(shape, ins, out)


def test_tolerance_catches_a_wrong_product():
    shape = MATMUL_SHAPES[0]
    ins = matmul_inputs(shape)
    out = vx.run(vx.parse_module(matmul_kernel(shape)), ins)["out"]
    out[5] += 1e-3
    with pytest.raises(AssertionError):
        assert_matmul_close(shape, ins, out)


# out = a * b^T + 1 on each of two subgroups, subgroup s on rows 16s..16s+15
# of a and out: b read transposed, a constant accumulator, per-subgroup
# indices from the lane id
TWO_SUBGROUPS = lowered_kernel("tiles", (
    TileBuffer("a", "read", (32, 16), "f16"),
    TileBuffer("b", "read", (16, 16), "f16"),
    TileBuffer("out", "write", (32, 16), "f32"),
), """
      %c0 = arith.constant 0 : index
      %c32 = arith.constant 32 : index
      %c256 = arith.constant 256 : index
      %lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
      %sub = arith.divui %lane, %c32 : index
      %base = arith.muli %sub, %c256 : index
      %ma = gpu.subgroup_mma_load_matrix %a[%base] {leadDimension = 16 : index} : memref<512xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
      %mb = gpu.subgroup_mma_load_matrix %b[%c0] {leadDimension = 16 : index, transpose} : memref<256xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
      %one = arith.constant 1.0 : f32
      %mc = gpu.subgroup_mma_constant_matrix %one : !gpu.mma_matrix<16x16xf32, "COp">
      %md = gpu.subgroup_mma_compute %ma, %mb, %mc : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
      gpu.subgroup_mma_store_matrix %md, %out[%base] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf32, "COp">, memref<512xf32>
""", lanes=64)


def _two_subgroup_inputs():
    rng = np.random.default_rng(1)
    return {"a": rng.standard_normal(512).astype(np.float16),
            "b": rng.standard_normal(256).astype(np.float16)}


def test_each_subgroup_has_its_own_tile_transposed_b_and_constant_c():
    ins = _two_subgroup_inputs()
    out = vx.run(vx.parse_module(TWO_SUBGROUPS), ins)["out"]
    a = ins["a"].astype(np.float64).reshape(32, 16)
    b = ins["b"].astype(np.float64).reshape(16, 16)
    np.testing.assert_allclose(out.reshape(32, 16), a @ b.T + 1, rtol=1e-5, atol=1e-5)


def _branching(cond: str) -> str:
    """TWO_SUBGROUPS with C chosen by `cond`: the constant 1 where it
    holds, else 2 (matrices made before the branch, as vyre-tensor-cores'
    rescale yields O as it is where no row moved)."""
    return TWO_SUBGROUPS.replace(
        '      %mc = gpu.subgroup_mma_constant_matrix %one : !gpu.mma_matrix<16x16xf32, "COp">\n',
        f"""      %two = arith.constant 2.0 : f32
      %c16 = arith.constant 16 : index
      %m1 = gpu.subgroup_mma_constant_matrix %one : !gpu.mma_matrix<16x16xf32, "COp">
      %m2 = gpu.subgroup_mma_constant_matrix %two : !gpu.mma_matrix<16x16xf32, "COp">
      %cond = arith.cmpi {cond} : index
      %mc = scf.if %cond -> (!gpu.mma_matrix<16x16xf32, "COp">) {{
        scf.yield %m1 : !gpu.mma_matrix<16x16xf32, "COp">
      }} else {{
        scf.yield %m2 : !gpu.mma_matrix<16x16xf32, "COp">
      }}
""")


def test_subgroups_may_take_different_branches_around_matrices():
    """Subgroup 0 takes the then-branch, subgroup 1 the else-branch: each
    keeps its own branch's matrix."""
    ins = _two_subgroup_inputs()
    out = vx.run(vx.parse_module(_branching("ult, %lane, %c32")), ins)["out"].reshape(32, 16)
    a = ins["a"].astype(np.float64).reshape(32, 16)
    product = a @ ins["b"].astype(np.float64).reshape(16, 16).T
    np.testing.assert_allclose(out[:16], product[:16] + 1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[16:], product[16:] + 2, rtol=1e-5, atol=1e-5)


def test_lanes_of_a_subgroup_must_take_one_branch_around_matrices():
    with pytest.raises(VyreError, match="subgroup 0 of workgroup .* took different branches"):
        vx.run(vx.parse_module(_branching("ult, %lane, %c16")), _two_subgroup_inputs())


def test_lanes_of_a_subgroup_must_agree_on_the_tile():
    text = TWO_SUBGROUPS.replace("%sub = arith.divui %lane, %c32 : index",
                                 "%sub = arith.remui %lane, %c32 : index")
    with pytest.raises(VyreError, match="different indices"):
        vx.run(vx.parse_module(text), _two_subgroup_inputs())


def test_a_tile_beyond_the_buffer_is_refused():
    text = TWO_SUBGROUPS.replace("%c256 = arith.constant 256 : index",
                                 "%c256 = arith.constant 400 : index")
    with pytest.raises(VyreError, match="reaches element"):
        vx.run(vx.parse_module(text), _two_subgroup_inputs())


# -- SPIR-V --------------------------------------------------------------------

def _mlir_verifies_spirv(binary: bytes, tmp_path) -> str:
    """mlir-translate-22 deserialises `binary` and mlir-opt-22 verifies it;
    returns MLIR's text of the spirv.module."""
    path = tmp_path / "k.spv"
    path.write_bytes(binary)
    result = subprocess.run([MLIR_TRANSLATE, "--deserialize-spirv", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    verified = subprocess.run([MLIR_OPT], input=result.stdout, capture_output=True,
                              text=True)
    assert verified.returncode == 0, verified.stderr
    return verified.stdout


@needs_mlir_translate
@needs_mlir_opt
@pytest.mark.parametrize("shape", MATMUL_SHAPES, ids=lambda s: s.name)
def test_spirv_cooperative_matrices_verify_in_mlir(shape, tmp_path):
    spirv = emit_spirv_module(vx.parse_module(matmul_kernel(shape)))
    entry = spirv.entry("matmul")
    assert {Capability.CooperativeMatrixKHR, Capability.VulkanMemoryModel} <= entry.capabilities
    assert {"SPV_KHR_cooperative_matrix", "SPV_KHR_vulkan_memory_model"} <= entry.extensions
    if shape.inputs == "bf16":  # SPV_KHR_bfloat16's type and matrices, no f16
        assert {Capability.BFloat16TypeKHR,
                Capability.BFloat16CooperativeMatrixKHR} <= entry.capabilities
        assert Capability.Float16 not in entry.capabilities
        assert "SPV_KHR_bfloat16" in entry.extensions
    else:
        assert Capability.Float16 in entry.capabilities
    text = _mlir_verifies_spirv(spirv.binary, tmp_path)
    m, n, k, t, acc = shape.m, shape.n, shape.k, shape.inputs, shape.accumulator
    for expected in (
        "spirv.module Logical Vulkan",
        f"!spirv.coopmatrix<{m}x{k}x{t}, Subgroup, MatrixA>",
        f"!spirv.coopmatrix<{k}x{n}x{t}, Subgroup, MatrixB>",
        f"-> !spirv.coopmatrix<{m}x{n}x{acc}, Subgroup, MatrixAcc>",
        "spirv.KHR.CooperativeMatrixMulAdd",
        "spirv.KHR.CooperativeMatrixStore",
    ):
        assert expected in text, expected
    assert "spirv.KHR.CooperativeMatrixLoad" in text and "<RowMajor>" in text


@needs_mlir_translate
@needs_mlir_opt
def test_spirv_transposed_load_and_constant_matrix_verify_in_mlir(tmp_path):
    spirv = emit_spirv_module(vx.parse_module(TWO_SUBGROUPS))
    text = _mlir_verifies_spirv(spirv.binary, tmp_path)
    assert "<ColumnMajor>" in text
    assert "spirv.CompositeConstruct" in text


# -- Vulkan --------------------------------------------------------------------

@needs_vulkan
@pytest.mark.parametrize("shape", MATMUL_SHAPES[:2], ids=lambda s: s.name)
def test_vulkan_runs_or_refuses_cooperative_matrices(shape):
    """On a device with VK_KHR_cooperative_matrix (and for bf16 inputs
    VK_KHR_shader_bfloat16's matrices) the kernel matches numpy; on one
    without (lavapipe) the runtime refuses it, naming the device and the
    features, before creating anything."""
    from vyre_xdsl.vulkan import runtime

    ctx = runtime._context(runtime._validation_requested(None))
    ins = matmul_inputs(shape)
    module = vx.parse_module(matmul_kernel(shape))
    bf16 = shape.inputs == "bf16"
    if ctx.cooperative_matrix and ctx.memory_model and (
            runtime.bfloat16_matrices(ctx) if bf16 else ctx.float16):
        assert_matmul_close(shape, ins, vx.run(module, ins, backend="vulkan")["out"])
        return
    with pytest.raises(VyreError, match="cooperativeMatrix") as refused:
        vx.run(module, ins, backend="vulkan")
    assert ctx.name in str(refused.value)
    assert "VK_KHR_cooperative_matrix" in str(refused.value)
    if bf16 and not runtime.bfloat16_matrices(ctx):
        assert "shaderBFloat16CooperativeMatrix (VK_KHR_shader_bfloat16)" in str(refused.value)


@needs_vulkan
def test_reading_the_layout_asks_for_bf16_matrices_without_reading_it_again(monkeypatch):
    """The bf16 layout kernel is checked like any kernel, and the check asks
    whether bf16 matrices are usable, which needs the layout: while the
    layout kernels run it answers from the device's features (before, a
    device with bf16 matrices would recurse here)."""
    from vyre_xdsl.vulkan import runtime

    ctx = runtime._context(runtime._validation_requested(None))
    asked = []

    def read(ctx):
        asked.append(runtime.bfloat16_matrices(ctx))  # the bf16 kernel's check
        return None

    monkeypatch.setattr(runtime, "_read_accumulator", read)
    for name in ("cooperative_matrix", "float16", "memory_model", "int16", "bfloat16_matrices"):
        monkeypatch.setattr(ctx, name, True)
    monkeypatch.setattr(ctx, "accumulator_read", False)
    monkeypatch.setattr(ctx, "accumulator", None)
    assert runtime.device_accumulator(ctx) is None
    assert asked == [True] and not ctx.reading_accumulator
    assert not runtime.bfloat16_matrices(ctx)  # no layout: no bf16 matrices


# out = a * b, K = 64 in four steps of 16: the accumulator is carried by
# an scf.for, as a tiled product over keys carries it
K_LOOP = lowered_kernel("kloop", (
    TileBuffer("a", "read", (16, 64), "f16"),
    TileBuffer("b", "read", (64, 16), "f16"),
    TileBuffer("out", "write", (16, 16), "f32"),
), """
      %c0 = arith.constant 0 : index
      %c16 = arith.constant 16 : index
      %c64 = arith.constant 64 : index
      %zero = arith.constant 0.0 : f32
      %init = gpu.subgroup_mma_constant_matrix %zero : !gpu.mma_matrix<16x16xf32, "COp">
      %acc = scf.for %k = %c0 to %c64 step %c16 iter_args(%m = %init) -> (!gpu.mma_matrix<16x16xf32, "COp">) {
        %ma = gpu.subgroup_mma_load_matrix %a[%k] {leadDimension = 64 : index} : memref<1024xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
        %row = arith.muli %k, %c16 : index
        %mb = gpu.subgroup_mma_load_matrix %b[%row] {leadDimension = 16 : index} : memref<1024xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
        %md = gpu.subgroup_mma_compute %ma, %mb, %m : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
        scf.yield %md : !gpu.mma_matrix<16x16xf32, "COp">
      }
      gpu.subgroup_mma_store_matrix %acc, %out[%c0] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf32, "COp">, memref<256xf32>
""")


def test_interpreter_carries_the_accumulator_through_scf_for():
    rng = np.random.default_rng(2)
    ins = {"a": rng.standard_normal(1024).astype(np.float16),
           "b": rng.standard_normal(1024).astype(np.float16)}
    out = vx.run(vx.parse_module(K_LOOP), ins)["out"]
    a = ins["a"].astype(np.float64).reshape(16, 64)
    b = ins["b"].astype(np.float64).reshape(64, 16)
    bound = 65 * UNIT_ROUNDOFF["f32"] * (np.abs(a) @ np.abs(b))
    assert (np.abs(out.reshape(16, 16) - a @ b) <= bound).all()


@needs_mlir_translate
@needs_mlir_opt
def test_spirv_loop_carried_matrix_verifies_in_mlir(tmp_path):
    text = _mlir_verifies_spirv(emit_spirv_module(vx.parse_module(K_LOOP)).binary,
                                tmp_path)
    assert "spirv.mlir.loop -> !spirv.coopmatrix<16x16xf32, Subgroup, MatrixAcc>" in text
    assert text.count("spirv.KHR.CooperativeMatrixMulAdd") == 1


@needs_mlir_opt
@pytest.mark.parametrize("text", [*(matmul_kernel(s) for s in MATMUL_SHAPES),
                                  TWO_SUBGROUPS, K_LOOP],
                         ids=[*(s.name for s in MATMUL_SHAPES), "two_subgroups", "k_loop"])
def test_mlir_opt_accepts_the_kernels(text):
    printed = assert_mlir_opt_accepts(vx.parse_module(text))
    assert "gpu.subgroup_mma_compute" in printed


# -- MLIR's own lowering as a cross-check of the emitter ----------------------

TARGET_ENV = (
    "#spirv.target_env<#spirv.vce<v1.6, [Shader, CooperativeMatrixKHR, Float16, "
    "StorageBuffer16BitAccess], [SPV_KHR_storage_buffer_storage_class, "
    "SPV_KHR_cooperative_matrix]>, #spirv.resource_limits<>>"
)


def _matrix_instructions(spirv_text: str) -> list[tuple[str, ...]]:
    """Each cooperative-matrix instruction: its name, layout and matrix
    types (pointers and SSA names differ between the two lowerings)."""
    found = []
    for line in spirv_text.splitlines():
        op = re.search(r"spirv\.(KHR\.CooperativeMatrix\w+|CompositeConstruct|"
                       r"FAdd|FSub|FMul|FDiv|FNegate|MatrixTimesScalar) ", line)
        if op is None or "coopmatrix" not in line:
            continue
        layout = re.findall(r"<(RowMajor|ColumnMajor)>", line)
        found.append((op.group(1), *layout, *re.findall(r"!spirv\.coopmatrix<[^>]*>", line)))
    return found


def _mlir_lowering(text: str, workgroup: int) -> str:
    """MLIR 22's convert-gpu-to-spirv of the lowered kernel `text`."""
    printed = assert_mlir_opt_accepts(vx.parse_module(text))
    printed = re.sub(r"(gpu\.module @\w+) \{",
                     rf"\1 attributes {{spirv.target_env = {TARGET_ENV}}} {{", printed)
    printed = printed.replace(
        "kernel attributes {",
        f"kernel attributes {{spirv.entry_point_abi = "
        f"#spirv.entry_point_abi<workgroup_size = [{workgroup}, 1, 1]>, ")
    result = subprocess.run([MLIR_OPT, "--allow-unregistered-dialect",
                             "--convert-gpu-to-spirv"], input=printed,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


@needs_mlir_translate
@needs_mlir_opt
@pytest.mark.parametrize("name", ["matmul", "two_subgroups", "k_loop"])
def test_emitter_agrees_with_mlirs_convert_gpu_to_spirv(name, tmp_path):
    text, workgroup = {"matmul": (matmul_kernel(MATMUL_SHAPES[0]), 32),
                       "two_subgroups": (TWO_SUBGROUPS, 64),
                       "k_loop": (K_LOOP, 32)}[name]
    ours = _matrix_instructions(
        _mlir_verifies_spirv(emit_spirv_module(vx.parse_module(text)).binary, tmp_path))
    theirs = _matrix_instructions(_mlir_lowering(text, workgroup))
    assert ours and ours == theirs


def test_a_matrix_merged_after_divergent_lanes_is_refused():
    # lanes below 16 run one more K step than the others
    text = K_LOOP.replace(
        "%acc = scf.for %k = %c0 to %c64 step %c16",
        '%lane = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index\n'
        "      %lt = arith.cmpi ult, %lane, %c16 : index\n"
        "      %end = arith.select %lt, %c64, %c16 : index\n"
        "      %acc = scf.for %k = %c0 to %end step %c16")
    rng = np.random.default_rng(3)
    ins = {"a": rng.standard_normal(1024).astype(np.float16),
           "b": rng.standard_normal(1024).astype(np.float16)}
    with pytest.raises(VyreError, match="merged lane by lane"):
        vx.run(vx.parse_module(text), ins)


def _elementwise_kernel() -> str:
    """out = 2c - a b, through every element-wise operation vyre executes."""
    acc = '!gpu.mma_matrix<16x16xf32, "COp">'
    lines = [
        "%half = arith.constant 0.5 : f32",
        f"%mh = gpu.subgroup_mma_constant_matrix %half : {acc}",
        f"%e1 = gpu.subgroup_mma_elementwise mulf %md, %mh : ({acc}, {acc}) -> {acc}",
        f"%e2 = gpu.subgroup_mma_elementwise subf %e1, %mc : ({acc}, {acc}) -> {acc}",
        f"%e3 = gpu.subgroup_mma_elementwise negatef %e2 : ({acc}) -> {acc}",
        f"%e4 = gpu.subgroup_mma_elementwise divf %e3, %mh : ({acc}, {acc}) -> {acc}",
        f"%e5 = gpu.subgroup_mma_elementwise addf %e4, %mc : ({acc}, {acc}) -> {acc}",
    ]
    text = matmul_kernel(MATMUL_SHAPES[0])
    store = "      gpu.subgroup_mma_store_matrix %md,"
    assert store in text
    return text.replace(store, "".join(f"      {line}\n" for line in lines)
                        + "      gpu.subgroup_mma_store_matrix %e5,")


ELEMENTWISE = _elementwise_kernel()


def test_interpreter_elementwise_matches_numpy():
    shape = MATMUL_SHAPES[0]
    ins = matmul_inputs(shape)
    out = vx.run(vx.parse_module(ELEMENTWISE), ins)["out"]
    a = ins["a"].astype(np.float64).reshape(16, 16)
    b = ins["b"].astype(np.float64).reshape(16, 16)
    c = ins["c"].astype(np.float64).reshape(16, 16)
    np.testing.assert_allclose(out.reshape(16, 16), 2 * c - a @ b, rtol=1e-5, atol=1e-5)


@needs_mlir_translate
@needs_mlir_opt
def test_elementwise_agrees_with_mlirs_convert_gpu_to_spirv(tmp_path):
    ours = _matrix_instructions(_mlir_verifies_spirv(
        emit_spirv_module(vx.parse_module(ELEMENTWISE)).binary, tmp_path))
    theirs = _matrix_instructions(_mlir_lowering(ELEMENTWISE, 32))
    assert ours == theirs
