"""vyre-projection-tensor-cores: MLA decode's per-head projections (q_lat =
W_uk q, out = W_uv o_lat) on subgroup matrix ops.

The interpreter runs the rewritten kernels against the absorbed program's
oracle within the declared tolerance (the source rows read in 16 bits, the
matrix unit's order of sums), with a batch that fills its row blocks, one
that overhangs them, and a width below a workgroup's columns; NaN lands
where the oracle puts it; mlir-opt-22 verifies the lowered IR at every
level and MLIR's SPIR-V deserialiser the emitted matrices.  The GPU runs
it through tools/gpu_check.py (`--match projections`)."""

from __future__ import annotations

import numpy as np
import pytest

import vyre_xdsl as vx
from requirements import assert_mlir_opt_accepts, needs_mlir_opt
from test_absorb_mla import NAMES
from test_mma import _mlir_verifies_spirv, needs_mlir_translate
from vyre_xdsl import tuning
from vyre_xdsl.compiler import apply_pipeline
from vyre_xdsl.device import GENERIC, H200
from vyre_xdsl.dialects import vyre
from vyre_xdsl.dialects.mla import HEAD_PRODUCT_ATTR, HeadProductAttr
from vyre_xdsl.dtypes import numpy_dtype
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import lowered_kernels, program_info, read_kernel
from vyre_xdsl.mma_elements import MATRIX_TOLERANCE
from vyre_xdsl.passes.projection_tensor_cores import ProjectionTiling, problem
from vyre_xdsl.spirv import emit_spirv_module
from vyre_xdsl.spirv.spec import Capability

SMALL = dict(seq_len=64, num_heads=4, head_dim=16, kv_lora_rank=64, qk_rope_head_dim=16)
PROJECTIONS = ("mla_decode_absorb_query", "mla_decode_project")


def _pipeline(options: str = "", level: str = "exact") -> str:
    return (f"vyre-absorb-mla{{kernels=3}},vyre-projection-tensor-cores{{device=h200 "
            f"force=true {options}}},vyre-to-gpu{{optimize={level}}}")


def _lowered(dtype: str = "bf16", options: str = "", level: str = "exact", **kwargs):
    module = vx.mla_decode(dtype=dtype, **dict(SMALL, **kwargs))
    return vx.lower_to_gpu(module, optimize=_pipeline(options, level))


