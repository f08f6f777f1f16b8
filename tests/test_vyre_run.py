"""vyre-run: the command line that runs a kernel file."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import vyre_xdsl as vx
from vyre_xdsl import reference
from vyre_xdsl.compiler import lower_to_gpu
from vyre_xdsl.tools.vyre_run import main


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vyre_xdsl.tools.vyre_run", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def fa2_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("k") / "fa2.mlir"
    path.write_text(str(vx.flash_attention_2(seq_len=70, head_dim=3, tile_size=16)))
    return path


@pytest.fixture(scope="module")
def mla_lowered_file(tmp_path_factory):
    module = lower_to_gpu(
        vx.mla_decode(seq_len=9, num_heads=3, head_dim=2, kv_lora_rank=4,
                      qk_rope_head_dim=1, tile_size=4),
        optimize="exact",  # the seed's order of sums: bit-exact with the oracle
    )
    path = tmp_path_factory.mktemp("k") / "mla_lowered.mlir"
    path.write_text(str(module))
    return path


def test_random_check_subprocess(fa2_file):
    result = cli(str(fa2_file), "--random", "--seed", "3", "--check")
    assert result.returncode == 0, result.stderr
    assert "max abs error 0.000e+00" in result.stdout
    assert "bit-exact" in result.stdout


def test_check_lowered_mla_with_pipeline_flag(mla_lowered_file, capsys):
    assert main([str(mla_lowered_file), "--random", "--check"]) == 0
    assert "bit-exact" in capsys.readouterr().out


@pytest.mark.parametrize("serving", [dict(kv_lens=True), dict(page_size=4, num_pages=3)],
                         ids=["kv_lens", "paged"])
def test_check_mla_with_run_time_lengths_and_pages(serving, tmp_path, capsys):
    """--check gives MLA's oracle the kernel's lengths, block table, page
    size and keys, as FlashAttention-2's."""
    path = tmp_path / "mla.mlir"
    path.write_text(str(vx.mla_decode(seq_len=8, num_heads=2, head_dim=4, kv_lora_rank=4,
                                      qk_rope_head_dim=2, tile_size=4, batch=2, **serving)))
    assert main([str(path), "--random", "--seed", "1", "--check"]) == 0
    # the default plan's absorbed program sums in its own order: within the
    # tolerance (bit-exact only when the random lengths were mostly 0 or 1)
    assert "vs oracle (ok)" in capsys.readouterr().out


@pytest.mark.parametrize("build, pool", [
    (lambda: vx.flash_attention_2(seq_len=1, kv_len=64, head_dim=4, batch=8, page_size=16,
                                  num_pages=40), "k"),
    (lambda: vx.mla_decode(seq_len=64, num_heads=2, head_dim=4, kv_lora_rank=4,
                           qk_rope_head_dim=2, tile_size=16, batch=8, page_size=16,
                           num_pages=40), "kv_cache"),
])
def test_random_lengths_and_pages_are_in_range(build, pool):
    """--random draws run-time lengths from 0 to the kernel's keys and a
    block table's entries from the pool's pages (rounded normal values made
    almost every sequence 0 or 1 keys long)."""
    from vyre_xdsl.compiler import compile_module
    from vyre_xdsl.tools.vyre_run import _random_input

    info = compile_module(build(), None, "exact").info
    rng = np.random.default_rng(0)
    lengths = _random_input(rng, info.buffer("kv_lens"), info)
    table = _random_input(rng, info.buffer("block_table"), info)
    assert lengths.dtype == table.dtype == np.int32
    assert 0 <= lengths.min() and lengths.max() <= 64 and len(set(lengths.tolist())) > 4
    pages = info.buffer(pool).shape[0]
    assert 0 <= table.min() and table.max() < pages and len(set(table.ravel().tolist())) > 8


def test_bf16_inputs_from_npy(tmp_path, capsys):
    """np.save writes a bfloat16 array as raw 16-bit elements (np.load
    says |V2): vyre-run reads them as the bf16 they are."""
    import ml_dtypes

    path = tmp_path / "bf16.mlir"
    path.write_text(str(vx.flash_attention_2(seq_len=4, head_dim=4, tile_size=4, dtype="bf16")))
    rng = np.random.default_rng(2)
    arrays = {n: rng.standard_normal((4, 4)).astype(ml_dtypes.bfloat16) for n in "qkv"}
    args = [str(path), "--output", f"out={tmp_path / 'out.npy'}"]
    for name, value in arrays.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    assert np.load(tmp_path / "q.npy").dtype == np.dtype("V2")
    assert main(args) == 0
    out = np.load(tmp_path / "out.npy").view(ml_dtypes.bfloat16)
    want = reference.flash_attention_2(*arrays.values(), tile_size=4, dtype="bf16")
    np.testing.assert_allclose(out.astype(np.float32), want.astype(np.float32), rtol=8e-3)


