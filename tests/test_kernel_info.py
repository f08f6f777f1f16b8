"""kernel_info reads the typed launch contract (dialects/launch.py) and
checks only what ties it to the body; vyre-run --check takes the recorded
tile size, right after vyre-retile."""

from __future__ import annotations

import pytest

import vyre_xdsl as vx
from vyre_xdsl.compiler import parse_module
from vyre_xdsl.dialects.launch import (
    LAUNCH_ATTR,
    BufferAttr,
    LaunchAttr,
    ScratchRole,
    launch_of,
    scratch_role,
)
from vyre_xdsl.errors import VyreError
from vyre_xdsl.kernel_info import kernel_info, program_info
from vyre_xdsl.tools import vyre_run


def _lowered(**kwargs):
    return vx.lower_to_gpu(vx.flash_attention_2(**kwargs), optimize="none")


def test_the_launch_is_read_into_kernel_info():
    info = kernel_info(_lowered(seq_len=64, head_dim=4, tile_size=16))
    assert info.item_count == 64 and info.workgroup_size == (64, 1, 1)
    assert info.grid_size == (1, 1, 1) and info.tile_size == 16
    assert [(b.name, b.binding, b.access, b.shape, b.dtype) for b in info.buffers] == [
        ("q", 0, "read", (64, 4), "f32"), ("k", 1, "read", (64, 4), "f32"),
        ("v", 2, "read", (64, 4), "f32"), ("out", 3, "write", (64, 4), "f32"),
    ]


def test_the_launch_round_trips_as_text():
    lowered = _lowered(seq_len=64, head_dim=4, tile_size=16, dtype="f16")
    again = parse_module(str(lowered))
    assert program_info(again).buffers == program_info(lowered).buffers
    func = next(op for op in again.walk() if launch_of(op) is not None)
    assert launch_of(func).skeleton.head_dim.data == 4
    roles = {scratch_role(op) for op in again.walk() if op.name == "memref.alloc"}
    assert roles == {ScratchRole.Q_SCRATCH, ScratchRole.SCORE_TILE, ScratchRole.O_ACC}


def _with_launch(lowered, **changes):
    func = next(op for op in lowered.walk() if launch_of(op) is not None)
    launch = launch_of(func)
    fields = dict(item_count=launch.item_count, workgroup_size=launch.workgroup_size,
                  grid_size=launch.grid_size, buffers=launch.buffers,
                  skeleton=launch.skeleton)
    fields.update(changes)
    func.attributes[LAUNCH_ATTR] = LaunchAttr(**fields)
    return lowered


def test_a_dtype_the_argument_does_not_have_is_refused():
    lowered = _lowered(seq_len=64, head_dim=4, tile_size=16)
    buffers = list(launch_of(next(
        op for op in lowered.walk() if launch_of(op) is not None)).buffers)
    buffers[0] = BufferAttr("q", 0, "read", (64, 4), "f16")
    with pytest.raises(VyreError, match="argument 0 of @flash_attention_2 is "
                                        "memref<256xf32> but buffer 'q'.* holds f16"):
        kernel_info(_with_launch(lowered, buffers=buffers))


def test_a_buffer_per_argument():
    lowered = _lowered(seq_len=64, head_dim=4, tile_size=16)
    func = next(op for op in lowered.walk() if launch_of(op) is not None)
    with pytest.raises(VyreError, match="describes 3 buffers but @flash_attention_2 "
                                        "takes 4 arguments"):
        kernel_info(_with_launch(lowered, buffers=launch_of(func).buffers[:3]))


def test_a_grid_short_of_the_items_is_refused():
    lowered = _lowered(seq_len=200, head_dim=4, tile_size=16)
    with pytest.raises(VyreError, match="fewer than its 200 items"):
        kernel_info(_with_launch(lowered, grid_size=(1, 1, 1)))