def _inputs(lowered, dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {b.name: (rng.standard_normal(b.shape) * (0.2 if b.name.startswith("w_") else 1))
            .astype(numpy_dtype(dtype)) for b in program_info(lowered).inputs}


def _oracle(inputs, dtype: str) -> np.ndarray:
    return np.asarray(vx.reference.mla_decode_program(*(inputs[n] for n in NAMES),
                                                      dtype=dtype), np.float32)


def _error(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def _run(lowered, inputs) -> np.ndarray:
    return vx.run(lowered, inputs)["out"].astype(np.float32)


def _check(lowered, dtype: str, seed: int = 0) -> None:
    inputs = _inputs(lowered, dtype, seed)
    got = _run(lowered, inputs)
    assert _error(got, _oracle(inputs, dtype).reshape(got.shape)) <= MATRIX_TOLERANCE[dtype]


def _workgroups(lowered) -> dict[str, tuple[int, int]]:
    """Each projection kernel's (lanes a workgroup, workgroups)."""
    return {f.sym_name.data: (read_kernel(f).workgroup_size[0], read_kernel(f).grid_size[0])
            for f in lowered_kernels(lowered) if f.sym_name.data in PROJECTIONS}


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("options, kwargs", [
    ("", dict(batch=2)),  # one row block, 14 rows past the batch
    ("", dict(batch=32)),  # two row blocks, full
    ("row_tiles=1", dict(batch=20)),  # two workgroups of row blocks, the second overhanging
    ("col_blocks=2", dict(batch=16, head_dim=32)),  # two column blocks a subgroup
])
def test_interpreter_matches_the_oracle_within_the_tolerance(dtype, options, kwargs):
    lowered = _lowered(dtype, options, **kwargs)
    text = str(lowered)
    assert text.count("gpu.subgroup_mma_compute") >= 2
    _check(lowered, dtype)


def test_widths_of_a_workgroup_and_more():
    """head_dim 64 (the projection's width a workgroup's 64 columns) and a
    rank of 128 (two workgroups of columns for the absorbed query)."""
    lowered = _lowered("bf16", batch=3, head_dim=64, kv_lora_rank=128)
    assert _workgroups(lowered) == {"mla_decode_absorb_query": (128, 4 * 2),
                                    "mla_decode_project": (128, 4 * 1)}
    _check(lowered, "bf16")


def test_nan_lands_where_the_oracle_puts_it():
    """A NaN in sequence 1's query makes that row's q_lat NaN, and so every
    output of its row: no other row."""
    lowered = _lowered("f16", batch=3)
    inputs = _inputs(lowered, "f16")
    inputs["q"].reshape(3, 4, 16)[1, 2, 5] = np.nan
    got = _run(lowered, inputs)
    want = _oracle(inputs, "f16").reshape(got.shape)
    assert np.isnan(want).any()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    assert _error(got[finite], want[finite]) <= MATRIX_TOLERANCE["f16"]


def test_the_tolerance_catches_a_wrong_kernel():
    """Two heads' weights swapped: the same matrix code on the wrong rows."""
    lowered = _lowered("bf16", batch=2)
    inputs = _inputs(lowered, "bf16")
    w = inputs["w_uv"].reshape(64, 4, 16)
    swapped = dict(inputs, w_uv=np.ascontiguousarray(w[:, ::-1]).reshape(64, 64))
    got = _run(lowered, swapped)
    assert _error(got, _oracle(inputs, "bf16").reshape(got.shape)) > MATRIX_TOLERANCE["bf16"]


def test_the_program_records_its_products():
    module = vx.mla_decode(dtype="bf16", batch=2, **SMALL)
    apply_pipeline(module, "vyre-absorb-mla{kernels=3 rows=2}")
    records = {k.sym_name.data: k.attributes.get(HEAD_PRODUCT_ATTR)
               for k in module.walk() if isinstance(k, vyre.KernelOp)}
    assert records["mla_decode"] is None
    absorb, project = (records[name] for name in PROJECTIONS)
    assert absorb == HeadProductAttr(source="q", weights="w_uk", dest="q_lat", sequences=2,
                                     heads=4, depth=16, width=64, transposed=True)
    assert project == HeadProductAttr(source="o_lat", weights="w_uv", dest="out",
                                      sequences=2, heads=4, depth=64, width=16,
                                      transposed=False)


def _kernel(name: str = "mla_decode_project", **kwargs) -> vyre.KernelOp:
    module = vx.mla_decode(**dict(SMALL, **kwargs))
    apply_pipeline(module, "vyre-absorb-mla{kernels=3}")
    (kernel,) = [k for k in module.walk() if isinstance(k, vyre.KernelOp)
                 and k.sym_name.data == name]
    return kernel


@pytest.mark.parametrize("kwargs, device, tiling, reason", [
    (dict(dtype="f32"), H200, ProjectionTiling(), "must be all f16 or all bf16, not w_uv f32"),
    (dict(dtype="bf16"), GENERIC, ProjectionTiling(), "no 16x16x16 bf16 cooperative matrices"),
    (dict(dtype="bf16", head_dim=24), H200, ProjectionTiling(),
     "a width of 24, neither a multiple nor a divisor of a workgroup's 64 columns"),
    (dict(dtype="bf16"), H200, ProjectionTiling(col_blocks=2),
     "a width of 16, neither a multiple nor a divisor of a workgroup's 128 columns"),
    (dict(dtype="bf16"), H200, ProjectionTiling(row_tiles=0), "must be positive"),
    (dict(dtype="bf16"), H200, ProjectionTiling(row_tiles=64),
     "workgroup memory (151552 bytes) exceeds the device's 49152"),
])
def test_problem_names_what_does_not_qualify(kwargs, device, tiling, reason):
    assert reason in problem(_kernel(**kwargs), device, tiling)


def test_a_depth_not_of_whole_blocks_does_not_qualify():
    """The absorbed query's depth is head_dim: 24 dims are not 16-dim blocks."""
    kernel = _kernel("mla_decode_absorb_query", dtype="bf16", head_dim=24,
                     qk_rope_head_dim=8)
    assert "a depth of 24, not a multiple of 16" in problem(kernel, H200, ProjectionTiling())


def test_a_record_that_does_not_match_the_buffers_does_not_qualify():
    kernel = _kernel(dtype="bf16")
    record = kernel.attributes[HEAD_PRODUCT_ATTR]
    fields = dict(source="o_lat", weights="w_uv", dest="out", sequences=1, heads=4,
                  depth=64, width=16, transposed=False)
    kernel.attributes[HEAD_PRODUCT_ATTR] = HeadProductAttr(**dict(fields, sequences=2))
    assert "buffer 'o_lat' holds 256 elements, not the 512 the record implies" in problem(
        kernel, H200, ProjectionTiling())
    kernel.attributes[HEAD_PRODUCT_ATTR] = HeadProductAttr(**dict(fields, source="q"))
    assert "names buffer 'q', which the kernel does not declare" in problem(
        kernel, H200, ProjectionTiling())
    kernel.attributes[HEAD_PRODUCT_ATTR] = record
    assert problem(kernel, H200, ProjectionTiling()) is None
    del kernel.attributes[HEAD_PRODUCT_ATTR]
    assert "records no per-head product" in problem(kernel, H200, ProjectionTiling())


def test_force_names_the_kernel_that_does_not_qualify():
    module = vx.mla_decode(dtype="f32", batch=2, **SMALL)
    with pytest.raises(VyreError, match="this kernel's product cannot run on subgroup matrix "
                                        "ops: the matrices' operands must be all f16"):
        vx.lower_to_gpu(module, optimize=_pipeline())
    left = vx.lower_to_gpu(vx.mla_decode(dtype="f32", batch=2, **SMALL),
                           optimize=_pipeline().replace(" force=true", ""))
    assert "gpu.subgroup_mma" not in str(left)


@pytest.mark.parametrize("sequences, others, row_tiles", [
    (1, 4096, 1),  # one row block
    (32, 16 * 2, 1),  # B=32 H=16, out = W_uv o_lat (2 groups of 64 columns a head)
    (32, 16 * 8, 1),  # its q_lat = W_uk q (8 groups): 256 workgroups with one
    (128, 16 * 8, 2),  # B=128 H=16: 512 workgroups of 2 row blocks
    (32, 128 * 8, 2),  # B=32 H=128
    (128, 64 * 2, 2),  # B=128 H=64
    (128, 64 * 8, 8),  # B=128 H=64: 512 workgroups of 8 row blocks
    (1024, 4096, 8),  # no more than PROJECTION_ROW_TILES
    (48, 4096, 2),  # 3 row blocks: a power of two up to them
])
def test_the_tuning_keeps_the_grid_full(sequences, others, row_tiles):
    """The tilings that were fastest on an H100 (docs/performance.md,
    "Twenty-second session")."""
    assert tuning.projection_tiling(sequences, others) == (row_tiles, 1)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_default_plan_takes_the_projections_where_the_device_has_matrices(dtype):
    module = vx.mla_decode(dtype=dtype, batch=20, **SMALL)
    lowered = vx.lower_to_gpu(module, optimize="default", device="h200")
    # 20 sequences: two row blocks, a workgroup each (8 workgroups are far
    # from a full grid), 4 heads, one group of columns
    assert _workgroups(lowered) == {name: (128, 8) for name in PROJECTIONS}
    _check(lowered, dtype)
    lanes = vx.lower_to_gpu(vx.mla_decode(dtype=dtype, batch=20, **SMALL),
                            optimize="vyre-to-gpu{device=h200 matrix_units=false}")
    assert "gpu.subgroup_mma" not in str(lanes)
    on_f32 = vx.lower_to_gpu(vx.mla_decode(dtype="f32", batch=20, **SMALL), optimize="default",
                             device="h200")
    assert "gpu.subgroup_mma" not in str(on_f32)


@pytest.mark.parametrize("batch, on_matrices", [
    (1, {"mla_decode_project"}),  # W_uk's product of one sequence: 15 rows of padding
    (15, {"mla_decode_project"}),
    (16, set(PROJECTIONS)),
])
def test_the_plan_keeps_a_transposed_product_of_few_sequences_on_the_lanes(
        batch, on_matrices):
    lowered = vx.lower_to_gpu(vx.mla_decode(dtype="bf16", batch=batch, **SMALL),
                              optimize="default", device="h200")
    matrices = {f.sym_name.data for f in lowered_kernels(lowered)
                if f.sym_name.data in PROJECTIONS and "gpu.subgroup_mma" in str(f)}
    assert matrices == on_matrices
    _check(lowered, "bf16")


@needs_mlir_opt
@pytest.mark.parametrize("level", ["none", "exact", "default device=h200"])
def test_mlir_opt_accepts_the_lowered_kernels(level):
    printed = assert_mlir_opt_accepts(_lowered("bf16", level=level, batch=20))
    assert "gpu.subgroup_mma_compute" in printed


@needs_mlir_translate
@needs_mlir_opt
def test_spirv_cooperative_matrices_verify_in_mlir(tmp_path):
    spirv = emit_spirv_module(_lowered("f16", batch=20))
    for name in PROJECTIONS:
        assert Capability.CooperativeMatrixKHR in spirv.entry(name).capabilities
    text = _mlir_verifies_spirv(spirv.binary, tmp_path)
    assert "spirv.KHR.CooperativeMatrixMulAdd" in text