def test_vyre_file_with_explicit_pipeline(fa2_file, capsys):
    assert main([str(fa2_file), "-p", "vyre-to-gpu", "--random", "--check"]) == 0
    assert "bit-exact" in capsys.readouterr().out


def test_inputs_and_outputs_through_npy(fa2_file, tmp_path, capsys):
    rng = np.random.default_rng(5)
    arrays = {n: rng.standard_normal((70, 3)).astype(np.float32) for n in "qkv"}
    args = [str(fa2_file)]
    for name, value in arrays.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    out_path = tmp_path / "out.npy"
    assert main([*args, "--output", f"out={out_path}"]) == 0
    out = np.load(out_path)
    assert out.shape == (70, 3) and out.dtype == np.float32
    want = reference.flash_attention_2(arrays["q"], arrays["k"], arrays["v"], 16)
    assert np.array_equal(out, want)
    # given inputs win over --random; --check then checks them
    assert main([*args, "--random", "--check"]) == 0
    assert "bit-exact" in capsys.readouterr().out


def test_check_reports_a_mismatch(fa2_file, monkeypatch, capsys):
    from vyre_xdsl.tools import vyre_run

    oracle = vyre_run._oracle
    monkeypatch.setattr(
        vyre_run, "_oracle", lambda *a: {"out": oracle(*a)["out"] + np.float32(1)}
    )
    assert main([str(fa2_file), "--random", "--check"]) == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out and "max abs error 1.000e+00" in captured.out
    assert captured.err.startswith("error:")


def test_missing_file_is_an_error_not_a_traceback(tmp_path):
    result = cli(str(tmp_path / "nope.mlir"), "--random")
    assert result.returncode == 1
    assert result.stderr.startswith("error: cannot read")
    assert "Traceback" not in result.stderr


def test_bad_mlir_is_an_error_not_a_traceback(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("builtin.module {\n  %0 = arith.bogus 1 : i32\n}\n")
    result = cli(str(bad), "--random", "--check")
    assert result.returncode == 1
    # located, as vyre-opt's diagnostics
    assert result.stderr.startswith(f"{bad}:2:20: error: Operation arith.bogus is not registered")
    assert "Traceback" not in result.stderr


LOWERED = """builtin.module attributes {{gpu.container_module}} {{
  "gpu.module"() <{{sym_name = "k"}}> ({{
    "gpu.func"() <{{function_type = (memref<8xf32>, memref<8xf32>) -> (), kernel}}> ({{
    ^bb0(%a: memref<8xf32>, %out: memref<8xf32>):
      %item = "gpu.global_id"() <{{dimension = #gpu<dim x>}}> : () -> index
      %n = arith.constant 8 : index
      %c0 = arith.constant 0 : index
      %in = arith.cmpi ult, %item, %n : index
      scf.if %in {{
{body}
      }}
      "gpu.return"() : () -> ()
    }}) {{sym_name = "k", gpu.kernel, vyre.launch = #vyre.launch<items = 8, workgroup = [64, 1, 1], grid = [1, 1, 1], buffers = [#vyre.buffer<name = "a", binding = 0, access = read, shape = [8], dtype = f32>, #vyre.buffer<name = "out", binding = 1, access = write, shape = [8], dtype = f32>]>}} : () -> ()
  }}) : () -> ()
}}
"""


@pytest.mark.parametrize("body, op, message", [
    ("""        %far = arith.constant 100 : index
        %i = arith.addi %item, %far : index
        %x = memref.load %a[%i] : memref<8xf32>
        memref.store %x, %out[%item] : memref<8xf32>""",
     "%x = memref.load", "memref.load: index 107 is out of bounds for buffer 'a' of 8 elements"),
    ("""        scf.for %j = %c0 to %n step %c0 {
          %x = memref.load %a[%item] : memref<8xf32>
          memref.store %x, %out[%item] : memref<8xf32>
        }""", "scf.for", "kernel @k: an scf.for with a step of 0 never ends"),
    ("""        %three = arith.constant 3 : index
        %first = arith.cmpi ult, %item, %three : index
        scf.if %first {
          "gpu.barrier"() : () -> ()
        }""", '"gpu.barrier"', "divergent gpu.barrier: only 3 of the 64 lanes"),
])
def test_run_time_errors_point_at_their_op(tmp_path, body, op, message):
    """An error the interpreter finds while it runs a kernel file is located
    at the op that raised it, as vyre-opt's diagnostics are."""
    path = tmp_path / "kernel.mlir"
    text = LOWERED.format(body=body)
    path.write_text(text)
    line = next(i for i, row in enumerate(text.split("\n"), 1) if op in row)
    column = text.split("\n")[line - 1].index(op) + 1
    result = cli(str(path), "--random")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"{path}:{line}:{column}: error: {message}"), result.stderr


