"""Every index into a lane's private arrays (memref.alloca: the query row,
the score tile, the accumulator) in the default plan's kernels is known
once the driver unrolls the loops of constant bounds: an array indexed by
a run-time value cannot live in registers, and NVIDIA's driver put the
whole of it in local memory (1,280 bytes a lane for GQA decode with
run-time lengths; docs/performance.md, "Twenty-eighth session")."""

from __future__ import annotations

import pytest
from xdsl.dialects import arith, memref, scf
from xdsl.ir import BlockArgument, OpResult, SSAValue

import vyre_xdsl as vx
from vyre_xdsl.loop_bounds import constant_index


def _known(value: SSAValue, memo: dict[SSAValue, bool]) -> bool:
    """Whether `value` is a constant once every loop of constant bounds is
    unrolled: constants, such loops' indices, and arith of them."""
    if value not in memo:
        memo[value] = False  # no cycles in SSA outside loops; be safe
        known = False
        if isinstance(value, BlockArgument):
            loop = value.owner.parent_op()
            known = (isinstance(loop, scf.ForOp) and value is loop.body.block.args[0]
                     and constant_index(loop.lb) is not None
                     and constant_index(loop.ub) is not None)
        elif isinstance(value, OpResult):
            op = value.op
            known = isinstance(op, arith.ConstantOp) or (
                op.name.startswith("arith.") and bool(op.operands)
                and all(_known(o, memo) for o in op.operands))
        memo[value] = known
    return memo[value]


def run_time_indexed(module) -> dict[str, int]:
    """The private arrays of `module` (lowered IR) indexed by a run-time
    value, with how many loads and stores do it."""
    private = {op.results[0] for op in module.walk() if isinstance(op, memref.AllocaOp)}
    memo: dict[SSAValue, bool] = {}
    found: dict[str, int] = {}
    for op in module.walk():
        if isinstance(op, memref.LoadOp | memref.StoreOp) and op.memref in private and not all(
            _known(index, memo) for index in op.indices
        ):
            name = op.memref.name_hint or "?"
            found[name] = found.get(name, 0) + 1
    return found


GQA = dict(seq_len=1, batch=2, num_heads=8, num_kv_heads=2, head_dim=128, dtype="bf16")
CASES = {
    # 16 rows: two an invocation over 16 lanes, a lane's row one chunk
    "gqa few rows, run-time lengths": lambda: vx.flash_attention_2(
        kv_len=256, kv_lens=True, **GQA),
    "gqa few rows, pages": lambda: vx.flash_attention_2(
        kv_len=256, page_size=16, num_pages=32, **GQA),
    "gqa many rows, run-time lengths, a cut tile": lambda: vx.flash_attention_2(
        kv_len=1000, kv_lens=True, **{**GQA, "num_heads": 32, "num_kv_heads": 8}),
    "fa2, a last tile of 300 % tile keys": lambda: vx.flash_attention_2(300, 64, num_heads=4),
    "fa2 causal": lambda: vx.flash_attention_2(256, 64, num_heads=4,
                                               mask_mod=lambda q, kv: kv <= q),
    "mla, run-time lengths": lambda: vx.mla_decode(
        512, 16, 128, 512, 64, batch=4, dtype="bf16", kv_lens=True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_default_kernels_index_private_arrays_by_known_values(case):
    lowered = vx.lower_to_gpu(CASES[case](), device="h200")
    assert run_time_indexed(lowered) == {}


def test_a_key_loop_to_a_run_time_length_is_found(monkeypatch):
    # without vyre-unroll-jam's guarded copies the cut tile's loop over its
    # keys stays a loop: score_tile[j]
    from vyre_xdsl.passes.unroll_jam import UnrollJamPass

    monkeypatch.setattr(UnrollJamPass, "guard", lambda self, loop: False)
    lowered = vx.lower_to_gpu(CASES["gqa few rows, run-time lengths"](), device="h200")
    assert "score_tile" in run_time_indexed(lowered)
