"""vyre_xdsl.cse: xDSL's CSE with the check for writes between two reads
done by counting: the same IR as xDSL's `cse`, found in one pass."""

from __future__ import annotations


import pytest
from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.transforms.common_subexpression_elimination import cse as xdsl_cse

import vyre_xdsl as vx
from vyre_xdsl.compiler import apply_pipeline
from vyre_xdsl.cse import cse

PROGRAM = """
func.func @f(%m: memref<8xf32>, %i: index, %c: i1, %x: f32) -> (f32, f32, f32, f32, f32, f32) {
  %a = memref.load %m[%i] : memref<8xf32>
  %b = memref.load %m[%i] : memref<8xf32>
  memref.store %x, %m[%i] : memref<8xf32>
  %c1 = memref.load %m[%i] : memref<8xf32>
  scf.if %c {
    memref.store %x, %m[%i] : memref<8xf32>
  }
  %d = memref.load %m[%i] : memref<8xf32>
  %e = memref.load %m[%i] : memref<8xf32>
  %r = scf.if %c -> (f32) {
    %g = memref.load %m[%i] : memref<8xf32>
    scf.yield %g : f32
  } else {
    scf.yield %x : f32
  }
  %h = memref.load %m[%i] : memref<8xf32>
  func.return %a, %b, %c1, %d, %e, %h : f32, f32, f32, f32, f32, f32
}
"""


def _parse(text: str) -> ModuleOp:
    ctx = Context()
    for dialect in (arith.Arith, func.Func, memref.MemRef, scf.Scf):
        ctx.load_dialect(dialect)
    return Parser(ctx, text).parse_module()


def test_reads_merge_only_with_no_write_between_them():
    module = _parse(PROGRAM)
    cse(module)
    returned = list(next(o for o in module.walk() if isinstance(o, func.ReturnOp)).operands)
    a, b, c1, d, e, h = returned
    assert a is b  # nothing between them
    assert c1 is not a  # a store between
    assert d is not c1  # a store nested in the scf.if between
    assert e is d
    assert h is d  # the scf.if between only reads
    expected = _parse(PROGRAM)
    xdsl_cse(expected)
    assert str(module) == str(expected)


def _paged_decode():
    return vx.flash_attention_2(seq_len=1, kv_len=256, batch=2, num_heads=8, num_kv_heads=2,
                                head_dim=128, dtype="bf16", page_size=16, num_pages=32)


CASES = {
    # rows over eight lanes, four rows an invocation, unrolled: thousands of
    # identical loads in one block
    "decode rows": (_paged_decode, "vyre-split-kv{splits=4 merge=kernel},"
                    "vyre-split-head-dim{parts=8 chunk=8},vyre-block-rows{rows=4},"
                    "vyre-to-gpu{optimize=none},vyre-promote-scratch,"
                    "vyre-unroll-jam{factor=8},vyre-fold-divisions"),
    "causal": (lambda: vx.flash_attention_2(seq_len=256, head_dim=64, num_heads=2,
                                            mask_mod=lambda q, kv: kv <= q),
               "vyre-to-gpu{optimize=none},vyre-promote-scratch,vyre-unroll-jam,"
               "vyre-fold-divisions"),
    "latent staged": (lambda: vx.mla_decode(dtype="bf16", seq_len=256, num_heads=16,
                                            head_dim=64, kv_lora_rank=64,
                                            qk_rope_head_dim=64),
                      "vyre-absorb-mla{kernels=3},vyre-latent-tensor-cores{device=h200 "
                      "stage=true},vyre-to-gpu{optimize=none},vyre-promote-scratch,"
                      "vyre-unroll-jam,vyre-fold-divisions"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowered_kernels_come_out_as_with_xdsls_cse(case):
    build, pipeline = CASES[case]
    ours = apply_pipeline(build(), pipeline)
    theirs = ours.clone()
    cse(ours)
    xdsl_cse(theirs)
    assert str(ours) == str(theirs)