def test_check_names_a_missing_output(tmp_path, capsys):
    """--check on a decoder whose `out` is not written (declared temp) says
    so (it was an internal KeyError)."""
    text = str(vx.flash_attention_2(seq_len=20, head_dim=4, tile_size=8))
    path = tmp_path / "temp_out.mlir"
    path.write_text(text.replace('"out" binding 3 write', '"out" binding 3 temp'))
    assert main([str(path), "--random", "--check"]) == 1
    err = capsys.readouterr().err
    assert "--check compares output 'out' with its oracle, but" in err
    assert "writes no buffer 'out' (its outputs: none)" in err and "internal" not in err


@pytest.mark.parametrize(
    "extra,code,message",
    [
        (["--input", "q"], 2, "--input expects NAME=FILE.npy"),
        (["--random", "--output", "zz=x.npy"], 1, "has no output 'zz'"),
        (["--input", "q=missing.npy"], 1, "cannot read input 'q'"),
        ([], 1, "missing input"),
        (["--random", "-p", "no-such-pass"], 1, "no-such-pass"),
    ],
)
def test_user_errors(fa2_file, capsys, extra, code, message):
    assert main([str(fa2_file), *extra]) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_wrong_dtype_input(fa2_file, tmp_path, capsys):
    np.save(tmp_path / "q.npy", np.zeros((70, 3)))  # float64
    assert main([str(fa2_file), "--random", "--input", f"q={tmp_path / 'q.npy'}"]) == 1
    assert "float32" in capsys.readouterr().err


def _mla_f16(tmp_path, w_uv_row):
    """An f16 MLA decode whose outputs are 4 * w_uv_row in f32 (every key
    weighs 1/4, its latent row all ones)."""
    cfg = dict(seq_len=4, num_heads=1, head_dim=4, kv_lora_rank=4, qk_rope_head_dim=4)
    path = tmp_path / "mla_f16.mlir"
    path.write_text(str(vx.mla_decode(dtype="f16", **cfg)))
    arrays = dict(q=np.zeros((1, 4), np.float16), kv_cache=np.ones((4, 4), np.float16),
                  kr_cache=np.zeros((4, 4), np.float16), w_uk=np.zeros((4, 4), np.float16),
                  w_uv=np.array([w_uv_row] * 4, np.float16))
    args = [str(path)]
    for name, value in arrays.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    return args


@pytest.mark.parametrize("backend", ["interpreter", "vulkan"])
def test_check_takes_an_overflow_to_inf_as_the_oracle_rounded(tmp_path, capsys, backend):
    """An f16 output that overflows to inf where the f32 oracle rounds to
    inf is right (it was a MISMATCH: an infinite error against 1 ulp).
    Outputs 65520, 65504, 80000 and 65488 in f32: rounded once to f16,
    inf, 65504, inf and 65472 (a tie, to even)."""
    args = _mla_f16(tmp_path, [16380, 16376, 20000, 16372])
    out_path = tmp_path / "out.npy"
    assert main([*args, "--backend", backend, "--check", "--output", f"out={out_path}"]) == 0
    assert "MISMATCH" not in capsys.readouterr().out
    assert np.array_equal(np.load(out_path)[0], np.array([np.inf, 65504, np.inf, 65472],
                                                         np.float16))


def test_check_is_not_unlimited_at_the_largest_half(tmp_path, monkeypatch, capsys):
    """At f16's largest finite value an ulp is the gap below it (32), not
    the infinite gap above: an output of 0 there is a MISMATCH (it passed)."""
    import importlib

    runner = importlib.import_module("vyre_xdsl.run")  # vx.run is the function
    args = _mla_f16(tmp_path, [16376, 16376, 0.25, 0.25])  # 65504, 65504, 1, 1
    run = runner.run

    def first_zeroed(*args, **kwargs):
        outputs = run(*args, **kwargs)
        outputs["out"][..., 0] = 0
        return outputs

    monkeypatch.setattr(runner, "run", first_zeroed)
    assert main([*args, "--check"]) == 1
    assert "MISMATCH" in capsys.readouterr().out