def test_the_attribute_verifiers_refuse_what_they_can_see_alone():
    from xdsl.utils.exceptions import VerifyException

    with pytest.raises(VerifyException, match="binding -1 is outside"):
        BufferAttr("q", -1, "read", (4,), "f32")
    with pytest.raises(VerifyException, match="two buffers share a name"):
        LaunchAttr(4, (4, 1, 1), (1, 1, 1),
                   [BufferAttr("q", 0, "read", (4,), "f32"),
                    BufferAttr("q", 1, "write", (4,), "f32")])


@pytest.mark.parametrize("optimize", ["none", "exact"])
def test_check_after_retile_uses_the_recorded_tile_size(tmp_path, capsys, optimize):
    # retile shrinks the tiles but keeps each lane's score stride (64): only
    # the recorded tile size makes the oracle's order of sums the kernel's
    path = tmp_path / "fa2.mlir"
    path.write_text(str(vx.flash_attention_2(seq_len=256, head_dim=4, tile_size=64)))
    pipeline = f"vyre-retile{{tile_size=16}},vyre-to-gpu{{optimize={optimize}}}"
    status = vyre_run.main([str(path), "-p", pipeline, "--random", "--check"])
    assert status == 0
    assert "(bit-exact)" in capsys.readouterr().out


def test_a_launch_that_is_not_the_typed_attribute_is_refused():
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr

    lowered = _lowered(seq_len=64, head_dim=4, tile_size=16)
    func = next(op for op in lowered.walk() if launch_of(op) is not None)
    func.attributes[LAUNCH_ATTR] = DictionaryAttr({"items": IntegerAttr(64, 64)})
    with pytest.raises(VyreError, match="'vyre.launch' of @flash_attention_2 must be a "
                                        r"#vyre.launch<\.\.\.>"):
        kernel_info(lowered)


def test_interleave_scratch_finds_arrays_by_role_not_by_name():
    from vyre_xdsl.compiler import apply_pipeline

    lowered = _lowered(seq_len=64, head_dim=4, tile_size=16)
    for op in lowered.walk():  # SSA names are no data: renaming changes nothing
        if op.name == "memref.alloc":
            op.results[0].name_hint = "renamed"
    before = str(lowered)
    interleaved = str(apply_pipeline(lowered, "vyre-interleave-scratch{arrays=q_scratch}"))
    assert "%renamed" in interleaved and interleaved != before


def test_a_compiled_module_is_lowered_and_read_once(monkeypatch):
    import numpy as np

    from vyre_xdsl import compiler, kernel_info as kernel_info_module
    from vyre_xdsl.compiler import Compiled, compile_module

    compiled = compile_module(vx.flash_attention_2(seq_len=64, head_dim=4, tile_size=16),
                              spirv=True)
    assert isinstance(compiled, Compiled) and compiled.info.kernels[0].tile_size == 16
    assert compiled.spirv.binary[:4] == b"\x03\x02\x23\x07"  # the SPIR-V magic

    def twice(*args, **kwargs):
        raise AssertionError("lowered or read a second time")

    monkeypatch.setattr(compiler, "lower_to_gpu", twice)
    monkeypatch.setattr(kernel_info_module, "program_info", twice)
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal((64, 4)).astype(np.float32) for n in "qkv"}
    assert vx.run(compiled, inputs)["out"].shape == (64, 4)
    assert vx.compile(compiled).compiled is compiled
    assert vx.compile_spirv(compiled) == compiled.spirv.binary


def test_check_without_a_recorded_skeleton_says_so(tmp_path, capsys):
    import re

    text = str(_lowered(seq_len=64, head_dim=4, tile_size=16))
    path = tmp_path / "lowered.mlir"
    path.write_text(re.sub(r", skeleton = #vyre\.skeleton<[^>]*>", "", text))
    assert vyre_run.main([str(path), "--random", "--check"]) == 1
    assert "no kernel records the skeleton it was expanded from" in capsys.readouterr().err
